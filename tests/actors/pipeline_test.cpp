// A request through admission -> router (its owner) -> engine -> sink on virtual time, with
// the whole supervision tree of a node.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <caf/all.hpp>

#include "actors/router_shard.hpp"
#include "engine/cost_model.hpp"
#include "engine/tokenizer.hpp"
#include "tests/support/node_fixture.hpp"

using namespace kiln;
using namespace std::chrono_literals;

namespace {

struct region_fixture : test::node_fixture {
  engine::word_tokenizer tok;
  using node_fixture::submit;
  open_request submit(int max_tokens, const std::string& team, const std::string& model, const std::string& prompt) {
    return node_fixture::submit(max_tokens, prompt, 1, model, team);
  }
  int running() const { return in_engines(); }
};

}  // namespace

TEST_CASE_FIXTURE(region_fixture, "pipeline: tokens arrive in order, then exactly one end with usage") {
  auto req = submit(12);
  const auto t0 = vt.now();
  REQUIRE(vt.run_until([&] { return req.rec->terminal(); }, 10s));
  const auto elapsed = vt.now() - t0;
  CHECK(req.rec->errors.empty());
  REQUIRE(req.rec->ends.size() == 1);
  CHECK(req.rec->order.back() == "end");
  const auto& end = req.rec->ends[0];
  CHECK(end.finish_reason == "length");
  CHECK(end.completion_tokens == 12);
  const int n = static_cast<int>(tok.encode(engine::render_chat_prompt({{"user", "hello kiln"}})).size());
  CHECK(end.prompt_tokens == n);
  CHECK(end.model_version == "v1");
  CHECK(end.region == "local");
  CHECK(end.replica_id.rfind("chat-7b-v1-r", 0) == 0);
  int streamed = 0;
  for (const auto& t : req.rec->tokens) streamed += t.tokens;
  CHECK(req.rec->tokens.front().prompt_tokens == end.prompt_tokens);
  CHECK(end.attempts == 1);
  CHECK(streamed == 12);
  // Virtual time advanced by the cost model's twelve steps: one prefill, eleven decodes.
  const engine::cost_model model(cfg->pools[0].shape, cfg->pools[0].gpu);
  double expected = 0;
  for (int k = 0; k < 12; ++k) {
    engine::step_shape s;
    s.new_tokens = k == 0 ? n : 1;
    s.kv_tokens_read = k == 0 ? n : n + k;
    if (k == 0) s.attention_flops = model.attention_flops(n, 0);
    expected += model.time(s).total;
  }
  CHECK(std::chrono::duration<double>(elapsed).count() == doctest::Approx(expected).epsilon(1e-6));
  CHECK(end.engine_ttft_ms > 0);
  // Nothing more arrives later.
  vt.run_for(2s);
  CHECK(req.rec->ends.size() == 1);
  CHECK(running() == 0);
}

TEST_CASE_FIXTURE(region_fixture, "pipeline: an unknown model or version ends in one error naming it; a pinned version serves") {
  auto bad_model = submit(5, "search", "gpt-9", "hi");
  auto bad_version = submit(5, "search", "chat-7b@v9", "hi");
  auto pinned = submit(5, "search", "chat-7b@v1", "hi");
  vt.run_for(1s);
  for (auto* r : {&bad_model, &bad_version}) {
    REQUIRE(r->rec->errors.size() == 1);
    CHECK(r->rec->ends.empty());
    CHECK(r->rec->tokens.empty());
    CHECK(r->rec->errors[0].code == actors::errc::unknown_model);
    CHECK(r->rec->errors[0].param == "model");
  }
  CHECK(bad_version.rec->errors[0].message.find("chat-7b@v9") != std::string::npos);
  REQUIRE(pinned.rec->ends.size() == 1);
  CHECK(pinned.rec->ends[0].model_version == "v1");
}

TEST_CASE_FIXTURE(region_fixture, "pipeline: a request over the context limit is refused by admission") {
  std::string prompt;
  for (int i = 0; i < 100; ++i) prompt += "kiln ";
  auto r = submit(cfg->pools[0].max_context, "search", "chat-7b", prompt);
  vt.run_for(1s);
  REQUIRE(r.rec->errors.size() == 1);
  CHECK(r.rec->errors[0].code == actors::errc::context_too_long);
  CHECK(r.rec->errors[0].param == "messages");
}

TEST_CASE_FIXTURE(region_fixture, "pipeline: 50 concurrent requests each end exactly once") {
  std::vector<open_request> reqs;
  for (int i = 0; i < 50; ++i) reqs.push_back(submit(20 + i));
  REQUIRE(vt.run_until([&] {
    return std::all_of(reqs.begin(), reqs.end(), [](const open_request& r) { return r.rec->terminal(); });
  }, 60s));
  vt.run_for(1s);
  for (int i = 0; i < 50; ++i) {
    CAPTURE(i);
    REQUIRE(reqs[i].rec->ends.size() == 1);
    CHECK(reqs[i].rec->errors.empty());
    CHECK(reqs[i].rec->ends[0].completion_tokens == 20 + i);
  }
  // Both replicas took work.
  std::set<std::string> used;
  for (const auto& r : reqs) used.insert(r.rec->ends[0].replica_id);
  CHECK(used.size() == 2);
}

TEST_CASE_FIXTURE(region_fixture, "pipeline: a sink that goes away cancels its sequence and frees the slot") {
  auto r = submit(5000);
  vt.run_for(200ms);
  CHECK(running() == 1);
  CHECK_FALSE(r.rec->tokens.empty());
  actors::stop_sink(r.sink);
  vt.run_for(100ms);
  CHECK(running() == 0);
  std::int64_t in_flight = 0;
  for (const auto& g : gauges->engines()) in_flight += g.tokens_in_flight;
  CHECK(in_flight == 0);
  CHECK(r.rec->ends.empty());
}

TEST_CASE_FIXTURE(region_fixture, "pipeline: replicas report load to the router every second") {
  // A big request is cancelled at once. Until its replica reports, the router still counts
  // its tokens and sends the same key elsewhere; after a report the key goes home again.
  auto a = submit(3000, "search", "chat-7b", "same opening");
  vt.run_for(20ms);
  actors::stop_sink(a.sink);
  auto early = submit(5, "search", "chat-7b", "same opening");
  REQUIRE(vt.run_until([&] { return early.rec->terminal(); }, 10s));
  vt.run_for(1500ms);
  auto late = submit(5, "search", "chat-7b", "same opening");
  REQUIRE(vt.run_until([&] { return late.rec->terminal(); }, 10s));
  REQUIRE(early.rec->ends.size() == 1);
  REQUIRE(late.rec->ends.size() == 1);
  CHECK(early.rec->ends[0].replica_id != late.rec->ends[0].replica_id);
}

TEST_CASE_FIXTURE(region_fixture, "pipeline: a repeated conversation reports its cached prefix; another team's does not") {
  std::string prompt;
  for (int i = 0; i < 50; ++i) prompt += "kiln clay ";  // 100 tokens: 6 full blocks of 16
  std::vector<open_request> reqs;
  for (const char* key : {"search", "search", "assistant"}) {
    reqs.push_back(submit(4, key, "chat-7b", prompt));
    REQUIRE(vt.run_until([&] { return reqs.back().rec->terminal(); }, 10s));
    REQUIRE(reqs.back().rec->ends.size() == 1);
  }
  CHECK(reqs[0].rec->ends[0].cached_tokens == 0);
  CHECK(reqs[1].rec->ends[0].cached_tokens == 96);
  CHECK(reqs[1].rec->ends[0].replica_id == reqs[0].rec->ends[0].replica_id);
  CHECK(reqs[2].rec->ends[0].cached_tokens == 0);
}

namespace {

// A front's sink: one actor for many requests, recording each message as it comes.
struct shared_sink_log {
  std::map<std::string, int> tokens;  ///< by request id
  std::map<std::string, int> ends;
  std::map<std::string, int> completion;  ///< completion tokens its end reports
  std::vector<std::size_t> batch_sizes;
};

caf::behavior shared_sink(caf::event_based_actor*, std::shared_ptr<shared_sink_log> log) {
  return {
      [log](actors::stream_tokens& ev) {
        log->batch_sizes.push_back(1);
        log->tokens[ev.id.str()] += ev.tokens;
      },
      [log](actors::stream_batch& b) {
        log->batch_sizes.push_back(b.items.size());
        for (const auto& ev : b.items) log->tokens[ev.id.str()] += ev.tokens;
      },
      [log](actors::stream_end& ev) {
        ++log->ends[ev.id.str()];
        log->completion[ev.id.str()] = ev.completion_tokens;
      },
      [log](actors::stream_error& ev) { ++log->ends[ev.id.str()]; },
      [](actors::rate_limit_info&) {},
  };
}

}  // namespace

TEST_CASE_FIXTURE(region_fixture, "pipeline: one sink for many requests gets a batch per step; a client gone cancels its request only") {
  auto log = std::make_shared<shared_sink_log>();
  const caf::actor sink = sys.spawn(shared_sink, log);
  std::vector<caf::actor> clients;
  std::vector<actors::request_id> req_ids;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(sys.spawn([](caf::event_based_actor*) -> caf::behavior { return {[](caf::unit_t) {}}; }));
    actors::request r;
    r.id = ids.next();
    req_ids.push_back(r.id);
    r.team = "search";
    r.model = "chat-7b";
    r.messages = {{"user", "the same prompt for both, so one replica serves them"}};
    r.sampling.max_tokens = 400;
    r.sampling.seed = 1;
    r.sink = sink;
    r.client = clients.back();
    actors::submit(sys, std::move(r));
  }
  vt.run_for(300ms);
  CHECK(running() == 2);
  CHECK(std::count(log->batch_sizes.begin(), log->batch_sizes.end(), std::size_t{2}) > 0);  // both in one message
  // The first request's client goes (its connection closed): that request ends, the other runs on.
  caf::anon_send_exit(clients[0], caf::exit_reason::user_shutdown);
  vt.run_for(100ms);
  CHECK(running() == 1);
  const int cut_at = log->tokens[req_ids[0].str()];
  REQUIRE(vt.run_until([&] { return log->ends.count(req_ids[1].str()) > 0; }, 60s));
  vt.run_for(1s);
  CHECK(log->tokens[req_ids[1].str()] == log->completion[req_ids[1].str()]);  // every token, then its end
  CHECK(log->tokens[req_ids[1].str()] > cut_at);
  CHECK(log->ends[req_ids[1].str()] == 1);
  CHECK(log->tokens[req_ids[0].str()] == cut_at);  // nothing more for the gone one
  CHECK(cut_at > 0);
  CHECK(log->ends.count(req_ids[0].str()) == 0);  // its client is gone: no end is owed to anyone
  caf::anon_send_exit(clients[1], caf::exit_reason::user_shutdown);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}
