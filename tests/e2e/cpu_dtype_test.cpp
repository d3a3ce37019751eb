// CPU pools in the weights' own precision through `kiln serve`: one tiny F32 model served as
// F32 (its files' dtype, the default), BF16 and INT8 at once; each answers, and /metrics
// names each pool's weights, kernels and KV cache dtype.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "kernels/cpu/qmatrix.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"

using namespace kiln::test;
using json = nlohmann::json;
namespace kc = kiln::kernels::cpu;

TEST_CASE("e2e cpu dtypes: one model served as F32, BF16 and INT8 side by side") {
  char tmpl[] = "/tmp/kiln-e2e-dtypes-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  const std::string dir = root + "/tiny";
  REQUIRE(std::system((std::string(kiln_binary()) + " make-tiny-model " + dir + " >/dev/null").c_str()) == 0);
  kiln_process p(test_config(1) + cpu_pool("tiny-f32", dir, false) + cpu_pool("tiny-bf16", dir, false) +
                 "weights_dtype = \"bf16\"\n" + cpu_pool("tiny-int8", dir, false) + "weights_dtype = \"int8\"\nkv_dtype = \"f32\"\n");
  const std::vector<std::string> auth = {"Authorization: Bearer key-search"};
  std::map<std::string, std::string> answers;
  for (const char* model : {"tiny-f32", "tiny-bf16", "tiny-int8"}) {
    const http_response r = request(p.port(), "POST", "/v1/completions",
                                    json{{"model", model}, {"prompt", "The kiln fires clay"}, {"max_tokens", 8}, {"temperature", 0}}.dump(),
                                    auth);
    CAPTURE(r.body);
    REQUIRE(r.status == 200);
    const json j = json::parse(r.body);
    CHECK(j["usage"]["completion_tokens"] == 8);
    answers[model] = j["choices"][0]["text"];
  }
  // Greedy F32 is deterministic: the same pool answers the same again.
  const json again = json::parse(request(p.port(), "POST", "/v1/completions",
                                         json{{"model", "tiny-f32"}, {"prompt", "The kiln fires clay"}, {"max_tokens", 8}, {"temperature", 0}}.dump(),
                                         auth).body);
  CHECK(again["choices"][0]["text"] == answers["tiny-f32"]);
  const std::string metrics = request(p.port(), "GET", "/metrics").body;
  auto info = [&](const char* model, kc::wtype t, const char* kv) {
    return "kiln_cpu_kernels_info{model=\"" + std::string(model) + "\",version=\"v1\",weights=\"" + std::string(kc::to_string(t)) +
           "\",kernels=\"" + std::string(kc::to_string(kc::paths_for(t).front())) + "\",kv=\"" + kv + "\"} 1";
  };
  CHECK(metrics.find(info("tiny-f32", kc::wtype::f32, "f32")) != std::string::npos);  // the files' dtype, F32 KV
  CHECK(metrics.find(info("tiny-bf16", kc::wtype::bf16, "bf16")) != std::string::npos);
  CHECK(metrics.find(info("tiny-int8", kc::wtype::int8, "f32")) != std::string::npos);
  std::filesystem::remove_all(root);
}
