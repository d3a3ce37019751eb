#include "engine/kv_block_pool.hpp"

#include <algorithm>
#include <bit>

// Inlined here: the block keys and prompt hashes are hot, of short or known lengths.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include "kernels/reference/sampling.hpp"

namespace kiln::engine {

std::uint64_t salt_seed(std::uint64_t salt) {
  // splitmix's finaliser, a bijection: no two salts give a first block the same seed.
  return kernels::reference::mix64(salt ^ 0x6B696C6E626C6B73ull);
}

block_hash chain_hash_seeded(block_hash parent, std::uint64_t seed, std::span<const token_id> tokens) {
  // One hash of the tokens, seeded by the parent's key and the salt's seed.
  const block_hash h = XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent ^ seed);
  return h != 0 ? h : 1;  // 0 marks a block without a key
}

block_hash chain_hash(block_hash parent, std::uint64_t salt, std::span<const token_id> tokens) {
  return chain_hash_seeded(parent, salt_seed(salt), tokens);
}

kv_block_pool::kv_block_pool(int num_blocks, int block_size)
    : block_size_(std::max(1, block_size)), by_key_(std::min<std::size_t>(static_cast<std::size_t>(std::max(1, num_blocks)), 1u << 16)) {
  meta_.assign(static_cast<std::size_t>(std::max(1, num_blocks)), block_meta{});
  meta_[0].refs = 1;  // the null block is never free
  ring_.assign(std::bit_ceil(meta_.size() * 2), 0);
  for (block_id b = 1; b < static_cast<block_id>(meta_.size()); ++b) push_free(b);
}

void kv_block_pool::push_free(block_id b) {
  if (tail_ - head_ == ring_.size()) compact_ring();
  meta_[static_cast<std::size_t>(b)].spot = static_cast<std::uint32_t>(tail_);
  ring_[tail_ & (ring_.size() - 1)] = b;
  ++tail_;
  ++free_count_;
}

void kv_block_pool::compact_ring() {
  // Every free block has one live entry, so at most capacity() of the ring's entries live:
  // with the ring twice that size, a full ring is at least half stale.
  const std::uint64_t mask = ring_.size() - 1;
  std::uint64_t out = head_;
  for (std::uint64_t at = head_; at != tail_; ++at) {
    const block_id b = ring_[at & mask];
    block_meta& m = meta_[static_cast<std::size_t>(b)];
    if (m.refs != 0 || m.spot != static_cast<std::uint32_t>(at)) continue;
    m.spot = static_cast<std::uint32_t>(out);
    ring_[out & mask] = b;
    ++out;
  }
  tail_ = out;
  meta_ahead_ = slot_ahead_ = head_;  // the places past head_ name other blocks now
}

std::vector<block_id> kv_block_pool::allocate(int n) {
  std::vector<block_id> out;
  allocate_into(n, out);
  return out;
}

bool kv_block_pool::allocate_into(int n, std::vector<block_id>& out) {
  if (n <= 0 || n > free_count_) return n == 0;
  const std::size_t first = out.size();
  out.reserve(first + static_cast<std::size_t>(n));
  // The blocks leave the ring first; their keys leave the index after, in the same order,
  // once every index slot they need is on its way into the cache.
  const std::uint64_t mask = ring_.size() - 1;
  while (out.size() - first < static_cast<std::size_t>(n)) {
    const std::uint64_t at = head_++;
    const block_id b = ring_[at & mask];
    block_meta& m = meta_[static_cast<std::size_t>(b)];
    if (m.refs != 0 || m.spot != static_cast<std::uint32_t>(at)) continue;  // stale
    m.refs = 1;
    --free_count_;
    if (m.key != 0) by_key_.prefetch(m.key);
    out.push_back(b);
  }
  look_ahead();
  const auto key_of = [this](std::int32_t v) { return this->key_of(v); };
  for (std::size_t i = first; i < out.size(); ++i) {
    block_meta& m = meta_[static_cast<std::size_t>(out[i])];
    if (m.key == 0) continue;
    by_key_.erase(m.key, key_of);
    m.key = 0;
    ++evictions_;
  }
  return true;
}

void kv_block_pool::look_ahead() {
  // Ahead of the next allocations, a window of the ring at a time: the records of the blocks
  // kMetaAhead places on, and for those kSlotAhead on (their records fetched by earlier calls)
  // the index slots their evictions will need. Each place enters each window once, so a run
  // of one-block allocations (decode growth) keeps as many loads in flight as a big one.
  constexpr std::uint64_t kMetaAhead = 16, kSlotAhead = 8;
  const std::uint64_t mask = ring_.size() - 1;
  const std::uint64_t meta_to = std::min(tail_, head_ + kMetaAhead);
  for (std::uint64_t at = std::max(meta_ahead_, head_); at < meta_to; ++at)
    __builtin_prefetch(&meta_[static_cast<std::size_t>(ring_[at & mask])], 1);
  meta_ahead_ = std::max(meta_ahead_, meta_to);
  const std::uint64_t slot_to = std::min(tail_, head_ + kSlotAhead);
  for (std::uint64_t at = std::max(slot_ahead_, head_); at < slot_to; ++at) {
    const block_meta& m = meta_[static_cast<std::size_t>(ring_[at & mask])];
    if (m.refs == 0 && m.key != 0) by_key_.prefetch(m.key);
  }
  slot_ahead_ = std::max(slot_ahead_, slot_to);
}

void kv_block_pool::release_all(std::span<const block_id> blocks) {
  // The records are fetched a stretch ahead of their release, so their cache misses overlap.
  constexpr std::size_t kAhead = 8;
  const std::size_t n = blocks.size();
  for (std::size_t i = 0; i < std::min(n, kAhead); ++i) __builtin_prefetch(&meta_[static_cast<std::size_t>(blocks[n - 1 - i])], 1);
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(&meta_[static_cast<std::size_t>(blocks[n - 1 - i - kAhead])], 1);
    release(blocks[n - 1 - i]);
  }
}

void kv_block_pool::cache(block_id b, block_hash key) {
  block_meta& m = meta_[static_cast<std::size_t>(b)];
  if (m.key != 0 || key == 0) return;
  m.key = key;  // as key_of(b) for the index's check; undone when the key is taken
  if (!by_key_.insert(key, b, [this](std::int32_t v) { return key_of(v); })) m.key = 0;
}

void kv_block_pool::cache_all(std::span<const block_id> blocks, std::span<const block_hash> keys) {
  const std::size_t n = std::min(blocks.size(), keys.size());
  for (std::size_t i = 0; i < n; ++i)
    if (meta_[static_cast<std::size_t>(blocks[i])].key == 0) by_key_.prefetch(keys[i]);
  for (std::size_t i = 0; i < n; ++i) cache(blocks[i], keys[i]);
}

}  // namespace kiln::engine
