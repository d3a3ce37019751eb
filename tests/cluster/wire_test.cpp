// Every message type that crosses nodes, through a second process over CAF's middleman and
// back: each field arrives as sent (actor handles come back as the same local actors).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <limits>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/batch_calls.hpp"
#include "actors/messages.hpp"
#include "actors/replica.hpp"
#include "actors/region_limits.hpp"
#include "actors/registry_calls.hpp"
#include "actors/store_writer.hpp"
#include "actors/worker_host.hpp"
#include "cluster/wire.hpp"
#include "tests/cluster/echo_process.hpp"

using namespace kiln;

namespace {

struct wire_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<test::echo_process> peer;
  caf::actor echo;
  wire_fixture() {
    cluster::set_heartbeats(cfg, 500, 1500);
    cluster::add_wire_types(cfg);
    cfg.set("logger.console", caf::atom("none"));
    sys = std::make_unique<caf::actor_system>(cfg);
    peer = std::make_unique<test::echo_process>(KILN_WIRE_ECHO);
    REQUIRE(peer->port() > 0);
    auto remote = sys->middleman().remote_actor("127.0.0.1", static_cast<std::uint16_t>(peer->port()));
    REQUIRE(remote);
    echo = *remote;
  }
  std::vector<caf::actor> spawned;
  ~wire_fixture() {
    for (auto& a : spawned) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    echo = nullptr;
    peer.reset();
  }
  template <class T>
  T round_trip(const T& sent) {
    caf::scoped_actor self{*sys};
    T back;
    bool got = false;
    self->request(echo, std::chrono::seconds(5), sent)
        .receive([&](T& x) { back = std::move(x), got = true; },
                 [&](caf::error& e) { FAIL("round trip of " << std::string(typeid(T).name()) << " failed: " << sys->render(e)); });
    REQUIRE(got);
    return back;
  }
  caf::actor local_actor() {
    spawned.push_back(sys->spawn([](caf::event_based_actor*) -> caf::behavior { return {[](int) {}}; }));
    return spawned.back();
  }
};

engine::token_logprob lp(const std::string& t, float v, std::vector<engine::token_alt> top = {}) {
  return {t, v, std::move(top)};
}

void check_same(const std::vector<engine::token_logprob>& a, const std::vector<engine::token_logprob>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].token == b[i].token);
    if (std::isnan(a[i].logprob)) CHECK(std::isnan(b[i].logprob));
    else CHECK(a[i].logprob == b[i].logprob);
    REQUIRE(a[i].top.size() == b[i].top.size());
    for (std::size_t j = 0; j < a[i].top.size(); ++j) {
      CHECK(a[i].top[j].token == b[i].top[j].token);
      CHECK(a[i].top[j].logprob == b[i].top[j].logprob);
    }
  }
}

}  // namespace

TEST_CASE_FIXTURE(wire_fixture, "wire: a request crosses nodes whole, its handles included") {
  actors::request r;
  r.id = {0xDEADBEEFCAFEF00Dull, 42};
  r.team = "search";
  r.model = "chat-7b@v2";
  r.version = "v2";
  r.priority = engine::priority::batch;
  r.sampling.max_tokens = 77;
  r.sampling.temperature = 0.25;
  r.sampling.top_k = 5;
  r.sampling.top_p = 0.9;
  r.sampling.seed = 0;  // a seed of 0 is a seed, not none
  r.sampling.stop = {"\n\n", "</s>", ""};
  r.sampling.logprobs = 20;
  r.sampling.prompt_logprobs = true;
  r.sampling.presence_penalty = -1.5;
  r.sampling.frequency_penalty = 0.25;
  r.sampling.repetition_penalty = 1.3;
  r.sampling.logit_bias = {{0, -100.f}, {7, 0.5f}, {16777215, 100.f}};
  r.sampling.min_tokens = 9;
  r.sampling.stop_token_ids = {2, 128009};
  r.sampling.ignore_eos = true;
  r.conversation_id = "conv-1";
  r.messages = {{"system", "be brief"}, {"user", "h\xC3\xA9llo \"quoted\"\n"}};
  r.chat_json = R"({"messages":[],"tools":[]})";
  r.created_unix = 1796168926;
  r.prompt_text = std::string("a\0b", 3);
  r.prompt = {1, 0, -1, std::numeric_limits<std::int32_t>::max()};
  r.sink = local_actor();
  r.client = local_actor();
  r.owner = local_actor();
  r.attempt = 2;
  auto b = round_trip(r);
  CHECK(b.id == r.id);
  CHECK(b.team == r.team);
  CHECK(b.model == r.model);
  CHECK(b.version == r.version);
  CHECK(b.priority == r.priority);
  CHECK(b.sampling.max_tokens == 77);
  CHECK(b.sampling.temperature == 0.25);
  CHECK(b.sampling.top_k == 5);
  CHECK(b.sampling.top_p == 0.9);
  REQUIRE(b.sampling.seed.has_value());
  CHECK(*b.sampling.seed == 0);
  CHECK(b.sampling.stop == r.sampling.stop);
  CHECK(b.sampling.logprobs == 20);
  CHECK(b.sampling.prompt_logprobs);
  CHECK(b.sampling.presence_penalty == -1.5);
  CHECK(b.sampling.frequency_penalty == 0.25);
  CHECK(b.sampling.repetition_penalty == 1.3);
  CHECK(b.sampling.logit_bias == r.sampling.logit_bias);
  CHECK(b.sampling.min_tokens == 9);
  CHECK(b.sampling.stop_token_ids == r.sampling.stop_token_ids);
  CHECK(b.sampling.ignore_eos);
  CHECK(b.conversation_id == r.conversation_id);
  REQUIRE(b.messages.size() == 2);
  CHECK(b.messages[1].role == "user");
  CHECK(b.messages[1].content == r.messages[1].content);
  CHECK(b.chat_json == r.chat_json);
  CHECK(b.created_unix == r.created_unix);
  CHECK(b.prompt_text == r.prompt_text);
  CHECK(b.prompt == r.prompt);
  CHECK(b.sink == r.sink);
  CHECK(b.client == r.client);  // remote engines watch it: the client going away cancels there
  CHECK(b.owner == r.owner);
  CHECK(b.attempt == 2);

  // No seed stays no seed; null handles stay null.
  actors::request bare;
  bare.id = {1, 2};
  auto nb = round_trip(bare);
  CHECK_FALSE(nb.sampling.seed.has_value());
  CHECK_FALSE(nb.sink);
  CHECK_FALSE(nb.client);
  CHECK(nb.sampling.logprobs == -1);
  CHECK(nb.priority == engine::priority::standard);
  for (auto p : {engine::priority::interactive, engine::priority::standard, engine::priority::batch}) {
    bare.priority = p;
    CHECK(round_trip(bare).priority == p);
  }
}

TEST_CASE_FIXTURE(wire_fixture, "wire: what a sink receives crosses nodes whole") {
  actors::stream_tokens t;
  t.id = {7, 8};
  t.text = " hello\xE2\x80\x94";
  t.tokens = 3;
  t.prompt_tokens = 11;
  t.cached_tokens = 0;
  t.logprobs = {lp(" hello", -0.5f, {{" hello", -0.5f}, {" hi", -1.25f}}), lp("x", -std::numeric_limits<float>::infinity())};
  t.prompt_logprobs = {lp("<s>", std::nanf("")), lp("a", -3.0f)};
  auto bt = round_trip(t);
  CHECK(bt.id == t.id);
  CHECK(bt.text == t.text);
  CHECK(bt.tokens == 3);
  CHECK(bt.prompt_tokens == 11);
  CHECK(bt.cached_tokens == 0);
  check_same(bt.logprobs, t.logprobs);
  check_same(bt.prompt_logprobs, t.prompt_logprobs);

  actors::stream_batch batch;
  for (int i = 0; i < 3; ++i) {
    auto x = t;
    x.id.seq = static_cast<std::uint64_t>(i);
    x.prompt_tokens = -1;
    batch.items.push_back(x);
  }
  auto bb = round_trip(batch);
  REQUIRE(bb.items.size() == 3);
  CHECK(bb.items[2].id.seq == 2);
  CHECK(bb.items[1].prompt_tokens == -1);
  CHECK(round_trip(actors::stream_batch{}).items.empty());

  actors::stream_end e{{9, 10}, "stop", 11, 22, 4, "v2", "b", "chat-7b-v2-r3", 12.5, 3};
  auto be = round_trip(e);
  CHECK(be.id == e.id);
  CHECK(be.finish_reason == "stop");
  CHECK(be.prompt_tokens == 11);
  CHECK(be.completion_tokens == 22);
  CHECK(be.cached_tokens == 4);
  CHECK(be.model_version == "v2");
  CHECK(be.region == "b");
  CHECK(be.replica_id == "chat-7b-v2-r3");
  CHECK(be.engine_ttft_ms == 12.5);
  CHECK(be.attempts == 3);

  for (auto code : {actors::errc::over_limit, actors::errc::replica_lost, actors::errc::internal}) {
    actors::stream_error x{{1, 1}, code, "why", "messages", 7};
    auto bx = round_trip(x);
    CHECK(bx.code == code);
    CHECK(bx.message == "why");
    CHECK(bx.param == "messages");
    CHECK(bx.retry_after_s == 7);
  }

  actors::rate_limit_info rl{{3, 4}, 1000, 0, 59.5};
  auto brl = round_trip(rl);
  CHECK(brl.id == rl.id);
  CHECK(brl.limit_tokens == 1000);
  CHECK(brl.remaining_tokens == 0);
  CHECK(brl.reset_s == 59.5);
}

TEST_CASE_FIXTURE(wire_fixture, "wire: membership crosses nodes whole, alone and as a list") {
  cluster::member_info m{"a-router", "a", 0xE, "127.0.0.1:7401", "127.0.0.1:8181", local_actor()};
  auto bm = round_trip(m);
  CHECK(bm == m);
  std::vector<cluster::member_info> all{m, {"front", "a", 1, "h:1", "", nullptr}};
  auto ball = round_trip(all);
  CHECK(ball == all);
  cluster::node_health h{{"chat-7b", "reason-70b"}, {"code-13b"}, "control", "00ff00ff00ff00ff"};
  auto bh = round_trip(h);
  CHECK(bh == h);
  CHECK(round_trip(cluster::node_health{}) == cluster::node_health{});
}

TEST_CASE_FIXTURE(wire_fixture, "wire: what passes between a router node and its worker nodes crosses whole") {
  const caf::actor router = local_actor(), engine = local_actor();
  actors::host_replica h{"chat-7b-v1-r2", "chat-7b", "v1", "a", router, 360000, {}};
  auto bh = round_trip(h);
  CHECK(bh.replica_id == "chat-7b-v1-r2");
  CHECK(bh.model == "chat-7b");
  CHECK(bh.version == "v1");
  CHECK(bh.region == "a");
  CHECK(bh.router == router);  // back home as the same local actor
  CHECK(bh.cold_start_ms == 360000);
  CHECK(round_trip(actors::unhost_replica{"chat-7b-v1-r2"}).replica_id == "chat-7b-v1-r2");

  actors::replica_status s;
  s.replica_id = "chat-7b-v1-r0";
  s.phase = actors::replica_phase::draining;
  s.engine = engine;
  s.load = {3, 5, 123456789012LL, 7, 8, 9};
  s.restarts = 2;
  auto bs = round_trip(s);
  CHECK(bs.replica_id == s.replica_id);
  CHECK(bs.phase == actors::replica_phase::draining);
  CHECK(bs.engine == engine);
  CHECK(bs.load.waiting == 3);
  CHECK(bs.load.running == 5);
  CHECK(bs.load.tokens_in_flight == 123456789012LL);
  CHECK(bs.load.received_tokens == 7);
  CHECK(bs.load.prompt_tokens_total == 8);
  CHECK(bs.load.cached_tokens_total == 9);
  CHECK(bs.restarts == 2);
  CHECK_FALSE(round_trip(actors::replica_status{}).engine);  // none yet: stays none

  CHECK(round_trip(actors::router_is{router}).router == router);
  auto bf = round_trip(actors::first_token{{5, 6}, 2});
  CHECK(bf.id == actors::request_id{5, 6});
  CHECK(bf.attempt == 2);
  actors::job_done d{{5, 6}, 1, engine::finish_reason::length, {100, 20, 64}, "chat-7b-v1-r0", 41.5};
  auto bd = round_trip(d);
  CHECK(bd.id == d.id);
  CHECK(bd.attempt == 1);
  CHECK(bd.finish == engine::finish_reason::length);
  CHECK(bd.usage.prompt_tokens == 100);
  CHECK(bd.usage.completion_tokens == 20);
  CHECK(bd.usage.cached_tokens == 64);
  CHECK(bd.replica_id == "chat-7b-v1-r0");
  CHECK(bd.engine_ttft_ms == 41.5);
  actors::job_failed jf{{5, 7}, 0, actors::errc::engine_failed, "device lost", {10, 3, 0}};
  auto bjf = round_trip(jf);
  CHECK(bjf.code == actors::errc::engine_failed);
  CHECK(bjf.message == "device lost");
  CHECK(bjf.usage.completion_tokens == 3);
  CHECK(round_trip(actors::cancel_job{{8, 9}}).id == actors::request_id{8, 9});
  actors::chaos_order o{actors::chaos_action::slow, 2.5, 40};
  auto bo = round_trip(o);
  CHECK(bo.action == actors::chaos_action::slow);
  CHECK(bo.seconds == 2.5);
  CHECK(bo.factor == 40);
  auto bc = round_trip(actors::engine_chaos{o, true});
  CHECK(bc.kill);
  CHECK(bc.order.factor == 40);
}

TEST_CASE_FIXTURE(wire_fixture, "wire: a router node's store calls on its control node and their answers cross whole") {
  auto fold = round_trip(actors::usage_fold{{{3, 0xFFFFFFFFFFFFFFF0ull, 9, "search", "chat-7b", "v1", 29000000, 120, 64, 30, 2, 1}},
                                            41, 17, "b-router"});
  REQUIRE(fold.records.size() == 1);
  const auto& rec = fold.records[0];
  CHECK(rec.seq == 3);
  CHECK(rec.id_origin == 0xFFFFFFFFFFFFFFF0ull);
  CHECK(rec.id_seq == 9);
  CHECK(rec.team == "search");
  CHECK(rec.version == "v1");
  CHECK(rec.minute == 29000000);
  CHECK(rec.prompt_tokens == 120);
  CHECK(rec.cached_tokens == 64);
  CHECK(rec.output_tokens == 30);
  CHECK(rec.requests == 2);
  CHECK(rec.shed == 1);
  CHECK(fold.through_seq == 41);
  CHECK(fold.from_seq == 17);
  CHECK(fold.ledger == "b-router");
  CHECK(round_trip(std::uint64_t{18446744073709551615ull}) == 18446744073709551615ull);
  auto q = round_trip(actors::usage_query{"search", "chat-7b", 10, 20});
  CHECK(q.team == "search");
  CHECK(q.to_minute == 20);
  CHECK(round_trip(std::vector<config::usage_row>{{"a", "m", "v", 1, 2, 3, 4, 5, 6}, {}}).size() == 2);

  auto pl = round_trip(actors::put_limit{"search", {"chat-7b", 6000.5, 600, 8, 0.25}});
  CHECK(pl.team == "search");
  CHECK(pl.limit.model == "chat-7b");
  CHECK(pl.limit.tokens_per_minute == 6000.5);
  CHECK(pl.limit.burst == 600);
  CHECK(pl.limit.max_concurrency == 8);
  CHECK(pl.limit.guaranteed_share == 0.25);
  CHECK(round_trip(actors::get_limits{"search"}).team == "search");
  CHECK(round_trip(std::vector<config::team_limit>{{"m", 1, 2, 3, 0.5}})[0].guaranteed_share == 0.5);
  auto ct = round_trip(actors::create_team{"ads", "Ads", engine::priority::batch});
  CHECK(ct.name == "Ads");
  CHECK(ct.max_priority == engine::priority::batch);
  auto tc = round_trip(actors::team_created{"ads", "kiln-key", "k1"});
  CHECK(tc.key == "kiln-key");
  CHECK(tc.key_id == "k1");
  CHECK(round_trip(actors::revoke_key{"ads", "k1"}).key_id == "k1");

  auto use = round_trip(actors::region_use_report{"b", {{"b", "search", "chat-7b", 1500.5, 1700000000}}});
  CHECK(use.region == "b");
  REQUIRE(use.rows.size() == 1);
  CHECK(use.rows[0].tokens_per_minute == 1500.5);
  CHECK(use.rows[0].at == 1700000000);
  actors::region_shares_update sh;
  sh.shares[{"search", "chat-7b"}] = 0.375;
  sh.shares[{"ads", "chat-7b"}] = 1;
  auto bsh = round_trip(sh);
  REQUIRE(bsh.shares.size() == 2);
  CHECK(bsh.shares.at({"search", "chat-7b"}) == 0.375);

  config::model_version v;
  v.model = "chat-7b";
  v.version = "v2";
  v.weights_uri = "http://control:8180/artifacts/chat-7b/v2";
  v.files = {{"model.safetensors", std::string(64, 'a')}};
  v.load_test_tokens_per_s = 950.5;
  auto reg = round_trip(actors::register_version_call{v, {v.files, std::string(64, 'e'), std::string(64, 'f')}, "/tmp/v2"});
  CHECK(reg.version.weights_uri == v.weights_uri);
  REQUIRE(reg.version.files.size() == 1);
  CHECK(reg.version.files[0].sha256 == std::string(64, 'a'));
  REQUIRE(reg.hashed.files.size() == 1);
  CHECK(reg.hashed.files[0].file == "model.safetensors");
  CHECK(reg.hashed.weights_hash == std::string(64, 'e'));
  CHECK(reg.hashed.tokenizer_hash == std::string(64, 'f'));
  CHECK(reg.where == "/tmp/v2");
  auto vr = round_trip(actors::version_registered{v, true});
  CHECK(vr.created);
  CHECK(vr.version.load_test_tokens_per_s == 950.5);
  CHECK(round_trip(actors::versions_call{"chat-7b"}).model == "chat-7b");
  CHECK(round_trip(actors::version_call{"chat-7b", "v2"}).version == "v2");
  CHECK(round_trip(std::vector<config::model_version>{v, v}).size() == 2);
  config::model_route route{"chat-7b", "v1", "v2", 5, "v3", 1, "v0", 1700000300};
  auto rw = round_trip(actors::route_write{route, 3600});
  CHECK(rw.route.canary == "v2");
  CHECK(rw.route.canary_percent == 5);
  CHECK(rw.route.shadow == "v3");
  CHECK(rw.route.previous_until == 1700000300);
  CHECK(rw.keep_previous_s == 3600);
  config::rollout_row row{7, "chat-7b", "v2", "canary", 5, 1700000000, "advance", "guards pass", R"({"p95":1})"};
  auto rr = round_trip(actors::rollout_write{row});
  CHECK(rr.row.seq == 7);
  CHECK(rr.row.decision == "advance");
  CHECK(rr.row.guard_metrics == R"({"p95":1})");
  CHECK(round_trip(actors::rollouts_call{"chat-7b"}).model == "chat-7b");
  CHECK(round_trip(std::vector<config::rollout_row>{row})[0].reason == "guards pass");
  CHECK(round_trip(actors::status_write{"chat-7b", "v2", "retired"}).status == "retired");
  CHECK(round_trip(actors::load_test_write{"chat-7b", "v2", 900, 3000}).tokens_in_flight == 3000);
  config::pool_limits lim{"chat-7b", "v2", "b", 2, 9, 1};
  auto lw = round_trip(actors::pool_limits_write{lim});
  CHECK(lw.limits.region == "b");
  CHECK(lw.limits.max_replicas == 9);
  CHECK(lw.limits.warm_replicas == 1);
  round_trip(actors::pool_limits_call{});
  CHECK(round_trip(std::vector<config::pool_limits>{lim, lim}).size() == 2);
  CHECK(round_trip(actors::scale_settings_call{"chat-7b", "v2", "b"}).region == "b");
  auto ss = round_trip(actors::scale_settings{true, lim, 2500.5});
  CHECK(ss.has_limits);
  CHECK(ss.limits.min_replicas == 2);
  CHECK(ss.gated_tokens_in_flight == 2500.5);
  // Files and batches: the front's calls and the batch runners' writes.
  config::file_row file{"file-1", "search", "batch", "in.jsonl", 4096, 1700000000, "/f/file-1.jsonl"};
  CHECK(round_trip(actors::file_write{file}).row.path == "/f/file-1.jsonl");
  CHECK(round_trip(actors::file_call{"file-1", "search"}).team == "search");
  CHECK(round_trip(actors::files_call{"search"}).team == "search");
  CHECK(round_trip(actors::file_delete{"file-1", "search"}).id == "file-1");
  CHECK(round_trip(std::vector<config::file_row>{file})[0].bytes == 4096);
  config::batch_row b;
  b.id = "batch_1";
  b.team = "search";
  b.metadata = R"({"k":"v"})";
  b.status = "in_progress";
  b.node = "n1";
  b.expires_at = 1700086400;
  b.total = 2000;
  b.completed = 1999;
  b.failed = 1;
  auto bw = round_trip(actors::batch_write{b});
  CHECK(bw.row.metadata == R"({"k":"v"})");
  CHECK(bw.row.node == "n1");
  CHECK(bw.row.expires_at == 1700086400);
  CHECK(bw.row.failed == 1);
  CHECK(round_trip(actors::batch_call{"batch_1", ""}).id == "batch_1");
  auto bc = round_trip(actors::batches_call{"search", "batch_0", 21, true});
  CHECK(bc.after == "batch_0");
  CHECK(bc.limit == 21);
  CHECK(bc.open_only);
  CHECK(round_trip(std::vector<config::batch_row>{b, b})[1].completed == 1999);
}
