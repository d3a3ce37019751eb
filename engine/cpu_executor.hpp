#pragma once
// CPU executor: the Llama-family forward pass (RMSNorm, RoPE with Llama 3 scaling, GQA
// attention over the paged block table, SwiGLU, tied embeddings, Qwen2 qkv bias) as one
// batched step over mixed prefill chunks and decodes, on a thread pool. The math is the
// CPU twins of kernels/reference/.
#include <initializer_list>
#include <memory>
#include <vector>

#include "engine/engine_core.hpp"
#include "engine/executor.hpp"
#include "engine/llama_model.hpp"
#include "engine/thread_pool.hpp"

namespace kiln::engine {

class cpu_executor final : public executor {
 public:
  cpu_executor(std::shared_ptr<const llama_weights> weights, kv_geometry kv, int threads);
  step_execution run(const step_plan& plan, const scheduler& sched, std::span<const sample_slot> slots) override;

  /// Logits of the last step's sampling rows, [slots, vocab] (for tests).
  const std::vector<float>& last_logits() const { return logits_; }
  const llama_weights& weights() const { return *w_; }
  executor_load load() const override { return {0, static_cast<double>(w_->bytes())}; }

 private:
  /// y[T, N] = x[T, K] . w^T (+ bias): one output of a fused matmul.
  struct projection {
    const std::vector<float>* w;
    const std::vector<float>* bias;
    std::size_t N;
    float* y;
  };
  void matmul(const float* x, std::size_t T, std::size_t K, std::initializer_list<projection> outs);

  std::shared_ptr<const llama_weights> w_;
  kv_geometry kv_;
  thread_pool pool_;
  std::vector<float> inv_freq_;
  std::vector<float> k_cache_, v_cache_;  ///< [layer][block][slot][kv_head][head_dim]
  // per-step buffers, kept to avoid reallocation
  std::vector<float> x_, h_, q_, k_, v_, attn_, o_, gate_, up_, logits_;
};

}  // namespace kiln::engine
