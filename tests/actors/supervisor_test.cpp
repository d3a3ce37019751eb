// The supervisor: its restart decision as a table, then live children on virtual time.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>

#include <caf/all.hpp>

#include "actors/supervisor.hpp"
#include "tests/support/actor_fixture.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using actors::restart_policy;
using actors::restart_strategy;

namespace {

using tp = caf::actor_clock::time_point;
using idx = std::vector<std::size_t>;

}  // namespace

TEST_CASE("supervisor plan: restart policies by exit kind") {
  struct row {
    restart_policy policy;
    bool abnormal;
    bool restarted;
  };
  const row table[] = {{restart_policy::permanent, false, true}, {restart_policy::permanent, true, true},
                       {restart_policy::transient, false, false}, {restart_policy::transient, true, true},
                       {restart_policy::temporary, false, false}, {restart_policy::temporary, true, false}};
  for (const auto& t : table) {
    std::deque<tp> history;
    const auto plan = actors::plan_restart({restart_strategy::one_for_one, 3, 5s}, {t.policy}, 0, t.abnormal, tp{}, history);
    CHECK(plan.start == (t.restarted ? idx{0} : idx{}));
    CHECK_FALSE(plan.escalate);
    CHECK(history.size() == (t.restarted ? 1u : 0u));
  }
}

TEST_CASE("supervisor plan: one_for_one restarts the child; rest_for_one also those started after it") {
  const std::vector<restart_policy> p(4, restart_policy::permanent);
  std::deque<tp> h1, h2;
  auto one = actors::plan_restart({restart_strategy::one_for_one, 3, 5s}, p, 1, true, tp{}, h1);
  CHECK(one.stop.empty());
  CHECK(one.start == idx{1});
  auto rest = actors::plan_restart({restart_strategy::rest_for_one, 3, 5s}, p, 1, true, tp{}, h2);
  CHECK(rest.stop == idx{3, 2});  // latest started first
  CHECK(rest.start == idx{1, 2, 3});
  // A temporary child after it is stopped but not started again.
  std::deque<tp> h3;
  auto temp = actors::plan_restart({restart_strategy::rest_for_one, 3, 5s},
                                   {restart_policy::permanent, restart_policy::permanent, restart_policy::temporary}, 0,
                                   true, tp{}, h3);
  CHECK(temp.stop == idx{2, 1});
  CHECK(temp.start == idx{0, 1});
}

TEST_CASE("supervisor plan: more than `intensity` restarts within `period` escalate; older ones are forgotten") {
  const actors::supervisor_flags flags{restart_strategy::one_for_one, 2, 5s};
  const std::vector<restart_policy> p(3, restart_policy::permanent);
  std::deque<tp> h;
  const tp t0{};
  CHECK_FALSE(actors::plan_restart(flags, p, 0, true, t0, h).escalate);
  CHECK_FALSE(actors::plan_restart(flags, p, 1, true, t0 + 1s, h).escalate);
  // The third within 5 s is one too many: every other child is stopped.
  auto third = actors::plan_restart(flags, p, 2, true, t0 + 5s, h);
  CHECK(third.escalate);
  CHECK(third.start.empty());
  CHECK(third.stop == idx{1, 0});
  // Exactly one period after the first restart it still counts; a moment later it does not.
  std::deque<tp> edge{t0, t0 + 1s};
  CHECK(actors::plan_restart(flags, p, 0, true, t0 + 5s, edge).escalate);
  std::deque<tp> later{t0, t0 + 1s};
  CHECK_FALSE(actors::plan_restart(flags, p, 0, true, t0 + 5s + 1ns, later).escalate);
  CHECK(later.size() == 2);  // t0 dropped, t0 + 5s + 1ns added
  // Intensity 0: no restart at all.
  std::deque<tp> none;
  CHECK(actors::plan_restart({restart_strategy::one_for_one, 0, 5s}, p, 0, true, t0, none).escalate);
}

namespace {

// A test supervisor of `n` children that echo ints; it records what each down did.
struct sup_log {
  std::vector<actors::supervisor::outcome> outcomes;
  actors::supervisor* sup = nullptr;
};

struct sup_state {
  actors::supervisor sup;
};

caf::behavior child() {
  return {[](int x) { return x; }};
}

caf::behavior test_supervisor(caf::stateful_actor<sup_state>* self, actors::supervisor_flags flags, int n,
                              std::shared_ptr<sup_log> log) {
  std::vector<actors::child_spec> specs;
  for (int i = 0; i < n; ++i)
    specs.push_back({"c" + std::to_string(i), [](caf::local_actor* p) { return p->system().spawn(child); },
                     i == n - 1 ? restart_policy::transient : restart_policy::permanent});
  self->state.sup = actors::supervisor(flags, std::move(specs));
  self->state.sup.start_all(self);
  log->sup = &self->state.sup;
  self->set_down_handler([self, log](caf::down_msg& dm) {
    log->outcomes.push_back(self->state.sup.on_down(self, dm.source, dm.reason));
  });
  return {[self](const std::string& cmd) {
    if (cmd == "revive") self->state.sup.revive(self);
  }};
}

struct live_fixture : test::actor_fixture {
  std::shared_ptr<sup_log> log = std::make_shared<sup_log>();
  caf::actor sup;
  void start(actors::supervisor_flags flags, int n) {
    sup = sys.spawn(test_supervisor, flags, n, log);
    vt.run_ready();
  }
  caf::actor child(int i) const { return log->sup->child("c" + std::to_string(i)); }
  /// Whether `a` has ended (a monitor on an ended actor fires at once).
  bool ended(const caf::actor& a) {
    auto flag = std::make_shared<bool>(false);
    sys.spawn([a, flag](caf::event_based_actor* self) -> caf::behavior {
      self->monitor(a);
      self->set_down_handler([self, flag](caf::down_msg&) {
        *flag = true;
        self->quit();
      });
      return {[](int) {}};
    });
    vt.run_ready();
    return *flag;
  }
  ~live_fixture() {
    caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
    vt.run_ready();
  }
};

}  // namespace

TEST_CASE_FIXTURE(live_fixture, "supervisor: one_for_one restarts a killed child alone; a transient child ending normally stays down") {
  start({restart_strategy::one_for_one, 3, 5s}, 3);
  const auto c0 = child(0), c1 = child(1), c2 = child(2);
  REQUIRE(c0);
  caf::anon_send_exit(c1, caf::exit_reason::kill);
  vt.run_ready();
  REQUIRE(log->outcomes.size() == 1);
  CHECK(log->outcomes[0].ours);
  CHECK(log->outcomes[0].id == "c1");
  CHECK(log->outcomes[0].restarted == std::vector<std::string>{"c1"});
  CHECK(child(1));
  CHECK(child(1) != c1);
  CHECK(child(0) == c0);
  CHECK(child(2) == c2);
  CHECK(log->sup->restarts() == 1);
  caf::anon_send_exit(c2, caf::exit_reason::user_shutdown);  // transient, normal: not restarted
  vt.run_ready();
  CHECK_FALSE(child(2));
  CHECK(log->sup->restarts() == 1);
}

TEST_CASE_FIXTURE(live_fixture, "supervisor: rest_for_one restarts the child and those after it") {
  start({restart_strategy::rest_for_one, 3, 5s}, 3);
  const auto c0 = child(0), c1 = child(1), c2 = child(2);
  caf::anon_send_exit(c1, caf::exit_reason::kill);
  vt.run_ready();
  CHECK(child(0) == c0);
  CHECK(child(1) != c1);
  CHECK(child(2) != c2);
  CHECK(child(2));
  // The child it stopped itself is not mistaken for a failure.
  REQUIRE(log->outcomes.size() == 2);
  CHECK_FALSE(log->outcomes[1].ours);
}

TEST_CASE_FIXTURE(live_fixture, "supervisor: past the intensity every child is stopped and the outcome escalates") {
  start({restart_strategy::one_for_one, 2, 10s}, 3);
  for (int k = 0; k < 2; ++k) {
    caf::anon_send_exit(child(0), caf::exit_reason::kill);
    vt.run_ready();
    vt.run_for(1s);
  }
  REQUIRE(log->outcomes.size() == 2);
  CHECK_FALSE(log->outcomes.back().escalate);
  const auto c1 = child(1);
  caf::anon_send_exit(child(0), caf::exit_reason::kill);
  vt.run_ready();
  REQUIRE(log->outcomes.size() >= 3);
  CHECK(log->outcomes[2].escalate);
  CHECK_FALSE(child(0));
  CHECK_FALSE(child(1));
  CHECK_FALSE(child(2));
  CHECK(ended(c1));  // the stopped children really ended
  // Reviving starts them all again, with a fresh history.
  caf::anon_send(sup, std::string("revive"));
  vt.run_ready();
  CHECK(child(0));
  CHECK(child(1));
  CHECK(child(2));
  caf::anon_send_exit(child(0), caf::exit_reason::kill);
  vt.run_ready();
  CHECK_FALSE(log->outcomes.back().escalate);
}

TEST_CASE_FIXTURE(live_fixture, "supervisor: children end with their supervisor, even when it is killed") {
  start({restart_strategy::one_for_one, 3, 5s}, 2);
  const auto c0 = child(0), c1 = child(1);
  caf::anon_send_exit(sup, caf::exit_reason::kill);
  vt.run_ready();
  CHECK(ended(c0));
  CHECK(ended(c1));
}
