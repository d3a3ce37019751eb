#pragma once
// A map from request ids (or an engine's sequence ids) to small values, for the bookkeeping
// that admission, the routers and the engines keep per request in flight (its charge, its
// slot, its pool, its job): a flat table with linear probing, so a lookup of a request that
// started long ago costs one cache miss where a node-based map costs three (bucket, the node
// before, the node). Deletion by backward shift (no tombstones); doubling when half full. A
// value's address changes when any other entry is added or erased: hold none across such a
// change. A walk goes in table order, which follows the ids' hashes: whoever needs an order
// sorts what it collects.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "actors/request.hpp"

namespace kiln::actors {

/// The engines' sequence ids (a counter): spread by one multiply in id_map's home().
struct seq_hash {
  std::size_t operator()(std::uint64_t id) const noexcept { return static_cast<std::size_t>(id ^ (id >> 29)); }
};

template <class V, class K = request_id, class Hash = request_id_hash>
class id_map {
 public:
  V* find(const K& id) {
    const std::size_t i = index_of(id);
    return i == kNone ? nullptr : &slots_[i].value;
  }
  const V* find(const K& id) const { return const_cast<id_map*>(this)->find(id); }
  bool contains(const K& id) const { return find(id) != nullptr; }

  /// The value of `id`, made (value-initialized) if absent.
  V& operator[](const K& id) {
    if (V* v = find(id)) return *v;
    if ((size_ + 1) * 2 > slots_.size()) grow();
    slot& s = free_slot(id);  // its value is V{}: a slot is emptied when its entry leaves
    s.key = id;
    s.used = true;
    ++size_;
    return s.value;
  }

  /// Removes `id` and gives its value (none: it was not there).
  std::optional<V> take(const K& id) {
    const std::size_t i = index_of(id);
    if (i == kNone) return std::nullopt;
    std::optional<V> out(std::move(slots_[i].value));
    remove_at(i);
    return out;
  }
  /// False if `id` was not there.
  bool erase(const K& id) {
    const std::size_t i = index_of(id);
    if (i == kNone) return false;
    remove_at(i);
    return true;
  }

  /// f(id, value) for every entry, in table order; f must not add or erase.
  template <class F>
  void for_each(F f) const {
    for (const slot& s : slots_)
      if (s.used) f(s.key, s.value);
  }

  /// The keys of the entries where keep(id, value) holds, in key order (for a walk that
  /// sends, or that may add or erase).
  template <class Keep>
  std::vector<K> sorted_keys(Keep keep) const {
    std::vector<K> out;
    for_each([&](const K& id, const V& v) {
      if (keep(id, v)) out.push_back(id);
    });
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<K> sorted_keys() const {
    return sorted_keys([](const K&, const V&) { return true; });
  }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void clear() {
    slots_.clear();
    mask_ = 0;
    size_ = 0;
  }

 private:
  static constexpr std::size_t kNone = ~std::size_t{0};
  struct slot {
    K key{};
    bool used = false;
    V value{};
  };

  std::size_t home(const K& id) const {
    // The key's hash, mixed once more and read from its top bits.
    return static_cast<std::size_t>((static_cast<std::uint64_t>(Hash{}(id)) * 0xD6E8FEB86659FD93ull) >> shift_);
  }
  std::size_t index_of(const K& id) const {
    if (slots_.empty()) return kNone;
    for (std::size_t i = home(id);; i = (i + 1) & mask_) {
      if (!slots_[i].used) return kNone;
      if (slots_[i].key == id) return i;
    }
  }
  /// The first unused slot of `id`'s probe (the table has room).
  slot& free_slot(const K& id) {
    std::size_t i = home(id);
    while (slots_[i].used) i = (i + 1) & mask_;
    return slots_[i];
  }
  void remove_at(std::size_t i) {
    // Pull later entries of the run into the hole where their home allows it.
    for (std::size_t j = (i + 1) & mask_; slots_[j].used; j = (j + 1) & mask_) {
      const std::size_t h = home(slots_[j].key);
      const bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
      if (!movable) continue;
      slots_[i].key = slots_[j].key;
      slots_[i].value = std::move(slots_[j].value);
      i = j;
    }
    slots_[i].used = false;
    slots_[i].value = V{};  // what it held goes now, not when the slot is next used
    --size_;
  }
  void grow() {
    std::vector<slot> old = std::move(slots_);
    const std::size_t n = old.empty() ? 16 : old.size() * 2;
    slots_ = std::vector<slot>(n);
    mask_ = n - 1;
    shift_ = 64 - std::countr_zero(n);
    for (slot& s : old) {
      if (!s.used) continue;
      slot& to = free_slot(s.key);
      to.key = s.key;
      to.used = true;
      to.value = std::move(s.value);
    }
  }

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  int shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace kiln::actors
