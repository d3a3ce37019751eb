#pragma once
// GEMMs through cuBLASLt: y[T, N] = x[T, K] . w[N, K]^T (projections as Hugging Face stores
// them), BF16, FP16 or FP32 inputs, FP32 accumulation and output. The algorithm for a shape is
// chosen once by cuBLASLt's heuristic and cached; the library is opened on first use. Twin: reference::matmul_xwt.
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <variant>

#include <cuda_runtime.h>

namespace kiln::kernels {

/// bf16/f16: tensor-core inputs, FP32 accumulation. f32: full FP32 (no TF32), for checks
/// that must match the CPU executor bit for bit in the choices they make.
enum class gemm_input { bf16, f16, f32 };

class gemm_runner {
 public:
  /// A handle and workspace on the current device, or why not (no GPU, say).
  static std::variant<std::unique_ptr<gemm_runner>, std::string> create(std::size_t workspace_bytes = 32u << 20);
  ~gemm_runner();
  gemm_runner(const gemm_runner&) = delete;
  gemm_runner& operator=(const gemm_runner&) = delete;

  /// Why cuBLASLt could not be loaded (it is opened on first use); empty when it was.
  static std::string library_error();
  /// All pointers on the device; empty on success, else what failed.
  std::string matmul_xwt(const void* x, const void* w, gemm_input type, float* y, int T, int N, int K, cudaStream_t stream);
  std::size_t cached_algorithms() const { return algos_.size(); }

 private:
  gemm_runner() = default;
  struct algo;  // descriptors and the chosen algorithm of one shape
  void* handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::map<std::tuple<int, int, int, int>, std::shared_ptr<algo>> algos_;
};

}  // namespace kiln::kernels
