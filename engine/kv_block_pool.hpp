#pragma once
// Paged KV cache bookkeeping: fixed-size blocks with reference counts, free blocks kept in
// eviction order (least recently released first), a permanent null block 0, and the prefix
// cache: full blocks keyed by a chained hash so a later prompt with the same opening shares
// them by reference. Running out is an ordinary empty return, never an exception.
#include <cassert>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/tagged_index.hpp"
#include "engine/types.hpp"

namespace kiln::engine {

using block_id = std::int32_t;
using block_hash = std::uint64_t;

/// Key of a full block: its parent's key, the block's tokens and the team salt. The salt
/// keeps every team's blocks apart, so no block is ever shared across teams. Never 0.
block_hash chain_hash(block_hash parent, std::uint64_t salt, std::span<const token_id> tokens);
/// What chain_hash() takes of the salt, mixed once: chain_hash(p, salt, t) ==
/// chain_hash_seeded(p, salt_seed(salt), t), for a sequence that keys many blocks.
std::uint64_t salt_seed(std::uint64_t salt);
block_hash chain_hash_seeded(block_hash parent, std::uint64_t seed, std::span<const token_id> tokens);

class kv_block_pool {
 public:
  /// `num_blocks` includes the null block 0, which is never handed out.
  kv_block_pool(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int capacity() const { return static_cast<int>(meta_.size()) - 1; }
  /// Blocks that allocate() can hand out now: unreferenced, cached or not.
  int num_free() const { return free_count_; }

  /// n blocks with one reference each, evicting the least recently used cached blocks as
  /// needed; empty when fewer than n are free (then nothing is taken).
  std::vector<block_id> allocate(int n);
  /// allocate() appending to `out` (whose room a caller may keep between calls); false and
  /// nothing taken when fewer than n are free.
  bool allocate_into(int n, std::vector<block_id>& out);
  /// Takes one more reference (a prefix hit); a free cached block stops being free.
  void ref(block_id b) {
    std::int32_t& r = meta_[static_cast<std::size_t>(b)].refs;
    if (r == 0) --free_count_;  // its ring entry is stale from now on
    ++r;
  }
  /// Drops a reference; at zero the block becomes the most recently freed, keeping its
  /// cache key until it is evicted.
  void release(block_id b) {
    if (b == 0) return;
    std::int32_t& r = meta_[static_cast<std::size_t>(b)].refs;
    assert(r > 0);
    if (--r == 0) push_free(b);
  }
  /// Releases a block table, last block first, so a table's tail is evicted before its head.
  void release_all(std::span<const block_id> blocks);

  /// Registers a full block under its chain key (first registration wins).
  void cache(block_id b, block_hash key);
  /// cache() of each (blocks[i], keys[i]) in order; the index's cache misses overlap.
  void cache_all(std::span<const block_id> blocks, std::span<const block_hash> keys);
  std::optional<block_id> lookup(block_hash key) const {
    return by_key_.find(key, [this](std::int32_t v) { return key_of(v); });
  }
  /// Starts loading what lookup(key) reads (see tagged_index::prefetch).
  void prefetch(block_hash key) const { by_key_.prefetch(key); }
  /// Once prefetch(key)'s slot has come: starts loading the block record that lookup(key)
  /// checks a match against, so a run of lookups waits for those together too.
  void prefetch_record(block_hash key) const {
    if (const auto v = by_key_.candidate(key)) __builtin_prefetch(&meta_[static_cast<std::size_t>(*v)]);
  }
  bool is_free(block_id b) const { return meta_[static_cast<std::size_t>(b)].refs == 0; }
  int ref_count(block_id b) const { return meta_[static_cast<std::size_t>(b)].refs; }
  std::uint64_t evictions() const { return evictions_; }

 private:
  /// One block's bookkeeping in 16 bytes, so touching a block costs one cache line.
  struct block_meta {
    block_hash key = 0;      ///< its cache key; 0: none
    std::int32_t refs = 0;
    std::uint32_t spot = 0;  ///< while free: its place in the free ring (low 32 bits)
  };
  void push_free(block_id b);
  void compact_ring();
  void look_ahead();
  block_hash key_of(std::int32_t b) const { return meta_[static_cast<std::size_t>(b)].key; }

  int block_size_;
  std::vector<block_meta> meta_;
  /// Free blocks in the order they were freed, read from `head_`: an entry whose block was
  /// taken back (a prefix hit) or freed again later is stale and skipped. Reading and
  /// writing it in order touches memory in order, where a linked list would touch two
  /// other blocks for every change.
  std::vector<block_id> ring_;
  std::uint64_t head_ = 0, tail_ = 0;
  std::uint64_t meta_ahead_ = 0, slot_ahead_ = 0;  ///< ring places look_ahead() has fetched for, up to
  int free_count_ = 0;
  tagged_index by_key_;  ///< cached blocks by chain key (at most one key per block)
  std::uint64_t evictions_ = 0;
};

}  // namespace kiln::engine
