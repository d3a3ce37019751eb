#pragma once
// An open-addressing hash map from 64-bit keys to 32-bit values whose keys are kept by the
// owner elsewhere (the prefix cache keeps each block's key with the block). A slot holds a
// 32-bit tag of the key beside the value, 8 bytes, and a tag match is confirmed by the
// owner's key of that value (`key_of`). Linear probing, deletion by backward shift (no
// tombstones), doubling when half full: half the memory of a slot that holds the whole key,
// so more of a busy index stays in the processor's caches.
#include <bit>
#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::engine {

class tagged_index {
 public:
  /// Room for `expected` entries before the first growth.
  explicit tagged_index(std::size_t expected = 16) { reset(std::bit_ceil(std::max<std::size_t>(16, expected * 2))); }

  template <class KeyOf>
  std::optional<std::int32_t> find(std::uint64_t key, const KeyOf& key_of) const {
    const std::uint32_t tag = tag_of(key);
    for (std::size_t i = home(tag);; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.value == kEmpty) return std::nullopt;
      if (s.tag == tag && key_of(s.value) == key) return s.value;
    }
  }

  /// Inserts if absent; false (and nothing changed) if the key is there. `value` >= 0.
  template <class KeyOf>
  bool insert(std::uint64_t key, std::int32_t value, const KeyOf& key_of) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const std::uint32_t tag = tag_of(key);
    for (std::size_t i = home(tag);; i = (i + 1) & mask_) {
      slot& s = slots_[i];
      if (s.value == kEmpty) {
        s = {tag, value < 0 ? 0 : value};
        ++size_;
        return true;
      }
      if (s.tag == tag && key_of(s.value) == key) return false;
    }
  }

  /// False if the key was not there.
  template <class KeyOf>
  bool erase(std::uint64_t key, const KeyOf& key_of) {
    const std::uint32_t tag = tag_of(key);
    std::size_t i = home(tag);
    while (true) {
      const slot& s = slots_[i];
      if (s.value == kEmpty) return false;
      if (s.tag == tag && key_of(s.value) == key) break;
      i = (i + 1) & mask_;
    }
    remove_at(i);
    return true;
  }

  /// The value of the first entry whose tag is `key`'s, unconfirmed: the one find() would
  /// check first. For loading ahead what that check reads.
  std::optional<std::int32_t> candidate(std::uint64_t key) const {
    const std::uint32_t tag = tag_of(key);
    for (std::size_t i = home(tag);; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.value == kEmpty) return std::nullopt;
      if (s.tag == tag) return s.value;
    }
  }

  /// Starts loading the slot where `key`'s probe begins, so a batch of operations waits for
  /// its cache misses together rather than one after another.
  void prefetch(std::uint64_t key) const { __builtin_prefetch(&slots_[home(tag_of(key))], 1); }
  std::size_t size() const { return size_; }

 private:
  static constexpr std::int32_t kEmpty = -1;
  struct slot {
    std::uint32_t tag = 0;
    std::int32_t value = kEmpty;  ///< kEmpty: a free slot
  };
  /// A bijection of the key (odd multiplier), top half: spread even for small or patterned keys.
  static std::uint32_t tag_of(std::uint64_t key) { return static_cast<std::uint32_t>((key * 0x9E3779B97F4A7C15ull) >> 32); }
  std::size_t home(std::uint32_t tag) const { return static_cast<std::size_t>(tag >> shift_); }
  void reset(std::size_t slots);
  void remove_at(std::size_t i) {
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
  void grow();

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  int shift_ = 32;
  std::size_t size_ = 0;
};

}  // namespace kiln::engine
