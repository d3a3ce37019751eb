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
  cfg.pools.resize(1);  // the sim pool only
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
    job.messages = {{"user", prompt}};
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
  const int n = static_cast<int>(tok.encode(engine::render_chat_prompt({{"user", "hello kiln"}})).size());
  CHECK(end.prompt_tokens == n);
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

TEST_CASE("router shard state: a key keeps its replica until that replica is 1.25x over average") {
  actors::router_shard_state st;
  for (int i = 0; i < 4; ++i) st.replicas.push_back({caf::actor{}, "r" + std::to_string(i), 0, 0, 0, 0});
  // Keys spread over the replicas, and each key always ranks the same replica first.
  std::set<int> used;
  for (std::uint64_t key = 1; key <= 64; ++key) {
    const int r = st.pick(key, 10);
    CHECK(r == st.pick(key, 10));
    used.insert(r);
  }
  CHECK(used.size() == 4);
  const std::uint64_t key = 42;
  const int home = st.pick(key, 10);
  // Loaded up to the bound it stays home; above it the key moves to another replica.
  auto& h = st.replicas[static_cast<std::size_t>(home)];
  h.sent = 120;  // sent, not yet reported: average with the job 32.5, bound 40.6
  const int moved = st.pick(key, 10);
  CHECK(moved != home);
  // A report taken before those jobs arrived does not hide them; one taken after does.
  st.on_report({h.replica_id, 0, 0, 0, /*forwarded_tokens=*/0});
  CHECK(st.pick(key, 10) == moved);
  st.on_report({h.replica_id, 0, 0, 0, /*forwarded_tokens=*/120});
  CHECK(h.load() == 0);
  CHECK(st.pick(key, 10) == home);
  // Everyone over the bound: the least loaded.
  actors::router_shard_state two;
  two.replicas = {{caf::actor{}, "a", 100, 0, 0, 0}, {caf::actor{}, "b", 50, 0, 0, 0}};
  CHECK(two.pick(7, 1000) >= 0);
  actors::router_shard_state empty;
  CHECK(empty.pick(1, 1) == -1);
}

TEST_CASE("router: the affinity key is the conversation id, else team and prompt opening") {
  actors::chat_job a;
  a.team = "search";
  a.prompt = {1, 2, 3};
  actors::chat_job b = a;
  CHECK(actors::affinity_key(a) == actors::affinity_key(b));
  b.team = "assistant";
  CHECK(actors::affinity_key(a) != actors::affinity_key(b));
  actors::chat_job c = a;
  c.conversation_id = "conv-1";
  actors::chat_job d = c;
  d.prompt = {9, 9, 9};  // a later turn of the same conversation
  CHECK(actors::affinity_key(c) == actors::affinity_key(d));
  CHECK(actors::affinity_key(c) != actors::affinity_key(a));
}

TEST_CASE_FIXTURE(region_fixture, "pipeline: replicas report load to the router every second") {
  // A big request is cancelled at once. Until its replica reports, the router still counts
  // its tokens and sends the same key elsewhere; after a report the key goes home again.
  auto a = submit(3000, "kiln-search-local", "chat-7b", "same opening");
  vt.run_for(20ms);
  actors::stop_sink(a.sink);
  auto early = submit(5, "kiln-search-local", "chat-7b", "same opening");
  REQUIRE(vt.run_until([&] { return early.rec->terminal(); }, 10s));
  vt.run_for(1500ms);
  auto late = submit(5, "kiln-search-local", "chat-7b", "same opening");
  REQUIRE(vt.run_until([&] { return late.rec->terminal(); }, 10s));
  REQUIRE(early.rec->ends.size() == 1);
  REQUIRE(late.rec->ends.size() == 1);
  CHECK(early.rec->ends[0].replica_id != late.rec->ends[0].replica_id);
}

TEST_CASE_FIXTURE(region_fixture, "pipeline: a repeated conversation reports its cached prefix; another team's does not") {
  std::string prompt;
  for (int i = 0; i < 50; ++i) prompt += "kiln clay ";  // 100 tokens: 6 full blocks of 16
  std::vector<open_request> reqs;
  for (const char* key : {"kiln-search-local", "kiln-search-local", "kiln-assistant-local"}) {
    reqs.push_back(submit(4, key, "chat-7b", prompt));
    REQUIRE(vt.run_until([&] { return reqs.back().rec->terminal(); }, 10s));
    REQUIRE(reqs.back().rec->ends.size() == 1);
  }
  CHECK(reqs[0].rec->ends[0].cached_tokens == 0);
  CHECK(reqs[1].rec->ends[0].cached_tokens == 96);
  CHECK(reqs[1].rec->ends[0].replica_id == reqs[0].rec->ends[0].replica_id);
  CHECK(reqs[2].rec->ends[0].cached_tokens == 0);
}
