#include "kernels/gemm.hpp"

#include <cublasLt.h>

namespace kiln::kernels {

namespace {

std::string status(const char* what, cublasStatus_t s) {
  return std::string(what) + " failed: cuBLAS status " + std::to_string(static_cast<int>(s));
}

// Owns the descriptors of one (T, N, K, type) problem and its chosen algorithm.
struct problem {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t chosen{};
  ~problem() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

}  // namespace

struct gemm_runner::algo : problem {};

std::variant<std::unique_ptr<gemm_runner>, std::string> gemm_runner::create(std::size_t workspace_bytes) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return std::string("no CUDA device");
  std::unique_ptr<gemm_runner> g(new gemm_runner());
  cublasLtHandle_t h = nullptr;
  if (auto s = cublasLtCreate(&h); s != CUBLAS_STATUS_SUCCESS) return status("cublasLtCreate", s);
  g->handle_ = h;
  if (cudaMalloc(&g->workspace_, workspace_bytes) != cudaSuccess) return std::string("cannot allocate the GEMM workspace");
  g->workspace_bytes_ = workspace_bytes;
  return g;
}

gemm_runner::~gemm_runner() {
  algos_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

std::string gemm_runner::matmul_xwt(const void* x, const void* w, gemm_input type, float* y, int T, int N, int K,
                                    cudaStream_t stream) {
  if (T <= 0 || N <= 0 || K <= 0) return {};
  const auto key = std::make_tuple(T, N, K, static_cast<int>(type));
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    // Column-major view: y^T [N, T] = op_T(w as [K, N]) . (x as [K, T]).
    auto p = std::make_shared<algo>();
    const cudaDataType_t in = type == gemm_input::bf16 ? CUDA_R_16BF : type == gemm_input::f16 ? CUDA_R_16F : CUDA_R_32F;
    cublasStatus_t s = cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s != CUBLAS_STATUS_SUCCESS) return status("cublasLtMatmulDescCreate", s);
    const cublasOperation_t trans = CUBLAS_OP_T;
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans);
    if ((s = cublasLtMatrixLayoutCreate(&p->a, in, K, N, K)) != CUBLAS_STATUS_SUCCESS) return status("layout A", s);
    if ((s = cublasLtMatrixLayoutCreate(&p->b, in, K, T, K)) != CUBLAS_STATUS_SUCCESS) return status("layout B", s);
    if ((s = cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, N, T, N)) != CUBLAS_STATUS_SUCCESS) return status("layout C", s);
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                         sizeof workspace_bytes_);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    s = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->desc, p->a, p->b, p->c, p->c, pref, 1,
                                       &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) return status("cublasLtMatmulAlgoGetHeuristic", s);
    p->chosen = result.algo;
    it = algos_.emplace(key, std::move(p)).first;
  }
  const algo& p = *it->second;
  const float alpha = 1.f, beta = 0.f;
  const cublasStatus_t s = cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.desc, &alpha, w, p.a, x, p.b, &beta, y,
                                          p.c, y, p.c, &p.chosen, workspace_, workspace_bytes_, stream);
  return s == CUBLAS_STATUS_SUCCESS ? std::string() : status("cublasLtMatmul", s);
}

}  // namespace kiln::kernels
