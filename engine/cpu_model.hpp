#pragma once
// A Llama-family model laid out for the CPU executor in one weight dtype (F32, BF16 or INT8
// weight-only): the projection matrices as kernels::cpu::qmatrix, norms and biases in F32.
// Built once per pool and shared by its replicas; the F32 weights it came from can go.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/llama_model.hpp"
#include "kernels/cpu/qmatrix.hpp"

namespace kiln::engine {

struct cpu_layer {
  std::vector<float> attn_norm, bq, bk, bv, q_norm, k_norm, mlp_norm;
  kernels::cpu::qmatrix wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct cpu_model {
  llama_config cfg;
  kernels::cpu::wtype type = kernels::cpu::wtype::f32;
  kernels::cpu::isa_path path = kernels::cpu::isa_path::scalar;  ///< the kernels every product runs
  kernels::cpu::qmatrix head;   ///< [vocab, hidden]: lm_head, or the embeddings when tied
  kernels::cpu::qmatrix embed;  ///< empty when tied (the head's rows are the embeddings)
  std::vector<float> final_norm;
  std::vector<cpu_layer> layers;
  double convert_seconds = 0;  ///< making it from the F32 weights

  const kernels::cpu::qmatrix& embeddings() const { return embed.empty() ? head : embed; }
  /// Weight bytes one decode step reads (every projection and the head, in their dtype).
  std::size_t bytes() const;
  /// e.g. "bf16 weights on avx512_bf16 (cpu: avx2 avx512 avx512_bf16 ...)"
  std::string describe() const;
};

/// Builds a cpu_model while load_llama / load_model_dir read the files: each matrix is
/// converted as it arrives and its F32 values freed, so memory holds the model in its dtype
/// plus one F32 matrix at most. Without a type, the files' own (f32, f16 or bf16).
class cpu_model_loader {
 public:
  /// Without a path, the best this CPU has for the type.
  explicit cpu_model_loader(std::optional<kernels::cpu::wtype> type = std::nullopt,
                            std::optional<kernels::cpu::isa_path> path = std::nullopt);
  /// Takes each matrix (convert, then frees its F32 values).
  weight_sink sink();
  /// Converts `m`, one of w's matrices, into the model (leaving it as it is).
  void convert(const llama_weights& w, const std::vector<float>& m, std::size_t N, std::size_t K);
  /// The model, once loading succeeded: the norms and biases come from `w`.
  std::shared_ptr<const cpu_model> finish(const llama_weights& w);

 private:
  std::optional<kernels::cpu::wtype> type_;
  std::optional<kernels::cpu::isa_path> path_;
  std::shared_ptr<cpu_model> m_ = std::make_shared<cpu_model>();
  std::chrono::steady_clock::duration spent_{};
};

/// Converts `w` to `type`, running the best kernels this CPU has for it (or `path`).
std::shared_ptr<const cpu_model> make_cpu_model(const llama_weights& w, kernels::cpu::wtype type);
std::shared_ptr<const cpu_model> make_cpu_model(const llama_weights& w, kernels::cpu::wtype type,
                                                kernels::cpu::isa_path path);

}  // namespace kiln::engine
