#include "engine/tagged_index.hpp"

namespace kiln::engine {

void tagged_index::reset(std::size_t slots) {
  slots_.assign(slots, slot{});
  mask_ = slots - 1;
  shift_ = 32 - std::countr_zero(slots);
  size_ = 0;
}

void tagged_index::grow() {
  // The home of an entry is its tag's, so the table rehashes without asking for keys.
  std::vector<slot> old = std::move(slots_);
  reset(old.size() * 2);
  for (const slot& s : old) {
    if (s.value == kEmpty) continue;
    std::size_t i = home(s.tag);
    while (slots_[i].value != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
    ++size_;
  }
}

}  // namespace kiln::engine
