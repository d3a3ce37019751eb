#include "engine/cost_model.hpp"

#include <algorithm>

namespace kiln::engine {

namespace {

double params_from_shape(const model_shape& m) {
  const double d = m.d_model;
  const double q = static_cast<double>(m.heads) * m.head_dim;
  const double kv = static_cast<double>(m.kv_heads) * m.head_dim;
  const double attn = d * q + 2 * d * kv + q * d;  // Wq, Wk, Wv, Wo
  const double mlp = 3 * d * m.ffn_dim;            // gate, up, down (SwiGLU)
  const double norms = 2 * d;
  const double embed = 2 * d * m.vocab;            // input embedding + LM head
  return m.layers * (attn + mlp + norms) + embed + d;
}

}  // namespace

cost_model::cost_model(model_shape shape, gpu_assumptions gpu)
    : shape_(shape), gpu_(gpu),
      params_(shape.params > 0 ? shape.params : params_from_shape(shape)) {}

double cost_model::kv_bytes_per_token() const {
  return 2.0 * shape_.layers * shape_.kv_heads * shape_.head_dim * shape_.kv_dtype_bytes;
}

double cost_model::attention_flops(std::int64_t chunk, std::int64_t past) const {
  // 4 x L x N x context x d_model (QK^T and PV, 2 FLOPs per multiply-add); for a whole
  // prompt (past == 0) this is seed 001's 4 L N^2 d.
  const double n = static_cast<double>(chunk);
  const double ctx = static_cast<double>(past) + n;
  return 4.0 * shape_.layers * n * ctx * shape_.d_model;
}

int cost_model::memory_bound_tokens() const {
  // 2 x params x N / flops = weight_bytes / bandwidth (both split alike over tensor parallelism).
  const double flops = gpu_.flops_per_s * gpu_.flops_efficiency;
  const double bw = gpu_.hbm_bytes_per_s * gpu_.bandwidth_efficiency;
  const double n = weight_bytes() * flops / (2.0 * params_ * bw);
  return static_cast<int>(std::clamp(n, 1.0, 1e7));
}

int cost_model::kv_blocks(int block_size) const {
  const double tp = std::max(1, gpu_.tensor_parallel);
  const double free = gpu_.hbm_capacity_bytes * gpu_.kv_memory_fraction * tp - weight_bytes();
  const double blocks = free / (kv_bytes_per_token() * std::max(1, block_size));
  return blocks <= 0 ? 0 : static_cast<int>(std::min(blocks, 1e9));
}

double cost_model::memory_seconds(std::int64_t kv_tokens_read, double weights_per_gpu, double kv_bytes) const {
  const double tp = std::max(1, gpu_.tensor_parallel);
  const double bw = gpu_.hbm_bytes_per_s * gpu_.bandwidth_efficiency;
  return (weights_per_gpu + static_cast<double>(kv_tokens_read) * kv_bytes / tp) / bw;
}

step_time cost_model::time(const step_shape& s) const {
  step_time t;
  const double tp = std::max(1, gpu_.tensor_parallel);
  const double flops = gpu_.flops_per_s * gpu_.flops_efficiency;
  t.memory = memory_seconds(s.kv_tokens_read, weight_bytes() / tp, kv_bytes_per_token());
  t.compute = (2.0 * params_ * static_cast<double>(s.new_tokens) + s.attention_flops) / (tp * flops);
  if (gpu_.tensor_parallel > 1) {
    const double n = tp;
    const double collectives = 2.0 * shape_.layers;
    const double message = static_cast<double>(s.new_tokens) * shape_.d_model * shape_.activation_bytes;
    const double volume = collectives * 2.0 * (n - 1) / n * message;
    t.allreduce = volume / gpu_.allreduce_bytes_per_s + collectives * gpu_.allreduce_latency_s;
  }
  t.fixed = gpu_.fixed_step_s;
  t.roofline = std::max(t.memory, t.compute) + t.allreduce + t.fixed;
  t.total = t.roofline / gpu_.end_to_end_efficiency;
  return t;
}

void cost_model::decode_totals(std::int64_t batch, std::int64_t kv_tokens, int steps, std::vector<double>& out) const {
  out.clear();
  if (steps <= 0) return;
  out.reserve(static_cast<std::size_t>(steps));
  step_shape shape;
  shape.new_tokens = batch;
  shape.kv_tokens_read = kv_tokens + batch;
  const step_time first = time(shape);  // what no step's reads change: compute, all-reduce, fixed
  const double tp = std::max(1, gpu_.tensor_parallel);
  const double weights = weight_bytes() / tp, kv_bytes = kv_bytes_per_token();
  for (int k = 1; k <= steps; ++k) {
    const double memory = memory_seconds(kv_tokens + batch * k, weights, kv_bytes);
    out.push_back((std::max(memory, first.compute) + first.allreduce + first.fixed) / gpu_.end_to_end_efficiency);
  }
}

}  // namespace kiln::engine
