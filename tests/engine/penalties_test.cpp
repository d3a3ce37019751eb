// Logit bias and the presence, frequency and repetition penalties: the per-token arithmetic,
// what the engine core hands its executor step by step, and the CPU executor's tokens and
// log-probabilities against the naive reference.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>

#include "engine/cpu_executor.hpp"
#include "engine/engine_core.hpp"
#include "engine/logit_adjust.hpp"
#include "engine/tiny_model.hpp"
#include "tests/support/naive_llama.hpp"
#include "tests/support/tiny_llama.hpp"

using namespace kiln::engine;
using kiln::test::id_tokenizer;
using kiln::test::tiny_config;
namespace ref = kiln::kernels::reference;

namespace {

// Samples a script of tokens per sequence and keeps, for every step, each slot's adjustments.
class scripted_executor final : public executor {
 public:
  std::map<seq_id, std::vector<token_id>> script;
  std::map<seq_id, std::vector<std::vector<ref::logit_adjust>>> seen;
  step_execution run(const step_plan&, const scheduler&, std::span<const sample_slot> slots) override {
    step_execution out;
    for (const sample_slot& s : slots) {
      auto& steps = seen[s.id];
      steps.emplace_back(s.adjust.begin(), s.adjust.end());
      const auto& toks = script[s.id];
      out.tokens.push_back(static_cast<std::size_t>(s.position) < toks.size() ? toks[static_cast<std::size_t>(s.position)] : 1000);
    }
    return out;
  }
};

// Steps `core` until idle: each sequence's text, and its last output.
std::pair<std::map<seq_id, std::string>, std::map<seq_id, seq_output>> run_all(engine_core& core) {
  std::map<seq_id, std::string> text;
  std::map<seq_id, seq_output> last;
  while (!core.idle())
    for (auto& out : core.step().outputs) {
      text[out.id] += out.text;
      if (out.finish != finish_reason::none) last[out.id] = out;
    }
  return {text, last};
}

struct three_answers {
  std::map<seq_id, std::string> text;
  std::map<seq_id, seq_output> last;
  std::map<seq_id, std::vector<std::vector<ref::logit_adjust>>> seen;
};

// Sequences 1, 2 and 3 sampling `scripts` on `tok`: as `base`; with ignore_eos and at most
// `endless_max` tokens; with min_tokens 1.
three_answers run_three(std::shared_ptr<const tokenizer> tok, const std::vector<std::vector<token_id>>& scripts,
                        const sampling_params& base, int endless_max) {
  auto exec = std::make_unique<scripted_executor>();
  auto* ex = exec.get();
  for (std::size_t k = 0; k < scripts.size(); ++k) ex->script[k + 1] = scripts[k];
  engine_core core({64, 4}, {64, 4}, std::move(exec), std::move(tok), 1);
  sampling_params endless = base;
  endless.max_tokens = endless_max;
  endless.ignore_eos = true;
  sampling_params least = base;
  least.min_tokens = 1;
  REQUIRE(core.add({1, {1, 2}, base, priority::standard, 0}));
  REQUIRE(core.add({2, {1, 2}, endless, priority::standard, 0}));
  REQUIRE(core.add({3, {1, 2}, least, priority::standard, 0}));
  auto [text, last] = run_all(core);
  return {std::move(text), std::move(last), ex->seen};
}

bool same(const ref::logit_adjust& a, const ref::logit_adjust& b) {
  return a.token == b.token && a.bias == doctest::Approx(b.bias) && a.repeat == doctest::Approx(b.repeat) &&
         a.subtract == doctest::Approx(b.subtract);
}

}  // namespace

TEST_CASE("adjust_logits: bias, then the repetition penalty by sign, then the subtraction; ids outside skipped") {
  std::vector<float> l{2.f, -2.f, 0.5f, 4.f};
  const std::vector<ref::logit_adjust> a{{0, 0.f, 2.f, 0.f},    // positive: halved
                                         {1, 0.f, 2.f, 0.5f},   // negative: doubled, then 0.5 off
                                         {2, -1.f, 2.f, 0.f},   // 0.5 - 1 = -0.5: negative once biased, doubled
                                         {7, 100.f, 1.f, 0.f},  // outside the row
                                         {-1, 100.f, 1.f, 0.f}};
  ref::adjust_logits(l.data(), 4, a.data(), static_cast<int>(a.size()));
  CHECK(l[0] == doctest::Approx(1.f));
  CHECK(l[1] == doctest::Approx(-4.5f));
  CHECK(l[2] == doctest::Approx(-1.f));
  CHECK(l[3] == 4.f);
}

TEST_CASE("append_adjustments: one entry per token, from the bias, the answer's counts and the prompt") {
  sampling_params p;
  p.logit_bias = {{3, 5.f}, {9, -100.f}};
  token_tally tally;
  std::vector<ref::logit_adjust> out{{42, 1.f, 1.f, 0.f}};  // another slot's: left as it is
  append_adjustments(p, tally, {}, {}, out);
  REQUIRE(out.size() == 3);
  CHECK(same(out[1], {3, 5.f, 1.f, 0.f}));
  CHECK(same(out[2], {9, -100.f, 1.f, 0.f}));

  // Presence and frequency: tokens of the answer only; the bias merges in.
  p.presence_penalty = 0.5;
  p.frequency_penalty = 0.25;
  for (token_id t : {9, 4, 9, 9}) tally.add(t);
  out.clear();
  append_adjustments(p, tally, std::vector<token_id>{4, 8}, {}, out);
  REQUIRE(out.size() == 3);
  CHECK(same(out[0], {3, 5.f, 1.f, 0.f}));
  CHECK(same(out[1], {4, 0.f, 1.f, 0.75f}));
  CHECK(same(out[2], {9, -100.f, 1.f, 0.5f + 0.75f}));

  // Repetition: the prompt's tokens too, each once; negative penalties reward.
  p.repetition_penalty = 1.5;
  p.presence_penalty = -1;
  p.frequency_penalty = 0;
  out.clear();
  append_adjustments(p, tally, std::vector<token_id>{8, 4, 8, 2}, {}, out);
  REQUIRE(out.size() == 5);
  CHECK(same(out[0], {2, 0.f, 1.5f, 0.f}));
  CHECK(same(out[1], {3, 5.f, 1.f, 0.f}));
  CHECK(same(out[2], {4, 0.f, 1.5f, -1.f}));
  CHECK(same(out[3], {8, 0.f, 1.5f, 0.f}));
  CHECK(same(out[4], {9, -100.f, 1.5f, -1.f}));
  CHECK(tally.prompt == std::vector<token_id>{2, 4, 8});

  // Nothing asked: nothing appended.
  sampling_params none;
  CHECK_FALSE(none.adjusts_logits());
  out.clear();
  append_adjustments(none, tally, {}, {}, out);
  CHECK(out.empty());
}

TEST_CASE("engine core: each slot gets its own sequence's adjustments, from the tokens it sampled before") {
  auto exec = std::make_unique<scripted_executor>();
  auto* ex = exec.get();
  ex->script[1] = {5, 5, 7, 5};
  ex->script[2] = {6, 6, 6, 6};
  ex->script[3] = {8, 9, 8, 9};
  engine_core core({64, 4}, {64, 4}, std::move(exec), std::make_shared<id_tokenizer>(), 1);
  sampling_params pen;
  pen.temperature = 0;
  pen.max_tokens = 4;
  pen.presence_penalty = 1;
  pen.frequency_penalty = 0.5;
  pen.logit_bias = {{7, 2.f}};
  sampling_params plain = pen;
  plain.presence_penalty = plain.frequency_penalty = 0;
  plain.logit_bias.clear();
  sampling_params rep = plain;
  rep.repetition_penalty = 2;
  REQUIRE(core.add({1, {1, 2, 3}, pen, priority::standard, 0}));
  REQUIRE(core.add({2, {1, 2, 3}, plain, priority::standard, 0}));
  REQUIRE(core.add({3, {4, 4, 3}, rep, priority::standard, 0}));
  while (!core.idle()) core.step();

  const auto& one = ex->seen[1];
  REQUIRE(one.size() == 4);
  REQUIRE(one[0].size() == 1);  // nothing sampled yet: the bias alone
  CHECK(same(one[0][0], {7, 2.f, 1.f, 0.f}));
  REQUIRE(one[1].size() == 2);  // after 5
  CHECK(same(one[1][0], {5, 0.f, 1.f, 1.5f}));
  CHECK(same(one[1][1], {7, 2.f, 1.f, 0.f}));
  REQUIRE(one[3].size() == 2);  // after 5 5 7
  CHECK(same(one[3][0], {5, 0.f, 1.f, 2.f}));
  CHECK(same(one[3][1], {7, 2.f, 1.f, 1.5f}));
  for (const auto& step : ex->seen[2]) CHECK(step.empty());
  const auto& three = ex->seen[3];
  REQUIRE(three.size() == 4);
  REQUIRE(three[0].size() == 2);  // the prompt's 3 and 4
  CHECK(same(three[0][0], {3, 0.f, 2.f, 0.f}));
  CHECK(same(three[0][1], {4, 0.f, 2.f, 0.f}));
  REQUIRE(three[2].size() == 4);  // and the answer's 8 and 9
  CHECK(same(three[2][3], {9, 0.f, 2.f, 0.f}));
}

TEST_CASE("cpu executor: penalised greedy tokens are the adjusted naive logits' argmax; logprobs stay raw") {
  auto w = std::make_shared<const llama_weights>(random_llama(tiny_config(), 99));
  std::mt19937 rng(11);
  std::vector<token_id> prompt(9);
  for (auto& t : prompt) t = static_cast<token_id>(1 + rng() % 60);
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    sampling_params sp;
    sp.temperature = 0;
    sp.max_tokens = 10;
    sp.logprobs = 0;
    if (variant == 0) sp.logit_bias = {{17, 100.f}};
    if (variant == 1) sp.logit_bias = {{17, 3.f}, {23, -100.f}};
    if (variant >= 1) sp.frequency_penalty = 2;
    if (variant >= 2) sp.presence_penalty = -0.5;
    if (variant == 3) sp.repetition_penalty = 1.7;
    engine_core core({64, 8, 0}, {128, 4}, std::make_unique<cpu_executor>(w, kv_geometry{128, 4}, 2),
                     std::make_shared<id_tokenizer>(), 3);
    REQUIRE(core.add({1, prompt, sp, priority::standard, 0}));
    std::vector<token_logprob> got;
    while (!core.idle())
      for (auto& out : core.step().outputs) got.insert(got.end(), out.logprobs.begin(), out.logprobs.end());
    REQUIRE(got.size() == 10);
    // The penalties written out by their formulas, on the naive model's logits.
    std::vector<token_id> context = prompt;
    std::map<token_id, int> counts;
    for (const token_logprob& t : got) {
      const token_id id = std::stoi(t.token.substr(1));
      const std::vector<float> raw = kiln::test::naive_next_logits(*w, context);
      std::vector<double> adj(raw.begin(), raw.end());
      for (const auto& [tok, b] : sp.logit_bias) adj[static_cast<std::size_t>(tok)] += b;
      for (std::size_t k = 0; k < adj.size(); ++k) {
        const auto tk = static_cast<token_id>(k);
        const bool seen = counts.count(tk) || std::find(prompt.begin(), prompt.end(), tk) != prompt.end();
        if (seen && sp.repetition_penalty != 1) adj[k] = adj[k] > 0 ? adj[k] / sp.repetition_penalty : adj[k] * sp.repetition_penalty;
        if (counts.count(tk)) adj[k] -= sp.presence_penalty + sp.frequency_penalty * counts[tk];
      }
      const auto best = static_cast<token_id>(std::max_element(adj.begin(), adj.end()) - adj.begin());
      CHECK(id == best);
      double max = -1e300, sum = 0;
      for (float l : raw) max = std::max(max, static_cast<double>(l));
      for (float l : raw) sum += std::exp(l - max);
      CHECK(t.logprob == doctest::Approx(raw[static_cast<std::size_t>(id)] - max - std::log(sum)).epsilon(1e-4));
      ++counts[id];
      context.push_back(id);
    }
    if (variant == 0) CHECK(counts[17] == 10);  // +100 wins every step
    if (variant == 1) CHECK(counts.count(23) == 0);
    if (variant >= 1) CHECK(std::all_of(counts.begin(), counts.end(), [](const auto& c) { return c.second < 10; }));
  }
}

TEST_CASE("engine core: min_tokens bars eos until then; with ignore_eos an eos sampled ends nothing and adds no text") {
  auto exec = std::make_unique<scripted_executor>();
  auto* ex = exec.get();
  ex->script[1] = {5, 6, 7, 1000};
  ex->script[2] = {1000, 5, 1000, 6, 1000};
  engine_core core({64, 4}, {64, 4}, std::move(exec), std::make_shared<id_tokenizer>(), 1);
  sampling_params least;
  least.max_tokens = 6;
  least.min_tokens = 2;
  sampling_params endless;
  endless.max_tokens = 5;
  endless.ignore_eos = true;
  REQUIRE(core.add({1, {1, 2}, least, priority::standard, 0}));
  REQUIRE(core.add({2, {1, 2}, endless, priority::standard, 0}));
  const auto [text, last] = run_all(core);
  const auto& one = ex->seen[1];
  REQUIRE(one.size() == 4);
  for (std::size_t k = 0; k < 2; ++k) {
    REQUIRE(one[k].size() == 1);
    CHECK(one[k][0].token == 1000);
    CHECK(std::isinf(one[k][0].bias));
    CHECK(one[k][0].bias < 0);
  }
  CHECK(one[2].empty());  // two tokens in: eos may come
  CHECK(last.at(1).finish == finish_reason::stop);
  CHECK(last.at(1).usage.completion_tokens == 4);
  CHECK(text.at(1) == "<5><6><7>");
  for (const auto& step : ex->seen[2]) CHECK(step.empty());
  CHECK(last.at(2).finish == finish_reason::length);
  CHECK(last.at(2).usage.completion_tokens == 5);
  CHECK(text.at(2) == "<5><6>");
}

namespace {

// As id_tokenizer, with a second end token (7) besides eos.
class two_end_tokenizer final : public tokenizer {
 public:
  std::vector<token_id> encode(std::string_view) const override { return {}; }
  std::string decode(token_id id) const override { return "<" + std::to_string(id) + ">"; }
  token_id eos() const override { return 1000; }
  std::vector<token_id> stop_ids() const override { return {1000, 7}; }
  int vocab_size() const override { return 61; }
};

}  // namespace

TEST_CASE("engine core: every end token of the model ends an answer; min_tokens bars them all; ignore_eos passes them") {
  sampling_params plain;
  plain.max_tokens = 8;
  const auto [text, last, seen] = run_three(std::make_shared<two_end_tokenizer>(), {{5, 7, 6}, {7, 5, 7}, {5, 6, 7, 8}}, plain, 3);
  CHECK(last.at(1).finish == finish_reason::stop);
  CHECK(last.at(1).usage.completion_tokens == 2);
  CHECK(text.at(1) == "<5>");
  CHECK(last.at(2).finish == finish_reason::length);
  CHECK(last.at(2).usage.completion_tokens == 3);
  CHECK(text.at(2) == "<5>");
  CHECK(last.at(3).finish == finish_reason::stop);
  CHECK(text.at(3) == "<5><6>");
  REQUIRE_FALSE(seen.at(3).empty());
  const auto& barred = seen.at(3)[0];  // before the first token: both end tokens
  REQUIRE(barred.size() == 2);
  CHECK(barred[0].token == 7);
  CHECK(barred[1].token == 1000);
  CHECK(std::isinf(barred[0].bias));
  CHECK(seen.at(3)[1].empty());
}

TEST_CASE("engine core: stop_token_ids end an answer, ignore_eos or not, with no text; min_tokens bars them with eos") {
  sampling_params sp;
  sp.max_tokens = 8;
  sp.stop_token_ids = {6, 9};
  const auto [text, last, seen] = run_three(std::make_shared<id_tokenizer>(), {{5, 6, 7}, {1000, 6, 7}, {5, 8, 6, 7}}, sp, 8);
  CHECK(last.at(1).finish == finish_reason::stop);
  CHECK(last.at(1).usage.completion_tokens == 2);
  CHECK(text.at(1) == "<5>");
  CHECK(last.at(2).finish == finish_reason::stop);  // eos passed, the stop id not
  CHECK(last.at(2).usage.completion_tokens == 2);
  CHECK(text.at(2) == "");
  CHECK(text.at(3) == "<5><8>");
  const auto& first = seen.at(3)[0];  // before min_tokens: eos and both stop ids barred
  REQUIRE(first.size() == 3);
  CHECK(first[0].token == 6);
  CHECK(first[1].token == 9);
  CHECK(first[2].token == 1000);
  CHECK(seen.at(3)[1].empty());
  for (const auto& step : seen.at(1)) CHECK(step.empty());  // stop ids alone adjust nothing
}
