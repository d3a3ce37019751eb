// Scheduler step plans as tables: the plan and queue state expected at each iteration.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/scheduler.hpp"

using namespace kiln::engine;

namespace {

// n distinct prompt tokens starting at `base`.
std::vector<token_id> toks(int n, token_id base = 100) {
  std::vector<token_id> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = base + i;
  return v;
}

// Applies a plan as if the executor sampled token 7 for every sampling item.
void apply(scheduler& s, const step_plan& plan) {
  std::vector<token_id> sampled;
  for (const auto& i : plan.items)
    if (i.samples) sampled.push_back(7);
  s.update(plan, sampled);
}

// "A:P5*" = prefill chunk of 5 that samples; "B:D*" = decode; items in plan order.
std::string show(const step_plan& plan, const std::map<seq_id, char>& names) {
  std::string out;
  for (const auto& item : plan.items) {
    if (!out.empty()) out += ' ';
    out += names.at(item.id);
    out += item.prefill ? ":P" + std::to_string(item.tokens) : std::string(":D");
    if (item.samples) out += '*';
  }
  return out;
}

struct row {
  std::string plan;
  int running;
  int waiting;
};

// Runs the table; `between(i, sched)` may add or finish sequences before iteration i.
void run_table(scheduler& s, const std::map<seq_id, char>& names, const std::vector<row>& table,
               const std::function<void(int, scheduler&)>& between) {
  for (int i = 0; i < static_cast<int>(table.size()); ++i) {
    between(i, s);
    const step_plan plan = s.schedule();
    CAPTURE(i);
    CHECK(show(plan, names) == table[static_cast<std::size_t>(i)].plan);
    CHECK(s.running() == table[static_cast<std::size_t>(i)].running);
    CHECK(s.waiting() == table[static_cast<std::size_t>(i)].waiting);
    apply(s, plan);
  }
}

// Ends every sequence that has produced max_tokens, as the engine does.
void finish_done(scheduler& s, std::initializer_list<seq_id> ids) {
  for (seq_id id : ids) {
    const seq_status* st = s.find(id);
    if (st && st->generated >= st->max_tokens) s.remove(id);
  }
}

}  // namespace

TEST_CASE("scheduler: token budget, batch cap, joins and leaves between steps") {
  scheduler s({/*max_tokens_per_step=*/8, /*max_running=*/2}, /*num_blocks=*/64, /*block_size=*/4);
  const std::map<seq_id, char> names{{1, 'A'}, {2, 'B'}, {3, 'C'}};
  s.add(1, priority::standard, toks(5), 3);
  s.add(2, priority::standard, toks(10), 4);
  run_table(s, names,
            {
                {"A:P5* B:P3", 2, 0},   // A's whole prompt, B's first chunk fills the budget
                {"A:D* B:P7*", 2, 0},   // A decodes while B's prompt finishes
                {"A:D* B:D*", 2, 1},    // C waits: the batch is full
                {"B:D* C:P3*", 2, 0},   // A left after 3 tokens; C takes its slot
                {"C:D* B:D*", 2, 0},    // interactive C decodes first
                {"", 0, 0},             // B and C done
            },
            [](int i, scheduler& sch) {
              if (i == 2) sch.add(3, priority::interactive, toks(3), 2);
              finish_done(sch, {1, 2, 3});
            });
}

TEST_CASE("scheduler: chunked prefill keeps a running stream decoding") {
  scheduler s({8, 4}, 64, 4);
  const std::map<seq_id, char> names{{1, 'A'}, {2, 'B'}};
  s.add(1, priority::standard, toks(2), 100);
  run_table(s, names,
            {
                {"A:P2*", 1, 0},
                {"A:D* B:P7", 2, 0},
                {"A:D* B:P7", 2, 0},
                {"A:D* B:P6*", 2, 0},
                {"A:D* B:D*", 2, 0},
            },
            [](int i, scheduler& sch) {
              if (i == 1) sch.add(2, priority::standard, toks(20), 100);
            });
}

TEST_CASE("scheduler: tiers order admission; batch never takes an interactive slot") {
  scheduler s({64, 1}, 64, 4);
  const std::map<seq_id, char> names{{1, 'X'}, {2, 'Y'}, {3, 'Z'}};
  s.add(1, priority::batch, toks(4), 1);        // arrives first
  s.add(2, priority::interactive, toks(4), 1);
  s.add(3, priority::standard, toks(4), 1);
  run_table(s, names,
            {
                {"Y:P4*", 1, 2},
                {"Z:P4*", 1, 1},
                {"X:P4*", 1, 0},
                {"", 0, 0},
            },
            [](int, scheduler& sch) { finish_done(sch, {1, 2, 3}); });
}

TEST_CASE("scheduler: beside online work, batch prompt chunks fill a step only to batch_step_tokens") {
  scheduler s({64, 8, 0, /*batch_step_tokens=*/10}, 64, 4);
  const std::map<seq_id, char> names{{1, 'B'}, {2, 'I'}, {3, 'C'}, {4, 'D'}};
  s.add(1, priority::batch, toks(12), 10);
  run_table(s, names,
            {
                {"B:P12*", 1, 0},            // batch alone: no bound
                {"B:D* I:P4* C:P5", 3, 0},   // I arrives: C's first chunk fills the step to 10
                {"I:D* B:D* C:P8", 3, 0},    // decodes first, then 8 more of C
                {"I:D* B:D* C:P8*", 3, 0},   // C's last 8 end exactly at the bound
                {"I:D* B:D* C:D*", 3, 0},
                {"B:D* C:D* D:P30*", 3, 0},  // I done: batch alone again, a 30-token chunk
            },
            [](int i, scheduler& sch) {
              if (i == 1) {
                sch.add(2, priority::interactive, toks(4, 300), 4);
                sch.add(3, priority::batch, toks(21, 500), 3);
              }
              if (i == 5) sch.add(4, priority::batch, toks(30, 700), 2);
              finish_done(sch, {1, 2, 3, 4});
            });
}

TEST_CASE("scheduler: a step that online work fills to batch_step_tokens admits no batch sequence; one token less admits one token of it") {
  for (const int online_prompt : {10, 9}) {
    CAPTURE(online_prompt);
    scheduler s({64, 8, 0, 10}, 64, 4);
    const std::map<seq_id, char> names{{1, 'S'}, {2, 'X'}};
    s.add(1, priority::standard, toks(online_prompt), 2);
    s.add(2, priority::batch, toks(4, 300), 1);
    const std::vector<row> at_bound{{"S:P10*", 1, 1}, {"S:D* X:P4*", 2, 0}, {"", 0, 0}};
    const std::vector<row> under{{"S:P9* X:P1", 2, 0}, {"S:D* X:P3*", 2, 0}, {"", 0, 0}};
    run_table(s, names, online_prompt == 10 ? at_bound : under, [](int, scheduler& sch) { finish_done(sch, {1, 2}); });
  }
}

TEST_CASE("scheduler: tokens in flight are prompt plus remaining output") {
  scheduler s({100, 8}, 64, 4);
  s.add(1, priority::standard, toks(10), 5);
  s.add(2, priority::standard, toks(3), 7);
  CHECK(s.tokens_in_flight() == 10 + 5 + 3 + 7);
  apply(s, s.schedule());  // both prompts done, one token each
  CHECK(s.tokens_in_flight() == 10 + 4 + 3 + 6);
  CHECK(s.remove(1));
  CHECK_FALSE(s.remove(1));
  CHECK(s.tokens_in_flight() == 3 + 6);
  CHECK(s.running() == 1);
}

TEST_CASE("scheduler: removing a sequence mid-step is harmless to update") {
  scheduler s({100, 8}, 64, 4);
  s.add(1, priority::standard, toks(4), 5);
  const step_plan plan = s.schedule();
  s.remove(1);
  apply(s, plan);
  CHECK(s.running() == 0);
  CHECK(s.waiting() == 0);
  CHECK(s.schedule().empty());
}

TEST_CASE("scheduler: a sequence removed mid-step and added again under its id is not the plan's") {
  scheduler s({100, 8}, 64, 4);
  s.add(1, priority::standard, toks(4), 5);
  s.add(2, priority::standard, toks(6, 50), 5);
  const step_plan plan = s.schedule();
  REQUIRE(plan.items.size() == 2);
  CHECK(s.remove(1));
  REQUIRE(s.add(1, priority::standard, toks(8, 90), 3));  // the same id, a new sequence
  apply(s, plan);
  const seq_status* again = s.find(1);
  REQUIRE(again);
  CHECK_FALSE(again->running);  // waiting: the old plan's prefill was not applied to it
  CHECK(again->computed == 0);
  CHECK(again->generated == 0);
  const seq_status* other = s.find(2);
  REQUIRE(other);
  CHECK(other->computed == 6);
  CHECK(other->generated == 1);
  CHECK(s.tokens_in_flight() == (6 + 4) + (8 + 3));
}

TEST_CASE("scheduler: decoding outgrows the pool: the latest admitted is preempted and recomputed") {
  // Six usable blocks of 4 tokens. A and B hold 2 blocks each after their prompts and grow.
  scheduler s({64, 4}, /*num_blocks=*/7, /*block_size=*/4);
  const std::map<seq_id, char> names{{1, 'A'}, {2, 'B'}};
  s.add(1, priority::standard, toks(8, 100), 6);
  s.add(2, priority::standard, toks(8, 200), 100);
  run_table(s, names,
            {
                {"A:P8* B:P8*", 2, 0},
                {"A:D* B:D*", 2, 0},  // each takes its third block
                {"A:D* B:D*", 2, 0},
                {"A:D* B:D*", 2, 0},
                {"A:D* B:D*", 2, 0},
                {"A:D*", 1, 1},       // A needs a fourth block: B, admitted last, is preempted
                {"B:P5*", 1, 0},      // A done; B back with 2 cached blocks, recomputes 5 tokens
                {"B:D*", 1, 0},
            },
            [](int, scheduler& sch) { finish_done(sch, {1, 2}); });
  CHECK(s.preemptions() == 1);
  REQUIRE(s.find(2) != nullptr);
  CHECK(s.find(2)->preemptions == 1);
  CHECK(s.find(2)->cached_tokens == 0);  // usage reports the first admission's hits
  CHECK_FALSE(s.find(2)->guarded);        // it has made progress since
}

TEST_CASE("scheduler: an interactive sequence takes a batch sequence's slot and blocks") {
  scheduler s({64, 1}, 64, 4);
  const std::map<seq_id, char> names{{1, 'X'}, {2, 'Y'}};
  s.add(1, priority::batch, toks(4), 3);
  run_table(s, names,
            {
                {"X:P4*", 1, 0},
                {"X:D*", 1, 0},
                {"Y:P4*", 1, 1},  // Y arrives: X is preempted for it
                {"Y:D*", 1, 1},
                {"X:P2*", 1, 0},  // Y done: X's full prompt block is cached; it recomputes 2 tokens
                {"", 0, 0},
            },
            [](int i, scheduler& sch) {
              if (i == 2) sch.add(2, priority::interactive, toks(4, 300), 2);
              finish_done(sch, {1, 2});
            });
  CHECK(s.preemptions() == 1);

  // KV: batch fills the pool; an interactive prompt still gets in.
  scheduler k({64, 8}, /*num_blocks=*/5, /*block_size=*/4);
  k.add(1, priority::batch, toks(12), 100);  // 3 of 4 blocks
  apply(k, k.schedule());
  k.add(2, priority::interactive, toks(8, 500), 5);  // needs 2
  const step_plan plan = k.schedule();
  REQUIRE(plan.items.size() == 1);
  CHECK(plan.items[0].id == 2);
  CHECK(k.find(1)->running == false);
  // A standard prompt that does not fit waits instead.
  scheduler w({64, 8}, 5, 4);
  w.add(1, priority::batch, toks(12), 100);
  apply(w, w.schedule());
  w.add(2, priority::standard, toks(8, 500), 5);
  CHECK(w.schedule().items.size() == 1);
  CHECK(w.find(2)->running == false);
  CHECK(w.preemptions() == 0);
}

TEST_CASE("scheduler: a sequence that outgrows the whole pool is handed back, not left stuck") {
  scheduler s({64, 4, /*kv_reserve_blocks=*/1}, /*num_blocks=*/4, /*block_size=*/2);  // 3 usable
  s.add(1, priority::standard, toks(2), 100);
  for (int i = 0; i < 5; ++i) apply(s, s.schedule());  // 6 tokens in KV: 3 blocks, the whole pool
  CHECK(s.find(1)->running);
  CHECK(s.find(1)->computed == 6);
  CHECK(s.take_overflowed().empty());
  s.schedule();  // the 7th token needs a 4th block: it preempts itself and can never return
  const auto over = s.take_overflowed();
  REQUIRE(over.size() == 1);
  CHECK(over[0] == 1);
  CHECK(s.find(1)->running == false);
  CHECK(s.pool().num_free() == 3);
}

TEST_CASE("scheduler: admission needs the prompt's blocks plus the reserve") {
  scheduler s({64, 8, /*kv_reserve_blocks=*/2}, /*num_blocks=*/6, /*block_size=*/4);  // 5 usable
  CHECK(s.add(1, priority::standard, toks(12), 10));  // 3 blocks + 2 reserve = 5: fits
  CHECK_FALSE(s.add(9, priority::standard, toks(13), 10));  // 4 + 2 > 5: can never fit
  s.add(2, priority::standard, toks(1, 900), 10);
  const step_plan plan = s.schedule();
  REQUIRE(plan.items.size() == 1);  // 2 is held back: only 2 blocks are left, all reserve
  CHECK(plan.items[0].id == 1);
  CHECK(s.pool().num_free() == 2);
  s.remove(1);
  CHECK(s.pool().num_free() == 5);  // cancel frees the blocks at once
  CHECK(s.schedule().items.at(0).id == 2);
}

TEST_CASE("prefix cache: the same prompt from the same team hits; from another team it misses") {
  const std::uint64_t team_a = 11, team_b = 22;
  scheduler s({256, 8}, 64, 4);
  s.add(1, priority::standard, toks(22), 1, team_a);
  apply(s, s.schedule());
  s.remove(1);  // done: its blocks stay cached while free
  // Same team: 5 full blocks (20 tokens) of the 22-token prompt come from the cache.
  s.add(2, priority::standard, toks(22), 1, team_a);
  step_plan plan = s.schedule();
  REQUIRE(plan.items.size() == 1);
  CHECK(plan.items[0].tokens == 2);
  CHECK(plan.items[0].context_before == 20);
  CHECK(s.find(2)->cached_tokens == 20);
  apply(s, plan);
  s.remove(2);
  // Another team, same tokens: nothing shared.
  s.add(3, priority::standard, toks(22), 1, team_b);
  plan = s.schedule();
  CHECK(plan.items.at(0).tokens == 22);
  CHECK(s.find(3)->cached_tokens == 0);
  apply(s, plan);
  // A prompt that shares only the first 8 tokens hits 2 blocks, and a whole-block prompt
  // still computes its last token.
  auto partly = toks(8);
  for (int i = 0; i < 9; ++i) partly.push_back(5000 + i);
  s.add(4, priority::standard, partly, 1, team_a);
  s.add(5, priority::standard, toks(20), 1, team_a);
  plan = s.schedule();
  CHECK(s.find(4)->cached_tokens == 8);
  CHECK(s.find(5)->cached_tokens == 16);
}

TEST_CASE("kv pool: refcounts, LRU eviction of cached blocks, the null block, running out") {
  kv_block_pool pool(/*num_blocks=*/5, /*block_size=*/4);
  CHECK(pool.capacity() == 4);
  CHECK(pool.num_free() == 4);
  auto a = pool.allocate(3);
  REQUIRE(a.size() == 3);
  CHECK(std::find(a.begin(), a.end(), 0) == a.end());  // never the null block
  CHECK(pool.allocate(2).empty());                      // not enough: nothing taken
  CHECK(pool.num_free() == 1);
  pool.cache(a[0], 1000);
  pool.cache(a[1], 1001);
  pool.cache(a[2], 1002);
  pool.ref(a[1]);  // shared
  pool.release_all(a);
  CHECK(pool.ref_count(a[1]) == 1);
  CHECK(pool.num_free() == 3);
  // Free list order: the untouched block, then a[2], then a[0] (released last-first).
  auto b = pool.allocate(2);
  REQUIRE(b.size() == 2);
  CHECK(pool.lookup(1002) == std::nullopt);  // evicted
  CHECK(pool.lookup(1000) == a[0]);          // still cached
  CHECK(pool.lookup(1001) == a[1]);          // referenced: never evicted
  CHECK(pool.evictions() == 1);
  pool.ref(a[0]);  // a prefix hit takes a free cached block back
  CHECK(pool.num_free() == 0);
  CHECK(pool.allocate(1).empty());
}

TEST_CASE("kv pool: keys given together are kept in order, first registration wins; one allocation evicts many") {
  kv_block_pool pool(/*num_blocks=*/9, /*block_size=*/4);
  auto a = pool.allocate(4);
  REQUIRE(a.size() == 4);
  pool.cache(a[3], 7);  // already keyed: cache_all leaves it as it is
  const std::vector<block_hash> keys = {100, 101, 100, 103};
  pool.cache_all(a, keys);
  CHECK(pool.lookup(100) == a[0]);  // the first of two blocks with one key holds it
  CHECK(pool.lookup(101) == a[1]);
  CHECK(pool.lookup(7) == a[3]);
  CHECK(pool.lookup(103) == std::nullopt);
  pool.cache(a[2], 102);  // a[2] lost the race for 100, so it may take another key
  CHECK(pool.lookup(102) == a[2]);
  pool.release_all(a);  // free list: the 4 untouched blocks, then a[3], a[2], a[1], a[0]
  CHECK(pool.allocate(7).size() == 7);  // every untouched block and three keyed ones at once
  CHECK(pool.evictions() == 3);
  CHECK(pool.lookup(7) == std::nullopt);
  CHECK(pool.lookup(102) == std::nullopt);
  CHECK(pool.lookup(101) == std::nullopt);
  CHECK(pool.lookup(100) == a[0]);
  CHECK(pool.num_free() == 1);
}

TEST_CASE("kv pool: many prefix hits on free blocks keep eviction in release order (the ring's stale entries)") {
  // 4 blocks: a ring of 16 entries; each hit-and-release leaves one stale entry, so the ring
  // fills and compacts many times over.
  kv_block_pool pool(/*num_blocks=*/5, /*block_size=*/4);
  auto a = pool.allocate(4);
  REQUIRE(a.size() == 4);
  for (int i = 0; i < 4; ++i) pool.cache(a[static_cast<std::size_t>(i)], 500 + static_cast<block_hash>(i));
  pool.release_all(a);  // release order: a[3], a[2], a[1], a[0]
  std::vector<block_id> order = {a[3], a[2], a[1], a[0]};
  std::mt19937 rng(3);
  for (int round = 0; round < 1000; ++round) {
    // A prefix hit on a random free block, then its release: it becomes the most recent.
    const auto pick = static_cast<std::size_t>(rng() % order.size());
    const block_id b = order[pick];
    pool.ref(b);
    CHECK(pool.num_free() == 3);
    pool.release(b);
    order.erase(order.begin() + static_cast<long>(pick));
    order.push_back(b);
  }
  CHECK(pool.num_free() == 4);
  // Allocations evict in release order, oldest first, each taking its key with it.
  for (block_id expected : order) {
    const auto got = pool.allocate(1);
    REQUIRE(got.size() == 1);
    CHECK(got[0] == expected);
  }
  CHECK(pool.evictions() == 4);
  CHECK(pool.num_free() == 0);
  for (int i = 0; i < 4; ++i) CHECK(pool.lookup(500 + static_cast<block_hash>(i)) == std::nullopt);
}

TEST_CASE("scheduler: random load on a tight pool: no thrash, every block accounted, all finish") {
  std::mt19937 rng(1234);
  // Small step budgets make recomputes span several steps, when a guard matters most.
  for (int round = 0; round < 200; ++round) {
    CAPTURE(round);
    const int bs = 1 + static_cast<int>(rng() % 8);
    scheduler s({1 + static_cast<int>(rng() % (round % 2 ? 8 : 64)), 1 + static_cast<int>(rng() % 6), static_cast<int>(rng() % 2)},
                /*num_blocks=*/12 + static_cast<int>(rng() % 20), bs);
    std::map<seq_id, std::pair<int, int>> last_preempt;  // id -> (preemptions, generated at the last one)
    int added = 0;
    for (int i = 0; i < 12; ++i) {
      const int len = 1 + static_cast<int>(rng() % (3 * bs));
      if (s.add(static_cast<seq_id>(i + 1), static_cast<priority>(rng() % 3), toks(len, 40 * (i % 3)),
                1 + static_cast<int>(rng() % 20), rng() % 2))
        ++added;
    }
    int steps = 0, finished = 0;
    while (s.running() + s.waiting() > 0 && steps < 5000) {
      const step_plan plan = s.schedule();
      apply(s, plan);
      ++steps;
      for (seq_id id : s.take_overflowed()) {
        CHECK(s.find(id)->preemptions > 0);  // only growth can outrun the pool
        s.remove(id);
        ++finished;
      }
      for (seq_id id = 1; id <= 12; ++id) {
        const seq_status* st = s.find(id);
        if (!st) continue;
        auto& [count, gen] = last_preempt[id];
        if (st->preemptions > count) {
          CHECK(st->preemptions == count + 1);  // at most once per step
          // Preempted again: it must have produced a token since the last time.
          if (count > 0) CHECK(st->progress_mark > gen);
          count = st->preemptions;
          gen = st->progress_mark;
        }
        if (st->generated >= st->max_tokens) {
          s.remove(id);
          ++finished;
        }
      }
      // The load the router reads is the sum over what is held, however it came and went.
      std::int64_t in_flight = 0;
      for (seq_id id = 1; id <= 12; ++id)
        if (const seq_status* st = s.find(id)) in_flight += st->prompt_len + st->max_tokens - st->generated;
      CHECK(s.tokens_in_flight() == in_flight);
      // Every block is either free or held: held blocks are those of running sequences.
      std::set<block_id> held;
      for (seq_id id = 1; id <= 12; ++id)
        if (const seq_status* st = s.find(id)) {
          if (!st->running) CHECK(st->blocks.empty());
          held.insert(st->blocks.begin(), st->blocks.end());
        }
      CHECK(static_cast<int>(held.size()) + s.pool().num_free() == s.pool().capacity());
    }
    CHECK(finished == added);
  }
}

TEST_CASE("scheduler: a bulk decode takes, fills and keys the same blocks in the same order as stepping") {
  // Two schedulers given the same history; then one runs a stretch of decode steps in one
  // call and the other step by step. Many sequences with small blocks, so several cross a
  // block boundary at the same step, in both orders, and allocations evict cached blocks.
  std::mt19937 rng(99);
  auto token_at = [](seq_id id, int position) { return static_cast<token_id>(1 + (id * 131 + position * 7) % 50); };
  int compared = 0;
  for (int round = 0; round < 40; ++round) {
    CAPTURE(round);
    const int bs = 2 + static_cast<int>(rng() % 5);
    const int blocks = 160 + static_cast<int>(rng() % 80);
    scheduler a({4096, 64, 0}, blocks, bs), b({4096, 64, 0}, blocks, bs);
    // Earlier requests leave cached blocks in the ring, for the stretch's allocations to evict.
    for (seq_id id = 1; id <= 6; ++id) {
      const int len = 3 * bs + static_cast<int>(rng() % (4 * bs));
      for (scheduler* s : {&a, &b}) s->add(id, priority::standard, toks(len, 10 * static_cast<token_id>(id)), 1, id % 2);
    }
    seq_id next = 7;
    const int live = 8 + static_cast<int>(rng() % 24);
    for (int i = 0; i < live; ++i, ++next) {
      const int len = 1 + static_cast<int>(rng() % (5 * bs));
      const auto tier = static_cast<priority>(rng() % 3);
      const std::uint64_t salt = rng() % 2;
      for (scheduler* s : {&a, &b}) s->add(next, tier, toks(len, 7 * static_cast<token_id>(i % 4)), 10000, salt);
    }
    // Step both alike until every live sequence decodes (the first six finish on the way).
    int guard = 0;
    while (!(a.steady_decode() && a.waiting() == 0 && a.running() == live) && ++guard < 200) {
      for (scheduler* s : {&a, &b}) {
        const step_plan plan = s->schedule();
        std::vector<token_id> sampled;
        for (const auto& item : plan.items)
          if (item.samples) sampled.push_back(token_at(item.id, s->find(item.id)->generated));
        s->update(plan, sampled);
        for (seq_id id = 1; id <= 6; ++id)
          if (const seq_status* st = s->find(id); st && st->generated >= st->max_tokens) s->remove(id);
      }
    }
    REQUIRE(a.steady_decode());
    REQUIRE(a.running() == live);
    // As long as the pool allows (often to its last block, evicting every cached one).
    int steps = 1 + static_cast<int>(rng() % 150);
    while (steps > 1 && a.blocks_for_decode(steps) > a.pool().num_free()) --steps;
    if (a.blocks_for_decode(steps) > a.pool().num_free()) continue;
    compared += steps > 1;
    a.bulk_decode(steps, [&](std::size_t i, int first, std::span<token_id> out) {
      const seq_id id = a.running_view()[i]->id;
      for (std::size_t j = 0; j < out.size(); ++j) out[j] = token_at(id, first + static_cast<int>(j));
    });
    for (int k = 0; k < steps; ++k) {
      const step_plan plan = b.schedule();
      std::vector<token_id> sampled;
      for (const auto& item : plan.items) {
        REQUIRE_FALSE(item.prefill);
        sampled.push_back(token_at(item.id, b.find(item.id)->generated));
      }
      b.update(plan, sampled);
    }
    for (seq_id id = 7; id < next; ++id) {
      const seq_status* x = a.find(id);
      const seq_status* y = b.find(id);
      REQUIRE(x);
      REQUIRE(y);
      CHECK(x->blocks == y->blocks);
      CHECK(x->keys == y->keys);
      CHECK(x->computed == y->computed);
      CHECK(x->generated == y->generated);
      CHECK(std::vector<token_id>(x->tokens.begin(), x->tokens.begin() + x->computed) ==
            std::vector<token_id>(y->tokens.begin(), y->tokens.begin() + y->computed));
    }
    CHECK(a.pool().num_free() == b.pool().num_free());
    CHECK(a.tokens_in_flight() == b.tokens_in_flight());
  }
  CHECK(compared >= 30);
}

TEST_CASE("scheduler: next_coast runs to the nearest coast end, only while the batch decodes steadily") {
  scheduler s({64, 8, 0}, 64, 4);
  int record = 0;  // any caller's record: next_coast reads only the coast ends kept with it
  s.add(1, priority::standard, toks(5), 20);
  s.add(2, priority::standard, toks(3, 300), 20);
  CHECK(s.next_coast(100).steps == 0);  // both wait
  apply(s, s.schedule());               // both prefill whole and sample their first token
  REQUIRE(s.steady_decode());
  CHECK(s.next_coast(100).steps == 0);  // no coast end given: neither may be run ahead
  s.set_user(1, &record, 10);
  CHECK(s.next_coast(100).steps == 0);  // the other still may not
  s.set_user(2, &record, 7);
  const auto span = s.next_coast(100);
  CHECK(span.steps == 6);      // sequence 2 has 1 token and ends at its 7th
  CHECK(span.kv_tokens == 8);  // 5 + 3 prompt tokens computed
  CHECK(s.next_coast(4).steps == 4);
  CHECK(s.next_coast(6).steps == 6);
  s.set_user(2, &record, 2);  // its end is the next step: one step, nothing to run ahead
  CHECK(s.next_coast(100).steps == 1);
  s.set_user(2, &record, 1);  // already past it
  CHECK(s.next_coast(100).steps == 0);
  s.set_user(2, nullptr, 7);  // a record taken back takes its coast end with it
  CHECK(s.next_coast(100).steps == 0);
  s.set_user(2, &record, 7);
  apply(s, s.schedule());  // one decode each
  CHECK(s.next_coast(100).steps == 5);
  CHECK(s.next_coast(100).kv_tokens == 10);
  s.add(3, priority::standard, toks(4, 500), 20);  // a sequence waiting: the next step admits it
  CHECK(s.next_coast(100).steps == 0);
  apply(s, s.schedule());
  s.set_user(3, &record, 20);
  CHECK(s.next_coast(100).steps == 4);  // sequence 2 again, now two tokens on
}
