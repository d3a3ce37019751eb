#pragma once
// cuda executor: the Llama-family step of the CPU executor on one GPU: kernels/ on a stream
// the executor owns, cuBLASLt GEMMs over BF16 (or FP32) weights, a device KV pool sized from
// the memory left after the weights. Weights reach the device through a pinned staging buffer,
// timed. Built only with nvcc; run on a thread of its own (the engine actor is detached).
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "engine/engine_core.hpp"
#include "engine/executor.hpp"
#include "engine/llama_model.hpp"
#include "kernels/gemm.hpp"

namespace kiln::engine {

/// How projection weights sit on the device: BF16; FP32 (exact checks against the CPU);
/// INT8 with a scale per output row (half the memory of BF16; dequantised before each GEMM).
enum class cuda_weights { bf16, f32, int8 };

struct cuda_options {
  cuda_weights weights = cuda_weights::bf16;
  double memory_fraction = 0.90;  ///< of the device's memory for weights + KV; the rest is reserve
  int kv_blocks = 0;              ///< 0: as many as fit
  int block_size = 16;
  bool graphs = true;             ///< replay decode steps of each batch size as CUDA graphs
  int max_step_tokens = 2048;     ///< step buffers are sized for these once (fixed pointers)
  int max_batch = 256;
  int max_context = 32768;        ///< block tables have room for this many tokens a sequence
};

/// The cold-start arithmetic of a load, measured.
struct cuda_load_report {
  double convert_s = 0;  ///< host: F32 -> BF16 / INT8 into pinned staging
  double upload_s = 0;   ///< host to device copies
  double bytes = 0;      ///< bytes on the device
  int kv_blocks = 0;
};

class cuda_executor final : public executor {
 public:
  static std::variant<std::unique_ptr<cuda_executor>, std::string> create(std::shared_ptr<const llama_weights> w,
                                                                         cuda_options opts);
  /// Weights drawn on the device (no host copy): benchmarks of 7B shapes.
  static std::variant<std::unique_ptr<cuda_executor>, std::string> create_random(const llama_config& cfg, cuda_options opts,
                                                                                std::uint64_t seed);
  ~cuda_executor() override;

  step_execution run(const step_plan& plan, const scheduler& sched, std::span<const sample_slot> slots) override;
  /// Turns graph replay on or off (a benchmark compares both); off also drops captured graphs.
  void set_graphs(bool on);
  std::size_t captured_graphs() const;
  kv_geometry kv() const { return {load_.kv_blocks, opts_.block_size}; }
  const cuda_load_report& report() const { return load_; }
  executor_load load() const override { return {load_.convert_s + load_.upload_s, load_.bytes}; }
  double weight_bytes() const { return weight_bytes_; }

  struct device_state;

 private:
  cuda_executor() = default;
  std::string reserve_steps();
  std::unique_ptr<device_state> d_;
  llama_config cfg_;
  cuda_options opts_;
  cuda_load_report load_;
  double weight_bytes_ = 0;
};

}  // namespace kiln::engine
