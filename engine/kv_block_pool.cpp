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
  const auto n = static_cast<std::size_t>(std::max(1, num_blocks));
  refs_.assign(n, 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
  key_of_.assign(n, std::nullopt);
  refs_[0] = 1;  // the null block is never free
  for (block_id b = 1; b < static_cast<block_id>(n); ++b) push_back(b);
}

void kv_block_pool::unlink(block_id b) {
  const auto i = static_cast<std::size_t>(b);
  if (prev_[i] >= 0) next_[static_cast<std::size_t>(prev_[i])] = next_[i];
  else head_ = next_[i];
  if (next_[i] >= 0) prev_[static_cast<std::size_t>(next_[i])] = prev_[i];
  else tail_ = prev_[i];
  prev_[i] = next_[i] = -1;
  --free_count_;
}

void kv_block_pool::push_back(block_id b) {
  const auto i = static_cast<std::size_t>(b);
  prev_[i] = tail_;
  next_[i] = -1;
  if (tail_ >= 0) next_[static_cast<std::size_t>(tail_)] = b;
  else head_ = b;
  tail_ = b;
  ++free_count_;
}

std::vector<block_id> kv_block_pool::allocate(int n) {
  std::vector<block_id> out;
  if (n <= 0 || n > free_count_) return out;
  out.reserve(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) {
    const block_id b = head_;
    unlink(b);
    auto& key = key_of_[static_cast<std::size_t>(b)];
    if (key) {
      by_key_.erase(*key);
      key.reset();
      ++evictions_;
    }
    refs_[static_cast<std::size_t>(b)] = 1;
    out.push_back(b);
  }
  return out;
}

void kv_block_pool::ref(block_id b) {
  auto& r = refs_[static_cast<std::size_t>(b)];
  if (r == 0) unlink(b);
  ++r;
}

void kv_block_pool::release(block_id b) {
  if (b == 0) return;
  auto& r = refs_[static_cast<std::size_t>(b)];
  assert(r > 0);
  if (--r == 0) push_back(b);
}

void kv_block_pool::release_all(std::span<const block_id> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) release(*it);
}

void kv_block_pool::cache(block_id b, block_hash key) {
  auto& k = key_of_[static_cast<std::size_t>(b)];
  if (k) return;
  if (by_key_.insert(key, b)) k = key;
}

std::optional<block_id> kv_block_pool::lookup(block_hash key) const {
  return by_key_.find(key);
}

}  // namespace kiln::engine
