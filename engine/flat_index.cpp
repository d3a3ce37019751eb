#include "engine/flat_index.hpp"

#include <bit>

namespace kiln::engine {

flat_index::flat_index(std::size_t expected) {
  const std::size_t slots = std::bit_ceil(std::max<std::size_t>(16, expected * 2));
  keys_.assign(slots, 0);
  values_.assign(slots, kEmpty);
  mask_ = slots - 1;
  shift_ = 64 - std::countr_zero(slots);
}

std::optional<std::int32_t> flat_index::find(std::uint64_t key) const {
  for (std::size_t i = home(key);; i = (i + 1) & mask_) {
    if (values_[i] == kEmpty) return std::nullopt;
    if (keys_[i] == key) return values_[i];
  }
}

bool flat_index::insert(std::uint64_t key, std::int32_t value) {
  if ((size_ + 1) * 2 > keys_.size()) grow();
  for (std::size_t i = home(key);; i = (i + 1) & mask_) {
    if (values_[i] == kEmpty) {
      keys_[i] = key;
      values_[i] = value < 0 ? 0 : value;
      ++size_;
      return true;
    }
    if (keys_[i] == key) return false;
  }
}

bool flat_index::erase(std::uint64_t key) {
  std::size_t i = home(key);
  while (true) {
    if (values_[i] == kEmpty) return false;
    if (keys_[i] == key) break;
    i = (i + 1) & mask_;
  }
  // Backward shift: pull later entries of the run into the hole when their home allows it.
  for (std::size_t j = (i + 1) & mask_; values_[j] != kEmpty; j = (j + 1) & mask_) {
    const std::size_t h = home(keys_[j]);
    // The entry at j may move to i when i lies cyclically within [h, j).
    const bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
    if (!movable) continue;
    keys_[i] = keys_[j];
    values_[i] = values_[j];
    i = j;
  }
  values_[i] = kEmpty;
  --size_;
  return true;
}

void flat_index::grow() {
  std::vector<std::uint64_t> keys = std::move(keys_);
  std::vector<std::int32_t> values = std::move(values_);
  const std::size_t slots = keys.size() * 2;
  keys_.assign(slots, 0);
  values_.assign(slots, kEmpty);
  mask_ = slots - 1;
  shift_ = 64 - std::countr_zero(slots);
  size_ = 0;
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (values[i] != kEmpty) insert(keys[i], values[i]);
}

}  // namespace kiln::engine
