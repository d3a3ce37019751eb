#pragma once
// An open-addressing hash map from 64-bit keys to 32-bit values: linear probing in one flat
// array, deletion by backward shift (no tombstones), doubling when half full. The prefix
// cache's index of blocks by chain key: one short probe per lookup instead of a bucket list.
#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::engine {

class flat_index {
 public:
  /// Room for `expected` entries before the first growth.
  explicit flat_index(std::size_t expected = 16);

  std::optional<std::int32_t> find(std::uint64_t key) const;
  bool contains(std::uint64_t key) const { return find(key).has_value(); }
  /// Inserts if absent; false (and nothing changed) if the key is there.
  bool insert(std::uint64_t key, std::int32_t value);
  /// False if the key was not there.
  bool erase(std::uint64_t key);
  std::size_t size() const { return size_; }
  /// Starts loading the slot where `key`'s probe begins, so a batch of operations can wait
  /// for its cache misses together rather than one after another.
  void prefetch(std::uint64_t key) const { __builtin_prefetch(&slots_[home(key)], 1); }

 private:
  static constexpr std::int32_t kEmpty = -1;
  std::size_t home(std::uint64_t key) const { return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  void grow();

  /// A key beside its value, so a probe touches one cache line, not two.
  struct slot {
    std::uint64_t key = 0;
    std::int32_t value = kEmpty;  ///< kEmpty: a free slot (stored values are >= 0)
  };
  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace kiln::engine
