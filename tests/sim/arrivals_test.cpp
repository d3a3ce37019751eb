// Arrivals: the synthetic processes, the team and conversation rules, the trace readers and
// the oracle hit rate.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <thread>
#include <filesystem>
#include <fstream>

#include "sim/arrivals.hpp"
#include "sim/traces.hpp"

using namespace kiln::sim;
using kiln::config::block_hashes_of;
using kiln::config::capture_record;
using kiln::config::encode_capture;
using kiln::config::read_capture;

namespace {

std::vector<arrival> make(const arrival_spec& s, std::uint64_t seed = 1) {
  auto r = make_arrivals(s, seed);
  REQUIRE(std::holds_alternative<std::vector<arrival>>(r));
  return std::get<std::vector<arrival>>(r);
}

/// The same prompt with its block names listed one by one (not drawn when asked).
arrival listed_copy(const arrival& x) {
  arrival y = x;
  blocks_of(x, y.blocks);
  y.drawn = nullptr;
  return y;
}

std::size_t between(const std::vector<arrival>& v, double lo, double hi) {
  std::size_t n = 0;
  for (const auto& a : v) n += a.t >= lo && a.t < hi;
  return n;
}

std::string temp_file(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / ("kiln_sim_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

/// What read_trace says of a trace file holding `text` (a failed check when it reads it).
std::string trace_error(const std::string& name, const std::string& text) {
  auto read = read_trace(temp_file(name, text));
  REQUIRE(std::holds_alternative<std::string>(read));
  return std::get<std::string>(read);
}

const std::string kTraces = std::string(KILN_SOURCE_DIR) + "/../shared/data/traces/";

}  // namespace

TEST_CASE("arrivals: Poisson at a rate, the same for a seed, different for another") {
  arrival_spec s;
  s.rate = 50;
  s.duration_s = 100;
  const auto a = make(s), b = make(s), c = make(s, 2);
  // 5,000 expected; five standard deviations is about 354.
  CHECK(std::abs(static_cast<double>(a.size()) - 5000) < 354);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].t == b[i].t);
  CHECK((a.size() != c.size() || a[0].t != c[0].t));
  CHECK(std::is_sorted(a.begin(), a.end(), [](const auto& x, const auto& y) { return x.t < y.t; }));
  CHECK(a.back().t < 100);
  double prompt = 0;
  for (const auto& x : a) {
    prompt += x.prompt_tokens;
    CHECK(x.prompt_tokens >= 1200 / 8);
    CHECK(x.prompt_tokens <= 4 * 1200);
    CHECK(x.output_tokens >= 1);
  }
  CHECK(prompt / static_cast<double>(a.size()) == doctest::Approx(1200).epsilon(0.1));
}

TEST_CASE("arrivals: a ramp of 5% a minute, a step doubling, a daily curve") {
  arrival_spec s;
  s.rate = 40;
  s.duration_s = 1200;
  s.process = arrival_process::ramp;
  const auto ramp = make(s);
  // After 20 minutes the rate is 1.05^20 = 2.65 times the start.
  const double first = static_cast<double>(between(ramp, 0, 60)), last = static_cast<double>(between(ramp, 1140, 1200));
  CHECK(last / first == doctest::Approx(std::pow(1.05, 19.5)).epsilon(0.15));

  s.process = arrival_process::step;
  s.step_at_s = 600;
  const auto step = make(s);
  CHECK(static_cast<double>(between(step, 600, 1200)) / static_cast<double>(between(step, 0, 600)) ==
        doctest::Approx(2).epsilon(0.08));

  s.process = arrival_process::daily;
  s.daily_period_s = 1200;
  s.daily_trough = 0.25;
  const auto day = make(s);
  // The trough at the start and end, the peak in the middle: 4 times the rate.
  const double trough = static_cast<double>(between(day, 0, 60) + between(day, 1140, 1200));
  const double peak = static_cast<double>(between(day, 570, 690));
  CHECK(peak / trough == doctest::Approx(4).epsilon(0.2));
}

TEST_CASE("arrivals: teams by weight and multiplier, their system prompts, and conversations that grow") {
  arrival_spec s;
  s.rate = 20;
  s.duration_s = 200;
  s.conversation_turns = 4;
  s.teams = {{"a", "", 3, kiln::engine::priority::interactive, 160, 1},
             {"b", "m2", 1, kiln::engine::priority::batch, 0, 10}};
  const auto v = make(s);
  std::size_t na = 0, nb = 0;
  for (const auto& x : v) {
    if (x.team == "a") {
      ++na;
      CHECK(x.tier == kiln::engine::priority::interactive);
      CHECK(x.model.empty());
    } else {
      ++nb;
      CHECK(x.tier == kiln::engine::priority::batch);
      CHECK(x.model == "m2");
    }
  }
  // b's share is a quarter, times 10: 2.5 times a's 3/4 ... b sends 10/3 as much as a.
  CHECK(static_cast<double>(nb) / static_cast<double>(na) == doctest::Approx(10.0 / 3).epsilon(0.1));
  // Team a's prompts open with the same 160 tokens; a conversation's later turn begins with
  // an earlier turn's prompt.
  const arrival* first_a = nullptr;
  std::map<std::string, std::vector<const arrival*>> turns;
  for (const auto& x : v) {
    if (x.team == "a" && x.prompt_tokens > 200) {
      const auto t = prompt_of(x, 32000);
      if (!first_a) first_a = &x;
      const auto f = prompt_of(*first_a, 32000);
      CHECK(std::equal(t.begin(), t.begin() + 160, f.begin()));
    }
    if (!x.conversation.empty()) turns[x.conversation].push_back(&x);
  }
  std::size_t multi = 0;
  for (const auto& [id, ts] : turns) {
    if (ts.size() < 2) continue;
    ++multi;
    const auto p0 = prompt_of(*ts[0], 32000), p1 = prompt_of(*ts[1], 32000);
    const std::size_t shared = std::min<std::size_t>(p0.size() / kFineBlockTokens * kFineBlockTokens,
                                                     (p1.size() - 1) / kFineBlockTokens * kFineBlockTokens);
    CHECK(std::equal(p0.begin(), p0.begin() + static_cast<long>(shared), p1.begin()));
  }
  CHECK(multi > 50);
  for (const auto& t : prompt_of(v.front(), 32000)) {
    CHECK(t >= 2);
    CHECK(t < 32000);
  }
  s.max_prompt_tokens = 100;
  for (const auto& x : make(s)) CHECK(x.prompt_tokens <= 100);
  s.duration_s = 0;
  CHECK(std::holds_alternative<std::string>(make_arrivals(s, 1)));
  // A run larger than a run can hold is refused before anything is made.
  s.duration_s = 1e9;
  s.rate = 1e6;
  auto huge = make_arrivals(s, 1);
  REQUIRE(std::holds_alternative<std::string>(huge));
  CHECK(std::get<std::string>(huge).find("at most") != std::string::npos);
  s.process = arrival_process::ramp;
  s.rate = 1;
  s.ramp_per_minute = 10;  // grows past any bound
  CHECK(std::holds_alternative<std::string>(make_arrivals(s, 1)));
}

TEST_CASE("arrivals: a synthetic prompt's names, made when asked, follow a conversation through long chains of turns") {
  arrival_spec s;
  s.rate = 100;
  s.duration_s = 60;
  s.conversation_turns = 1000;  // nearly every request continues one of 64 open conversations
  s.prompt_tokens = 400;
  s.teams = {{"a", "", 1, kiln::engine::priority::standard, 96, 1}, {"b", "", 1, kiln::engine::priority::standard, 0, 1}};
  const auto v = make(s);
  REQUIRE(v.size() > 5000);
  std::map<std::string, std::vector<std::uint64_t>> last;  // a conversation's latest names
  std::map<std::string, std::size_t> turns;
  std::vector<arrival> listed;  // the same prompts as explicit lists
  std::vector<std::uint64_t> names;
  std::size_t continued = 0, deepest = 0;
  for (const auto& x : v) {
    blocks_of(x, names);
    REQUIRE(names.size() == block_count(x));
    CHECK(names.size() == static_cast<std::size_t>((x.prompt_tokens + 15) / 16));
    if (x.team == "a" && names.size() >= 7) {  // team a's 96-token system prompt: its first 6 blocks
      auto& system = last["a:system"];
      if (system.empty()) system = names;
      CHECK(std::equal(names.begin(), names.begin() + 6, system.begin()));
    }
    auto& before = last[x.conversation];
    if (!before.empty()) {
      // A later turn begins with its earlier turn as far as it reaches, leaving one block its own.
      const std::size_t reach = std::min(before.size(), names.size() - 1);
      CHECK(std::equal(names.begin(), names.begin() + static_cast<long>(reach), before.begin()));
      if (x.team == "b" || names.size() > 6)  // past the system prompt: its last block is drawn afresh
        CHECK(std::find(before.begin(), before.end(), names.back()) == before.end());
      ++continued;
    }
    deepest = std::max(deepest, ++turns[x.conversation]);
    before = names;
    arrival y = x;
    y.drawn = nullptr;
    y.blocks = names;
    listed.push_back(std::move(y));
  }
  CHECK(continued > v.size() / 2);
  CHECK(deepest > 100);
  for (std::size_t i = 0; i < v.size(); i += 97) {
    CHECK(prompt_of(v[i], 32000) == prompt_of(listed[i], 32000));
    CHECK(prompt_list_of(v[i], 32000).vec() == prompt_of(listed[i], 32000));  // what the engines get
  }
  const auto drawn = oracle_hit_rate(v, 16, 32000), explicit_lists = oracle_hit_rate(listed, 16, 32000);
  CHECK(drawn.reusable_tokens > drawn.prompt_tokens / 2);
  CHECK(drawn.reusable_tokens == explicit_lists.reusable_tokens);
  CHECK(drawn.prompt_tokens == explicit_lists.prompt_tokens);
}

TEST_CASE("arrivals: the oracle counted from how prompts were drawn is the prefix tree's count") {
  // System prompts longer and shorter than the prompts, one turn to nearly endless
  // conversations, prompts cut short, and only some requests served (a turn whose earlier
  // turn never reached an engine): each the tree's figure to the token.
  int compared = 0;
  for (const std::uint64_t seed : {1u, 7u}) {
    for (const int turns : {1, 3, 1000}) {
      for (const int system : {0, 96, 320, 800}) {
        for (const int cap : {0, 300}) {
          arrival_spec s;
          s.rate = 40;
          s.duration_s = 60;
          s.prompt_tokens = 400;
          s.conversation_turns = turns;
          s.max_prompt_tokens = cap;
          s.teams = {{"a", "", 3, kiln::engine::priority::standard, system, 1},
                     {"b", "", 1, kiln::engine::priority::standard, 48, 1}};
          const auto v = make(s, seed);
          REQUIRE(v.size() > 1000);
          std::vector<arrival> served;  // two of every three, the others never served
          for (std::size_t i = 0; i < v.size(); ++i)
            if (i % 3 != 1) served.push_back(v[i]);
          for (const std::vector<arrival>* set : {&v, static_cast<const std::vector<arrival>*>(&served)}) {
            const auto drawn = drawn_oracle_hit_rate(*set, 16);
            REQUIRE(drawn.has_value());
            const oracle_result tree = oracle_hit_rate(*set, 16, 32000, true);
            CHECK(drawn->prompt_tokens == tree.prompt_tokens);
            CHECK(drawn->reusable_tokens == tree.reusable_tokens);
            CHECK(oracle_hit_rate(*set, 16, 32000).reusable_tokens == tree.reusable_tokens);
            if (turns > 1 || system > 0) CHECK(tree.reusable_tokens > 0);
            ++compared;
          }
        }
      }
    }
  }
  CHECK(compared == 2 * 3 * 4 * 2 * 2);
}

TEST_CASE("arrivals: prompts out of their drawn order, of another block size or listed take the tree") {
  arrival_spec s;
  s.rate = 40;
  s.duration_s = 30;
  s.prompt_tokens = 400;
  s.conversation_turns = 3;
  s.teams = {{"a", "", 1, kiln::engine::priority::standard, 96, 1}};
  const auto v = make(s);
  REQUIRE(v.size() > 500);
  REQUIRE(drawn_oracle_hit_rate(v, 16).has_value());
  // Reversed, a later turn comes before the turn it extends: the earlier one now matches it.
  std::vector<arrival> reversed(v.rbegin(), v.rend());
  CHECK_FALSE(drawn_oracle_hit_rate(reversed, 16).has_value());
  const oracle_result back = oracle_hit_rate(reversed, 16, 32000);
  CHECK(back.reusable_tokens == oracle_hit_rate(reversed, 16, 32000, true).reusable_tokens);
  CHECK(back.reusable_tokens > 0);
  CHECK_FALSE(drawn_oracle_hit_rate(v, 8).has_value());  // a 16-token name is two cache blocks
  CHECK(oracle_hit_rate(v, 8, 32000).reusable_tokens == oracle_hit_rate(v, 8, 32000, true).reusable_tokens);
  std::vector<arrival> listed = v;  // the same prompts as explicit names
  for (auto& a : listed) {
    blocks_of(a, a.blocks);
    a.drawn = nullptr;
  }
  CHECK_FALSE(drawn_oracle_hit_rate(listed, 16).has_value());
  CHECK(oracle_hit_rate(listed, 16, 32000).reusable_tokens == drawn_oracle_hit_rate(v, 16)->reusable_tokens);
}

TEST_CASE("arrivals: a team's system prompt is made once and copied, the same ids as made afresh") {
  // Prompts shorter and longer than their team's system prompt (400 tokens, prompts about 300),
  // a team without one, two runs' prompts and two vocabularies read in turn, on two threads:
  // each prompt's ids are those of its names listed one by one.
  arrival_spec s;
  s.rate = 50;
  s.duration_s = 20;
  s.conversation_turns = 3;
  s.prompt_tokens = 300;
  s.teams = {{"a", "", 1, kiln::engine::priority::standard, 400, 1},
             {"b", "", 1, kiln::engine::priority::standard, 0, 1},
             {"c", "", 1, kiln::engine::priority::standard, 160, 1}};
  const auto one = make(s);
  s.teams[0].system_prompt_tokens = 96;
  const auto two = make(s, 2);
  REQUIRE(one.size() > 500);
  REQUIRE(two.size() > 500);
  std::size_t shorter = 0, longer = 0;
  for (const auto& x : one)
    if (x.team == "a") ++(x.prompt_tokens < 400 ? shorter : longer);
  CHECK(shorter > 10);
  CHECK(longer > 10);
  auto check_all = [&](int thread) {
    std::size_t wrong = 0;
    for (std::size_t i = static_cast<std::size_t>(thread); i < std::min(one.size(), two.size()); i += 2)
      for (const int vocab : {32000, 50}) {
        if (prompt_of(one[i], vocab) != prompt_of(listed_copy(one[i]), vocab)) ++wrong;
        if (prompt_list_of(two[i], vocab).vec() != prompt_of(listed_copy(two[i]), vocab)) ++wrong;
      }
    return wrong;
  };
  std::size_t wrong_there = 0;
  std::thread other([&] { wrong_there = check_all(1); });
  const std::size_t wrong_here = check_all(0);
  other.join();
  CHECK(wrong_here == 0);
  CHECK(wrong_there == 0);
}

TEST_CASE("arrivals: system prompts past what a thread keeps are made per prompt, the same ids") {
  // Three teams with 1.5 million-token system prompts: the third team's is past the 4 million
  // ids a thread keeps, so its prompts make their own ids.
  arrival_spec s;
  s.rate = 3;
  s.duration_s = 4;
  s.prompt_tokens = 1600000;
  s.teams = {{"a", "", 1, kiln::engine::priority::standard, 1500000, 1},
             {"b", "", 1, kiln::engine::priority::standard, 1500000, 1},
             {"c", "", 1, kiln::engine::priority::standard, 1500000, 1}};
  const auto v = make(s);
  std::set<std::string> teams;
  for (const auto& x : v) teams.insert(x.team);
  REQUIRE(teams.size() == 3);
  for (const auto& x : v) CHECK(prompt_of(x, 32000) == prompt_of(listed_copy(x), 32000));
}

TEST_CASE("arrivals: a prompt's tokens do not depend on its length or on where a block's run starts") {
  // prompt_of writes in wide runs (a vector body and a scalar tail): every length cuts the
  // same tokens, and a block's tokens are the same wherever it sits.
  arrival whole;
  whole.block_tokens = 37;  // runs whose lengths cross every vector width's boundary
  whole.blocks = {11, 22, 33, 44};
  whole.prompt_tokens = 37 * 4 + 29;  // and a tail past the blocks: the request's own tokens
  const auto all = prompt_of(whole, 50);
  REQUIRE(all.size() == static_cast<std::size_t>(whole.prompt_tokens));
  for (const auto t : all) {
    CHECK(t >= 2);
    CHECK(t < 50);
  }
  for (int n = 0; n <= whole.prompt_tokens; ++n) {
    arrival cut = whole;
    cut.prompt_tokens = n;
    const auto some = prompt_of(cut, 50);
    REQUIRE(some.size() == static_cast<std::size_t>(n));
    CHECK(std::equal(some.begin(), some.end(), all.begin()));
  }
  arrival moved = whole;
  moved.blocks = {33, 11};
  moved.prompt_tokens = 37 * 2;
  const auto m = prompt_of(moved, 50);
  CHECK(std::equal(m.begin(), m.begin() + 37, all.begin() + 2 * 37));
  CHECK(std::equal(m.begin() + 37, m.end(), all.begin()));
  // Not one token repeated over the whole prompt: the run draws, it does not copy.
  CHECK(std::count(all.begin(), all.end(), all.front()) < static_cast<long>(all.size()));
  // The list the fleet hands the engines makes the same ids, whether read or copied.
  const auto list = prompt_list_of(whole, 50);
  CHECK(list.size() == all.size());
  std::vector<std::int32_t> copied{-1};
  list.copy_to(copied);
  CHECK(std::equal(copied.begin() + 1, copied.end(), all.begin(), all.end()));
  CHECK(list.vec() == all);
}

TEST_CASE("arrivals: the oracle hit rate counts each request's longest prefix an earlier one began with") {
  arrival a, b, c;
  a.prompt_tokens = b.prompt_tokens = 48;
  c.prompt_tokens = 32;
  a.blocks = {1, 2, 3};
  b.blocks = {1, 2, 4};  // shares two blocks with a
  c.blocks = {1, 2};     // the whole prompt is a's opening: all but its last block
  const auto r = oracle_hit_rate({a, b, c}, 16, 32000);
  CHECK(r.prompt_tokens == 128);
  CHECK(r.reusable_tokens == 32 + 16);
  CHECK(oracle_hit_rate({a}, 16, 32000).reusable_tokens == 0);
}

TEST_CASE("arrivals: the oracle finds prefixes that branch inside an earlier prompt, per team, as a set of prefixes would") {
  auto req = [](std::string team, std::vector<std::uint64_t> blocks) {
    arrival a;
    a.team = std::move(team);
    a.blocks = std::move(blocks);
    a.prompt_tokens = static_cast<int>(a.blocks.size()) * 16 + 1;  // one token past its full blocks
    return a;
  };
  // b leaves a inside it; c follows b's branch one block further; d branches where b did,
  // elsewhere; e is another team's copy of a (nothing shared across teams).
  const std::vector<arrival> v = {req("t", {1, 2, 3, 4}), req("t", {1, 2, 5, 6}), req("t", {1, 2, 5, 7}),
                                  req("t", {1, 2, 8}), req("u", {1, 2, 3, 4}), req("t", {1, 2, 3, 4, 9})};
  CHECK(oracle_hit_rate(v, 16, 32000).reusable_tokens == 16 * (0 + 2 + 3 + 2 + 0 + 4));

  // Against a plain set of every prefix seen, on prompts that share openings at random.
  std::uint64_t x = 7;
  auto next = [&x] { return x = x * 6364136223846793005ull + 1442695040888963407ull; };
  std::vector<arrival> rnd;
  for (int i = 0; i < 400; ++i) {
    std::vector<std::uint64_t> blocks;
    const int len = 1 + static_cast<int>(next() >> 61);  // 1..8 blocks
    for (int k = 0; k < len; ++k) blocks.push_back((next() >> 62) + (k > 3 ? next() % 3 : 0));  // few names: many shared
    rnd.push_back(req(next() >> 63 ? "t" : "u", blocks));
  }
  std::set<std::pair<std::string, std::vector<std::uint64_t>>> seen;
  std::int64_t expected = 0;
  for (const auto& a : rnd) {
    std::size_t known = 0;
    while (known < a.blocks.size() &&
           seen.count({a.team, std::vector<std::uint64_t>(a.blocks.begin(), a.blocks.begin() + static_cast<long>(known) + 1)}))
      ++known;
    expected += static_cast<std::int64_t>(known) * 16;
    for (std::size_t k = 1; k <= a.blocks.size(); ++k)
      seen.insert({a.team, std::vector<std::uint64_t>(a.blocks.begin(), a.blocks.begin() + static_cast<long>(k))});
  }
  CHECK(expected > 0);
  CHECK(oracle_hit_rate(rnd, 16, 32000).reusable_tokens == expected);
}

TEST_CASE("arrivals: the oracle over names that stand for several cache blocks, partly covered, as over the cache blocks") {
  // Names of 64 tokens (4 cache blocks of 16); prompts end anywhere inside their last name,
  // so two prompts that share a name share only the cache blocks both cover.
  std::uint64_t x = 11;
  auto next = [&x] { return x = x * 6364136223846793005ull + 1442695040888963407ull; };
  std::vector<arrival> v;
  for (int i = 0; i < 600; ++i) {
    arrival a;
    a.team = next() >> 63 ? "t" : "u";
    a.block_tokens = 64;
    const int len = 1 + static_cast<int>(next() >> 62);  // 1..4 names
    for (int k = 0; k < len; ++k) a.blocks.push_back((next() >> 62) + (k > 1 ? next() % 2 : 0));  // few names: many shared
    a.prompt_tokens = (len - 1) * 64 + 1 + static_cast<int>(next() % 64);  // 1..64 tokens of the last name
    v.push_back(std::move(a));
  }
  // Brute force: every cache-block prefix seen, a cache block named by (name, its place inside).
  std::set<std::pair<std::string, std::vector<std::uint64_t>>> seen;
  std::int64_t expected = 0;
  for (const auto& a : v) {
    std::vector<std::uint64_t> cache_blocks;
    for (int j = 0; j < a.prompt_tokens / 16; ++j) cache_blocks.push_back(a.blocks[static_cast<std::size_t>(j / 4)] * 8 + static_cast<std::uint64_t>(j % 4));
    std::size_t known = 0;
    while (known < cache_blocks.size() &&
           seen.count({a.team, std::vector<std::uint64_t>(cache_blocks.begin(), cache_blocks.begin() + static_cast<long>(known) + 1)}))
      ++known;
    const std::size_t usable = static_cast<std::size_t>(a.prompt_tokens - 1) / 16;  // the last token is always computed
    expected += static_cast<std::int64_t>(std::min(known, usable)) * 16;
    for (std::size_t k = 1; k <= cache_blocks.size(); ++k)
      seen.insert({a.team, std::vector<std::uint64_t>(cache_blocks.begin(), cache_blocks.begin() + static_cast<long>(k))});
  }
  CHECK(expected > 0);
  CHECK(oracle_hit_rate(v, 16, 32000).reusable_tokens == expected);

  // The same teams' prompts of one-block names in between (the places of which keep no
  // counts): names of another size never name the same tokens, so the figure is the sum of
  // each kind's alone.
  std::vector<arrival> fine, mixed;
  for (int i = 0; i < 600; ++i) {
    arrival a;
    a.team = next() >> 63 ? "t" : "u";
    const int len = 1 + static_cast<int>(next() >> 61);  // 1..8 blocks
    for (int k = 0; k < len; ++k) a.blocks.push_back((next() >> 62) + (k > 3 ? next() % 3 : 0));
    a.prompt_tokens = len * 16 + static_cast<int>(next() % 2);  // the last block full, or one token past it
    fine.push_back(a);
    mixed.push_back(v[static_cast<std::size_t>(i)]);
    mixed.push_back(std::move(a));
  }
  const std::int64_t fine_alone = oracle_hit_rate(fine, 16, 32000).reusable_tokens;
  CHECK(fine_alone > 0);
  CHECK(oracle_hit_rate(mixed, 16, 32000).reusable_tokens == expected + fine_alone);
}

TEST_CASE("arrivals: the oracle shared by threads, a team at a time, sums to the one-thread figure") {
  std::uint64_t x = 11;
  auto next = [&x] { return x = x * 6364136223846793005ull + 1442695040888963407ull; };
  const std::vector<std::string> teams = {"a", "b", "c", "d", "e"};
  std::vector<arrival> v;
  for (int i = 0; i < 3000; ++i) {
    arrival a;
    a.team = teams[(next() >> 33) % (i < 2000 ? 2 : teams.size())];  // two large teams, three small
    for (int k = 0, len = 1 + static_cast<int>(next() >> 60); k < len; ++k) a.blocks.push_back((next() >> 62) + (k > 2 ? next() % 4 : 0));
    a.prompt_tokens = static_cast<int>(a.blocks.size()) * 16 - static_cast<int>(next() >> 61);  // the last block partial or full
    v.push_back(std::move(a));
  }
  const oracle_result one = oracle_hit_rate(v, 16, 32000);
  oracle_result by_team;
  for (const auto& t : teams) {
    std::vector<arrival> mine;
    for (const auto& a : v)
      if (a.team == t) mine.push_back(a);
    const auto r = oracle_hit_rate(mine, 16, 32000);
    CHECK(r.reusable_tokens > 0);
    by_team.prompt_tokens += r.prompt_tokens;
    by_team.reusable_tokens += r.reusable_tokens;
  }
  CHECK(one.prompt_tokens == by_team.prompt_tokens);
  CHECK(one.reusable_tokens == by_team.reusable_tokens);
  for (int threads : {1, 2, 4, 8}) {
    oracle_work work(v, 16, 32000);
    std::vector<std::thread> helpers;
    for (int t = 0; t < threads; ++t) helpers.emplace_back([&work] { work.help(); });
    for (auto& h : helpers) h.join();
    work.help();  // nothing left: changes nothing
    CHECK(work.result().prompt_tokens == one.prompt_tokens);
    CHECK(work.result().reusable_tokens == one.reusable_tokens);
  }
  const std::vector<arrival> empty;
  oracle_work none(empty, 16, 32000);
  none.help();
  CHECK(none.result().prompt_tokens == 0);
}

TEST_CASE("traces: Azure CSV and Mooncake JSONL, scaled to a rate; bad lines name their place") {
  const std::string csv = temp_file("a.csv",
                                    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    "2023-11-16 23:59:59.5000000,374,44\n"
                                    "2023-11-17 00:00:00.5000000,396,109\r\n"
                                    "2023-11-17 00:00:01.5000000,100,7\n");
  auto read = read_trace(csv);
  REQUIRE(std::holds_alternative<std::vector<arrival>>(read));
  const auto& rows = std::get<std::vector<arrival>>(read);
  REQUIRE(rows.size() == 3);
  CHECK(rows[1].t - rows[0].t == doctest::Approx(1.0));  // across midnight
  CHECK(rows[1].prompt_tokens == 396);
  CHECK(rows[1].output_tokens == 109);
  arrival_spec s;
  s.process = arrival_process::trace;
  s.trace = csv;
  s.trace_rate = 4;  // recorded: 1 request/s between the first and the last
  s.duration_s = 100;
  const auto scaled = make(s);
  REQUIRE(scaled.size() == 3);
  CHECK(scaled[0].t == 0);
  CHECK(scaled[2].t == doctest::Approx(0.5));
  CHECK(block_count(scaled[0]) == (374 + 15) / 16);  // no hashes in the trace: drawn ones
  CHECK(scaled[0].team == "sim");

  // Teams by rule on a trace; a team at multiplier 0 drops out and the others keep their draws.
  std::string many = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  for (int i = 0; i < 200; ++i) many += "2023-11-16 10:00:" + std::to_string(10 + i / 10) + "." + std::to_string(i % 10) + ",100,10\n";
  s.trace = temp_file("many.csv", many);
  s.teams = {{"a", "", 1, kiln::engine::priority::standard, 0, 1}, {"b", "", 1, kiln::engine::priority::batch, 0, 1}};
  const auto both = make(s);
  s.teams[1].rate_multiplier = 0;
  const auto only_a = make(s);
  std::vector<double> a_times;
  for (const auto& x : both)
    if (x.team == "a") a_times.push_back(x.t);
  REQUIRE(a_times.size() > 50);
  REQUIRE(a_times.size() < 150);
  REQUIRE(only_a.size() == a_times.size());
  for (std::size_t i = 0; i < only_a.size(); ++i) CHECK(only_a[i].t == a_times[i]);
  s.teams.clear();

  const std::string jl = temp_file("m.jsonl",
                                   "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [7, 8, 9]}\n"
                                   "{\"timestamp\": 500, \"input_length\": 1024, \"output_length\": 3, \"hash_ids\": [7, 8]}\n");
  auto m = read_trace(jl);
  REQUIRE(std::holds_alternative<std::vector<arrival>>(m));
  const auto& mr = std::get<std::vector<arrival>>(m);
  REQUIRE(mr.size() == 2);
  CHECK(mr[1].t == doctest::Approx(0.5));
  CHECK(mr[0].conversation == mr[1].conversation);  // the same first block: one conversation
  CHECK(mr[0].block_tokens == kTraceBlockTokens);
  const auto p0 = prompt_of(mr[0], 32000), p1 = prompt_of(mr[1], 32000);
  CHECK(p0.size() == 1100);
  CHECK(std::equal(p1.begin(), p1.end(), p0.begin()));  // equal hash ids, equal tokens
  CHECK(oracle_hit_rate(mr, 16, 32000).reusable_tokens == 1024 - 16);

  for (const auto& [name, text, line] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"b1.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,12\n", ":2:"},
           {"b2.csv", "time,in,out\n", ":1:"},
           {"b3.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,-3,1\n", ":2:"},
           {"b4.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\n2023-11-16 18:15:45,1,1\n", ":3:"},
           {"b5.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n{oops\n", ":2:"},
           {"b6.jsonl", "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [\"x\"]}\n", ":1:"}}) {
    CAPTURE(name);
    CHECK(trace_error(name, text).find(line) != std::string::npos);
  }
  CHECK(std::holds_alternative<std::string>(read_trace("/nonexistent/t.csv")));
  CHECK(std::get<std::string>(read_trace(temp_file("x.txt", "1\n"))).find("unknown trace format") != std::string::npos);
}

TEST_CASE("arrivals: an Azure trace line's bad field is named, with its value, and counts are bounded like Mooncake's") {
  const std::string head = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  for (const auto& [name, row, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"c1.csv", "2023-11-16 18:15:46.6,-3,1", ":2: ContextTokens '-3' is out of range (0 to 10000000)"},
           {"c2.csv", "2023-11-16 18:15:46.6,10000001,1", ":2: ContextTokens '10000001' is out of range"},
           {"c3.csv", "2023-11-16 18:15:46.6,5,99999999999999999999999", ":2: GeneratedTokens '99999999999999999999999' is out of range"},
           {"c4.csv", "2023-11-16 18:15:46.6,5,x1", ":2: GeneratedTokens 'x1' is not a whole number"},
           {"c5.csv", "2023-11-16 18:15:46.6,,1", ":2: ContextTokens '' is not a whole number"},
           {"c6.csv", "2023-13-16 18:15:46.6,5,1", ":2: TIMESTAMP '2023-13-16 18:15:46.6' is not a date and time"},
           {"c7.csv", std::string("\x01\xff") + std::string(50, 'z') + ",5,1", ":2: TIMESTAMP '??" + std::string(38, 'z') + "...'"},
           {"c8.csv", "2023-11-16 18:15:46.6;5;1", ":2: expected TIMESTAMP,ContextTokens,GeneratedTokens"}}) {
    CAPTURE(name);
    CHECK(trace_error(name, head + row + "\n").find(says) != std::string::npos);
  }
  // Exactly at the bound, both counts: read.
  auto at = read_trace(temp_file("c9.csv", head + "2023-11-16 18:15:46.6,10000000,10000000\r\n"));
  REQUIRE(std::holds_alternative<std::vector<arrival>>(at));
  CHECK(std::get<std::vector<arrival>>(at).front().prompt_tokens == 10000000);
  CHECK(std::get<std::vector<arrival>>(at).front().output_tokens == 10000000);
}

TEST_CASE("arrivals: a run whose prompts would not fit is refused before its prompts are made, at the limit and past it") {
  // A trace: 200 prompts of 10 million tokens are exactly the limit; one token more is not.
  std::string at_limit;
  for (int i = 0; i < 200; ++i)
    at_limit += "{\"timestamp\": " + std::to_string(i) + ", \"input_length\": 10000000, \"output_length\": 1, \"hash_ids\": [" +
                std::to_string(i) + "]}\n";
  REQUIRE(200 * 10000000.0 == kMaxPromptTokens);
  arrival_spec s;
  s.process = arrival_process::trace;
  s.duration_s = 1000;
  s.trace = temp_file("limit.jsonl", at_limit);
  CHECK(make(s).size() == 200);
  s.trace = temp_file("past.jsonl", at_limit + "{\"timestamp\": 300000, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [9]}\n");
  auto past = make_arrivals(s, 1);
  REQUIRE(std::holds_alternative<std::string>(past));
  CHECK(std::get<std::string>(past).find("prompts total 2000000001 tokens; at most 2000000000") != std::string::npos);
  // Past the run's end (300 s) it is not asked for, so it does not count.
  s.duration_s = 250;
  CHECK(make(s).size() == 200);

  // A trace holds at most as many requests as a run makes (kMaxArrivals), counted within
  // the run's duration: 2,000,000 lines pass, one more does not.
  {
    std::string lines = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
    lines.reserve(50'000'000);
    for (int i = 0; i <= 2'000'000; ++i) lines += "2023-11-16 10:00:00.0000000,1,1\n";
    arrival_spec many;
    many.process = arrival_process::trace;
    many.duration_s = 1;
    many.trace = temp_file("many_rows.csv", lines);
    auto over = make_arrivals(many, 1);
    REQUIRE(std::holds_alternative<std::string>(over));
    CHECK(std::get<std::string>(over).find("2000001 requests within the run's duration; at most 2000000") != std::string::npos);
    lines.resize(lines.size() - std::string("2023-11-16 10:00:00.0000000,1,1\n").size());
    many.trace = temp_file("many_rows.csv", lines);
    CHECK(make(many).size() == 2'000'000);
    std::filesystem::remove(many.trace);
  }

  // Synthetic: 100 requests/s for 10 minutes of 10-million-token prompts would take hundreds
  // of gigabytes; refused from the rate alone (it once ended the process out of memory).
  arrival_spec big;
  big.rate = 100;
  big.duration_s = 600;
  big.prompt_tokens = 10000000;
  auto r = make_arrivals(big, 1);
  REQUIRE(std::holds_alternative<std::string>(r));
  CHECK(std::get<std::string>(r).find("would total about 600000000000 tokens") != std::string::npos);
  // Past what an integer holds, the count is still the request's own, not a clamped one.
  big.rate = 1e300;
  r = make_arrivals(big, 1);
  REQUIRE(std::holds_alternative<std::string>(r));
  CHECK(std::get<std::string>(r).find("would number about 6.0e+302 (rate x duration)") != std::string::npos);
  big.rate = 1e308;  // rate x duration is past what a double holds
  r = make_arrivals(big, 1);
  REQUIRE(std::holds_alternative<std::string>(r));
  CHECK(std::get<std::string>(r).find("would number more than 1.8e+308 (rate x duration)") != std::string::npos);
  big.rate = 100;
  big.prompt_tokens = 1000;
  CHECK(!make(big).empty());
}

TEST_CASE("arrivals: the count is told once, as made, and never for a run refused") {
  std::vector<std::size_t> told;
  const auto tell = [&](std::size_t n) { told.push_back(n); };
  arrival_spec s;
  s.rate = 20;
  s.duration_s = 30;
  s.prompt_tokens = 64;
  auto made = make_arrivals(s, 3, tell);
  REQUIRE(std::holds_alternative<std::vector<arrival>>(made));
  REQUIRE(told.size() == 1);
  CHECK(told[0] == std::get<std::vector<arrival>>(made).size());
  CHECK(told[0] > 400);

  // A trace whose second team is silenced (multiplier 0): the count is of the requests kept.
  std::string lines;
  for (int i = 0; i < 300; ++i)
    lines += "{\"timestamp\": " + std::to_string(i * 100) + ", \"input_length\": 40, \"output_length\": 5, \"hash_ids\": [" +
             std::to_string(i) + "]}\n";
  arrival_spec t;
  t.process = arrival_process::trace;
  t.duration_s = 1000;
  t.trace = temp_file("told.jsonl", lines);
  team_rule kept, silent;
  kept.name = "kept";
  silent.name = "silent";
  silent.rate_multiplier = 0;
  t.teams = {kept, silent};
  told.clear();
  auto replayed = make_arrivals(t, 1, tell);
  REQUIRE(std::holds_alternative<std::vector<arrival>>(replayed));
  const std::size_t n = std::get<std::vector<arrival>>(replayed).size();
  REQUIRE(told.size() == 1);
  CHECK(told[0] == n);
  CHECK(n > 50);
  CHECK(n < 250);
  std::filesystem::remove(t.trace);

  // Refused runs tell nothing: a rate too high, prompts too long.
  told.clear();
  arrival_spec big = s;
  big.rate = 1e9;
  CHECK(std::holds_alternative<std::string>(make_arrivals(big, 1, tell)));
  big = s;
  big.rate = 100;
  big.duration_s = 600;
  big.prompt_tokens = 10000000;
  CHECK(std::holds_alternative<std::string>(make_arrivals(big, 1, tell)));
  CHECK(told.empty());
}

TEST_CASE("traces: the shared public traces as their README describes them") {
  if (!std::filesystem::exists(kTraces + "mooncake_synthetic_trace.jsonl")) {
    MESSAGE("skipped: ../shared/data/traces is not here");
    return;
  }
  auto az = read_trace(kTraces + "AzureLLMInferenceTrace_conv_2023.csv");
  REQUIRE(std::holds_alternative<std::vector<arrival>>(az));
  CHECK(std::get<std::vector<arrival>>(az).size() == 19366);
  auto mc = read_trace(kTraces + "mooncake_synthetic_trace.jsonl");
  REQUIRE(std::holds_alternative<std::vector<arrival>>(mc));
  const auto& m = std::get<std::vector<arrival>>(mc);
  CHECK(m.size() == 3993);
  // "With an unlimited cache 65% of prompt blocks repeat an earlier block."
  const double hit = oracle_hit_rate(m, 16, 32000).hit_rate();
  CHECK(hit > 0.55);
  CHECK(hit < 0.70);
}

TEST_CASE("capture: records round-trip; a torn last record is dropped; garbage is an error") {
  capture_record a{1.5, "search", 0, "conv-1", block_hashes_of(std::vector<std::int32_t>(40, 7)), 40, 12};
  capture_record b{2.25, "docs", 2, "", {}, 0, 1};
  CHECK(a.block_hashes.size() == 3);  // 16 + 16 + 8
  const std::string bytes = encode_capture(a) + encode_capture(b);
  auto r = read_capture(temp_file("c.kcap", bytes));
  REQUIRE(std::holds_alternative<std::vector<capture_record>>(r));
  const auto& v = std::get<std::vector<capture_record>>(r);
  REQUIRE(v.size() == 2);
  CHECK(v[0].team == "search");
  CHECK(v[0].block_hashes == a.block_hashes);
  CHECK(v[1].t == 2.25);
  CHECK(v[1].tier == 2);
  auto torn = read_capture(temp_file("t.kcap", bytes.substr(0, bytes.size() - 3)));
  REQUIRE(std::holds_alternative<std::vector<capture_record>>(torn));
  CHECK(std::get<std::vector<capture_record>>(torn).size() == 1);
  CHECK(std::holds_alternative<std::string>(read_capture(temp_file("g.kcap", "\x93\x01\x02\x03 not a record"))));
  // A capture replays with who sent it.
  auto replay = read_trace(temp_file("r.kcap", bytes));
  REQUIRE(std::holds_alternative<std::vector<arrival>>(replay));
  CHECK(std::get<std::vector<arrival>>(replay)[0].team == "search");
  CHECK(std::get<std::vector<arrival>>(replay)[0].conversation == "conv-1");
  // Named otherwise, each format is known by its first bytes and read the same.
  auto same = [](const std::variant<std::vector<arrival>, std::string>& x, const std::variant<std::vector<arrival>, std::string>& y) {
    REQUIRE(std::holds_alternative<std::vector<arrival>>(x));
    REQUIRE(std::holds_alternative<std::vector<arrival>>(y));
    const auto &u = std::get<std::vector<arrival>>(x), &w = std::get<std::vector<arrival>>(y);
    REQUIRE(u.size() == w.size());
    for (std::size_t i = 0; i < u.size(); ++i) {
      CHECK(u[i].t == w[i].t);
      CHECK(u[i].team == w[i].team);
      CHECK(u[i].prompt_tokens == w[i].prompt_tokens);
      CHECK(u[i].blocks == w[i].blocks);
    }
  };
  same(read_trace(temp_file("r.msgpack", bytes)), replay);
  const std::string jsonl = "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 2, \"hash_ids\": [1]}\n";
  same(read_trace(temp_file("m.txt", jsonl)), read_trace(temp_file("m.jsonl", jsonl)));
  const std::string csv = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,12,3\n";
  same(read_trace(temp_file("a.trace", csv)), read_trace(temp_file("a.csv", csv)));
  // A sniffed file with errors reports them as its format does; bytes that match none say so.
  CHECK(std::get<std::string>(read_trace(temp_file("bad.txt", "{oops\n"))).find(":1:") != std::string::npos);
  CHECK(std::get<std::string>(read_trace(temp_file("empty.msgpack", ""))).find("match none") != std::string::npos);
  CHECK(std::get<std::string>(read_trace(temp_file("g.msgpack", "\x93\x01"))).find("match none") != std::string::npos);
}
