// Scheduler step plans as tables: the plan and queue state expected at each iteration.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/scheduler.hpp"

using namespace kiln::engine;

namespace {

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
    s.update(plan);
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
  scheduler s({/*max_tokens_per_step=*/8, /*max_running=*/2});
  const std::map<seq_id, char> names{{1, 'A'}, {2, 'B'}, {3, 'C'}};
  s.add(1, priority::standard, 5, 3);
  s.add(2, priority::standard, 10, 4);
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
              if (i == 2) sch.add(3, priority::interactive, 3, 2);
              finish_done(sch, {1, 2, 3});
            });
}

TEST_CASE("scheduler: chunked prefill keeps a running stream decoding") {
  scheduler s({8, 4});
  const std::map<seq_id, char> names{{1, 'A'}, {2, 'B'}};
  s.add(1, priority::standard, 2, 100);
  run_table(s, names,
            {
                {"A:P2*", 1, 0},
                {"A:D* B:P7", 2, 0},
                {"A:D* B:P7", 2, 0},
                {"A:D* B:P6*", 2, 0},
                {"A:D* B:D*", 2, 0},
            },
            [](int i, scheduler& sch) {
              if (i == 1) sch.add(2, priority::standard, 20, 100);
            });
}

TEST_CASE("scheduler: tiers order admission; batch never takes an interactive slot") {
  scheduler s({64, 1});
  const std::map<seq_id, char> names{{1, 'X'}, {2, 'Y'}, {3, 'Z'}};
  s.add(1, priority::batch, 4, 1);        // arrives first
  s.add(2, priority::interactive, 4, 1);
  s.add(3, priority::standard, 4, 1);
  run_table(s, names,
            {
                {"Y:P4*", 1, 2},
                {"Z:P4*", 1, 1},
                {"X:P4*", 1, 0},
                {"", 0, 0},
            },
            [](int, scheduler& sch) { finish_done(sch, {1, 2, 3}); });
}

TEST_CASE("scheduler: tokens in flight are prompt plus remaining output") {
  scheduler s({100, 8});
  s.add(1, priority::standard, 10, 5);
  s.add(2, priority::standard, 3, 7);
  CHECK(s.tokens_in_flight() == 10 + 5 + 3 + 7);
  s.update(s.schedule());  // both prompts done, one token each
  CHECK(s.tokens_in_flight() == 10 + 4 + 3 + 6);
  CHECK(s.remove(1));
  CHECK_FALSE(s.remove(1));
  CHECK(s.tokens_in_flight() == 3 + 6);
  CHECK(s.running() == 1);
}

TEST_CASE("scheduler: removing a sequence mid-step is harmless to update") {
  scheduler s({100, 8});
  s.add(1, priority::standard, 4, 5);
  const step_plan plan = s.schedule();
  s.remove(1);
  s.update(plan);
  CHECK(s.running() == 0);
  CHECK(s.waiting() == 0);
  CHECK(s.schedule().empty());
}
