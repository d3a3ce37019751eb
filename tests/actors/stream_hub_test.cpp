// The front's stream hub with one I/O thread: a batch reaches its streams in one post, and a
// stream the hub lets go of (detached, ended, or the hub itself gone) lives until every batch
// posted before that has run, since batches carry plain pointers.
#include <doctest/doctest.h>

#include <map>

#include <caf/all.hpp>

#include "net/io_lane.hpp"
#include "net/stream_hub.hpp"
#include "tests/support/actor_fixture.hpp"

namespace kiln::net {
namespace {

using actors::request_id;

/// What every target saw, kept outside them so it can be read after they are gone.
using journal = std::vector<std::string>;

struct logged_target : actors::stream_target {
  logged_target(std::string name, std::shared_ptr<journal> log) : name(std::move(name)), log(std::move(log)) {}
  ~logged_target() override { log->push_back(name + " gone"); }
  void on_tokens(actors::stream_tokens ev) override { log->push_back(name + " " + ev.text); }
  void on_end(actors::stream_end) override { log->push_back(name + " end"); }
  void on_error(actors::stream_error) override { log->push_back(name + " error"); }
  void on_rate_limit(actors::rate_limit_info) override { log->push_back(name + " limit"); }
  std::string name;
  std::shared_ptr<journal> log;
};

struct hub_fixture : test::actor_fixture {
  std::vector<std::function<void()>> io_queue;  ///< what the hub posted, run when the test says
  std::shared_ptr<journal> log = std::make_shared<journal>();
  bool on_io_thread = false;  ///< the hub runs on the I/O thread itself (the actors on it)
  caf::actor hub = spawn_stream_hub(
      sys, [this](std::function<void()> fn) { io_queue.push_back(std::move(fn)); }, true, [this] { return on_io_thread; });

  ~hub_fixture() {  // the hub's last posts land while the queue still exists
    caf::anon_send_exit(hub, caf::exit_reason::user_shutdown);
    sched.run();
    run_io();
  }

  /// Attaches a target the hub alone holds; returns a handle that sees when it is gone.
  std::weak_ptr<actors::stream_target> attach(request_id id, const std::string& name) {
    auto t = std::make_shared<logged_target>(name, log);
    hub_attach(hub, id, t, [](std::function<void()> fn) { fn(); });
    sched.run();
    return t;
  }
  /// Items whose text starts with '^' are their streams' first tokens (they carry the prompt's size).
  void batch(std::vector<std::pair<request_id, std::string>> items) {
    actors::stream_batch b;
    for (auto& [id, text] : items) {
      actors::stream_tokens ev;
      ev.id = id;
      ev.text = text;
      ev.tokens = 1;
      if (!text.empty() && text[0] == '^') ev.prompt_tokens = 12;
      b.items.push_back(std::move(ev));
    }
    caf::anon_send(hub, std::move(b));
    sched.run();
  }
  /// Runs what was posted, and what that posts, until nothing is left; returns how many ran.
  int run_io() {
    int ran = 0;
    while (!io_queue.empty()) {
      auto jobs = std::move(io_queue);
      io_queue.clear();
      for (auto& j : jobs) {  // as an io_context does: a handler is destroyed once it has run
        j();
        j = nullptr;
        ++ran;
      }
    }
    return ran;
  }
  /// Runs only what is posted now (one slice of the lane), not what that posts.
  void run_io_once() {
    auto jobs = std::move(io_queue);
    io_queue.clear();
    for (auto& j : jobs) {
      j();
      j = nullptr;
    }
  }
};

TEST_CASE_FIXTURE(hub_fixture, "a detached stream outlives the batch posted before its detach, and gets nothing after") {
  const request_id a{1, 1}, b{1, 2};
  auto wa = attach(a, "a");
  auto wb = attach(b, "b");
  batch({{a, "x"}, {b, "y"}});
  CHECK(io_queue.size() == 1);  // one post for the whole batch
  hub_detach(hub, a);
  sched.run();
  batch({{a, "late"}, {b, "z"}});
  CHECK_FALSE(wa.expired());  // the hub let go, but a queued batch still names it
  run_io();
  CHECK(wa.expired());
  CHECK_FALSE(wb.expired());
  CHECK(*log == journal{"a x", "b y", "a gone", "b z"});
}

TEST_CASE_FIXTURE(hub_fixture, "an ended stream gets its batch, then its end, then is let go; an unknown id is dropped") {
  const request_id a{2, 1};
  auto wa = attach(a, "a");
  batch({{a, "x"}, {request_id{9, 9}, "nobody"}});
  actors::stream_end end;
  end.id = a;
  caf::anon_send(hub, end);
  sched.run();
  batch({{a, "after"}});
  CHECK_FALSE(wa.expired());
  run_io();
  CHECK(wa.expired());
  CHECK(*log == journal{"a x", "a end", "a gone"});
}

TEST_CASE_FIXTURE(hub_fixture, "a hub that stops lets its streams go only after the batches it posted") {
  const request_id a{3, 1}, b{3, 2};
  auto wa = attach(a, "a");
  auto wb = attach(b, "b");
  batch({{b, "y"}, {a, "x"}});
  caf::anon_send_exit(hub, caf::exit_reason::user_shutdown);
  sched.run();
  CHECK_FALSE(wa.expired());
  CHECK_FALSE(wb.expired());
  run_io();
  CHECK(wa.expired());
  CHECK(wb.expired());
  REQUIRE(log->size() == 4);
  CHECK((*log)[0] == "b y");
  CHECK((*log)[1] == "a x");
}

// With the actors on the I/O thread the hub writes itself what waits behind nothing of its
// stream; a stream with something still in the lane keeps its order behind it.
TEST_CASE_FIXTURE(hub_fixture, "on the I/O thread the hub writes at once, except behind what its stream has in the lane") {
  const request_id a{5, 1}, b{5, 2}, c{5, 3};
  auto wa = attach(a, "a");
  auto wb = attach(b, "b");
  auto wc = attach(c, "c");
  batch({{a, "x"}});  // from another thread: into the lane
  CHECK(log->empty());
  on_io_thread = true;
  batch({{a, "x2"}, {b, "y"}});
  CHECK(*log == journal{"b y"});  // written at once; a's waits behind its first
  CHECK(io_queue.size() == 1);
  hub_detach(hub, a);  // a has tokens in the lane: let go only after them
  sched.run();
  CHECK_FALSE(wa.expired());
  run_io();
  CHECK(wa.expired());
  CHECK(*log == journal{"b y", "a x", "a x2", "a gone"});
  log->clear();
  batch({{b, "y2"}, {c, "^c1"}});  // the lane is empty: all at once, first tokens first
  actors::stream_end end;
  end.id = b;
  caf::anon_send(hub, end);
  sched.run();
  CHECK(io_queue.empty());
  CHECK(*log == journal{"c ^c1", "b y2", "b end", "b gone"});
  CHECK(wb.expired());
  hub_detach(hub, c);  // nothing of c waits: let go at once
  sched.run();
  CHECK(wc.expired());
  CHECK(io_queue.empty());
}

TEST_CASE_FIXTURE(hub_fixture, "a step's first tokens reach their streams before the others' next tokens") {
  const request_id a{4, 1}, b{4, 2}, c{4, 3}, d{4, 4};
  attach(a, "a");
  attach(b, "b");
  attach(c, "c");
  attach(d, "d");
  // As an engine's plan orders them: decodes, then the prompts it finished.
  batch({{a, "x"}, {b, "y"}, {c, "^c1"}, {d, "^d1"}});
  batch({{a, "x2"}, {c, "c2"}, {b, "y2"}, {d, "d2"}});
  run_io();
  CHECK(*log == journal{"c ^c1", "d ^d1", "a x", "b y", "a x2", "c c2", "b y2", "d d2"});
}

TEST_CASE_FIXTURE(test::actor_fixture, "with several I/O threads too, first tokens are handed on first") {
  auto log = std::make_shared<journal>();
  caf::actor hub = spawn_stream_hub(sys, nullptr, false);
  const request_id a{5, 1}, b{5, 2};
  hub_attach(hub, a, std::make_shared<logged_target>("a", log), [](std::function<void()> fn) { fn(); });
  hub_attach(hub, b, std::make_shared<logged_target>("b", log), [](std::function<void()> fn) { fn(); });
  actors::stream_batch batch;
  batch.items.resize(2);
  batch.items[0].id = a;
  batch.items[0].text = "x";
  batch.items[1].id = b;
  batch.items[1].text = "^b1";
  batch.items[1].prompt_tokens = 3;
  caf::anon_send(hub, std::move(batch));
  sched.run();
  caf::anon_send_exit(hub, caf::exit_reason::user_shutdown);
  sched.run();
  REQUIRE(log->size() >= 2);
  CHECK((*log)[0] == "b ^b1");
  CHECK((*log)[1] == "a x");
}

TEST_CASE_FIXTURE(hub_fixture, "the I/O thread gets a backlog a slice at a time; a first token passes it, in order per stream") {
  constexpr int kStreams = 100;
  std::vector<std::pair<request_id, std::string>> step1, step2;
  for (int i = 0; i < kStreams; ++i) {
    attach(request_id{6, static_cast<std::uint64_t>(i)}, "s" + std::to_string(i));
    step1.push_back({request_id{6, static_cast<std::uint64_t>(i)}, "1"});
    step2.push_back({request_id{6, static_cast<std::uint64_t>(i)}, "2"});
  }
  const request_id late{6, 1000};
  attach(late, "late");
  batch(step1);
  batch(step2);
  CHECK(io_queue.size() == 1);  // one runner for everything waiting
  run_io_once();
  CHECK(log->size() == io_lane::kSlice);  // the rest waits for the next slice
  CHECK(io_queue.size() == 1);            // which the runner posted behind whatever else came
  batch({{late, "^first"}});              // a new stream's first token, behind 168 waiting
  run_io_once();
  REQUIRE(log->size() == io_lane::kSlice + 1 + io_lane::kSlice);
  CHECK((*log)[io_lane::kSlice] == "late ^first");
  CHECK(run_io() == 6);  // a slice stays within one step's batch: 32 + 4, then 32 + 32 + 32 + 4
  REQUIRE(log->size() == 2 * kStreams + 1);
  // Every stream got its step-1 token before its step-2 token.
  std::map<std::string, std::string> seen;
  for (const auto& line : *log) {
    const auto sp = line.find(' ');
    seen[line.substr(0, sp)] += line.substr(sp + 1);
  }
  for (int i = 0; i < kStreams; ++i) CHECK(seen["s" + std::to_string(i)] == "12");
}

TEST_CASE_FIXTURE(hub_fixture, "a first token does not pass what still waits for its own stream") {
  const request_id a{7, 1}, b{7, 2}, c{7, 3};
  attach(a, "a");
  attach(b, "b");
  attach(c, "c");
  batch({{a, "x"}, {b, "y"}});  // waiting
  actors::rate_limit_info limit;
  limit.id = c;
  caf::anon_send(hub, limit);   // c's limit waits behind them
  sched.run();
  batch({{c, "^c1"}, {a, "^a-is-not-first"}});
  run_io();
  // c's first token stays behind its own limit; a's (said to be first) behind its earlier token.
  CHECK(*log == journal{"a x", "b y", "c limit", "c ^c1", "a ^a-is-not-first"});
  // Once nothing waits for it, a stream's first token goes ahead again.
  const request_id d{7, 4};
  attach(d, "d");
  batch({{a, "x2"}, {b, "y2"}});
  batch({{d, "^d1"}});
  run_io();
  CHECK(std::vector<std::string>(log->end() - 3, log->end()) == journal{"d ^d1", "a x2", "b y2"});
}

}  // namespace
}  // namespace kiln::net
