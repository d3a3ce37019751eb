// The CPU executor in the weights' own precision: BF16 and INT8 models against the same
// weights widened to F32 (rounded through BF16, or quantised and dequantised), position by
// position on the tiny model's prompts, with the BF16 KV cache too. Logits stay within the
// stated tolerance; greedy tokens agree, or differ only where the F32 model's top two logits
// are within twice it (the test reports how often).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include <stdlib.h>

#include "engine/cpu_executor.hpp"
#include "engine/cpu_model.hpp"
#include "engine/tiny_model.hpp"
#include "kernels/cpu/qmatrix.hpp"
#include "kernels/reference/quant.hpp"

using namespace kiln::engine;
namespace kc = kiln::kernels::cpu;

namespace {

llama_config small() {
  llama_config c;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.hidden = 64;
  c.intermediate = 160;
  c.layers = 2;
  c.vocab = 97;
  return c;
}

// Every weight as the dtype stores it, back in F32.
llama_weights as_stored(llama_weights w, kc::wtype t) {
  auto round = [&](std::vector<float>& v, std::size_t K) {
    if (v.empty() || t == kc::wtype::f32) return;
    const std::size_t N = v.size() / K;
    const kc::qmatrix m = kc::qmatrix::from_f32(v.data(), N, K, t);
    for (std::size_t n = 0; n < N; ++n) m.row(n, &v[n * K]);
  };
  const auto D = static_cast<std::size_t>(w.cfg.hidden), F = static_cast<std::size_t>(w.cfg.intermediate);
  const auto q = static_cast<std::size_t>(w.cfg.heads * w.cfg.head_dim);
  round(w.embed, D);
  round(w.lm_head, D);
  for (auto& l : w.layers) {
    for (auto* m : {&l.wq, &l.wk, &l.wv, &l.w_gate, &l.w_up}) round(*m, D);
    round(l.wo, q);
    round(l.w_down, F);
  }
  return w;
}

// The last row's logits for `tokens` computed in one prefill.
std::vector<float> logits_of(cpu_executor& exec, const std::vector<token_id>& tokens, kv_geometry kv) {
  scheduler sched({4096, 4, 0}, kv.num_blocks, kv.block_size);
  REQUIRE(sched.add(1, priority::standard, tokens, 1));
  const step_plan plan = sched.schedule();
  const sample_slot slot{1, 0, 0, 0.0};
  const auto out = exec.run(plan, sched, std::span<const sample_slot>(&slot, 1));
  REQUIRE(out.tokens.size() == 1);
  return exec.last_logits();
}

struct agreement {
  int positions = 0, differ = 0;
  double worst_error = 0;  ///< largest |logit difference| / tolerance
};

agreement compare(const llama_weights& reference_w, const std::shared_ptr<const cpu_model>& tested, kv_dtype kv_type,
                  double rel_tol) {
  const kv_geometry kv{64, 16};
  cpu_executor ref(make_cpu_model(reference_w, kc::wtype::f32), kv, 2, kv_dtype::f32);
  cpu_executor got(tested, kv, 2, kv_type);
  std::mt19937 rng(3);
  agreement a;
  for (int prompt = 0; prompt < 8; ++prompt) {
    std::vector<token_id> tokens(3 + prompt * 5);
    for (auto& t : tokens) t = static_cast<token_id>(rng() % 97);
    for (int step = 0; step < 12; ++step) {  // teacher-forced on the F32 model's greedy tokens
      const auto lf = logits_of(ref, tokens, kv), lb = logits_of(got, tokens, kv);
      double top = 1;
      for (float x : lf) top = std::max(top, static_cast<double>(std::fabs(x)));
      const double tol = rel_tol * top;
      double err = 0;
      for (std::size_t i = 0; i < lf.size(); ++i) err = std::max(err, static_cast<double>(std::fabs(lf[i] - lb[i])));
      a.worst_error = std::max(a.worst_error, err / tol);
      CHECK(err <= tol);
      const auto af = static_cast<std::size_t>(std::max_element(lf.begin(), lf.end()) - lf.begin());
      const auto ab = static_cast<std::size_t>(std::max_element(lb.begin(), lb.end()) - lb.begin());
      ++a.positions;
      if (af != ab) {
        ++a.differ;
        CHECK(lf[af] - lf[ab] <= 2 * tol);  // a near tie under F32
      }
      tokens.push_back(static_cast<token_id>(af));
    }
  }
  return a;
}

}  // namespace

TEST_CASE("cpu executor: BF16, INT8 and F16 weights against the same weights in F32, on every path this CPU has") {
  const llama_weights w = random_llama(small(), 2024);
  // Stated tolerances, as a fraction of the largest |logit|: F32 arithmetic on the BF16 or
  // dequantised INT8 values 1e-4; BF16 activations (vdpbf16ps) 1.5%; 8-bit activations 4%;
  // a BF16 KV cache 1% more.
  for (kc::wtype t : {kc::wtype::bf16, kc::wtype::int8, kc::wtype::f16}) {
    const llama_weights stored = as_stored(w, t);
    for (kc::isa_path p : kc::paths_for(t)) {
      for (kv_dtype kv : {kv_dtype::f32, kv_dtype::bf16}) {
        CAPTURE(kc::to_string(t));
        CAPTURE(kc::to_string(p));
        CAPTURE(kv == kv_dtype::bf16);
        const bool rounded_acts = p == kc::isa_path::avx512_bf16 || p == kc::isa_path::avx512_vnni || p == kc::isa_path::avx_vnni;
        double tol = rounded_acts ? (t == kc::wtype::bf16 ? 0.015 : 0.04) : 1e-4;
        if (kv == kv_dtype::bf16) tol += 0.01;  // keys and values rounded to BF16
        const agreement a = compare(stored, make_cpu_model(w, t, p), kv, tol);
        MESSAGE(std::string(kc::to_string(t)) << " on " << std::string(kc::to_string(p))
                                 << std::string(kv == kv_dtype::bf16 ? ", bf16 KV" : ", f32 KV") << ": " << a.differ << " of " << a.positions << " greedy tokens differ (near ties), worst logit error "
                                 << a.worst_error << " of the tolerance");
        CHECK(a.positions == 96);
        CHECK(a.differ <= a.positions / 10);
      }
    }
  }
}

TEST_CASE("cpu model: bytes count each dtype's storage; describe names dtype, path and the CPU") {
  const llama_weights w = random_llama(small(), 7);
  const auto f = make_cpu_model(w, kc::wtype::f32), b = make_cpu_model(w, kc::wtype::bf16), q = make_cpu_model(w, kc::wtype::int8);
  CHECK(b->bytes() * 2 == f->bytes());
  CHECK(q->bytes() < f->bytes() / 3);
  CHECK(b->describe().rfind("bf16 weights on " + std::string(kc::to_string(kc::paths_for(kc::wtype::bf16).front())), 0) == 0);
  CHECK(make_cpu_model(w, kc::wtype::int8, kc::isa_path::scalar)->path == kc::isa_path::scalar);
}

TEST_CASE("model loading: the files' dtype is kept, so a cpu pool serves BF16 and F16 files as stored") {
  llama_config c = small();
  c.architecture = "LlamaForCausalLM";
  const llama_weights w = random_llama(c, 8);
  char tmpl[] = "/tmp/kiln-dtype-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  for (const auto& [type, name] : {std::pair{dtype::f32, "f32"}, {dtype::f16, "f16"}, {dtype::bf16, "bf16"}}) {
    const std::string dir = root + "/" + name;
    REQUIRE(save_llama(dir, w, type).empty());
    auto loaded = load_llama(dir);
    if (auto* e = std::get_if<std::string>(&loaded)) FAIL(*e);
    REQUIRE(std::holds_alternative<std::shared_ptr<const llama_weights>>(loaded));
    const auto& full = *std::get<std::shared_ptr<const llama_weights>>(loaded);
    CHECK(full.stored_dtype == name);
    kc::wtype t;
    REQUIRE(kc::parse_wtype(name, t));
    // Converted as read: the same model as converting the whole F32 load, none of its
    // matrices left in F32, in the files' dtype unless one is asked for.
    for (std::optional<kc::wtype> asked : {std::optional<kc::wtype>{}, std::optional<kc::wtype>{kc::wtype::int8}}) {
      cpu_model_loader loader(asked);
      auto streamed = load_llama(dir, loader.sink());
      REQUIRE(std::holds_alternative<std::shared_ptr<const llama_weights>>(streamed));
      const auto& left = *std::get<std::shared_ptr<const llama_weights>>(streamed);
      const auto model = loader.finish(left);
      const auto whole = make_cpu_model(full, asked.value_or(t));
      CHECK(model->type == asked.value_or(t));
      CHECK(left.embed.empty());
      CHECK(left.layers[1].w_down.empty());
      CHECK(left.layers[1].mlp_norm.size() == 64);  // norms stay
      CHECK(model->bytes() == whole->bytes());
      CHECK(model->head.bf16 == whole->head.bf16);
      CHECK(model->head.f16 == whole->head.f16);
      CHECK(model->head.f32 == whole->head.f32);
      CHECK(model->layers[1].w_up.q == whole->layers[1].w_up.q);
      CHECK(model->layers[0].wq.scale == whole->layers[0].wq.scale);
      CHECK(model->layers[1].mlp_norm == whole->layers[1].mlp_norm);
    }
  }
  std::filesystem::remove_all(root);
}
