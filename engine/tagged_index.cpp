#include "engine/tagged_index.hpp"

namespace kiln::engine {

void tagged_index::reset(std::size_t slots) {
  slots_.assign(slots, slot{});
  mask_ = slots - 1;
  shift_ = 32 - std::countr_zero(slots);
  size_ = 0;
}

void tagged_index::remove_at(std::size_t i) {
  // Backward shift: pull later entries of the run into the hole when their home allows it.
  for (std::size_t j = (i + 1) & mask_; slots_[j].value != kEmpty; j = (j + 1) & mask_) {
    const std::size_t h = home(slots_[j].tag);
    // The entry at j may move to i when i lies cyclically within [h, j).
    const bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
    if (!movable) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i].value = kEmpty;
  --size_;
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
