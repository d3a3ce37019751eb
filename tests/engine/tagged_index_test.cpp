// The open-addressing index of the prefix cache and the oracle against std::unordered_map,
// through growth and backward-shift deletion.
#include <doctest/doctest.h>

#include <random>
#include <unordered_map>

#include "engine/tagged_index.hpp"

namespace {

// The owner's side of a tagged index: each value names the key it was stored under.
struct owned_keys {
  std::unordered_map<std::int32_t, std::uint64_t> key;
  std::uint64_t operator()(std::int32_t v) const { return key.at(v); }
};

// The inverse of the tag's odd multiplier mod 2^64 (Newton's iteration): k and
// k + inverse have the same tag, so their match needs the owner's key to tell them apart.
std::uint64_t multiplier_inverse() {
  const std::uint64_t g = 0x9E3779B97F4A7C15ull;
  std::uint64_t x = g;
  for (int i = 0; i < 6; ++i) x *= 2 - g * x;
  return x;
}

}  // namespace

TEST_CASE("tagged index: the same answers as a hash map, keys with equal tags told apart by their owner's keys") {
  using kiln::engine::tagged_index;
  const std::uint64_t twin = multiplier_inverse();
  CHECK(twin * 0x9E3779B97F4A7C15ull == 1);
  tagged_index idx(8);
  owned_keys owner;
  std::unordered_map<std::uint64_t, std::int32_t> ref;
  std::mt19937_64 rng(9);
  std::int32_t next_value = 0;
  for (int op = 0; op < 200000; ++op) {
    // Few distinct keys; a third are twins of small keys (the same tag, another key).
    std::uint64_t key = rng() % 3000;
    if (rng() % 3 == 0) key += twin;
    switch (rng() % 3) {
      case 0: {
        const std::int32_t v = next_value++;
        owner.key[v] = key;
        CHECK(idx.insert(key, v, owner) == ref.emplace(key, v).second);
        break;
      }
      case 1: CHECK(idx.erase(key, owner) == (ref.erase(key) > 0)); break;
      default: {
        auto it = ref.find(key);
        const auto got = idx.find(key, owner);
        REQUIRE(got.has_value() == (it != ref.end()));
        if (got) CHECK(*got == it->second);
        // The unconfirmed candidate: there whenever the key is, and of the key's tag.
        const auto cand = idx.candidate(key);
        if (got) REQUIRE(cand.has_value());
        if (cand) CHECK(((owner(*cand) * 0x9E3779B97F4A7C15ull) >> 32) == ((key * 0x9E3779B97F4A7C15ull) >> 32));
      }
    }
    if (op % 1000 == 0) CHECK(idx.size() == ref.size());
  }
  for (const auto& [k, v] : ref) CHECK(idx.find(k, owner) == v);
  CHECK(idx.size() == ref.size());
  CHECK_FALSE(idx.find(0xDEADBEEFull << 20, owner).has_value());
}
