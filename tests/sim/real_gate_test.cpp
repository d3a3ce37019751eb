// The gate on a real executor: a short load test on one cpu engine of the tiny model gives
// positive figures; targets it cannot meet, a model that cannot load and a sim pool are
// each a clear refusal.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "cluster/load_test.hpp"

using namespace kiln;

namespace {

config::pool_config tiny_pool(const std::string& dir) {
  config::pool_config p;
  p.model = "tiny-chat";
  p.version = "v2";
  p.executor = config::executor_kind::cpu;
  p.model_dir = dir;
  p.make_if_absent = "tiny";
  p.threads = 2;
  p.kv_blocks = 256;
  p.limits.max_running = 8;
  p.limits.max_tokens_per_step = 128;
  return p;
}

}  // namespace

TEST_CASE("real gate: a cpu engine's load test, and its refusals") {
  char tmpl[] = "/tmp/kiln-gate-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  config::pool_config p = tiny_pool(root + "/tiny");
  cluster::load_test_plan plan;
  plan.prompt_tokens = 64;
  plan.output_tokens = 16;
  auto r = cluster::real_load_test(p, plan);
  if (auto* e = std::get_if<std::string>(&r)) FAIL(*e);
  const auto lt = std::get<config::load_test>(r);
  CHECK(lt.tokens_per_s > 0);
  CHECK(lt.tokens_in_flight > 0);
  CHECK(lt.detail.find("load test on one cpu engine") != std::string::npos);
  CHECK(lt.detail.find("8 stream(s)") != std::string::npos);  // the tiny model meets the targets at max_running

  // Streams no engine could keep up with: no level passes, and the answer says what it saw.
  plan.min_stream_tokens_per_s = 1e12;
  r = cluster::real_load_test(p, plan);
  REQUIRE(std::holds_alternative<std::string>(r));
  CHECK(std::get<std::string>(r).find("no level met the targets") != std::string::npos);
  CHECK(std::get<std::string>(r).find("at 1 stream(s)") != std::string::npos);

  config::pool_config missing = p;
  missing.model_dir = root + "/absent";
  missing.make_if_absent.clear();
  r = cluster::real_load_test(missing, {});
  REQUIRE(std::holds_alternative<std::string>(r));
  CHECK(std::get<std::string>(r).find("cannot load") != std::string::npos);

  config::pool_config sim = p;
  sim.executor = config::executor_kind::sim;
  r = cluster::real_load_test(sim, {});
  REQUIRE(std::holds_alternative<std::string>(r));
  CHECK(std::get<std::string>(r).find("simulator") != std::string::npos);
  std::filesystem::remove_all(root);
}
