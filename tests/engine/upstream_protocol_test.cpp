// What a remote replica reads from an upstream: SSE split however the bytes arrive, each
// chunk's content, finish reason, usage and errors, and vLLM's, SGLang's and kiln's metrics.
#include <doctest/doctest.h>

#include "engine/upstream_protocol.hpp"

using namespace kiln::engine::upstream;

TEST_CASE("upstream sse: events whole, however the bytes are cut; comments and other fields skipped") {
  const std::string stream =
      ": keep-alive\n\ndata: {\"a\":1}\n\nevent: x\r\ndata: {\"b\":\r\ndata: 2}\r\n\r\ndata: [DONE]\n\n";
  for (std::size_t cut = 1; cut <= stream.size(); ++cut) {
    CAPTURE(cut);
    sse_reader r;
    std::vector<std::string> got;
    for (std::size_t i = 0; i < stream.size(); i += cut) r.feed(std::string_view(stream).substr(i, cut), got);
    REQUIRE(got.size() == 3);
    CHECK(got[0] == "{\"a\":1}");
    CHECK(got[1] == "{\"b\":\n2}");
    CHECK(got[2] == "[DONE]");
    CHECK(r.pending() == 0);
  }
  sse_reader r;
  std::vector<std::string> got;
  r.feed("data: {\"half\":", got);
  CHECK(got.empty());
  CHECK(r.pending() > 0);
}

TEST_CASE("upstream chunks: content, finish reason, usage with cached tokens, errors, [DONE]") {
  auto c = parse_chunk(R"({"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]})");
  REQUIRE(c);
  CHECK(c->content == "Hel");
  CHECK(c->finish_reason.empty());
  CHECK_FALSE(c->has_usage);
  c = parse_chunk(R"({"choices":[{"delta":{},"finish_reason":"length"}]})");
  CHECK(c->finish_reason == "length");
  c = parse_chunk(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":8}}})");
  REQUIRE(c->has_usage);
  CHECK(c->prompt_tokens == 12);
  CHECK(c->completion_tokens == 5);
  CHECK(c->cached_tokens == 8);
  c = parse_chunk(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":null}})");
  CHECK(c->cached_tokens == 0);
  c = parse_chunk(R"({"choices":[{"text":" world","finish_reason":null}]})");  // /v1/completions
  CHECK(c->content == " world");
  c = parse_chunk(R"({"error":{"message":"replica lost","type":"server_error","code":"replica_lost"}})");
  REQUIRE(c->is_error);
  CHECK(c->error_code == "replica_lost");
  CHECK(c->error_message == "replica lost");
  c = parse_chunk(R"({"error":{"message":"bad","type":"BadRequestError"}})");  // vLLM's shape
  CHECK(c->error_code == "BadRequestError");
  CHECK(parse_chunk("[DONE]")->done);
  CHECK_FALSE(parse_chunk("not json"));
  CHECK_FALSE(parse_chunk("[1,2]"));
  CHECK_FALSE(parse_chunk(R"({"object":"something else"})"));
}

TEST_CASE("upstream load: vLLM's, SGLang's and kiln's metric names, summed over label sets") {
  const auto v = parse_load(
      "# HELP vllm:num_requests_running Number of requests running.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{model_name=\"m\"} 7.0\n"
      "vllm:num_requests_waiting{model_name=\"m\"} 2.0 1700000000000\n"
      "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n"
      "vllm:num_preemptions_total{model_name=\"m\"} 3.0\n");
  CHECK(v.running == 7);
  CHECK(v.waiting == 2);
  CHECK(v.kv_usage == doctest::Approx(0.25));
  const auto s = parse_load("sglang:num_running_reqs{tp_rank=\"0\"} 4\nsglang:num_queue_reqs{tp_rank=\"0\"} 0\nsglang:token_usage{tp_rank=\"0\"} 0.5\n");
  CHECK(s.running == 4);
  CHECK(s.waiting == 0);
  CHECK(s.kv_usage == doctest::Approx(0.5));
  const auto k = parse_load(
      "kiln_engine_running_sequences{replica=\"a\"} 3\nkiln_engine_running_sequences{replica=\"b\"} 5\n"
      "kiln_engine_waiting_sequences{replica=\"a\"} 1\n");
  CHECK(k.running == 8);
  CHECK(k.waiting == 1);
  CHECK(k.kv_usage == -1);
  const auto none = parse_load("other_metric 1\nvllm:num_requests_running{broken 3\n");
  CHECK_FALSE(none.any());
  CHECK(parse_load("").running == -1);
}
