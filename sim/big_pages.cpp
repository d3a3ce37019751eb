#include "sim/big_pages.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

namespace kiln::sim {

void advise_big_pages(void* data, std::size_t bytes) {
  constexpr std::uintptr_t kBig = std::uintptr_t{2} << 20;
  const auto at = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t begin = (at + kBig - 1) & ~(kBig - 1);
  const std::uintptr_t end = (at + bytes) & ~(kBig - 1);
  // The advice may be refused (a kernel without such pages): the table works the same.
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

void reserve_big_pages(std::size_t bytes) {
  void* room = std::malloc(bytes);
  if (!room) return;  // no room to reserve: the run takes its pages as it goes
  advise_big_pages(room, bytes);
  std::free(room);
}

}  // namespace kiln::sim
