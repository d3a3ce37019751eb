// Log-probabilities: the softmax arithmetic, the CPU executor's against the naive reference
// (generated and prompt tokens, chunked prefill, a cached prefix), and the sim's modelled ones.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <set>

#include "engine/cpu_executor.hpp"
#include "engine/engine_core.hpp"
#include "engine/sampler.hpp"
#include "engine/sim_executor.hpp"
#include "engine/tiny_model.hpp"
#include "tests/support/naive_llama.hpp"
#include "tests/support/tiny_llama.hpp"

using namespace kiln::engine;
using kiln::test::id_tokenizer;
using kiln::test::tiny_config;

namespace {

std::vector<double> log_softmax(const std::vector<float>& logits) {
  double max = -1e300, sum = 0;
  for (float l : logits) max = std::max(max, static_cast<double>(l));
  for (float l : logits) sum += std::exp(l - max);
  std::vector<double> out;
  for (float l : logits) out.push_back(l - max - std::log(sum));
  return out;
}

struct cpu_engine {
  std::shared_ptr<const llama_weights> w;
  engine_core core;
  cpu_engine(std::shared_ptr<const llama_weights> weights, int step_tokens)
      : w(weights),
        core({step_tokens, 8, 0}, {128, 4}, std::make_unique<cpu_executor>(weights, kv_geometry{128, 4}, 2),
             std::make_shared<id_tokenizer>(), 3) {}

  // Runs one request to its end; every output's logprobs and prompt logprobs, in order.
  struct answer {
    std::vector<token_id> tokens;
    std::vector<token_logprob> logprobs, prompt_logprobs;
    usage u;
  };
  answer run(seq_id id, std::vector<token_id> prompt, sampling_params sp) {
    REQUIRE(core.add({id, std::move(prompt), sp, priority::standard, 0}));
    answer a;
    while (!core.idle()) {
      for (auto& out : core.step().outputs) {
        a.logprobs.insert(a.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
        CHECK((a.prompt_logprobs.empty() || out.prompt_logprobs.empty()));  // once
        a.prompt_logprobs.insert(a.prompt_logprobs.end(), out.prompt_logprobs.begin(), out.prompt_logprobs.end());
        if (out.finish != finish_reason::none) a.u = out.usage;
      }
    }
    const seq_status* none = core.sched().find(id);
    CHECK(none == nullptr);
    return a;
  }
};

token_id id_of(const tokenizer&, const std::string& text, int) { return std::stoi(text.substr(1)); }

}  // namespace

TEST_CASE("logprobs_of: log-softmax of the raw logits, top alternatives likeliest first, ties by id") {
  const std::vector<float> logits{std::log(1.f), std::log(2.f), std::log(3.f), std::log(4.f), std::log(3.f)};
  const logprob_row row = logprobs_of(logits, 2, 3);
  CHECK(row.token == 2);
  CHECK(row.logprob == doctest::Approx(std::log(3.0 / 13)).epsilon(1e-6));
  REQUIRE(row.top.size() == 3);
  CHECK(row.top[0].first == 3);
  CHECK(row.top[1].first == 2);  // 2 and 4 tie: the lower id first
  CHECK(row.top[2].first == 4);
  CHECK(row.top[0].second == doctest::Approx(std::log(4.0 / 13)).epsilon(1e-6));
  CHECK(logprobs_of(logits, 0, 0).top.empty());
  CHECK(logprobs_of(logits, 0, 20).top.size() == 5);  // no more than the vocabulary
  // Large logits do not overflow; an id outside the vocabulary is -inf.
  const std::vector<float> big{1000.f, 999.f};
  CHECK(logprobs_of(big, 0, 0).logprob == doctest::Approx(-std::log1p(std::exp(-1.0))).epsilon(1e-6));
  CHECK(std::isinf(logprobs_of(big, 7, 0).logprob));
}

TEST_CASE("cpu executor: generated and prompt logprobs equal the naive reference's log-softmax") {
  auto w = std::make_shared<const llama_weights>(random_llama(tiny_config(), 4242));
  std::mt19937 rng(5);
  std::vector<token_id> prompt(19);
  for (auto& t : prompt) t = static_cast<token_id>(1 + rng() % 60);

  // Greedy with 5 alternatives, prefill chunked in 6-token steps.
  cpu_engine e(w, 6);
  sampling_params sp;
  sp.temperature = 0;
  sp.max_tokens = 6;
  sp.logprobs = 5;
  const auto first = e.run(1, prompt, sp);
  REQUIRE(first.logprobs.size() == 6);
  CHECK(first.prompt_logprobs.empty());  // not asked
  const tokenizer& tok = e.core.tok();
  std::vector<token_id> context = prompt, generated;
  for (const token_logprob& t : first.logprobs) {
    const token_id id = id_of(tok, t.token, 61);
    const auto want = log_softmax(kiln::test::naive_next_logits(*w, context));
    CHECK(t.logprob == doctest::Approx(want[static_cast<std::size_t>(id)]).epsilon(1e-4));
    REQUIRE(t.top.size() == 5);
    CHECK(t.top[0].token == t.token);  // greedy: the likeliest
    CHECK(t.top[0].logprob == t.logprob);
    double mass = 0;
    for (std::size_t k = 0; k < t.top.size(); ++k) {
      mass += std::exp(t.top[k].logprob);
      if (k) CHECK(t.top[k].logprob <= t.top[k - 1].logprob);
      CHECK(t.top[k].logprob == doctest::Approx(want[static_cast<std::size_t>(id_of(tok, t.top[k].token, 61))]).epsilon(1e-4));
    }
    CHECK(mass <= 1 + 1e-5);
    context.push_back(id);
    generated.push_back(id);
  }

  // The prompt and answer again as one prompt with prompt logprobs, after the same prompt ran
  // once more without them (its blocks cached): nothing comes from the cache, every position
  // is scored, and the answer's positions score what generating them scored.
  sampling_params plain;
  plain.temperature = 0;
  plain.max_tokens = 1;
  e.run(2, context, plain);
  sampling_params echo = plain;
  echo.prompt_logprobs = true;
  echo.logprobs = 2;
  const auto scored = e.run(3, context, echo);
  CHECK(scored.u.cached_tokens == 0);
  REQUIRE(scored.prompt_logprobs.size() == context.size());
  CHECK(std::isnan(scored.prompt_logprobs[0].logprob));
  CHECK(scored.prompt_logprobs[0].token == tok.decode(context[0]));
  for (std::size_t i = 1; i < context.size(); ++i) {
    CAPTURE(i);
    const auto want = log_softmax(kiln::test::naive_next_logits(*w, {context.begin(), context.begin() + static_cast<std::ptrdiff_t>(i)}));
    const token_logprob& t = scored.prompt_logprobs[i];
    CHECK(t.token == tok.decode(context[i]));
    CHECK(t.logprob == doctest::Approx(want[static_cast<std::size_t>(context[i])]).epsilon(1e-4));
    CHECK(t.top.size() == 2);
    if (i >= prompt.size()) CHECK(t.logprob == doctest::Approx(first.logprobs[i - prompt.size()].logprob).epsilon(1e-5));
  }
  CHECK(scored.logprobs.size() == 1);  // and the one token it generates
}

TEST_CASE("cpu executor: prompt logprobs are the same whatever the prefill chunk, alone or in a batch") {
  auto w = std::make_shared<const llama_weights>(random_llama(tiny_config(), 77));
  std::vector<token_id> prompt{5, 9, 13, 2, 40, 41, 7, 7, 7, 30, 12, 3, 59};
  sampling_params sp;
  sp.temperature = 0;
  sp.max_tokens = 2;
  sp.logprobs = 0;
  sp.prompt_logprobs = true;
  std::vector<float> reference;
  for (int chunk : {1, 4, 64}) {
    CAPTURE(chunk);
    cpu_engine e(w, chunk);
    // A second sequence without prompt logprobs shares the steps.
    sampling_params other;
    other.max_tokens = 3;
    REQUIRE(e.core.add({9, {1, 2, 3, 4, 5, 6}, other, priority::standard, 0}));
    const auto a = e.run(1, prompt, sp);
    REQUIRE(a.prompt_logprobs.size() == prompt.size());
    std::vector<float> got;
    for (std::size_t i = 1; i < a.prompt_logprobs.size(); ++i) {
      got.push_back(a.prompt_logprobs[i].logprob);
      CHECK(a.prompt_logprobs[i].top.empty());
    }
    if (reference.empty()) reference = got;
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(reference[i]).epsilon(1e-5));
  }
}

TEST_CASE("sim executor: modelled logprobs are a distribution with the token likeliest, the same every time") {
  sim_executor sim(cost_model({}, {}), {}, 50, 0);
  for (std::uint64_t seed = 1; seed < 200; ++seed) {
    for (int top : {0, 1, 5, 20, 60}) {
      const logprob_row r = sim.modelled_logprobs(seed, 7, top);
      CHECK(r.logprob < 0);
      CHECK(r.logprob >= std::log(0.34) - 1e-6);
      REQUIRE(r.top.size() == static_cast<std::size_t>(std::min(top, 50)));
      std::set<token_id> ids;
      double mass = 0;
      for (std::size_t k = 0; k < r.top.size(); ++k) {
        ids.insert(r.top[k].first);
        mass += std::exp(r.top[k].second);
        if (k) CHECK(r.top[k].second < r.top[k - 1].second);
        CHECK(r.top[k].first >= 0);
        CHECK(r.top[k].first < 50);
      }
      CHECK(ids.size() == r.top.size());
      if (top > 0) CHECK(r.top[0].first == 7);
      CHECK(mass <= 1 + 1e-6);
      const logprob_row again = sim.modelled_logprobs(seed, 7, top);
      CHECK(again.logprob == r.logprob);
      CHECK(again.top == r.top);
    }
  }
}

TEST_CASE("engine core on the sim: logprobs come with every generated token but eos, and stop coasting") {
  auto tok = std::make_shared<word_tokenizer>();
  engine_core core({2048, 64}, {4096, 16}, std::make_unique<sim_executor>(cost_model({}, {}), sim_text{3, 5}, tok->vocab_size(), tok->eos()),
                   tok, 1);
  sampling_params sp;
  sp.max_tokens = 50;
  sp.logprobs = 3;
  REQUIRE(core.add({1, tok->encode("hello there"), sp, priority::standard, 0}));
  CHECK(core.coast_times(10).empty());  // queued: nothing to coast anyway
  core.step();                          // prefill and the first token
  CHECK(core.coast_times(10).empty());  // logprobs: each step's tokens are needed
  int tokens = 0, scored = 0;
  std::string text;
  while (!core.idle()) {
    for (const auto& out : core.step().outputs) {
      tokens += out.new_tokens;
      scored += static_cast<int>(out.logprobs.size());
      text += out.text;
      for (const auto& t : out.logprobs) CHECK(t.top.size() == 3);
      if (out.finish != finish_reason::none) CHECK(out.finish == finish_reason::stop);  // eos within 3-5 tokens
    }
  }
  CHECK(scored == tokens - 1);  // the eos token has no entry
}
