// The CPU executor's batched, paged, chunked, prefix-cached forward pass against the naive
// single-sequence reference, and batch invariance of greedy decoding.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "engine/cpu_executor.hpp"
#include "engine/sampler.hpp"
#include "engine/tiny_model.hpp"
#include "tests/support/naive_llama.hpp"

using namespace kiln::engine;

namespace {

llama_config small_config(std::mt19937& rng) {
  llama_config c;
  const int pick = static_cast<int>(rng() % 4);
  c.architecture = pick == 0   ? "LlamaForCausalLM"
                   : pick == 1 ? "MistralForCausalLM"
                   : pick == 2 ? "Qwen2ForCausalLM"
                               : "Qwen3ForCausalLM";
  c.qkv_bias = pick == 2;
  c.qk_norm = pick == 3;
  c.heads = 4;
  c.kv_heads = rng() % 2 ? 2 : 4;  // GQA or MHA
  c.head_dim = 8;
  c.hidden = 32;
  c.intermediate = 48;
  c.layers = 2;
  c.vocab = 61;
  c.rope_theta = rng() % 2 ? 10000 : 500000;
  c.tie_embeddings = rng() % 2;
  if (rng() % 2) {
    c.scaling.llama3 = true;
    c.scaling.factor = 8;
    c.scaling.original_max_position = 64;  // small, so all three wavelength bands occur (theta 1e4)
  }
  return c;
}

double max_abs_diff(const float* a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < b.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

struct harness {
  std::shared_ptr<const llama_weights> w;
  scheduler sched;
  cpu_executor exec;
  double worst = 0;
  int compared = 0;
  std::map<seq_id, std::vector<token_id>> produced;

  harness(std::shared_ptr<const llama_weights> weights, scheduler_limits limits, kv_geometry kv)
      : w(weights), sched(limits, kv.num_blocks, kv.block_size), exec(weights, kv, 2) {}

  // One step: every sampling row's logits are checked against the reference.
  void step(bool check) {
    const step_plan plan = sched.schedule();
    std::vector<sample_slot> slots;
    std::vector<std::vector<token_id>> contexts;
    for (const auto& item : plan.items) {
      if (!item.samples) continue;
      const seq_status* s = sched.find(item.id);
      slots.push_back({item.id, 0, s->generated, 0.0});
      contexts.push_back(s->tokens);
    }
    const step_execution out = exec.run(plan, sched, slots);
    REQUIRE(out.tokens.size() == slots.size());
    const auto V = static_cast<std::size_t>(w->cfg.vocab);
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (check) {
        const auto want = kiln::test::naive_next_logits(*w, contexts[i]);
        worst = std::max(worst, max_abs_diff(&exec.last_logits()[i * V], want));
        ++compared;
      }
      produced[slots[i].id].push_back(out.tokens[i]);
    }
    sched.update(plan, out.tokens);
    for (const auto& slot : slots) {
      const seq_status* s = sched.find(slot.id);
      if (s && s->generated >= s->max_tokens) sched.remove(slot.id);
    }
  }

  void run(bool check) {
    for (int guard = 0; guard < 10000 && sched.running() + sched.waiting() > 0; ++guard) step(check);
  }
};

std::vector<token_id> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::vector<token_id> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = static_cast<token_id>(rng() % static_cast<unsigned>(vocab));
  return t;
}

}  // namespace

TEST_CASE("cpu executor: logits equal the naive reference over prompts, block sizes, chunks and batch mixes") {
  std::mt19937 rng(99);
  std::set<std::string> architectures;
  for (int round = 0; round < 12; ++round) {
    CAPTURE(round);
    const llama_config cfg = small_config(rng);
    architectures.insert(cfg.architecture);
    auto w = std::make_shared<const llama_weights>(random_llama(cfg, 1000 + static_cast<unsigned>(round)));
    const int bs = std::array{1, 3, 4, 16}[rng() % 4];
    const int budget = std::array{5, 17, 64}[rng() % 3];
    harness h(w, {budget, 1 + static_cast<int>(rng() % 6), 0}, {/*num_blocks=*/256, bs});
    // A shared opening so later sequences hit the prefix cache, plus private tails.
    const auto opening = random_tokens(rng, 12, cfg.vocab);
    const int n = 2 + static_cast<int>(rng() % 5);
    for (int i = 0; i < n; ++i) {
      auto prompt = opening;
      const auto tail = random_tokens(rng, 1 + static_cast<int>(rng() % 20), cfg.vocab);
      prompt.insert(prompt.end(), tail.begin(), tail.end());
      REQUIRE(h.sched.add(static_cast<seq_id>(i + 1), static_cast<priority>(rng() % 3), prompt,
                          1 + static_cast<int>(rng() % 6), /*salt=*/7));
      if (i == 0) h.run(true);  // the first one finishes: its blocks are cached for the rest
    }
    h.run(true);
    CHECK(h.compared > n);
    CHECK(h.worst < 1e-4);
    if (bs <= 4) CHECK(h.sched.pool().evictions() + h.sched.pool().num_free() > 0);
  }
  CHECK(architectures.size() == 4);  // Llama, Mistral, Qwen2 (qkv bias) and Qwen3 (q/k norms) all ran
}

TEST_CASE("cpu executor: a sequence hits the prefix cache and still matches the reference") {
  std::mt19937 rng(5);
  llama_config cfg = small_config(rng);
  auto w = std::make_shared<const llama_weights>(random_llama(cfg, 77));
  harness h(w, {64, 4, 0}, {128, 4});
  const auto prompt = random_tokens(rng, 23, cfg.vocab);
  h.sched.add(1, priority::standard, prompt, 3, 1);
  h.run(true);
  h.sched.add(2, priority::standard, prompt, 3, 1);
  h.step(true);
  REQUIRE(h.sched.find(2) != nullptr);
  CHECK(h.sched.find(2)->cached_tokens == 20);
  h.run(true);
  CHECK(h.produced[1] == h.produced[2]);
  CHECK(h.worst < 1e-4);
}

TEST_CASE("cpu executor: preemption by recompute gives the same logits") {
  std::mt19937 rng(8);
  const llama_config cfg = small_config(rng);
  auto w = std::make_shared<const llama_weights>(random_llama(cfg, 3));
  harness h(w, {64, 8, 0}, {/*num_blocks=*/9, /*block_size=*/4});  // 8 usable blocks
  for (int i = 0; i < 3; ++i) h.sched.add(static_cast<seq_id>(i + 1), priority::standard, random_tokens(rng, 6, cfg.vocab), 8);
  h.run(true);
  CHECK(h.sched.preemptions() > 0);
  CHECK(h.worst < 1e-4);
}

TEST_CASE("cpu executor: greedy decoding gives the same tokens alone and inside a batch of 16") {
  std::mt19937 rng(21);
  const llama_config cfg = small_config(rng);
  auto w = std::make_shared<const llama_weights>(random_llama(cfg, 9));
  const auto prompt = random_tokens(rng, 9, cfg.vocab);
  harness alone(w, {256, 16, 0}, {512, 4});
  alone.sched.add(1, priority::standard, prompt, 12);
  alone.run(false);
  harness batch(w, {256, 16, 0}, {512, 4});
  for (int i = 0; i < 16; ++i)
    batch.sched.add(static_cast<seq_id>(i + 1), priority::standard,
                    i == 7 ? prompt : random_tokens(rng, 3 + static_cast<int>(rng() % 15), cfg.vocab), 12);
  batch.run(false);
  REQUIRE(alone.produced[1].size() == 12);
  CHECK(batch.produced[8] == alone.produced[1]);
}

TEST_CASE("sampler: greedy, temperature, top-k, top-p and seeds") {
  const std::vector<float> logits = {0.1f, 3.0f, 2.9f, -1.0f, 0.0f};
  sample_slot greedy{1, 42, 0, 0.0};
  CHECK(sample(logits, greedy) == 1);
  sample_slot k1{1, 42, 0, 1.0, /*top_k=*/1};
  CHECK(sample(logits, k1) == 1);
  // top-k 2: only tokens 1 and 2 ever come out; both do.
  std::map<token_id, int> seen;
  for (int pos = 0; pos < 400; ++pos) ++seen[sample(logits, {1, 42, pos, 1.0, 2})];
  CHECK(seen.size() == 2);
  CHECK(seen.count(1));
  CHECK(seen.count(2));
  // top-p small enough to keep only the best token.
  for (int pos = 0; pos < 50; ++pos) CHECK(sample(logits, {1, 42, pos, 1.0, 0, 0.3}) == 1);
  // The same seed and position give the same draw; high temperature spreads the choices.
  CHECK(sample(logits, {1, 7, 3, 1.5}) == sample(logits, {1, 7, 3, 1.5}));
  std::map<token_id, int> hot;
  for (int pos = 0; pos < 400; ++pos) ++hot[sample(logits, {1, 7, pos, 5.0})];
  CHECK(hot.size() == 5);
}

#include <future>

#include "engine/engine_core.hpp"

TEST_CASE("engine core: steps on the worker thread equal steps on the caller; mid-step adds and cancels wait for its end") {
  std::mt19937 rng(31);
  const llama_config cfg = small_config(rng);
  auto w = std::make_shared<const llama_weights>(random_llama(cfg, 4));
  auto make = [&] {
    auto tok = std::make_shared<word_tokenizer>();
    return std::make_unique<engine_core>(scheduler_limits{64, 8, 0}, kv_geometry{256, 4},
                                         std::make_unique<cpu_executor>(w, kv_geometry{256, 4}, 2), tok);
  };
  sampling_params sp;
  sp.max_tokens = 6;
  sp.temperature = 0;
  auto prompt = [&](int n) { return random_tokens(rng, n, 50); };  // ids clear of the stand-in's eos
  const auto p1 = prompt(9), p2 = prompt(5), p3 = prompt(7);
  auto collect = [](std::map<seq_id, std::string>& text, const step_result& r) {
    for (const auto& o : r.outputs) text[o.id] += o.text;
  };

  std::map<seq_id, std::string> sync_text;
  auto sync = make();
  sync->add({1, p1, sp, priority::standard});
  sync->add({2, p2, sp, priority::standard});
  while (!sync->idle()) collect(sync_text, sync->step());

  std::map<seq_id, std::string> async_text;
  auto core = make();
  core->add({1, p1, sp, priority::standard});
  core->add({2, p2, sp, priority::standard});
  core->add({3, p3, sp, priority::standard});
  int steps = 0;
  while (!core->idle()) {
    std::promise<void> finished;
    auto now = core->begin_step([&] { finished.set_value(); });
    if (now) {
      collect(async_text, *now);
      continue;
    }
    REQUIRE(core->in_flight());
    if (steps == 1) {
      CHECK(core->cancel(3));  // mid-step: nothing more from 3, its blocks go when the step ends
      CHECK(core->add({4, p3, sp, priority::standard}));
      CHECK(core->sched().find(3) != nullptr);
      CHECK(core->sched().find(4) == nullptr);
    }
    finished.get_future().wait();
    const step_result r = core->end_step();
    CHECK(r.error.empty());
    collect(async_text, r);
    if (steps == 1) {
      CHECK(core->sched().find(3) == nullptr);
      CHECK(core->sched().find(4) != nullptr);
    }
    ++steps;
  }
  CHECK(async_text[1] == sync_text[1]);
  CHECK(async_text[2] == sync_text[2]);
  CHECK(async_text.count(3) == 1);
  CHECK_FALSE(async_text[4].empty());
}

#include "engine/tensor_parallel.hpp"

TEST_CASE("tensor parallel shards: summed partial results reproduce the whole model") {
  std::mt19937 rng(41);
  llama_config cfg = small_config(rng);
  cfg.heads = 8;
  cfg.kv_heads = 4;
  cfg.intermediate = 64;
  const llama_weights w = random_llama(cfg, 12);
  const auto tokens = random_tokens(rng, 11, cfg.vocab);
  const auto whole = kiln::test::naive_next_logits(w, tokens);
  for (int size : {2, 4}) {
    CAPTURE(size);
    std::vector<llama_weights> shards;
    for (int r = 0; r < size; ++r) {
      auto s = shard_for_rank(w, r, size);
      REQUIRE(std::holds_alternative<llama_weights>(s));
      shards.push_back(std::get<llama_weights>(std::move(s)));
      CHECK(shards.back().cfg.heads == 8 / size);
      CHECK(shards.back().layers[0].wo.size() == w.layers[0].wo.size() / static_cast<std::size_t>(size));
    }
    std::vector<const llama_weights*> ranks;
    for (const auto& s : shards) ranks.push_back(&s);
    CHECK(max_abs_diff(kiln::test::naive_next_logits_tp(ranks, tokens).data(), whole) < 1e-4);
  }
  // A size that does not divide the heads is refused with the reason.
  auto bad = shard_for_rank(w, 0, 3);
  REQUIRE(std::holds_alternative<std::string>(bad));
  CHECK(std::get<std::string>(bad).find("must divide attention heads (8)") != std::string::npos);
}
