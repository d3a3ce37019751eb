#include "sim/plan.hpp"

#include <algorithm>
#include <cmath>

#include "engine/cost_model.hpp"

namespace kiln::sim {

double dtype_bytes(std::string_view d) {
  if (d == "fp32" || d == "f32") return 4;
  if (d == "bf16" || d == "fp16" || d == "f16") return 2;
  if (d == "fp8" || d == "int8") return 1;
  if (d == "int4" || d == "4bit") return 0.5;
  return 0;
}

namespace {

/// The engine's roofline model (what the sim executor steps by) for these assumptions.
engine::cost_model model_of(const plan_assumptions& a, int tp) {
  engine::model_shape m;
  m.layers = a.layers;
  m.d_model = a.d_model;
  m.heads = a.heads;
  m.kv_heads = a.kv_heads;
  m.head_dim = a.head_dim;
  m.params = a.params;
  m.dtype_bytes = dtype_bytes(a.weight_dtype);
  m.kv_dtype_bytes = dtype_bytes(a.kv_dtype);
  m.activation_bytes = a.activation_bytes;
  engine::gpu_assumptions g;
  g.hbm_bytes_per_s = a.hbm_bytes_per_s;
  g.flops_per_s = a.flops_per_s;
  g.bandwidth_efficiency = a.bandwidth_efficiency;
  g.flops_efficiency = a.flops_efficiency;
  g.end_to_end_efficiency = a.end_to_end_efficiency;
  g.allreduce_bytes_per_s = a.allreduce_bytes_per_s;
  g.allreduce_latency_s = a.allreduce_latency_s;
  g.fixed_step_s = a.fixed_step_s;
  g.tensor_parallel = std::max(1, tp);
  g.hbm_capacity_bytes = a.hbm_bytes_per_gpu;
  return engine::cost_model(m, g);
}

}  // namespace

decode_step decode_at(const plan_assumptions& a, int batch, int context, int tp) {
  const engine::cost_model model = model_of(a, tp);
  // A decode step: one new token per stream, every stream's context read once.
  engine::step_shape shape;
  shape.new_tokens = batch;
  shape.kv_tokens_read = static_cast<std::int64_t>(batch) * context;
  const engine::step_time t = model.time(shape);
  decode_step s;
  const double n = std::max(1, tp);
  s.batch = batch;
  s.weight_bytes = model.weight_bytes() / n;
  s.kv_bytes = static_cast<double>(shape.kv_tokens_read) * model.kv_bytes_per_token() / n;
  s.memory = t.memory;
  s.compute = t.compute;
  s.allreduce = t.allreduce;
  s.fixed = t.fixed;
  s.roofline = t.roofline;
  s.tpot = t.total;
  return s;
}

prefill_time prefill_at(const plan_assumptions& a, int tokens) {
  const engine::cost_model model = model_of(a, a.tensor_parallel);
  prefill_time p;
  p.tokens = tokens;
  p.linear_flops = 2.0 * a.params * tokens;
  p.attention_flops = model.attention_flops(tokens, 0);
  // The compute term of a step that computes the whole prompt at once.
  engine::step_shape shape;
  shape.new_tokens = tokens;
  shape.attention_flops = p.attention_flops;
  p.at_mfu_s = model.time(shape).compute;
  p.end_to_end_s = p.at_mfu_s / a.end_to_end_efficiency;
  return p;
}

int batch_at_slo(const plan_assumptions& a, int tp) {
  // TPOT grows with the batch; the first batch past the SLO bounds the search.
  if (decode_at(a, 1, a.context_tokens, tp).tpot > a.tpot_slo_s) return 0;
  int lo = 1, hi = 2;
  while (hi < (1 << 24) && decode_at(a, hi, a.context_tokens, tp).tpot <= a.tpot_slo_s) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (decode_at(a, mid, a.context_tokens, tp).tpot <= a.tpot_slo_s ? lo : hi) = mid;
  }
  return lo;
}

namespace {

/// ceil(x) as a count, held at kMaxPlanCount past it (absurd assumptions cannot overflow an int;
/// the assumptions' check refuses a plan that reaches it).
int count_up(double x) {
  if (!(x < kMaxPlanCount)) return kMaxPlanCount;
  return std::max(0, static_cast<int>(std::ceil(x - 1e-9)));
}

tp_option option_for(const plan_assumptions& a, int tp) {
  tp_option o;
  o.tp = tp;
  o.replicas_per_node = std::max(1, a.gpus_per_node / std::max(1, tp));
  const double hbm = a.gpus_per_node * a.hbm_bytes_per_gpu;
  o.weights_on_node = model_of(a, tp).weight_bytes() * o.replicas_per_node;
  o.kv_pool_bytes = hbm - hbm * a.runtime_reserve - o.weights_on_node;
  o.batch_at_slo = batch_at_slo(a, tp);
  if (o.batch_at_slo > 0) {
    const double tpot = decode_at(a, o.batch_at_slo, a.context_tokens, tp).tpot;
    o.node_tokens_per_s_at_slo = o.replicas_per_node * o.batch_at_slo / tpot;
  }
  return o;
}

}  // namespace

plan_figures derive(const plan_assumptions& a) {
  plan_figures f;
  const int tp = std::max(1, a.tensor_parallel);
  const double replicas_per_node = std::max(1, a.gpus_per_node / tp);
  const engine::cost_model model = model_of(a, tp);
  f.weight_bytes = model.weight_bytes();
  f.kv_bytes_per_token = model.kv_bytes_per_token();
  f.node_hbm = a.gpus_per_node * a.hbm_bytes_per_gpu;
  f.reserve = f.node_hbm * a.runtime_reserve;
  f.kv_pool_bytes = f.node_hbm - f.reserve - f.weight_bytes * replicas_per_node;
  f.kv_pool_tokens = f.kv_pool_bytes > 0 ? f.kv_pool_bytes / f.kv_bytes_per_token : 0;
  f.max_sequences = f.kv_pool_tokens / a.context_tokens;

  f.step = decode_at(a, a.decode_batch, a.context_tokens, tp);
  f.node_decode_tokens_per_s = replicas_per_node * a.decode_batch / f.step.tpot;
  // The knee: where the KV read of the batch equals the weight read.
  f.knee = (f.weight_bytes / tp) / (a.context_tokens * f.kv_bytes_per_token / tp);
  f.knee_8k = (f.weight_bytes / tp) / (8192.0 * f.kv_bytes_per_token / tp);
  f.batch_at_slo = batch_at_slo(a, tp);
  f.kv_tokens_at_slo = static_cast<double>(f.batch_at_slo) * a.context_tokens;

  f.prefill_2k = prefill_at(a, 2048);
  f.prefill_32k = prefill_at(a, 32768);
  f.node_prefill_tokens_per_s = replicas_per_node * 2048.0 / f.prefill_2k.end_to_end_s;

  f.decode_demand = a.peak_requests_per_s * a.output_tokens;
  f.prefill_demand = a.peak_requests_per_s * a.input_tokens;
  f.prefill_after_cache = f.prefill_demand * (1 - a.prefix_hit_rate);
  f.decode_nodes = f.decode_demand / f.node_decode_tokens_per_s;
  f.prefill_nodes = f.prefill_after_cache / f.node_prefill_tokens_per_s;
  f.capacity_nodes = f.decode_nodes + f.prefill_nodes;
  f.fleet_nodes = count_up(f.capacity_nodes * a.burst_headroom);

  f.usd_per_hour = static_cast<double>(f.fleet_nodes) * a.gpus_per_node * a.gpu_hour_usd;
  f.usd_per_month = f.usd_per_hour * a.hours_per_month;
  f.output_tokens_per_hour = f.decode_demand * a.average_load * 3600;
  f.input_tokens_per_hour = f.prefill_demand * a.average_load * 3600;
  // Cost is attributed to output and input by the nodes each needs.
  const double decode_share = f.capacity_nodes > 0 ? f.decode_nodes / f.capacity_nodes : 0;
  f.usd_per_million_output = f.usd_per_hour * decode_share / (f.output_tokens_per_hour / 1e6);
  f.usd_per_million_input = f.usd_per_hour * (1 - decode_share) / (f.input_tokens_per_hour / 1e6);

  f.tp_half = option_for(a, std::max(1, a.gpus_per_node / 2));
  f.tp_full = option_for(a, a.gpus_per_node);
  return f;
}

fleet_figures derive_fleet(const fleet_assumptions& a) {
  fleet_figures f;
  f.kv_bytes_per_token = 2.0 * a.chat_layers * a.chat_kv_heads * a.chat_head_dim * a.chat_kv_dtype_bytes;
  f.output_tokens_per_s = a.concurrent_streams * a.stream_tokens_per_s;
  f.requests_per_s = f.output_tokens_per_s / a.answer_tokens;
  f.streams_per_replica = a.replica_tokens_per_s / a.stream_tokens_per_s;
  f.kv_bytes_of_streams = std::floor(f.streams_per_replica) * a.stream_context * f.kv_bytes_per_token;
  f.chat_replicas = count_up(f.output_tokens_per_s / a.replica_tokens_per_s);
  f.chat_replicas_at_one_gpu_rate = count_up(f.output_tokens_per_s / a.one_gpu_tokens_per_s);
  f.prompt_tokens_per_s = f.requests_per_s * a.prompt_tokens;
  f.prefill_after_cache = f.requests_per_s * (a.prompt_tokens - a.prefix_found * a.cached_prefix_tokens);
  f.reason_replicas = count_up(static_cast<double>(a.reason_streams) * a.reason_stream_tokens_per_s / a.reason_replica_tokens_per_s);
  // Each region carries the whole peak alone.
  f.gpus = count_up(static_cast<double>(a.regions) *
                    (f.chat_replicas + static_cast<double>(f.reason_replicas) * a.reason_gpus_per_replica));
  f.usd_per_month = f.gpus * a.gpu_hour_usd * a.hours_per_month;
  f.replica_tokens_per_hour = a.replica_tokens_per_s * 3600;
  f.usd_per_million_full = a.gpu_hour_usd / (f.replica_tokens_per_hour / 1e6);
  f.usd_per_million_half = 2 * f.usd_per_million_full;
  f.cold_start_growth = std::pow(1 + a.growth_per_minute, a.cold_start_minutes);
  f.load_at_arrival = a.scale_threshold * f.cold_start_growth;
  return f;
}

}  // namespace kiln::sim
