// The virtual clock's driver: wakeups whose wake ticket was voided are dropped as their time
// comes, the clock moving as if they had been delivered; live ones arrive at their time.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/wake_ticket.hpp"
#include "tests/support/actor_fixture.hpp"

using namespace std::chrono_literals;
using kiln::actors::coast_atom;
using kiln::actors::wake_ticket;

namespace {

struct clock_fixture : kiln::test::actor_fixture {
  caf::actor_clock::time_point start = vt.now();
  std::vector<std::pair<std::uint64_t, caf::timespan>> got;  ///< (ticket issued, when)
  caf::actor receiver;

  clock_fixture() {
    receiver = sys.spawn([this](caf::event_based_actor* self) -> caf::behavior {
      return {[this, self](coast_atom, const wake_ticket& t) { got.emplace_back(t.issued, self->clock().now() - start); }};
    });
    vt.run_ready();
  }
  ~clock_fixture() {
    caf::anon_send_exit(receiver, caf::exit_reason::user_shutdown);
    vt.run_ready();
  }
  void wake_at(caf::timespan at, wake_ticket t) { caf::delayed_anon_send(receiver, at, coast_atom::value, std::move(t)); }
  std::size_t pending() const { return sched.clock().schedule().size(); }
};

}  // namespace

TEST_CASE_FIXTURE(clock_fixture, "virtual time: a voided wakeup is dropped at its time, a live one arrives at its own") {
  auto count = std::make_shared<std::uint64_t>(0);
  wake_at(1s, {count, ++*count});
  wake_at(2s, {count, ++*count});
  wake_at(3s, {count, ++*count});
  ++*count;  // all three void now
  wake_at(4s, {count, *count});  // live
  REQUIRE(pending() == 4);
  vt.run_for(1500ms);
  CHECK(got.empty());
  CHECK(pending() == 3);  // the wakeup of 1 s went without delivery
  CHECK(vt.now() - start == 1500ms);
  CHECK(vt.run_until([&] { return !got.empty(); }, 10s));
  REQUIRE(got.size() == 1);
  CHECK(got[0].first == *count);
  CHECK(got[0].second == 4s);
  CHECK(pending() == 0);
}

TEST_CASE_FIXTURE(clock_fixture, "virtual time: with only void wakeups due, the clock still moves to the last of them") {
  auto count = std::make_shared<std::uint64_t>(7);
  wake_at(5s, {count, 7});
  wake_at(6s, {count, 8});  // void from the start
  ++*count;                 // now 8: the first void, the second live
  wake_at(9s, {count, 7});  // void
  CHECK_FALSE(vt.run_until([] { return false; }, 8s));
  REQUIRE(got.size() == 1);
  CHECK(got[0] == std::pair<std::uint64_t, caf::timespan>{8, 6s});
  CHECK(vt.now() - start == 6s);  // run_until stops at the last event it moved to by 8 s
  CHECK_FALSE(vt.run_until([] { return false; }, 5s));
  CHECK(got.size() == 1);
  CHECK(vt.now() - start == 9s);  // the void one at 9 s: dropped, the clock at its time
  CHECK(pending() == 0);
  // A ticket without a count is void too.
  wake_at(1s, {nullptr, 0});
  vt.run_for(2s);
  CHECK(got.size() == 1);
}
