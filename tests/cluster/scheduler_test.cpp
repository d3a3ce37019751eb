// The serving node's scheduler: its timer thread sleeps until the earliest deadline and is
// woken only by a sooner one. Delayed messages and request timeouts must behave exactly as
// with CAF's own timer: in deadline order, never early, cancelled by a reply, all delivered.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "cluster/scheduler.hpp"

using namespace std::chrono_literals;

namespace {

struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  system_fixture() {
    cfg.set("scheduler.max-threads", std::size_t{1});
    cfg.set("logger.console", caf::atom("none"));
    kiln::cluster::use_lazy_timer_scheduler(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

}  // namespace

TEST_CASE_FIXTURE(system_fixture, "scheduler: a sooner deadline given later still comes first, none early") {
  caf::scoped_actor self{*sys};
  std::this_thread::sleep_for(20ms);  // the timer thread is asleep, with nothing due
  const auto start = std::chrono::steady_clock::now();
  self->delayed_send(self, 120ms, 1);  // wakes it: it now sleeps until +120 ms
  std::this_thread::sleep_for(10ms);
  self->delayed_send(self, 10ms, 2);  // must wake it again (due at +20 ms)
  self->delayed_send(self, 50ms, 3);  // need not (+60 ms)
  std::vector<int> order;
  std::vector<std::chrono::steady_clock::duration> at;
  for (int i = 0; i < 3; ++i)
    self->receive(
        [&](int x) {
          order.push_back(x);
          at.push_back(std::chrono::steady_clock::now() - start);
        },
        caf::after(2s) >> [] {});
  REQUIRE(order == std::vector<int>{2, 3, 1});
  CHECK(at[0] >= 20ms);
  CHECK(at[0] < 110ms);  // not held until the first deadline set
  CHECK(at[1] >= 60ms);
  CHECK(at[2] >= 120ms);
}

TEST_CASE_FIXTURE(system_fixture, "scheduler: request timeouts fire without a reply and are cancelled by one") {
  auto silent = sys->spawn([](caf::event_based_actor* s) -> caf::behavior {
    return {[s](int) -> caf::result<int> { return s->make_response_promise<int>(); }};
  });
  auto echo = sys->spawn([]() -> caf::behavior { return {[](int x) { return x; }}; });
  caf::scoped_actor self{*sys};
  bool timed_out = false;
  self->request(silent, 30ms, 1).receive([](int) { FAIL("the silent actor answered"); },
                                         [&](caf::error& e) { timed_out = e == caf::sec::request_timeout; });
  CHECK(timed_out);
  int got = 0;
  self->request(echo, 40ms, 7).receive([&](int x) { got = x; }, [](caf::error&) { FAIL("an answered request timed out"); });
  CHECK(got == 7);
  // The answered request's timeout must not arrive later as a stray message.
  bool stray = false;
  self->receive([&](caf::message&) { stray = true; }, caf::after(80ms) >> [] {});
  CHECK_FALSE(stray);
  caf::anon_send_exit(silent, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(system_fixture, "scheduler: deadlines from many threads at once all arrive, each once") {
  std::atomic<int> seen{0};
  std::vector<std::atomic<int>> each(800);
  auto counter = sys->spawn([&]() -> caf::behavior {
    return {[&](int i) {
      each[static_cast<std::size_t>(i)].fetch_add(1);
      seen.fetch_add(1);
    }};
  });
  std::vector<std::thread> senders;
  for (int t = 0; t < 4; ++t)
    senders.emplace_back([&, t] {
      for (int k = 0; k < 200; ++k) {
        const int i = t * 200 + k;
        caf::delayed_anon_send(counter, std::chrono::milliseconds((i * 7) % 23), i);
      }
    });
  for (auto& s : senders) s.join();
  for (int waited = 0; seen.load() < 800 && waited < 500; ++waited) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(30ms);  // nothing more after the last deadline
  CHECK(seen.load() == 800);
  int twice = 0;
  for (auto& e : each) twice += e.load() != 1;
  CHECK(twice == 0);
  caf::anon_send_exit(counter, caf::exit_reason::user_shutdown);
}

TEST_CASE("scheduler: a system ends with deadlines far ahead still set") {
  const auto start = std::chrono::steady_clock::now();
  {
    system_fixture f;
    auto a = f.sys->spawn([]() -> caf::behavior { return {[](int) {}}; });
    caf::delayed_anon_send(a, std::chrono::hours(1), 1);
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}
