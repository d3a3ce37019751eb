// The per-request map of admission and the engines: against std::map under a long random
// mix of adds, lookups and removals (runs that wrap the table's end included), and what a
// removal does with the value it held.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "actors/id_map.hpp"

using kiln::actors::id_map;
using kiln::actors::request_id;

namespace {

// Ids from a wide range, the map kept near `around` entries: near 6 the table stays at 16
// slots, so runs of neighbouring entries often wrap past its end and are cut there; near 400
// it is large and grows on the way.
void against_std_map(std::size_t around) {
  id_map<std::string> m;
  std::map<request_id, std::string> ref;
  std::mt19937_64 rng(7 + around);
  auto draw = [&] { return request_id{rng() % 3, 1 + rng() % 5000}; };
  // An id in the map, or (a quarter of the time, or when empty) one drawn afresh.
  auto some = [&] {
    if (ref.empty() || rng() % 4 == 0) return draw();
    auto it = ref.begin();
    std::advance(it, static_cast<long>(rng() % ref.size()));
    return it->first;
  };
  for (int step = 0; step < 60000; ++step) {
    const bool add = ref.size() < around ? rng() % 4 != 0 : rng() % 4 == 0;
    const request_id id = add ? (rng() % 8 == 0 ? some() : draw()) : some();
    switch (add ? 0 : 2 + rng() % 2) {
      case 0: {
        const std::string v = std::to_string(step) + " a value too long for the string's own room";
        m[id] = v;
        ref[id] = v;
        break;
      }
      case 2: {
        const auto taken = m.take(id);
        const auto it = ref.find(id);
        REQUIRE(taken.has_value() == (it != ref.end()));
        if (taken) {
          CHECK(*taken == it->second);
          ref.erase(it);
        }
        break;
      }
      default:
        CHECK(m.erase(id) == (ref.erase(id) == 1));
    }
    REQUIRE(m.size() == ref.size());
    if (step % 97 == 0) {
      for (const auto& [k, v] : ref) {
        const std::string* found = m.find(k);
        REQUIRE(found != nullptr);
        CHECK(*found == v);
      }
      for (int k = 0; k < 200; ++k) {
        const request_id other = draw();
        CHECK(m.contains(other) == (ref.count(other) == 1));
      }
    }
  }
}

}  // namespace

TEST_CASE("id_map: agrees with std::map through adds, lookups and removals") {
  SUBCASE("a small table") { against_std_map(6); }
  SUBCASE("a large one") { against_std_map(400); }
}

TEST_CASE("id_map: an empty map, a missing id, and clear") {
  id_map<int> m;
  const request_id a{1, 2}, b{2, 1};
  CHECK(m.find(a) == nullptr);
  CHECK_FALSE(m.erase(a));
  CHECK_FALSE(m.take(a).has_value());
  CHECK(m.empty());
  m[a] = 5;
  CHECK(m[a] == 5);  // operator[] finds what is there
  CHECK(m.size() == 1);
  CHECK(m.find(b) == nullptr);
  m.clear();
  CHECK(m.empty());
  CHECK(m.find(a) == nullptr);
  m[a] += 1;  // made again from nothing
  CHECK(*m.find(a) == 1);
}

TEST_CASE("id_map: growth keeps every entry, and a removed value is let go at once") {
  id_map<std::shared_ptr<int>> m;
  auto held = std::make_shared<int>(42);
  for (std::uint64_t s = 1; s <= 5000; ++s) m[{9, s}] = s % 2 ? held : std::make_shared<int>(static_cast<int>(s));
  CHECK(m.size() == 5000);
  CHECK(held.use_count() == 2501);
  for (std::uint64_t s = 1; s <= 5000; ++s) {
    const auto* v = m.find(request_id{9, s});
    REQUIRE(v != nullptr);
    CHECK(**v == (s % 2 ? 42 : static_cast<int>(s)));
  }
  for (std::uint64_t s = 1; s <= 5000; s += 2) CHECK(m.erase(request_id{9, s}));
  CHECK(held.use_count() == 1);  // no copy left behind in a freed or shifted slot
  CHECK(m.size() == 2500);
  auto taken = m.take({9, 2});
  REQUIRE(taken.has_value());
  CHECK(**taken == 2);
  CHECK(taken->use_count() == 1);
  CHECK(m.find(request_id{9, 4}) != nullptr);
}

TEST_CASE("id_map: an engine's sequence ids, a counter whose oldest entries leave first") {
  // The engine's pattern: ids from a counter, a window of them in flight, ended out of order.
  id_map<std::uint64_t, std::uint64_t, kiln::actors::seq_hash> m;
  std::map<std::uint64_t, std::uint64_t> ref;
  std::mt19937_64 rng(11);
  std::uint64_t next = 0;
  for (int step = 0; step < 40000; ++step) {
    if (ref.size() < 150 || rng() % 2) {
      m[next] = next * 3;
      ref[next] = next * 3;
      ++next;
    } else {
      auto it = ref.begin();
      std::advance(it, static_cast<long>(rng() % std::min<std::size_t>(ref.size(), 20)));  // mostly the oldest
      const auto taken = m.take(it->first);
      REQUIRE(taken.has_value());
      CHECK(*taken == it->second);
      ref.erase(it);
    }
    REQUIRE(m.size() == ref.size());
  }
  std::size_t walked = 0;
  m.for_each([&](std::uint64_t k, std::uint64_t v) {
    ++walked;
    CHECK(ref.at(k) == v);
  });
  CHECK(walked == ref.size());
}

TEST_CASE("id_map: sorted_keys gives the kept entries' ids in order, whatever the table order") {
  id_map<int, std::uint64_t, kiln::actors::seq_hash> m;
  std::vector<std::uint64_t> all, odd;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 300; ++i) {
    const std::uint64_t id = rng() % 100000;
    if (m.contains(id)) continue;
    m[id] = static_cast<int>(id % 2);
    all.push_back(id);
    if (id % 2) odd.push_back(id);
  }
  std::sort(all.begin(), all.end());
  std::sort(odd.begin(), odd.end());
  CHECK(m.sorted_keys() == all);
  CHECK(m.sorted_keys([](std::uint64_t, int v) { return v == 1; }) == odd);
  CHECK(id_map<int>{}.sorted_keys().empty());
}
