#pragma once
// CPU executor: the Llama-family forward pass (RMSNorm, RoPE with Llama 3 scaling, GQA
// attention over the paged block table, SwiGLU, tied embeddings, Qwen2 qkv bias, Qwen3 q/k
// norms) as one batched step over mixed prefill chunks and decodes, on a thread pool. The
// matrix products run in the weights' own dtype (cpu_model: F32, BF16 or INT8) on the best
// kernels the CPU has; the KV cache is F32 or BF16. The rest is the CPU twins of
// kernels/reference/.
#include <initializer_list>
#include <memory>
#include <vector>

#include "engine/cpu_model.hpp"
#include "engine/engine_core.hpp"
#include "engine/executor.hpp"
#include "engine/llama_model.hpp"
#include "engine/thread_pool.hpp"
#include "kernels/cpu/qmatrix.hpp"

namespace kiln::engine {

enum class kv_dtype : std::uint8_t { f32, bf16 };

class cpu_executor final : public executor {
 public:
  cpu_executor(std::shared_ptr<const cpu_model> model, kv_geometry kv, int threads, kv_dtype kv_type = kv_dtype::f32);
  /// F32 weights as loaded, F32 cache: the reference configuration tests compare with.
  cpu_executor(const std::shared_ptr<const llama_weights>& weights, kv_geometry kv, int threads);
  step_execution run(const step_plan& plan, const scheduler& sched, std::span<const sample_slot> slots) override;

  /// Logits of the last step's sampling rows, [slots, vocab] (for tests).
  const std::vector<float>& last_logits() const { return logits_; }
  const cpu_model& model() const { return *m_; }
  kv_dtype kv_type() const { return kv_type_; }
  executor_load load() const override { return {0, static_cast<double>(m_->bytes())}; }

 private:
  /// y[T, N] = x[T, K] . w^T (+ bias): one output of a fused matmul.
  struct projection {
    const kernels::cpu::qmatrix* w;
    const std::vector<float>* bias;
    float* y;
  };
  void matmul(const float* x, std::size_t T, std::size_t K, std::initializer_list<projection> outs);

  std::shared_ptr<const cpu_model> m_;
  kv_geometry kv_;
  kv_dtype kv_type_;
  thread_pool pool_;
  std::vector<float> inv_freq_;
  std::vector<float> k_cache_, v_cache_;              ///< F32: [layer][block][slot][kv_head][head_dim]
  std::vector<std::uint16_t> k_cache16_, v_cache16_;  ///< BF16: the same layout
  kernels::cpu::prepared_input in_;
  // per-step buffers, kept to avoid reallocation
  std::vector<float> x_, h_, q_, k_, v_, attn_, o_, gate_, up_, logits_;
};

}  // namespace kiln::engine
