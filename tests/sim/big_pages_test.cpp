// The simulator's big tables in 2 MB pages: what the advice covers, and that it changes no
// content.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/big_pages.hpp"

using namespace kiln::sim;

namespace {

constexpr std::uintptr_t kBig = std::uintptr_t{2} << 20;

/// The mapping of this process that holds `at`: its range and whether 2 MB pages may back it.
struct mapping {
  std::uintptr_t begin = 0, end = 0;
  int thp_eligible = -1;  ///< -1: the kernel does not say
};

mapping mapping_of(std::uintptr_t at) {
  std::ifstream in("/proc/self/smaps");
  mapping m;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    unsigned long long b = 0, e = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> b >> dash >> e && dash == '-') {
      if (inside) break;
      inside = at >= b && at < e;
      if (inside) m = {static_cast<std::uintptr_t>(b), static_cast<std::uintptr_t>(e), -1};
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) m.thp_eligible = std::stoi(line.substr(12));
  }
  return m;
}

/// Whether the kernel can give 2 MB pages to a mapping that asks (not "never").
bool big_pages_on() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(in, mode);
  return !mode.empty() && mode.find("[never]") == std::string::npos;
}

}  // namespace

TEST_CASE("advising 2 MB pages marks exactly the whole 2 MB pages inside the range") {
  if (!big_pages_on()) {
    MESSAGE("skipped: this kernel gives no 2 MB pages (transparent_hugepage off)");
    return;
  }
  // 16 MB of our own, used from a 2 MB boundary on, so the mapping's edges are known.
  const std::size_t room = 8 * kBig;
  void* raw = mmap(nullptr, room, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(raw != MAP_FAILED);
  const std::uintptr_t base = (reinterpret_cast<std::uintptr_t>(raw) + kBig - 1) & ~(kBig - 1);
  auto* at = reinterpret_cast<unsigned char*>(base);
  at[0] = 7;
  at[5 * kBig] = 9;

  // Less than one whole 2 MB page inside (one byte short of the boundary): no advice.
  advise_big_pages(at + 4096, kBig - 1);
  CHECK(mapping_of(base + kBig).begin <= base);

  // From 4 KB past a boundary to 4 KB past the third one after: pages 1 and 2 only.
  advise_big_pages(at + 4096, 3 * kBig);
  const mapping advised = mapping_of(base + kBig);
  CHECK(advised.begin == base + kBig);
  CHECK(advised.end == base + 3 * kBig);
  if (advised.thp_eligible >= 0) CHECK(advised.thp_eligible == 1);
  CHECK(mapping_of(base).end == base + kBig);                   // the page before: as it was
  CHECK(mapping_of(base + 3 * kBig).begin == base + 3 * kBig);  // and the one after
  // Advice changes no content.
  CHECK(at[0] == 7);
  CHECK(at[5 * kBig] == 9);
  CHECK(at[kBig + 12345] == 0);
  munmap(raw, room);
}

TEST_CASE("a table resized with advice holds what a plain resize would") {
  struct row {
    double t = -1;
    std::string name = "none";
    std::int32_t n = 3;
  };
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{200000}}) {
    std::vector<row> v;
    resize_advised(v, n);
    REQUIRE(v.size() == n);
    for (const row& r : v) {
      CHECK(r.t == -1);
      CHECK(r.name == "none");
      CHECK(r.n == 3);
    }
    // Growing a table that already has rows keeps them.
    if (n > 0) v[0].n = 42;
    resize_advised(v, n + 5);
    CHECK(v.size() == n + 5);
    if (n > 0) CHECK(v[0].n == 42);
    CHECK(v.back().name == "none");
  }
  // Reserving room for a run and handing it back leaves the allocator serving as before.
  reserve_big_pages(std::size_t{64} << 20);
  std::vector<int> after(1 << 20, 5);
  CHECK(after[123456] == 5);
}
