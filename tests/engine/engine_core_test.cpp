// The engine core on the sim executor: stopping rules, determinism, cancellation.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <memory>
#include <string>

#include "engine/engine_core.hpp"
#include "engine/sim_executor.hpp"

using namespace kiln::engine;

namespace {

std::unique_ptr<engine_core> make_core(sim_text text = {16, 400}, scheduler_limits limits = {2048, 64},
                                       std::uint64_t salt = 7, kv_geometry kv = {4096, 16}) {
  auto tok = std::make_shared<word_tokenizer>();
  auto exec = std::make_unique<sim_executor>(cost_model({}, {}), text, tok->vocab_size(), tok->eos());
  return std::make_unique<engine_core>(limits, kv, std::move(exec), tok, salt);
}

struct run_result {
  std::string text;
  finish_reason finish = finish_reason::none;
  usage u;
  int steps = 0;
  double seconds = 0;
};

run_result run_one(engine_core& core, const std::string& prompt, sampling_params sp, seq_id id = 1) {
  core.add({id, core.tok().encode(prompt), sp, priority::standard});
  run_result r;
  while (!core.idle()) {
    step_result step = core.step();
    ++r.steps;
    r.seconds += step.seconds;
    for (auto& out : step.outputs) {
      REQUIRE(out.id == id);
      CHECK(r.finish == finish_reason::none);  // exactly one finish
      r.text += out.text;
      if (out.finish != finish_reason::none) {
        r.finish = out.finish;
        r.u = out.usage;
      }
    }
  }
  return r;
}

sampling_params greedy(int max_tokens) {
  sampling_params sp;
  sp.max_tokens = max_tokens;
  sp.temperature = 0;
  return sp;
}

}  // namespace

TEST_CASE("engine core: max_tokens ends with length and exact usage") {
  auto core = make_core();
  const run_result r = run_one(*core, "the kiln is warm", greedy(7));
  CHECK(r.finish == finish_reason::length);
  CHECK(r.u.completion_tokens == 7);
  CHECK(r.u.prompt_tokens == 4);
  CHECK(r.steps == 7);  // one prefill step that samples, then six decodes
  CHECK(r.seconds > 0);
  CHECK_FALSE(r.text.empty());
}

TEST_CASE("engine core: eos at the generator's natural length ends with stop") {
  auto core = make_core({3, 3});
  const run_result r = run_one(*core, "hello", greedy(100));
  CHECK(r.finish == finish_reason::stop);
  CHECK(r.u.completion_tokens == 4);  // three words, then eos
}

TEST_CASE("engine core: ignore_eos runs a modelled answer to max_tokens; min_tokens to at least that many") {
  auto core = make_core({3, 3});
  sampling_params sp = greedy(25);
  sp.ignore_eos = true;
  const run_result all = run_one(*core, "hello", sp);
  CHECK(all.finish == finish_reason::length);
  CHECK(all.u.completion_tokens == 25);
  const run_result natural = run_one(*core, "hello", greedy(100), 2);
  CHECK(all.text.rfind(natural.text, 0) == 0);  // the same answer, carried on
  CHECK(all.text.size() > natural.text.size() * 4);
  for (const int least : {0, 2, 3, 4, 12, 25}) {
    CAPTURE(least);
    sampling_params m = greedy(25);
    m.min_tokens = least;
    const run_result r = run_one(*core, "hello", m, 10 + static_cast<seq_id>(least));
    // Three words then eos; with more asked, eos comes after them (max_tokens ends it first at 25).
    CHECK(r.u.completion_tokens == std::min(25, std::max(3, least) + 1));
    CHECK(r.finish == (least >= 25 ? finish_reason::length : finish_reason::stop));
    CHECK(r.text.rfind(natural.text, 0) == 0);
  }
}

TEST_CASE("engine core: stop_token_ids cut a modelled answer at the first of them; such answers never coast") {
  auto core = make_core({30, 30});
  const run_result whole = run_one(*core, "hello", greedy(40));
  const auto ids = core->tok().encode(whole.text);
  REQUIRE(ids.size() > 10);
  sampling_params sp = greedy(40);
  sp.stop_token_ids = {ids[6]};
  core->add({2, core->tok().encode("hello"), sp, priority::standard});
  run_result cut;
  const auto take = [&](const step_result& st) {
    for (const auto& out : st.outputs) {
      cut.text += out.text;
      if (out.finish != finish_reason::none) cut.finish = out.finish, cut.u = out.usage;
    }
  };
  take(core->step());  // its prefill and first token
  CHECK(core->coast_times(10).empty());
  while (!core->idle()) take(core->step());
  CHECK(cut.finish == finish_reason::stop);
  const auto first = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), ids[6]) - ids.begin());
  CHECK(cut.u.completion_tokens == static_cast<int>(first) + 1);
  CHECK(whole.text.rfind(cut.text, 0) == 0);
  CHECK(core->tok().encode(cut.text).size() == first);
}

TEST_CASE("engine core: greedy and seeded answers are deterministic; a modelled answer is of prompt and seed alone") {
  auto a = make_core({16, 400}, {2048, 64}, 1);
  auto b = make_core({16, 400}, {2048, 64}, 2);
  CHECK(run_one(*a, "same prompt", greedy(20)).text == run_one(*b, "same prompt", greedy(20)).text);
  CHECK(run_one(*a, "same prompt", greedy(20)).text != run_one(*a, "another prompt", greedy(20)).text);
  sampling_params seeded = greedy(20);
  seeded.temperature = 0.8;
  seeded.seed = 42;
  const std::string s42 = run_one(*a, "p", seeded).text;
  CHECK(run_one(*b, "p", seeded).text == s42);
  seeded.seed = 43;
  CHECK(run_one(*b, "p", seeded).text != s42);
  // The sim answer does not depend on the engine (replica) or the request: a retry elsewhere
  // gives the same text, unseeded too.
  sampling_params unseeded = seeded;
  unseeded.seed.reset();
  CHECK(run_one(*a, "p", unseeded, 1).text == run_one(*b, "p", unseeded, 2).text);
}

namespace {

// Records the seeds the core hands its executor; samples eos at once.
class seed_recorder final : public executor {
 public:
  explicit seed_recorder(token_id eos) : eos_(eos) {}
  step_execution run(const step_plan&, const scheduler&, std::span<const sample_slot> slots) override {
    step_execution out;
    for (const auto& s : slots) {
      rng.push_back(s.rng_seed);
      answer.push_back(s.answer_seed);
      out.tokens.push_back(eos_);
    }
    return out;
  }
  std::vector<std::uint64_t> rng, answer;

 private:
  token_id eos_;
};

}  // namespace

TEST_CASE("engine core: unseeded sampling varies by engine and request; the answer seed never does") {
  auto tok = std::make_shared<word_tokenizer>();
  auto rec_a = std::make_unique<seed_recorder>(tok->eos());
  auto rec_b = std::make_unique<seed_recorder>(tok->eos());
  auto* a_seeds = rec_a.get();
  auto* b_seeds = rec_b.get();
  engine_core a({64, 4}, {64, 4}, std::move(rec_a), tok, 1);
  engine_core b({64, 4}, {64, 4}, std::move(rec_b), tok, 2);
  sampling_params unseeded = greedy(5);
  unseeded.temperature = 0.8;
  sampling_params seeded = unseeded;
  seeded.seed = 9;
  for (engine_core* core : {&a, &b}) {
    for (seq_id id : {1, 2}) {
      REQUIRE(core->add({id, tok->encode("p"), id == 1 ? unseeded : seeded, priority::standard}));
      core->step();
      REQUIRE(core->idle());
    }
  }
  REQUIRE(a_seeds->rng.size() == 2);
  REQUIRE(b_seeds->rng.size() == 2);
  CHECK(a_seeds->rng[0] != b_seeds->rng[0]);     // unseeded: each engine samples its own way
  CHECK(a_seeds->rng[1] == b_seeds->rng[1]);     // seeded: the same everywhere
  CHECK(a_seeds->answer[0] == b_seeds->answer[0]);
  CHECK(a_seeds->answer[1] == b_seeds->answer[1]);
  CHECK(a_seeds->answer[0] != a_seeds->answer[1]);  // the seed is part of it
}

TEST_CASE("engine core: a stop string ends the answer before it and is never streamed") {
  auto core = make_core();
  const std::string full = run_one(*core, "tell me", greedy(40)).text;
  // A word from the middle of the answer becomes the stop string.
  const auto cut = full.find(' ', full.size() / 2);
  REQUIRE(cut != std::string::npos);
  const auto next = full.find(' ', cut + 1);
  const std::string stop = full.substr(cut, next == std::string::npos ? std::string::npos : next - cut);
  sampling_params sp = greedy(40);
  sp.stop = {stop};
  const run_result r = run_one(*core, "tell me", sp);
  CHECK(r.finish == finish_reason::stop);
  CHECK(r.text == full.substr(0, full.find(stop)));
  CHECK(r.text.find(stop) == std::string::npos);
}

TEST_CASE("engine core: a stop string of several tokens late in a long answer, beside one never met") {
  auto core = make_core();
  const std::string full = run_one(*core, "tell me more", greedy(300)).text;
  // Three words from near the end, so the text before them has long been returned.
  std::size_t cut = full.find(' ', full.size() * 9 / 10);
  REQUIRE(cut != std::string::npos);
  std::size_t end = cut;
  for (int w = 0; w < 3 && end != std::string::npos; ++w) end = full.find(' ', end + 1);
  const std::string stop = full.substr(cut, end == std::string::npos ? std::string::npos : end - cut);
  REQUIRE(stop.size() > 4);
  cut = full.find(stop);  // its first place, which may be earlier
  for (const auto& stops : {std::vector<std::string>{stop}, std::vector<std::string>{"\x01never", stop},
                            std::vector<std::string>{stop, stop.substr(0, 2) + "\x02"}}) {
    sampling_params sp = greedy(300);
    sp.stop = stops;
    const run_result r = run_one(*core, "tell me more", sp);
    CHECK(r.finish == finish_reason::stop);
    CHECK(r.text == full.substr(0, cut));
  }
}

TEST_CASE("engine core: safe_emit_end holds back a possible stop-string start") {
  std::size_t hit = 0;
  CHECK(safe_emit_end("hello wor", 0, {"world"}, hit) == 6);
  CHECK(hit == std::string::npos);
  CHECK(safe_emit_end("hello world!", 0, {"world"}, hit) == 6);
  CHECK(hit == 0);
  CHECK(safe_emit_end("abc", 0, {"x", "bc"}, hit) == 1);
  CHECK(safe_emit_end("abc", 0, {}, hit) == 3);
}

TEST_CASE("engine core: cancel frees the sequence at once") {
  auto core = make_core();
  core->add({1, core->tok().encode("a b c"), greedy(100), priority::standard});
  core->add({2, core->tok().encode("d e f"), greedy(100), priority::standard});
  core->step();
  CHECK(core->running() == 2);
  const auto before = core->tokens_in_flight();
  CHECK(core->cancel(1));
  CHECK_FALSE(core->cancel(1));
  CHECK(core->running() == 1);
  CHECK(core->tokens_in_flight() < before);
  const step_result s = core->step();
  REQUIRE(s.outputs.size() == 1);
  CHECK(s.outputs[0].id == 2);
}

TEST_CASE("word tokenizer: known words round-trip, unknown words hash stably") {
  word_tokenizer t;
  const auto ids = t.encode("the kiln, warm");
  REQUIRE(ids.size() == 4);
  std::string text;
  for (auto id : ids) text += t.decode(id);
  CHECK(text == " the kiln, warm");
  const auto unknown = t.encode("zyzzyva zyzzyva");
  REQUIRE(unknown.size() == 2);
  CHECK(unknown[0] == unknown[1]);
  CHECK(unknown[0] >= t.vocab_size());
  CHECK(t.decode(t.eos()).empty());
  CHECK(render_chat_prompt({{"system", "be brief"}, {"user", "hi"}}) ==
        "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n");
}

TEST_CASE("engine core: a sequence that outgrows the KV pool ends with length; a prompt that cannot fit is refused") {
  auto core = make_core({16, 400}, {2048, 8}, 7, kv_geometry{/*num_blocks=*/5, /*block_size=*/4});  // 16 tokens
  const run_result r = run_one(*core, "the kiln is warm", greedy(100));
  CHECK(r.finish == finish_reason::length);
  CHECK(r.u.completion_tokens == 13);  // 16 KV slots hold 4 prompt + 12; the 13th is sampled from them
  CHECK(core->sched().pool().num_free() == 4);
  sampling_params sp = greedy(5);
  CHECK_FALSE(core->add({2, std::vector<token_id>(17, 5), sp, priority::standard}));
  CHECK(core->idle());
}

TEST_CASE("engine core: cached_tokens counts the prefix shared with an earlier request of the same team") {
  auto core = make_core();
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "clay ";
  sampling_params sp = greedy(3);
  engine_request a{1, core->tok().encode(prompt), sp, priority::standard, /*cache_salt=*/1};
  auto b = a;
  b.id = 2;
  auto c = a;
  c.id = 3;
  c.cache_salt = 2;  // another team
  usage ua, ub, uc;
  for (auto* req : {&a, &b, &c}) {
    REQUIRE(core->add(*req));
    while (!core->idle())
      for (auto& out : core->step().outputs)
        if (out.finish != finish_reason::none) (req == &a ? ua : req == &b ? ub : uc) = out.usage;
  }
  CHECK(ua.cached_tokens == 0);
  CHECK(ub.cached_tokens == 32);  // two full blocks of the 40-token prompt
  CHECK(uc.cached_tokens == 0);
}

namespace {

class failing_executor final : public executor {
 public:
  step_execution run(const step_plan&, const scheduler&, std::span<const sample_slot>) override {
    step_execution out;
    out.error = "device lost";
    return out;
  }
};

}  // namespace

TEST_CASE("engine core: an executor failure is reported and nothing advances") {
  auto tok = std::make_shared<word_tokenizer>();
  engine_core core({64, 4}, {64, 4}, std::make_unique<failing_executor>(), tok);
  REQUIRE(core.add({1, tok->encode("a b c"), greedy(5), priority::standard}));
  const step_result r = core.step();
  CHECK(r.error == "device lost");
  CHECK(r.outputs.empty());
  REQUIRE(core.sched().find(1) != nullptr);
  CHECK(core.sched().find(1)->generated == 0);
  CHECK(core.cancel(1));
  CHECK(core.idle());
}

TEST_CASE("engine core: coasting through steady decode equals stepping, step for step") {
  // Two cores with the same requests: one steps with text, one without text coasts wherever
  // it may. Their tokens, finishes, step times, KV blocks and cached prefixes match throughout.
  // The coaster's steps are quiet where they can be: a sequence that has started and has no
  // output in a result decoded its quiet_steps tokens.
  // A pool of 48 blocks makes sequences preempt one another (recomputed later): a step with
  // one of them waiting or recomputing is not quiet.
  for (const int blocks : {512, 48}) {
    CAPTURE(blocks);
    auto stepper = make_core({20, 120}, {2048, 64}, 7, {blocks, 16});
    auto coaster = make_core({20, 120}, {2048, 64}, 7, {blocks, 16});
    coaster->set_text(false);
    std::map<seq_id, int> tokens_a, tokens_b;
    std::map<seq_id, finish_reason> end_a, end_b;
    std::set<seq_id> started;  // the coaster's sequences past their first token, not ended
    double time_a = 0, time_b = 0;
    int coasted = 0, quiet_steps = 0;
    auto take = [&](const step_result& b) {
      std::set<seq_id> quiet = started;
      for (const auto& o : b.outputs) {
        quiet.erase(o.id);
        tokens_b[o.id] += o.new_tokens;
        if (o.new_tokens > 0) started.insert(o.id);
        if (o.finish != finish_reason::none) end_b[o.id] = o.finish, started.erase(o.id);
      }
      for (const seq_id q : quiet) tokens_b[q] += b.quiet_steps;
      quiet_steps += b.quiet_steps > 0 && !quiet.empty();
    };
    sampling_params sp;
    sp.temperature = 0.8;
    for (seq_id id = 1; id <= 24; ++id) {
      sp.seed = id;
      sp.max_tokens = 40 + static_cast<int>(id % 5) * 30;
      // Some answers run on past their natural end: to max_tokens, or to at least 60 tokens.
      sp.ignore_eos = id % 7 == 3;
      sp.min_tokens = id % 7 == 5 ? std::min(60, sp.max_tokens) : 0;
      const auto prompt = stepper->tok().encode("a shared opening for every request " + std::to_string(id % 3));
      stepper->add({id, prompt, sp, priority::standard});
      coaster->add({id, prompt, sp, priority::standard});
      // A few steps between arrivals; the coaster takes what it can in one go.
      for (int k = 0; k < 6 && !stepper->idle(); ++k) {
        const step_result a = stepper->step();
        time_a += a.seconds;
        for (const auto& o : a.outputs) {
          tokens_a[o.id] += o.new_tokens;
          if (o.finish != finish_reason::none) end_a[o.id] = o.finish;
        }
      }
      // Bring the coaster to the stepper's step count: coasts where steady, steps elsewhere.
      while (time_b < time_a - 1e-12) {
        const auto times = coaster->coast_times(64);
        step_result b;
        if (!times.empty()) {
          int n = 0;
          double t = 0;
          while (n < static_cast<int>(times.size()) && time_b + t + times[static_cast<std::size_t>(n)] <= time_a + 1e-12)
            t += times[static_cast<std::size_t>(n++)];
          if (n == 0) n = 1, t = times[0];
          b = coaster->coast(n);
          CHECK(b.quiet_steps == n);
          for (const auto& o : b.outputs) CHECK(o.finish != finish_reason::none);  // only the ends
          time_b += t;
          coasted += n > 1;
        } else {
          b = coaster->step();
          time_b += b.seconds;
        }
        take(b);
      }
      CHECK(time_b == doctest::Approx(time_a).epsilon(1e-12));
      CHECK(tokens_a == tokens_b);
      CHECK(end_a == end_b);
      CHECK(stepper->sched().pool().num_free() == coaster->sched().pool().num_free());
      CHECK(stepper->tokens_in_flight() == coaster->tokens_in_flight());
      // The same blocks, taken in the same order, filled and keyed alike: what later
      // allocations evict and later prompts find depends on it.
      for (seq_id q = 1; q <= id; ++q) {
        const seq_status* x = stepper->sched().find(q);
        const seq_status* y = coaster->sched().find(q);
        REQUIRE((x == nullptr) == (y == nullptr));
        if (!x) continue;
        CHECK(x->blocks == y->blocks);
        CHECK(x->keys == y->keys);
        CHECK(x->computed == y->computed);
        CHECK(x->generated == y->generated);
      }
    }
    CHECK(coasted > 5);
    CHECK(quiet_steps > 5);  // ordinary steps were quiet too
    CHECK((stepper->preemptions() > 0) == (blocks < 100));
    CHECK(coaster->coast_times(1).empty());  // fewer than two steps: nothing to gain
  }
}

TEST_CASE("sim executor: an answer's tokens cover the vocabulary but eos, until its natural length, in runs as one by one") {
  for (const int vocab : {3, 50, 32000, 151936}) {
    CAPTURE(vocab);
    const sim_executor sim(cost_model({}, {}), sim_text{5, 60}, vocab, 0);
    std::vector<int> seen(static_cast<std::size_t>(vocab), 0);
    for (std::uint64_t seed = 1; seed <= 400; ++seed) {
      const int natural = sim.natural_length(seed);
      REQUIRE(natural >= 5);
      REQUIRE(natural <= 60);
      // A run that crosses the natural end, from a position inside the answer.
      const int first = static_cast<int>(seed % 7);
      std::vector<token_id> run(static_cast<std::size_t>(natural - first + 3));
      sim.tokens_at(seed, first, run);
      for (std::size_t k = 0; k < run.size(); ++k) {
        const int position = first + static_cast<int>(k);
        CHECK(run[k] == sim.token_at(seed, position));
        if (position >= natural) {
          CHECK(run[k] == 0);
        } else {
          CHECK(run[k] >= 1);
          CHECK(run[k] < vocab);
          ++seen[static_cast<std::size_t>(run[k])];
        }
      }
    }
    CHECK(seen[0] == 0);
    if (vocab <= 50) {  // about 300 draws of each id: every one appears, none far more than its share
      const auto [lo, hi] = std::minmax_element(seen.begin() + 1, seen.end());
      CHECK(*lo > 0);
      CHECK(*hi < 3 * *lo + 50);
    }
  }
}
