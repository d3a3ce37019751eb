// The serving node's scheduler: its timer (a thread of its own with several workers, the
// worker itself when it is alone) sleeps until the earliest deadline and is woken only by a
// sooner one. Delayed messages and request timeouts must behave exactly as with CAF's own
// timer: in deadline order, never early, cancelled by a reply, all delivered. Each case runs
// with one worker and with two.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <caf/all.hpp>

#include "cluster/scheduler.hpp"

using namespace std::chrono_literals;

namespace {

template <std::size_t Workers>
struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  system_fixture() {
    cfg.set("scheduler.max-threads", Workers);
    cfg.set("logger.console", caf::atom("none"));
    cfg.set("work-stealing.relaxed-sleep-duration", caf::timespan{1s});  // as `kiln serve` with one worker
    kiln::cluster::use_lazy_timer_scheduler(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

using one_worker = system_fixture<1>;
using two_workers = system_fixture<2>;

}  // namespace

TEST_CASE_TEMPLATE("scheduler: a sooner deadline given later still comes first, none early", F, one_worker, two_workers) {
  F f;
  auto& sys = f.sys;
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

TEST_CASE_TEMPLATE("scheduler: request timeouts fire without a reply and are cancelled by one", F, one_worker, two_workers) {
  F f;
  auto& sys = f.sys;
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

TEST_CASE_TEMPLATE("scheduler: deadlines from many threads at once all arrive, each once", F, one_worker, two_workers) {
  F f;
  auto& sys = f.sys;
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

TEST_CASE_TEMPLATE("scheduler: a system ends with deadlines far ahead still set", F, one_worker, two_workers) {
  const auto start = std::chrono::steady_clock::now();
  {
    F f;
    auto a = f.sys->spawn([]() -> caf::behavior { return {[](int) {}}; });
    caf::delayed_anon_send(a, std::chrono::hours(1), 1);
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }
  CHECK(std::chrono::steady_clock::now() - start < 5s);
}

// The lone worker keeps the clock between jobs: a deadline that passes while it runs a long
// job is delivered as soon as that job ends, and one set by an actor on the worker itself (an
// engine's next step) wakes it from its idle wait at the deadline.
TEST_CASE_FIXTURE(one_worker, "scheduler: one worker delivers deadlines that pass while it is busy, and wakes for its own") {
  caf::scoped_actor self{*sys};
  const auto start = std::chrono::steady_clock::now();
  auto busy = sys->spawn([]() -> caf::behavior {
    return {[](int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }};
  });
  caf::delayed_anon_send(self, 10ms, 1);
  caf::anon_send(busy, 60);  // the worker is held 60 ms, past the deadline
  std::chrono::steady_clock::duration at{};
  self->receive([&](int) { at = std::chrono::steady_clock::now() - start; }, caf::after(2s) >> [] {});
  CHECK(at >= 10ms);
  CHECK(at < 1s);
  // A ticker re-arms itself from the worker: each tick a deadline set while nothing else runs.
  auto ticker = sys->spawn([](caf::event_based_actor* s) -> caf::behavior {
    return {[s](int left, caf::actor reply_to) {
      if (left == 0) return s->send(reply_to, 0);
      s->delayed_send(s, 5ms, left - 1, reply_to);
    }};
  });
  const auto ticks_from = std::chrono::steady_clock::now();
  self->send(ticker, 10, caf::actor{self});
  bool done = false;
  self->receive([&](int) { done = true; }, caf::after(2s) >> [] {});
  const auto took = std::chrono::steady_clock::now() - ticks_from;
  CHECK(done);
  CHECK(took >= 50ms);
  CHECK(took < 1s);  // not held until the relaxed sleep (1 s in serving) per tick
  caf::anon_send_exit(busy, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(ticker, caf::exit_reason::user_shutdown);
}

// A worker that never runs out of jobs (two actors passing a message back and forth for
// 400 ms) still delivers a deadline set meanwhile when it falls due, not once it is idle.
TEST_CASE_TEMPLATE("scheduler: a busy worker delivers a new deadline on time", F, one_worker, two_workers) {
  F f;
  caf::scoped_actor self{*f.sys};
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + 400ms;
  auto pong = f.sys->spawn([until](caf::event_based_actor* s) -> caf::behavior {
    return {[s, until](int n, caf::actor back) {
      if (std::chrono::steady_clock::now() < until) s->send(back, n + 1, caf::actor_cast<caf::actor>(s));
    }};
  });
  auto ping = f.sys->spawn([until, &self, pong](caf::event_based_actor* s) -> caf::behavior {
    s->delayed_send(caf::actor{self}, 20ms, 1);  // set on the worker, while it is busy
    s->send(pong, 0, caf::actor_cast<caf::actor>(s));
    return {[s, until](int n, caf::actor back) {
      if (std::chrono::steady_clock::now() < until) s->send(back, n + 1, caf::actor_cast<caf::actor>(s));
    }};
  });
  std::chrono::steady_clock::duration at{};
  self->receive([&](int) { at = std::chrono::steady_clock::now() - start; }, caf::after(2s) >> [] {});
  CHECK(at >= 20ms);
  CHECK(at < 300ms);  // before the two stop at 400 ms
  std::this_thread::sleep_for(450ms);
  caf::anon_send_exit(ping, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(pong, caf::exit_reason::user_shutdown);
}

// The lone worker running an io_context (actors_on_io_thread): I/O handlers and actors share
// its thread; work from another thread and deadlines end its wait in the io_context; once the
// io_context stops, it says so and goes on with the actors alone.
TEST_CASE("scheduler: one worker also runs an io_context, woken by I/O, other threads and deadlines") {
  boost::asio::io_context ioc;
  auto guard = boost::asio::make_work_guard(ioc);
  auto io = std::make_shared<kiln::cluster::io_sharing>(ioc);
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", std::size_t{1});
  cfg.set("logger.console", caf::atom("none"));
  kiln::cluster::use_lazy_timer_scheduler(cfg, io);
  caf::actor_system sys{cfg};
  std::atomic<std::thread::id> actor_thread{}, io_thread{};
  auto echo = sys.spawn([&]() -> caf::behavior {
    return {[&](int x) {
      actor_thread = std::this_thread::get_id();
      return x;
    }};
  });
  caf::scoped_actor self{sys};
  // From another thread (this one) while the worker waits in the io_context.
  std::this_thread::sleep_for(20ms);
  int got = 0;
  self->request(echo, 2s, 5).receive([&](int x) { got = x; }, [](caf::error&) { FAIL("no answer"); });
  CHECK(got == 5);
  // An I/O handler runs on the same thread as the actors.
  std::atomic<bool> ran{false};
  boost::asio::post(ioc, [&] {
    io_thread = std::this_thread::get_id();
    ran = true;
  });
  for (int i = 0; i < 200 && !ran; ++i) std::this_thread::sleep_for(5ms);
  CHECK(ran.load());
  CHECK(io_thread.load() == actor_thread.load());
  // A deadline set from another thread ends the wait at its time, not later.
  const auto start = std::chrono::steady_clock::now();
  self->delayed_send(self, 30ms, 9);
  std::chrono::steady_clock::duration at{};
  self->receive([&](int) { at = std::chrono::steady_clock::now() - start; }, caf::after(2s) >> [] {});
  CHECK(at >= 30ms);
  CHECK(at < 500ms);
  // A stopped io_context is left; the actors go on.
  ioc.stop();
  io->wait_released();
  got = 0;
  self->request(echo, 2s, 6).receive([&](int x) { got = x; }, [](caf::error&) { FAIL("no answer after the I/O stopped"); });
  CHECK(got == 6);
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
}
