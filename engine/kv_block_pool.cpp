#include "engine/kv_block_pool.hpp"

#include <algorithm>
#include <cassert>

#include <xxhash.h>

namespace kiln::engine {

block_hash chain_hash(block_hash parent, std::uint64_t salt, std::span<const token_id> tokens) {
  const std::uint64_t head[2] = {parent, salt};
  const std::uint64_t seed = XXH3_64bits(head, sizeof head);
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), seed);
}

kv_block_pool::kv_block_pool(int num_blocks, int block_size)
    : block_size_(std::max(1, block_size)), by_key_(std::min<std::size_t>(static_cast<std::size_t>(std::max(1, num_blocks)), 1u << 16)) {
  meta_.assign(static_cast<std::size_t>(std::max(1, num_blocks)), block_meta{});
  meta_[0].refs = 1;  // the null block is never free
  for (block_id b = 1; b < static_cast<block_id>(meta_.size()); ++b) push_back(b);
}

void kv_block_pool::unlink(block_id b) {
  block_meta& m = meta_[static_cast<std::size_t>(b)];
  if (m.prev >= 0) meta_[static_cast<std::size_t>(m.prev)].next = m.next;
  else head_ = m.next;
  if (m.next >= 0) meta_[static_cast<std::size_t>(m.next)].prev = m.prev;
  else tail_ = m.prev;
  m.prev = m.next = -1;
  --free_count_;
}

void kv_block_pool::push_back(block_id b) {
  block_meta& m = meta_[static_cast<std::size_t>(b)];
  m.prev = tail_;
  m.next = -1;
  if (tail_ >= 0) meta_[static_cast<std::size_t>(tail_)].next = b;
  else head_ = b;
  tail_ = b;
  ++free_count_;
}

std::vector<block_id> kv_block_pool::allocate(int n) {
  std::vector<block_id> out;
  if (n <= 0 || n > free_count_) return out;
  out.reserve(static_cast<std::size_t>(n));
  // The blocks leave the free list first; their keys leave the index after, in the same
  // order, once every index slot they need is on its way into the cache.
  for (int k = 0; k < n; ++k) {
    const block_id b = head_;
    unlink(b);
    block_meta& m = meta_[static_cast<std::size_t>(b)];
    m.refs = 1;
    if (m.keyed) by_key_.prefetch(m.key);
    out.push_back(b);
  }
  for (block_id b : out) {
    block_meta& m = meta_[static_cast<std::size_t>(b)];
    if (!m.keyed) continue;
    by_key_.erase(m.key);
    m.keyed = false;
    ++evictions_;
  }
  return out;
}

void kv_block_pool::ref(block_id b) {
  int& r = meta_[static_cast<std::size_t>(b)].refs;
  if (r == 0) unlink(b);
  ++r;
}

void kv_block_pool::release(block_id b) {
  if (b == 0) return;
  int& r = meta_[static_cast<std::size_t>(b)].refs;
  assert(r > 0);
  if (--r == 0) push_back(b);
}

void kv_block_pool::release_all(std::span<const block_id> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) release(*it);
}

void kv_block_pool::cache(block_id b, block_hash key) {
  block_meta& m = meta_[static_cast<std::size_t>(b)];
  if (m.keyed) return;
  if (by_key_.insert(key, b)) {
    m.key = key;
    m.keyed = true;
  }
}

void kv_block_pool::cache_all(std::span<const block_id> blocks, std::span<const block_hash> keys) {
  const std::size_t n = std::min(blocks.size(), keys.size());
  for (std::size_t i = 0; i < n; ++i)
    if (!meta_[static_cast<std::size_t>(blocks[i])].keyed) by_key_.prefetch(keys[i]);
  for (std::size_t i = 0; i < n; ++i) cache(blocks[i], keys[i]);
}

std::optional<block_id> kv_block_pool::lookup(block_hash key) const {
  return by_key_.find(key);
}

}  // namespace kiln::engine
