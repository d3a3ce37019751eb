#include <doctest/doctest.h>

#include <string>
#include <thread>

#include "config/config.hpp"

using namespace kiln::config;

namespace {

std::string error_of(const std::string& text) {
  auto r = parse_config(text, "test.toml");
  auto* e = std::get_if<config_error>(&r);
  return e ? e->message : std::string();
}

const std::string kMinimal = R"(
[[teams]]
name = "t"
api_key = "k"
[[pools]]
model = "m"
version = "v"
)";

}  // namespace

TEST_CASE("config: the embedded default describes region local, chat-7b@v1 and two teams") {
  auto r = parse_config(embedded_default_config(), "<embedded>");
  REQUIRE(std::holds_alternative<kiln_config>(r));
  const kiln_config& c = std::get<kiln_config>(r);
  CHECK(c.region == "local");
  REQUIRE(c.pools.size() == 2);
  CHECK(c.pools[0].model == "chat-7b");
  CHECK(c.pools[1].model == "tiny-chat");
  CHECK(c.pools[1].executor == executor_kind::cpu);
  CHECK(c.pools[1].make_if_absent == "tiny");
  CHECK(c.pools[1].resolved_model_dir().find("/.kiln/models/tiny-chat") != std::string::npos);
  CHECK(c.pools[0].version == "v1");
  CHECK(c.pools[0].replicas > 1);
  CHECK(c.pools[0].gpu.hbm_bytes_per_s == doctest::Approx(4.8e12));
  CHECK(c.teams.size() == 2);
  CHECK(c.team_by_key(c.teams[1].api_key) == &c.teams[1]);
  CHECK(c.team_by_key("nope") == nullptr);
  CHECK(c.source == embedded_default_config());
}

TEST_CASE("config: defaults fill what a file leaves out, overrides apply") {
  auto r = parse_config(kMinimal + "[pools.gpu]\nend_to_end_efficiency = 0.3\n", "t");
  REQUIRE(std::holds_alternative<kiln_config>(r));
  const auto& p = std::get<kiln_config>(r).pools[0];
  CHECK(p.gpu.end_to_end_efficiency == doctest::Approx(0.3));
  CHECK(p.gpu.bandwidth_efficiency == doctest::Approx(0.7));
  CHECK(p.replicas == 1);
}

TEST_CASE("config: bad input gives one clear line naming the place") {
  CHECK(error_of(kMinimal + "[server]\nprot = 1\n") == "test.toml: server.prot: unknown key");
  CHECK(error_of(kMinimal + "[server]\nport = \"x\"\n") == "test.toml: server.port must be a number");
  CHECK(error_of(kMinimal + "[server]\nport = 70000\n").find("server.port must be between 0 and 65535") != std::string::npos);
  CHECK(error_of(kMinimal + "[server]\nport = 1.5\n") == "test.toml: server.port must be an integer");
  CHECK(error_of("region = \n").rfind("test.toml:1:", 0) == 0);
  CHECK(error_of(kMinimal + "[[teams]]\nname = \"u\"\napi_key = \"k\"\n") == "test.toml: teams[1].api_key is used by another team");
  CHECK(error_of(kMinimal + "[[pools]]\nmodel = \"m\"\nversion = \"v\"\n") == "test.toml: pools[1]: m@v is defined twice");
  CHECK(error_of("[[teams]]\nname = \"t\"\napi_key = \"k\"\n") == "test.toml: pools: at least one [[pools]] entry is required");
  CHECK(error_of(kMinimal + "executor = \"gpu\"\n") ==
        "test.toml: pools[0].executor must be \"sim\", \"cpu\", \"cuda\" or \"remote\" (got \"gpu\")");
  CHECK(error_of(kMinimal + "executor = \"cpu\"\n") == "test.toml: pools[0].model_dir is required for the cpu executor");
  CHECK(error_of(kMinimal + "executor = \"cuda\"\nmodel_dir = \"/m\"\nweights_dtype = \"f8\"\n") ==
        "test.toml: pools[0].weights_dtype must be bf16, f32 or int8");
  CHECK(error_of(kMinimal + "executor = \"cpu\"\nmodel_dir = \"/m\"\nweights_dtype = \"int4\"\n") ==
        "test.toml: pools[0].weights_dtype must be bf16, f16, f32 or int8");
  CHECK(error_of(kMinimal + "executor = \"cuda\"\nmodel_dir = \"/m\"\nweights_dtype = \"f16\"\n") ==
        "test.toml: pools[0].weights_dtype must be bf16, f32 or int8");
  CHECK(error_of(kMinimal + "executor = \"cpu\"\nmodel_dir = \"/m\"\nweights_dtype = \"f16\"\n").empty());
  CHECK(error_of(kMinimal + "executor = \"cpu\"\nmodel_dir = \"/m\"\nkv_dtype = \"f16\"\n") ==
        "test.toml: pools[0].kv_dtype must be bf16 or f32");
  for (const char* ok : {"weights_dtype = \"int8\"\nkv_dtype = \"f32\"\n", "weights_dtype = \"f32\"\nkv_dtype = \"bf16\"\n", ""})
    CHECK(error_of(kMinimal + "executor = \"cpu\"\nmodel_dir = \"/m\"\n" + ok).empty());
  CHECK(error_of(kMinimal + "executor = \"cpu\"\nmodel_dir = \"/m\"\nmake_if_absent = \"huge\"\n") ==
        "test.toml: pools[0].make_if_absent must be tiny, small or 100m (got \"huge\")");
  CHECK(error_of(kMinimal + "replicas = 0\n").find("pools[0].replicas must be between 1") != std::string::npos);
  CHECK(error_of(kMinimal + "tool_call_format = \"xml\"\n") ==
        "test.toml: pools[0].tool_call_format must be none, hermes or llama3_json (got \"xml\")");
  CHECK(error_of(kMinimal + "tool_call_format = \"hermes\"\n").empty());
  CHECK(error_of(kMinimal + "routing = \"random\"\n") ==
        "test.toml: pools[0].routing must be prefix_affinity_bounded, round_robin or least_tokens (got \"random\")");
  CHECK(error_of(kMinimal + "[pools.sim_text]\nmin_output_tokens = 9\nmax_output_tokens = 3\n") ==
        "test.toml: pools[0].sim_text.max_output_tokens must be at least min_output_tokens");
  // The default shape has 32 attention and 8 KV heads: 1, 2, 8 and 32 GPUs split them (KV
  // heads copied past 8), 3 and 12 do not.
  for (const char* tp : {"1", "2", "8", "32"})
    CHECK(error_of(kMinimal + "[pools.gpu]\ntensor_parallel = " + tp + "\nhbm_capacity_bytes = 1e12\n").empty());
  CHECK(error_of(kMinimal + "[pools.gpu]\ntensor_parallel = 3\n") ==
        "test.toml: pools[0].gpu.tensor_parallel: 3 does not split 32 attention heads and 8 KV heads evenly over the GPUs");
  CHECK(error_of(kMinimal + "[pools.gpu]\ntensor_parallel = 12\n").find("does not split") != std::string::npos);
  auto missing = load_config_file("/nonexistent/kiln.toml");
  REQUIRE(std::holds_alternative<config_error>(missing));
  CHECK(std::get<config_error>(missing).message == "/nonexistent/kiln.toml: cannot open config file");
}

TEST_CASE("config: a remote pool names its upstreams, one replica each; the keys are refused elsewhere") {
  const std::string remote = kMinimal + "executor = \"remote\"\n";
  CHECK(error_of(remote) == "test.toml: pools[0].upstreams must name at least one upstream for the remote executor");
  CHECK(error_of(remote + "upstreams = []\n") ==
        "test.toml: pools[0].upstreams must name at least one upstream for the remote executor");
  CHECK(error_of(remote + "upstreams = [\"https://a:1/v1\"]\n") ==
        "test.toml: pools[0].upstreams must be http://host:port/base (got \"https://a:1/v1\")");
  CHECK(error_of(remote + "upstreams = [\"http://a:1/v1?x=1\"]\n") ==
        "test.toml: pools[0].upstreams must be a plain base URL without spaces, query or fragment (got \"http://a:1/v1?x=1\")");
  CHECK(error_of(remote + "upstreams = [\"http://a:99999/v1\"]\n").find("must be http://host:port/base") != std::string::npos);
  CHECK(error_of(remote + "upstreams = [\"http://a:1/v1\", \"http://a:1/v1\"]\n") ==
        "test.toml: pools[0].upstreams lists http://a:1/v1 twice");
  CHECK(error_of(remote + "upstreams = [1]\n") == "test.toml: pools[0].upstreams must be an array of strings");
  CHECK(error_of(kMinimal + "upstreams = [\"http://a:1/v1\"]\n") == "test.toml: pools[0].upstreams are for the remote executor only");
  CHECK(error_of(kMinimal + "upstream_model = \"x\"\n") == "test.toml: pools[0].upstreams are for the remote executor only");
  CHECK(error_of(remote + "upstreams = [\"http://a:1/v1\"]\nupstream_connections = 0\n").find("upstream_connections must be between 1") !=
        std::string::npos);
  CHECK(error_of(remote + "upstreams = [\"http://a:1/v1\"]\n[pools.autoscale]\nmax_replicas = 3\n").find("autoscale is not for the remote") !=
        std::string::npos);
  auto r = parse_config(remote + "replicas = 7\nupstreams = [\"http://a:1/v1\", \"http://b/v1/\"]\nupstream_model = \"llama\"\n"
                                 "upstream_api_key = \"sk\"\nupstream_connections = 4096\n",
                        "t");
  REQUIRE(std::holds_alternative<kiln_config>(r));
  const auto& p = std::get<kiln_config>(r).pools[0];
  CHECK(p.executor == executor_kind::remote);
  CHECK(p.replicas == 2);  // one per upstream, whatever replicas says
  CHECK(p.upstreams[1] == "http://b/v1/");
  CHECK(p.upstream_model == "llama");
  CHECK(p.upstream_api_key == "sk");
  CHECK(p.upstream_connections == 4096);
  CHECK(p.model_dir.empty());
  CHECK(p.pool_capacity_tokens() == 0);
}

TEST_CASE("config: several versions of a model need a live version; the alias resolves to it") {
  const std::string two = kMinimal + "[[pools]]\nmodel = \"m\"\nversion = \"w\"\n";
  CHECK(error_of(two) == "test.toml: models: \"m\" has several versions; add [[models]] name = \"m\" with its live_version");
  CHECK(error_of(two + "[[models]]\nname = \"m\"\nlive_version = \"x\"\n") ==
        "test.toml: models[0].live_version \"x\" of model \"m\" has no [[pools]] entry");
  CHECK(error_of(two + "[[models]]\nname = \"m\"\nlive_version = \"w\"\n[[models]]\nname = \"m\"\nlive_version = \"v\"\n") ==
        "test.toml: models[1].name \"m\" is listed twice");
  CHECK(error_of("[[teams]]\nname = \"t\"\napi_key = \"k\"\n[[pools]]\nmodel = \"a@b\"\nversion = \"v\"\n") ==
        "test.toml: pools[0]: model and version must not contain '@'");
  auto r = parse_config(two + "[[models]]\nname = \"m\"\nlive_version = \"w\"\n", "test.toml");
  REQUIRE(std::holds_alternative<kiln_config>(r));
  const auto& c = std::get<kiln_config>(r);
  CHECK(c.live_version("m") == "w");
  CHECK(c.live_version("nope").empty());
  CHECK(c.pool_for("m", "v") != nullptr);
  CHECK(c.pool_for("m", "x") == nullptr);
  // One version needs no entry: it is the live one.
  auto one = parse_config(kMinimal, "test.toml");
  REQUIRE(std::holds_alternative<kiln_config>(one));
  CHECK(std::get<kiln_config>(one).live_version("m") == "v");
}

TEST_CASE("config: NaN and infinities fail the range checks; limits at and past their edges") {
  CHECK(error_of(kMinimal + "gpu_memory_fraction = nan\n").find("pools[0].gpu_memory_fraction must be between") != std::string::npos);
  CHECK(error_of(kMinimal + "gpu_memory_fraction = inf\n").find("must be between") != std::string::npos);
  CHECK(error_of(kMinimal + "[pools.gpu]\nhbm_bytes_per_s = -inf\n").find("hbm_bytes_per_s must be between") != std::string::npos);
  CHECK(error_of(kMinimal + "heartbeat_ms = 9\n").find("heartbeat_ms must be between 10 and 60000") != std::string::npos);
  CHECK(error_of(kMinimal + "heartbeat_ms = 10\n").empty());
  CHECK(error_of(kMinimal + "restart_intensity = -1\n").find("restart_intensity must be between") != std::string::npos);
  CHECK(error_of(kMinimal + "restart_intensity = 0\n").empty());
  CHECK(error_of(kMinimal + "first_token_timeout_ms = 0\n").find("first_token_timeout_ms must be between") != std::string::npos);
  CHECK(error_of("[server]\nwrite_timeout_ms = 0\n" + kMinimal).find("server.write_timeout_ms must be between") != std::string::npos);
  CHECK(error_of("[server]\nmax_buffered_bytes = 4095\n" + kMinimal).find("max_buffered_bytes must be between") != std::string::npos);
  CHECK(error_of("[server]\nmax_buffered_bytes = 4096\n" + kMinimal).empty());
}

TEST_CASE("config: batch_step_tokens: the GPU's knee by default on sim and cuda, no bound on the CPU, or as set") {
  const auto pool_of = [](const std::string& text) {
    auto r = parse_config(text, "t");
    REQUIRE(std::holds_alternative<kiln_config>(r));
    return std::get<kiln_config>(r).pools[0];
  };
  CHECK(pool_of(kMinimal).limits.batch_step_tokens == 117);
  CHECK(pool_of(kMinimal + "[pools.gpu]\nflops_efficiency = 0.2\n").limits.batch_step_tokens == 58);
  CHECK(pool_of(kMinimal + "batch_step_tokens = 0\n").limits.batch_step_tokens == 0);
  CHECK(pool_of(kMinimal + "batch_step_tokens = -1\n").limits.batch_step_tokens == 117);
  CHECK(pool_of(kMinimal + "batch_step_tokens = 300\n").limits.batch_step_tokens == 300);
  CHECK(pool_of(kMinimal + "executor = \"cpu\"\nmodel_dir = \"/nonexistent\"\n").limits.batch_step_tokens == 0);
  CHECK(error_of(kMinimal + "batch_step_tokens = -2\n").find("pools[0].batch_step_tokens must be between -1") != std::string::npos);
}

TEST_CASE("config: the admin key may not be a team's key") {
  CHECK(error_of("admin_key = \"k\"\n" + kMinimal) == "test.toml: admin_key is also a team's api_key");
  auto r = parse_config("admin_key = \"a\"\n" + kMinimal, "test.toml");
  REQUIRE(std::holds_alternative<kiln_config>(r));
  CHECK(std::get<kiln_config>(r).admin_key == "a");
}

TEST_CASE("config: team limits and priorities; shares may not promise more than a whole pool") {
  const std::string pools = "[[pools]]\nmodel = \"m\"\nversion = \"v\"\n";
  auto team = [](const std::string& name, const std::string& key, const std::string& extra) {
    return "[[teams]]\nname = \"" + name + "\"\napi_key = \"" + key + "\"\n" + extra;
  };
  auto r = parse_config(team("a", "ka", "max_priority = \"standard\"\n[[teams.limits]]\nmodel = \"m\"\ntokens_per_minute = 600\nburst = 100\nmax_concurrency = 3\nguaranteed_share = 0.6\n") +
                            team("b", "kb", "[[teams.limits]]\nmodel = \"m\"\nguaranteed_share = 0.4\n") + pools,
                        "t.toml");
  REQUIRE(std::holds_alternative<kiln_config>(r));
  const auto& c = std::get<kiln_config>(r);
  CHECK(c.teams[0].max_priority == kiln::engine::priority::standard);
  CHECK(c.teams[1].max_priority == kiln::engine::priority::interactive);
  REQUIRE(c.teams[0].limit_for("m"));
  CHECK(c.teams[0].limit_for("m")->burst == 100);
  CHECK(c.teams[0].limit_for("x") == nullptr);
  CHECK(c.resolved_store_path().find("/.kiln/kiln.db") != std::string::npos);
  // Exactly 1 in all is fine (above); one past it is not.
  CHECK(error_of(team("a", "ka", "[[teams.limits]]\nmodel = \"m\"\nguaranteed_share = 0.6\n") +
                 team("b", "kb", "[[teams.limits]]\nmodel = \"m\"\nguaranteed_share = 0.41\n") + pools) ==
        "test.toml: teams: the guaranteed shares of model \"m\" add up to more than 1");
  CHECK(error_of(team("a", "ka", "max_priority = \"urgent\"\n") + pools) ==
        "test.toml: teams[0].max_priority must be interactive, standard or batch (got \"urgent\")");
  CHECK(error_of(team("a", "ka", "[[teams.limits]]\nmodel = \"m\"\n[[teams.limits]]\nmodel = \"m\"\n") + pools) ==
        "test.toml: teams[0].limits[1].model \"m\" has two limits");
  CHECK(error_of(team("a", "ka", "[[teams.limits]]\nmodel = \"m\"\nguaranteed_share = 1.5\n") + pools)
            .find("guaranteed_share must be between 0 and 1") != std::string::npos);
  CHECK(error_of("store_path = \"\"\n" + team("a", "ka", "") + pools) == "test.toml: store_path must not be empty");
}

TEST_CASE("config: autoscale schedules and warm replicas; a bad entry names its place") {
  const std::string scaled = kMinimal + "replicas = 2\n[pools.cold_start]\nload_s = 40\n[pools.autoscale]\nmax_replicas = 6\n"
                                        "interval_s = 5\nwarm_replicas = 1\n";
  auto r = parse_config(scaled + "[[pools.autoscale.schedule]]\ncron = \"0 9 * * 1-5\"\nmin_replicas = 6\n"
                                 "[[pools.autoscale.schedule]]\ncron = \"*/30 * * * *\"\nmin_replicas = 3\nlead_s = 0\nhold_s = 60\n",
                        "t");
  REQUIRE(std::holds_alternative<kiln_config>(r));
  const auto& a = std::get<kiln_config>(r).pools[0].autoscale;
  CHECK(a.warm_replicas == 1);
  REQUIRE(a.schedule.size() == 2);
  CHECK(a.schedule[0].min_replicas == 6);  // exactly max_replicas
  CHECK(a.schedule[0].lead_s == 50);       // the cold start and two looks
  CHECK(a.schedule[0].hold_s == 3600);
  CHECK(a.schedule[1].lead_s == 0);
  CHECK(a.schedule[1].hold_s == 60);
  CHECK(error_of(scaled + "[[pools.autoscale.schedule]]\ncron = \"0 25 * * *\"\nmin_replicas = 2\n") ==
        "test.toml: pools[0].autoscale.schedule[0].cron cron '0 25 * * *': hour: '25' is outside 0-23");
  CHECK(error_of(scaled + "[[pools.autoscale.schedule]]\nmin_replicas = 2\n") ==
        "test.toml: pools[0].autoscale.schedule[0].cron is required");
  CHECK(error_of(scaled + "[[pools.autoscale.schedule]]\ncron = \"0 9 * * *\"\nmin_replicas = 7\n")
            .find("asks for 7 replicas at '0 9 * * *', more than max_replicas 6") != std::string::npos);
  CHECK(error_of(scaled + "[[pools.autoscale.schedule]]\ncron = \"0 9 * * *\"\nhold_s = 59\n")
            .find("schedule[0].hold_s must be between 60") != std::string::npos);
  CHECK(error_of(scaled + "[[pools.autoscale.schedule]]\ncron = \"0 9 * * *\"\nwhen = 1\n") ==
        "test.toml: pools[0].autoscale.schedule[0].when: unknown key");
}

TEST_CASE("config: actors on the I/O thread need the one I/O thread and one actor thread, and run one") {
  const auto ok = kiln::config::parse_config(kMinimal + "[server]\nactors_on_io_thread = true\nactor_threads = 1\n", "test.toml");
  REQUIRE(std::holds_alternative<kiln_config>(ok));
  CHECK(std::get<kiln_config>(ok).server.runs_actors_on_io_thread());
  CHECK(std::get<kiln_config>(ok).server.scheduler_threads() == 1);
  const auto automatic = kiln::config::parse_config(kMinimal + "[server]\nactors_on_io_thread = true\n", "test.toml");
  REQUIRE(std::holds_alternative<kiln_config>(automatic));
  CHECK(std::get<kiln_config>(automatic).server.scheduler_threads() == 1);  // not half the cores
  CHECK(error_of(kMinimal + "[server]\nactors_on_io_thread = true\nio_threads = 2\n") ==
        "test.toml: server.actors_on_io_thread needs io_threads = 1 and actor_threads 0 or 1 (the one thread runs both)");
  CHECK(error_of(kMinimal + "[server]\nactors_on_io_thread = true\nactor_threads = 2\n").find("needs io_threads = 1") !=
        std::string::npos);
  CHECK(error_of(kMinimal + "[server]\nactors_on_io_thread = 1\n") == "test.toml: server.actors_on_io_thread must be true or false");
  // Unset: on exactly where one I/O thread and one actor thread would run anyway.
  auto runs = [](const std::string& server) {
    const auto parsed = kiln::config::parse_config(kMinimal + "[server]\n" + server, "test.toml");
    REQUIRE(std::holds_alternative<kiln_config>(parsed));
    const auto& s = std::get<kiln_config>(parsed).server;
    CHECK_FALSE(s.actors_on_io_thread.has_value());
    return std::make_pair(s.runs_actors_on_io_thread(), s.scheduler_threads());
  };
  CHECK(runs("actor_threads = 1\n") == std::make_pair(true, 1));
  CHECK(runs("actor_threads = 2\n") == std::make_pair(false, 2));
  CHECK(runs("actor_threads = 1\nio_threads = 2\n") == std::make_pair(false, 1));
  const bool two_cores_or_fewer = std::thread::hardware_concurrency() / 2 <= 1;
  CHECK(runs("").first == two_cores_or_fewer);
  const auto off = kiln::config::parse_config(kMinimal + "[server]\nactors_on_io_thread = false\nactor_threads = 1\n", "test.toml");
  REQUIRE(std::holds_alternative<kiln_config>(off));
  CHECK_FALSE(std::get<kiln_config>(off).server.runs_actors_on_io_thread());
  CHECK(std::get<kiln_config>(off).server.scheduler_threads() == 1);
}
