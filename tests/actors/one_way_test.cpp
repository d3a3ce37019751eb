// What a one-way handler (actors/one_way.hpp) does: it handles its messages exactly once and
// in order, leaves none behind in the mailbox, and (unlike a void handler, which CAF answers
// with an empty reply) answers no request() at all, which is why only send() may reach one.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/one_way.hpp"
#include "tests/support/actor_fixture.hpp"

using namespace kiln;

namespace {

caf::behavior counter(caf::event_based_actor*, std::shared_ptr<std::vector<int>> seen) {
  return {
      [seen](int x) -> actors::one_way {
        seen->push_back(x);
        return actors::handled;
      },
      [seen](const std::string& s) -> std::string { return s + ":" + std::to_string(seen->size()); },
  };
}

caf::behavior void_counter(caf::event_based_actor*, std::shared_ptr<std::vector<int>> seen) {
  return {[seen](int x) { seen->push_back(x); }};
}

// Asks `target` with request(x) and records whether a reply or an error came.
struct asked {
  bool replied = false;
  std::optional<caf::error> failed;
};

void ask(caf::actor_system& sys, const caf::actor& target, int x, std::shared_ptr<asked> out) {
  sys.spawn([target, x, out](caf::event_based_actor* self) {
    self->request(target, std::chrono::seconds(1), x).then([out] { out->replied = true; }, [out](caf::error& e) { out->failed = e; });
  });
}

}  // namespace

TEST_CASE_FIXTURE(test::actor_fixture, "one_way: each message handled once, in order, none left behind") {
  auto seen = std::make_shared<std::vector<int>>();
  auto a = sys.spawn(counter, seen);
  for (int i = 1; i <= 5; ++i) caf::anon_send(a, i);
  sched.run();
  CHECK(*seen == std::vector<int>{1, 2, 3, 4, 5});
  // A message after them is answered, with all five counted: nothing was skipped or kept.
  auto reply = std::make_shared<std::string>();
  sys.spawn([a, reply](caf::event_based_actor* self) {
    self->request(a, std::chrono::seconds(1), std::string("after")).then([reply](const std::string& s) { *reply = s; });
  });
  sched.run();
  CHECK(*reply == "after:5");
  caf::anon_send(a, 6);
  sched.run();
  CHECK(seen->size() == 6);
  caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  sched.run();
}

TEST_CASE_FIXTURE(test::actor_fixture, "one_way: a request() gets no reply (a void handler's is empty), so it times out") {
  auto seen_one_way = std::make_shared<std::vector<int>>();
  auto seen_void = std::make_shared<std::vector<int>>();
  auto one_way = sys.spawn(counter, seen_one_way);
  auto plain = sys.spawn(void_counter, seen_void);
  auto to_one_way = std::make_shared<asked>();
  auto to_plain = std::make_shared<asked>();
  ask(sys, one_way, 7, to_one_way);
  ask(sys, plain, 7, to_plain);
  sched.run();
  CHECK(*seen_one_way == std::vector<int>{7});
  CHECK(*seen_void == std::vector<int>{7});
  CHECK(to_plain->replied);
  CHECK_FALSE(to_one_way->replied);
  CHECK_FALSE(to_one_way->failed);
  vt.run_for(std::chrono::seconds(2));
  CHECK_FALSE(to_one_way->replied);
  REQUIRE(to_one_way->failed);
  CHECK(*to_one_way->failed == caf::sec::request_timeout);
  caf::anon_send_exit(one_way, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(plain, caf::exit_reason::user_shutdown);
  sched.run();
}
