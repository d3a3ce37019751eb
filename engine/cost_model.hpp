#pragma once
// Roofline step-time model of a dense decoder on one GPU class (the sizing seed, 001).
// Every assumption is a named field so config can override it.
#include <cstdint>
#include <vector>

namespace kiln::engine {

/// Model shape and precision. params == 0 means "derive from the shape".
struct model_shape {
  int layers = 32;
  int d_model = 4096;
  int heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  int ffn_dim = 14336;
  int vocab = 32000;
  double params = 0;           ///< total parameters; 0: computed from the shape
  double dtype_bytes = 2;      ///< weight bytes per parameter (FP16: 2)
  double kv_dtype_bytes = 2;   ///< KV cache bytes per element
  double activation_bytes = 2; ///< what crosses the all-reduce (bf16 even with fp8 weights)
};

/// Hardware and efficiency assumptions (A3-A7 of seed 001), H200-class defaults.
struct gpu_assumptions {
  double hbm_bytes_per_s = 4.8e12;      ///< peak HBM bandwidth
  double flops_per_s = 989e12;          ///< peak dense FP16/BF16 FLOP/s
  double bandwidth_efficiency = 0.70;   ///< A4: achieved fraction of HBM bandwidth on decode
  double flops_efficiency = 0.40;       ///< A5: achieved fraction of FLOP/s on prefill GEMMs
  double end_to_end_efficiency = 0.60;  ///< A6: scheduler gaps, sampling, ragged batches
  double allreduce_bytes_per_s = 300e9; ///< A7: per-GPU all-reduce bandwidth
  double allreduce_latency_s = 8e-6;    ///< A7: fixed cost per collective
  double fixed_step_s = 1.5e-3;         ///< schedule, sample, detokenize per step
  int tensor_parallel = 1;              ///< GPUs per replica
  double hbm_capacity_bytes = 141e9;    ///< memory per GPU
  double kv_memory_fraction = 0.90;     ///< of HBM for weights + KV; the rest is runtime reserve
};

/// Whether `tp` GPUs split a model's heads as tensor parallelism needs: each holds a whole
/// number of attention heads, and of KV heads or copies of one.
inline bool heads_split_evenly(int heads, int kv_heads, int tp) {
  return tp > 0 && heads % tp == 0 && (kv_heads % tp == 0 || tp % kv_heads == 0);
}

/// What one step asks of the hardware: tokens computed and KV tokens read.
struct step_shape {
  std::int64_t new_tokens = 0;      ///< prefill + decode tokens computed this step
  std::int64_t kv_tokens_read = 0;  ///< context tokens whose K/V are read (summed over sequences)
  double attention_flops = 0;       ///< causal attention FLOPs of prefill chunks
};

/// Breakdown of one step's modelled time, seconds.
struct step_time {
  double memory = 0;
  double compute = 0;
  double allreduce = 0;
  double fixed = 0;
  double roofline = 0;  ///< max(memory, compute) + allreduce + fixed
  double total = 0;     ///< roofline / end_to_end_efficiency
};

class cost_model {
 public:
  cost_model(model_shape shape, gpu_assumptions gpu);

  double params() const { return params_; }
  double weight_bytes() const { return params_ * shape_.dtype_bytes; }
  /// 2 (K and V) x layers x kv_heads x head_dim x bytes.
  double kv_bytes_per_token() const;
  /// Attention FLOPs of a prefill chunk of `chunk` tokens that follows `past` cached tokens.
  double attention_flops(std::int64_t chunk, std::int64_t past) const;
  step_time time(const step_shape& s) const;
  /// time().total of `steps` steady decode steps of `batch` sequences that hold `kv_tokens`
  /// before the first: step k (from 1) reads kv_tokens + batch * k. The same figures as
  /// time() to the bit, its per-step constants worked out once; written over `out`.
  void decode_totals(std::int64_t batch, std::int64_t kv_tokens, int steps, std::vector<double>& out) const;
  /// Tokens a step computes before its compute time reaches the time it takes to read the
  /// weights (the roofline's knee; at least 1): up to there, more tokens make a step no longer.
  int memory_bound_tokens() const;
  /// KV blocks that fit beside the weights on the replica's GPUs (at least 0).
  int kv_blocks(int block_size) const;

  const model_shape& shape() const { return shape_; }
  const gpu_assumptions& gpu() const { return gpu_; }

 private:
  /// A step's HBM time: the weights' share of one GPU, then `kv_tokens_read` tokens' K and V.
  double memory_seconds(std::int64_t kv_tokens_read, double weights_per_gpu, double kv_bytes) const;

  model_shape shape_;
  gpu_assumptions gpu_;
  double params_;
};

}  // namespace kiln::engine
