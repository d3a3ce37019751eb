#include "engine/flat_index.hpp"

#include <bit>

namespace kiln::engine {

flat_index::flat_index(std::size_t expected) {
  const std::size_t slots = std::bit_ceil(std::max<std::size_t>(16, expected * 2));
  slots_.assign(slots, slot{});
  mask_ = slots - 1;
  shift_ = 64 - std::countr_zero(slots);
}

std::optional<std::int32_t> flat_index::find(std::uint64_t key) const {
  for (std::size_t i = home(key);; i = (i + 1) & mask_) {
    const slot& s = slots_[i];
    if (s.value == kEmpty) return std::nullopt;
    if (s.key == key) return s.value;
  }
}

bool flat_index::insert(std::uint64_t key, std::int32_t value) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  for (std::size_t i = home(key);; i = (i + 1) & mask_) {
    slot& s = slots_[i];
    if (s.value == kEmpty) {
      s.key = key;
      s.value = value < 0 ? 0 : value;
      ++size_;
      return true;
    }
    if (s.key == key) return false;
  }
}

bool flat_index::erase(std::uint64_t key) {
  std::size_t i = home(key);
  while (true) {
    if (slots_[i].value == kEmpty) return false;
    if (slots_[i].key == key) break;
    i = (i + 1) & mask_;
  }
  // Backward shift: pull later entries of the run into the hole when their home allows it.
  for (std::size_t j = (i + 1) & mask_; slots_[j].value != kEmpty; j = (j + 1) & mask_) {
    const std::size_t h = home(slots_[j].key);
    // The entry at j may move to i when i lies cyclically within [h, j).
    const bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
    if (!movable) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i].value = kEmpty;
  --size_;
  return true;
}

void flat_index::grow() {
  std::vector<slot> old = std::move(slots_);
  const std::size_t n = old.size() * 2;
  slots_.assign(n, slot{});
  mask_ = n - 1;
  shift_ = 64 - std::countr_zero(n);
  size_ = 0;
  for (const slot& s : old)
    if (s.value != kEmpty) insert(s.key, s.value);
}

}  // namespace kiln::engine
