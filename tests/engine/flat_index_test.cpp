// The prefix cache's open-addressing index against std::unordered_map, through growth and
// backward-shift deletion.
#include <doctest/doctest.h>

#include <random>
#include <unordered_map>

#include "engine/flat_index.hpp"

using kiln::engine::flat_index;

TEST_CASE("flat index: the same answers as a hash map under random inserts, erases and lookups") {
  flat_index idx(8);
  std::unordered_map<std::uint64_t, std::int32_t> ref;
  std::mt19937_64 rng(5);
  for (int op = 0; op < 200000; ++op) {
    // Few distinct keys, so erases and re-inserts collide in the same runs; some keys share
    // their home slot (multiples of a large power of two).
    const std::uint64_t key = (rng() % 3 == 0) ? (rng() % 64) << 40 : rng() % 5000;
    const auto value = static_cast<std::int32_t>(rng() % 1000);
    switch (rng() % 3) {
      case 0: CHECK(idx.insert(key, value) == ref.emplace(key, value).second); break;
      case 1: CHECK(idx.erase(key) == (ref.erase(key) > 0)); break;
      default: {
        auto it = ref.find(key);
        const auto got = idx.find(key);
        REQUIRE(got.has_value() == (it != ref.end()));
        if (got) CHECK(*got == it->second);
      }
    }
    if (op % 1000 == 0) CHECK(idx.size() == ref.size());
  }
  for (const auto& [k, v] : ref) CHECK(idx.find(k) == v);
  CHECK(idx.size() == ref.size());
  CHECK_FALSE(idx.contains(0xDEADBEEFull << 20));
}
