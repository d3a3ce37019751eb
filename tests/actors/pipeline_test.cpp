// A request through admission -> router -> replica -> engine -> sink on virtual time.
#include <doctest/doctest.h>

#include <chrono>
#include <algorithm>
#include <set>

#include <caf/all.hpp>

#include "actors/region.hpp"
#include "actors/router_shard.hpp"
#include "engine/cost_model.hpp"
#include "engine/tokenizer.hpp"
#include "tests/support/actor_fixture.hpp"

using namespace kiln;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<const config::kiln_config> region_config(int replicas) {
  auto r = config::parse_config(config::embedded_default_config(), "<embedded>");
  auto cfg = std::get<config::kiln_config>(r);
  cfg.pools[0].replicas = replicas;
  cfg.pools[0].text = {300, 400};
  return std::make_shared<const config::kiln_config>(cfg);
}

struct region_fixture : test::actor_fixture {
  std::shared_ptr<const config::kiln_config> cfg = region_config(2);
  std::shared_ptr<actors::engine_gauges> gauges = std::make_shared<actors::engine_gauges>();
  actors::region_handles region = actors::spawn_region(sys, cfg, gauges);
  engine::word_tokenizer tok;
  std::uint64_t next_id = 1;

  std::vector<caf::actor> sinks;

  ~region_fixture() {
    actors::stop_region(region);
    for (const auto& s : sinks) actors::stop_sink(s);
    vt.run_ready();
  }

  struct open_request {
    std::shared_ptr<test::recorded_stream> rec = std::make_shared<test::recorded_stream>();
    caf::actor sink;
  };

  open_request submit(int max_tokens, const std::string& key = "kiln-search-local",
                      const std::string& model = "chat-7b", const std::string& prompt = "hello kiln") {
    open_request o;
    o.sink = actors::spawn_stream_sink(sys, o.rec);
    sinks.push_back(o.sink);
    actors::chat_job job;
    job.id = next_id++;
    job.api_key = key;
    job.model = model;
    const auto ids = tok.encode(prompt);
    job.prompt.assign(ids.begin(), ids.end());
    job.max_tokens = max_tokens;
    job.temperature = 0;
    job.sink = o.sink;
    actors::submit(region.admission, std::move(job));
    return o;
  }

  int running() const {
    int n = 0;
    for (const auto& g : gauges->snapshot()) n += g.running + g.waiting;
    return n;
  }
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
  CHECK(end.prompt_tokens == 2);
  CHECK(end.team == "search");
  CHECK(end.model_version == "v1");
  CHECK(end.region == "local");
  CHECK(end.replica_id.rfind("chat-7b-v1-r", 0) == 0);
  int streamed = end.tokens;
  for (const auto& t : req.rec->tokens) streamed += t.tokens;
  CHECK(streamed == 12);
  // Virtual time advanced by the cost model's twelve steps: one prefill, eleven decodes.
  const engine::cost_model model(cfg->pools[0].shape, cfg->pools[0].gpu);
  double expected = 0;
  for (int k = 0; k < 12; ++k) {
    engine::step_shape s;
    s.new_tokens = k == 0 ? 2 : 1;
    s.kv_tokens_read = k == 0 ? 2 : 2 + k;
    if (k == 0) s.attention_flops = model.attention_flops(2, 0);
    expected += model.time(s).total;
  }
  CHECK(std::chrono::duration<double>(elapsed).count() == doctest::Approx(expected).epsilon(1e-6));
  CHECK(end.engine_ttft_ms > 0);
  // Nothing more arrives later.
  vt.run_for(2s);
  CHECK(req.rec->ends.size() == 1);
  CHECK(running() == 0);
}

TEST_CASE_FIXTURE(region_fixture, "pipeline: unknown key and unknown model end in one error") {
  auto no_key = submit(5, "");
  auto bad_key = submit(5, "wrong");
  auto bad_model = submit(5, "kiln-search-local", "gpt-9");
  vt.run_for(1s);
  for (auto* r : {&no_key, &bad_key, &bad_model}) {
    REQUIRE(r->rec->errors.size() == 1);
    CHECK(r->rec->ends.empty());
    CHECK(r->rec->tokens.empty());
  }
  CHECK(no_key.rec->errors[0].status == 401);
  CHECK(bad_key.rec->errors[0].status == 401);
  CHECK(bad_model.rec->errors[0].status == 404);
  CHECK(bad_model.rec->errors[0].param == "model");
}

TEST_CASE_FIXTURE(region_fixture, "pipeline: a request over the context limit is refused by admission") {
  std::string prompt;
  for (int i = 0; i < 100; ++i) prompt += "kiln ";
  auto r = submit(cfg->pools[0].max_context, "kiln-search-local", "chat-7b", prompt);
  vt.run_for(1s);
  REQUIRE(r.rec->errors.size() == 1);
  CHECK(r.rec->errors[0].status == 400);
  CHECK(r.rec->errors[0].code == "context_length_exceeded");
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
  for (const auto& g : gauges->snapshot()) in_flight += g.tokens_in_flight;
  CHECK(in_flight == 0);
  CHECK(r.rec->ends.empty());
}

TEST_CASE("router shard state: fewest tokens in flight, counting what was sent since the report") {
  actors::router_shard_state st;
  st.replicas = {{caf::actor{}, "r0", 100, 0, 0}, {caf::actor{}, "r1", 40, 0, 0}, {caf::actor{}, "r2", 60, 0, 0}};
  CHECK(st.pick() == 1);
  st.replicas[1].sent_since = 50;  // r1 now holds 90
  CHECK(st.pick() == 2);
  st.on_report({"r1", 0, 0, 10});  // the report replaces the estimate
  CHECK(st.replicas[1].sent_since == 0);
  CHECK(st.pick() == 1);
  actors::router_shard_state empty;
  CHECK(empty.pick() == -1);
}

TEST_CASE_FIXTURE(region_fixture, "pipeline: replicas report load to the router every second") {
  // A big request goes to r0 and is cancelled at once. Until r0 reports, the router still
  // counts its tokens and would send the next request to r1; after a report it picks r0 again.
  auto a = submit(3000);
  vt.run_for(20ms);
  actors::stop_sink(a.sink);
  vt.run_for(1500ms);
  auto b = submit(5);
  REQUIRE(vt.run_until([&] { return b.rec->terminal(); }, 10s));
  REQUIRE(b.rec->ends.size() == 1);
  CHECK(b.rec->ends[0].replica_id == "chat-7b-v1-r0");
}
