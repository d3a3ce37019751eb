#include "engine/cpu_executor.hpp"

#include <chrono>
#include <cmath>
#include <cstring>

#include "engine/sampler.hpp"
#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cpu/qmatrix_simd.hpp"
#include "kernels/reference/ops.hpp"
#include "kernels/reference/rmsnorm.hpp"

namespace kiln::engine {

namespace ref = kiln::kernels::reference;
namespace kc = kiln::kernels::cpu;

cpu_executor::cpu_executor(std::shared_ptr<const cpu_model> model, kv_geometry kv, int threads, kv_dtype kv_type)
    : m_(std::move(model)), kv_(kv), kv_type_(kv_type), pool_(threads) {
  const llama_config& c = m_->cfg;
  inv_freq_.resize(static_cast<std::size_t>(c.head_dim / 2));
  ref::rope_inv_freq(static_cast<std::size_t>(c.head_dim), c.rope_theta, c.scaling.llama3 ? c.scaling.factor : 0,
                     c.scaling.low_freq_factor, c.scaling.high_freq_factor, c.scaling.original_max_position,
                     inv_freq_.data());
  const std::size_t per_layer = static_cast<std::size_t>(kv.num_blocks) * static_cast<std::size_t>(kv.block_size) *
                                static_cast<std::size_t>(c.kv_heads) * static_cast<std::size_t>(c.head_dim);
  const std::size_t n = per_layer * static_cast<std::size_t>(c.layers);
  if (kv_type_ == kv_dtype::bf16) {
    k_cache16_.assign(n, 0);
    v_cache16_.assign(n, 0);
  } else {
    k_cache_.assign(n, 0.f);
    v_cache_.assign(n, 0.f);
  }
}

cpu_executor::cpu_executor(const std::shared_ptr<const llama_weights>& weights, kv_geometry kv, int threads)
    : cpu_executor(make_cpu_model(*weights, kc::wtype::f32), kv, threads, kv_dtype::f32) {}

void cpu_executor::matmul(const float* x, std::size_t T, std::size_t K, std::initializer_list<projection> outs) {
  // The input prepared once (padded, or rounded to BF16, or quantised to 8 bits), then one
  // parallel loop over the outputs of every projection that reads it.
  kc::prepare(x, T, K, m_->type, m_->path, in_);
  std::size_t total = 0;
  for (const auto& o : outs) total += o.w->N;
  pool_.parallel_for(total, [&](std::size_t n0, std::size_t n1) {
    std::size_t offset = 0;
    for (const auto& o : outs) {
      const std::size_t lo = std::max(n0, offset), hi = std::min(n1, offset + o.w->N);
      if (lo < hi)
        kc::gemm(in_, *o.w, o.bias && !o.bias->empty() ? o.bias->data() : nullptr, lo - offset, hi - offset, o.y, o.w->N);
      offset += o.w->N;
    }
  });
}

step_execution cpu_executor::run(const step_plan& plan, const scheduler& sched, std::span<const sample_slot> slots) {
  const auto started = std::chrono::steady_clock::now();
  step_execution out;
  const llama_config& c = m_->cfg;
  const auto D = static_cast<std::size_t>(c.hidden), F = static_cast<std::size_t>(c.intermediate);
  const auto H = static_cast<std::size_t>(c.heads), KVH = static_cast<std::size_t>(c.kv_heads);
  const auto hd = static_cast<std::size_t>(c.head_dim), V = static_cast<std::size_t>(c.vocab);
  const std::size_t qdim = H * hd, kvdim = KVH * hd;

  // Rows: every token computed this step, with its sequence and position.
  struct row {
    const seq_status* seq;
    std::size_t position;
  };
  std::vector<row> rows;
  std::vector<std::size_t> sample_rows;  // the last row of each sampling item, in plan order
  for (const plan_item& item : plan.items) {
    const seq_status* s = sched.find(item.id);
    for (int j = 0; j < item.tokens; ++j) rows.push_back({s, static_cast<std::size_t>(item.context_before + j)});
    if (item.samples) sample_rows.push_back(rows.size() - 1);
  }
  const std::size_t T = rows.size();
  x_.resize(T * D);
  h_.resize(T * D);
  q_.resize(T * qdim);
  k_.resize(T * kvdim);
  v_.resize(T * kvdim);
  attn_.resize(T * qdim);
  o_.resize(T * D);
  gate_.resize(T * F);
  up_.resize(T * F);
  for (std::size_t r = 0; r < T; ++r) {
    const auto tok = static_cast<std::size_t>(rows[r].seq->tokens[rows[r].position]);
    m_->embeddings().row(std::min(tok, V - 1), &x_[r * D]);
  }

  const std::size_t per_layer = std::max(k_cache_.size(), k_cache16_.size()) / static_cast<std::size_t>(c.layers);
  const bool kv16 = kv_type_ == kv_dtype::bf16;
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  const auto eps = static_cast<float>(c.rms_eps);
  for (std::size_t l = 0; l < static_cast<std::size_t>(c.layers); ++l) {
    const cpu_layer& L = m_->layers[l];
    const kc::paged_kv_bf16 kv16_layer{kv16 ? k_cache16_.data() + l * per_layer : nullptr, kv16 ? v_cache16_.data() + l * per_layer : nullptr,
                                       static_cast<std::size_t>(kv_.block_size), KVH, hd};
    const ref::paged_kv_layer kv{kv16 ? nullptr : k_cache_.data() + l * per_layer, kv16 ? nullptr : v_cache_.data() + l * per_layer,
                                 static_cast<std::size_t>(kv_.block_size), KVH, hd};
    ref::rmsnorm(x_.data(), L.attn_norm.data(), h_.data(), T, D, eps);
    matmul(h_.data(), T, D, {{&L.wq, &L.bq, q_.data()}, {&L.wk, &L.bk, k_.data()}, {&L.wv, &L.bv, v_.data()}});
    if (c.qk_norm) {  // Qwen3: each head's q and k normalized (in place) before RoPE
      ref::rmsnorm(q_.data(), L.q_norm.data(), q_.data(), T * H, hd, eps);
      ref::rmsnorm(k_.data(), L.k_norm.data(), k_.data(), T * KVH, hd, eps);
    }
    // Position each row, then write its K/V into its block before anyone attends.
    for (std::size_t r = 0; r < T; ++r) {
      const auto pos = rows[r].position;
      ref::rope(&q_[r * qdim], H, hd, static_cast<std::int64_t>(pos), inv_freq_.data());
      ref::rope(&k_[r * kvdim], KVH, hd, static_cast<std::int64_t>(pos), inv_freq_.data());
      const block_id b = rows[r].seq->blocks[pos / static_cast<std::size_t>(kv_.block_size)];
      const std::size_t slot = pos % static_cast<std::size_t>(kv_.block_size);
      if (kv16) {
        kc::store_bf16(&k_[r * kvdim], kvdim, kv16_layer.k_at(b, slot));
        kc::store_bf16(&v_[r * kvdim], kvdim, kv16_layer.v_at(b, slot));
      } else {
        std::memcpy(kv.k_at(b, slot), &k_[r * kvdim], kvdim * sizeof(float));
        std::memcpy(kv.v_at(b, slot), &v_[r * kvdim], kvdim * sizeof(float));
      }
    }
    // Every (row, KV head) pair on its own: a single decode row still spreads over the pool.
    pool_.parallel_for(T * KVH, [&](std::size_t i0, std::size_t i1) {
      std::vector<float> scratch;
      for (std::size_t i = i0; i < i1; ++i) {
        const std::size_t r = i / KVH, kvh = i % KVH, context = rows[r].position + 1;
        scratch.resize((H / KVH) * context + hd);
        if (kv16)
          kc::attend_kv_group(&q_[r * qdim], kv16_layer, rows[r].seq->blocks.data(), context, H, kvh, scale,
                              &attn_[r * qdim], scratch.data());
        else
          kc::attend_kv_group(&q_[r * qdim], kv, rows[r].seq->blocks.data(), context, H, kvh, scale, &attn_[r * qdim],
                              scratch.data());
      }
    });
    matmul(attn_.data(), T, qdim, {{&L.wo, nullptr, o_.data()}});
    for (std::size_t i = 0; i < T * D; ++i) x_[i] += o_[i];
    ref::rmsnorm(x_.data(), L.mlp_norm.data(), h_.data(), T, D, eps);
    matmul(h_.data(), T, D, {{&L.w_gate, nullptr, gate_.data()}, {&L.w_up, nullptr, up_.data()}});
    pool_.parallel_for(T, [&](std::size_t r0, std::size_t r1) {
      kc::simd::silu_mul(&gate_[r0 * F], &up_[r0 * F], &gate_[r0 * F], (r1 - r0) * F);
    });
    matmul(gate_.data(), T, F, {{&L.w_down, nullptr, o_.data()}});
    for (std::size_t i = 0; i < T * D; ++i) x_[i] += o_[i];
  }

  // Logits only for rows that sample, then for rows whose prompt log-probabilities are asked.
  const auto lp_rows = plan_prompt_rows(plan, sched, out.prompt_logprobs);
  const std::size_t S = sample_rows.size(), R = S + lp_rows.size();
  for (const auto& p : lp_rows) sample_rows.push_back(p.row);
  std::vector<float> last(R * D), normed(R * D);
  for (std::size_t i = 0; i < R; ++i) std::memcpy(&last[i * D], &x_[sample_rows[i] * D], D * sizeof(float));
  ref::rmsnorm(last.data(), m_->final_norm.data(), normed.data(), R, D, eps);
  logits_.resize(R * V);
  if (R > 0) matmul(normed.data(), R, D, {{&m_->head, nullptr, logits_.data()}});
  auto row_logits = [&](std::size_t i) { return std::span<const float>(&logits_[i * V], V); };
  std::vector<float> adjusted;
  for (std::size_t i = 0; i < S && i < slots.size(); ++i) {
    if (slots[i].adjust.empty()) {
      out.tokens.push_back(sample(row_logits(i), slots[i]));
      continue;
    }
    // Bias and penalties on a copy: log-probabilities below read the raw row.
    const auto raw = row_logits(i);
    adjusted.assign(raw.begin(), raw.end());
    kernels::reference::adjust_logits(adjusted.data(), static_cast<int>(V), slots[i].adjust.data(),
                                      static_cast<int>(slots[i].adjust.size()));
    out.tokens.push_back(sample(adjusted, slots[i]));
  }
  for (std::size_t i = 0; i < out.tokens.size(); ++i) {
    if (slots[i].logprobs < 0) continue;
    out.logprobs.resize(out.tokens.size());
    out.logprobs[i] = logprobs_of(row_logits(i), out.tokens[i], slots[i].logprobs);
  }
  for (std::size_t i = 0; i < lp_rows.size(); ++i)
    out.prompt_logprobs[lp_rows[i].part].rows.push_back(logprobs_of(row_logits(S + i), lp_rows[i].next, lp_rows[i].top));
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace kiln::engine
