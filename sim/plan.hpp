#pragma once
// The sizing model of seed 001 as a tool: from an assumptions table (model shape, dtypes, GPU
// bandwidth and FLOP/s, efficiencies, fabric, traffic mix, prefix hit rate, load, price) the
// derived figures: KV bytes per token, KV pool and sequences, decode step time and its terms,
// the knee, the batch at the TPOT SLO, node throughput, prefill time, fleet size and cost.
// Also seed 000's fleet arithmetic for the 7B chat and 70B reasoning pools. Pure functions.
#include <string>
#include <string_view>
#include <variant>

namespace kiln::sim {

/// Seed 001's assumptions register (A1-A12) plus the few constants its derivations use.
struct plan_assumptions {
  // A1: model shape (a 70B dense decoder)
  double params = 70e9;
  int layers = 80;
  int d_model = 8192;
  int heads = 64;
  int kv_heads = 8;
  int head_dim = 128;
  // A2: dtypes (bytes per element); activations cross the all-reduce at activation_bytes
  std::string weight_dtype = "bf16";
  std::string kv_dtype = "bf16";
  double activation_bytes = 2;
  // A3: node
  int gpus_per_node = 8;
  double hbm_bytes_per_gpu = 192e9;
  double hbm_bytes_per_s = 5.3e12;
  double flops_per_s = 1300e12;
  double runtime_reserve = 0.15;  ///< of node HBM: activations, workspace, buffers
  // A4-A6: efficiencies
  double bandwidth_efficiency = 0.70;
  double flops_efficiency = 0.40;
  double end_to_end_efficiency = 0.60;
  // A7: fabric
  double allreduce_bytes_per_s = 300e9;
  double allreduce_latency_s = 8e-6;
  double fixed_step_s = 1.5e-3;  ///< schedule, sample, detokenize
  int tensor_parallel = 8;
  // A8-A12: traffic and money
  double peak_requests_per_s = 300;
  double input_tokens = 1500;
  double output_tokens = 250;
  int context_tokens = 2048;   ///< A9: average live context
  double prefix_hit_rate = 0.60;
  double average_load = 0.45;
  double gpu_hour_usd = 3.00;
  // operating point and SLO
  int decode_batch = 192;
  double tpot_slo_s = 0.030;
  double burst_headroom = 1.25;  ///< burst and N+1 across two zones, on the capacity nodes
  int hours_per_month = 720;
};

/// Bytes per element of a dtype name (bf16, fp16, fp8, int8, int4, fp32); 0 if unknown.
double dtype_bytes(std::string_view dtype);

/// One decode step's time at a batch and context, seconds (seed 001 §4.4).
struct decode_step {
  int batch = 0;
  double weight_bytes = 0;  ///< per GPU
  double kv_bytes = 0;      ///< per GPU
  double memory = 0;
  double compute = 0;
  double allreduce = 0;
  double fixed = 0;
  double roofline = 0;  ///< max(memory, compute) + allreduce + fixed
  double tpot = 0;      ///< roofline / end-to-end efficiency
  bool memory_bound() const { return memory >= compute; }
};

struct prefill_time {
  int tokens = 0;
  double linear_flops = 0;
  double attention_flops = 0;
  double at_mfu_s = 0;        ///< FLOPs over achieved FLOP/s (A5) on the node
  double end_to_end_s = 0;    ///< the same over A6 as well
  double attention_share() const { return attention_flops / (linear_flops + attention_flops); }
};

/// One parallelism choice for the TP comparison.
struct tp_option {
  int tp = 0;
  int replicas_per_node = 0;
  double weights_on_node = 0;
  double kv_pool_bytes = 0;
  int batch_at_slo = 0;             ///< per replica
  double node_tokens_per_s_at_slo = 0;
};

/// Every figure seed 001 derives.
struct plan_figures {
  double weight_bytes = 0;
  double kv_bytes_per_token = 0;
  double node_hbm = 0;
  double reserve = 0;
  double kv_pool_bytes = 0;
  double kv_pool_tokens = 0;
  double max_sequences = 0;
  decode_step step;             ///< at the operating batch
  double node_decode_tokens_per_s = 0;
  double knee = 0;              ///< at the average context
  double knee_8k = 0;
  int batch_at_slo = 0;
  double kv_tokens_at_slo = 0;
  prefill_time prefill_2k, prefill_32k;
  double node_prefill_tokens_per_s = 0;  ///< at 2k, end to end
  double decode_demand = 0, prefill_demand = 0, prefill_after_cache = 0;
  double decode_nodes = 0, prefill_nodes = 0, capacity_nodes = 0;
  int fleet_nodes = 0;
  double usd_per_hour = 0, usd_per_month = 0;
  double output_tokens_per_hour = 0, input_tokens_per_hour = 0;
  double usd_per_million_output = 0, usd_per_million_input = 0;
  tp_option tp_half, tp_full;  ///< TP = node/2 with two replicas, TP = node with one
};

/// The most nodes, replicas or GPUs a plan counts: a figure past it is held there, and the
/// assumptions that lead to it are refused (parse_plan_assumptions).
inline constexpr int kMaxPlanCount = 1'000'000'000;

plan_figures derive(const plan_assumptions& a);
decode_step decode_at(const plan_assumptions& a, int batch, int context, int tp);
prefill_time prefill_at(const plan_assumptions& a, int tokens);
/// The largest batch whose TPOT meets the SLO at the average context and `tp`.
int batch_at_slo(const plan_assumptions& a, int tp);

/// Seed 000's fleet: a 7B chat pool and a 70B reasoning pool in two regions.
struct fleet_assumptions {
  int chat_layers = 32, chat_kv_heads = 8, chat_head_dim = 128;
  double chat_kv_dtype_bytes = 2;
  double chat_weight_bytes = 14e9;
  double gpu_memory = 80e9;
  int concurrent_streams = 1000;
  double stream_tokens_per_s = 30;
  double answer_tokens = 300;
  double replica_tokens_per_s = 2500;  ///< assumed; a capacity run replaces it
  double one_gpu_tokens_per_s = 800;   ///< the one-GPU batching problem's figure
  double prompt_tokens = 1200;
  double cached_prefix_tokens = 800;
  double prefix_found = 0.80;
  double stream_context = 1500;
  int reason_streams = 60;
  double reason_stream_tokens_per_s = 20;
  double reason_replica_tokens_per_s = 400;
  int reason_gpus_per_replica = 2;  ///< INT8
  int regions = 2;
  double gpu_hour_usd = 2.50;
  int hours_per_month = 720;
  double growth_per_minute = 0.05;
  double cold_start_minutes = 6;
  double scale_threshold = 0.70;
};

struct fleet_figures {
  double kv_bytes_per_token = 0;
  double output_tokens_per_s = 0;
  double requests_per_s = 0;
  double streams_per_replica = 0;
  double kv_bytes_of_streams = 0;  ///< streams_per_replica at stream_context
  int chat_replicas = 0;
  int chat_replicas_at_one_gpu_rate = 0;
  double prompt_tokens_per_s = 0;
  double prefill_after_cache = 0;
  int reason_replicas = 0;
  int gpus = 0;
  double usd_per_month = 0;
  double replica_tokens_per_hour = 0;
  double usd_per_million_full = 0, usd_per_million_half = 0;
  double cold_start_growth = 0;
  double load_at_arrival = 0;
};

fleet_figures derive_fleet(const fleet_assumptions& a);

/// Reads an assumptions file (TOML: [model] [node] [efficiency] [fabric] [traffic] [slo]
/// [fleet] tables; any key left out keeps seed 001's or seed 000's value).
struct plan_input {
  plan_assumptions sizing;
  fleet_assumptions fleet;
};
std::variant<plan_input, std::string> parse_plan_assumptions(std::string_view toml_text, std::string_view origin);

/// The derived tables as text.
std::string render_plan(const plan_input& in);

/// `kiln plan [--assumptions FILE] [--weight-dtype D] [--kv-dtype D] [--tp N]`.
int run_plan(int argc, const char* const* argv, std::string& out, std::string& err);

}  // namespace kiln::sim
