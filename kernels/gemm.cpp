#include "kernels/gemm.hpp"

#include <cublasLt.h>
#include <dlfcn.h>

#include <mutex>

#ifndef KILN_CUDA_LIBRARY_DIR
#define KILN_CUDA_LIBRARY_DIR ""
#endif

namespace kiln::kernels {

namespace {

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)

// cuBLASLt's entry points, resolved on first use: linked into the binary, the library's
// 400,000 relocations cost every kiln start (`kiln ops`, `kiln sim`, a CPU-only serve)
// 0.16 s and 25,000 page faults, GPU or not.
#define KILN_LT_ENTRY_POINTS(X)                                                              \
  X(create, cublasLtCreate) X(destroy, cublasLtDestroy) X(matmul, cublasLtMatmul)              \
  X(heuristic, cublasLtMatmulAlgoGetHeuristic) X(desc_create, cublasLtMatmulDescCreate)        \
  X(desc_destroy, cublasLtMatmulDescDestroy) X(desc_set, cublasLtMatmulDescSetAttribute)       \
  X(pref_create, cublasLtMatmulPreferenceCreate) X(pref_destroy, cublasLtMatmulPreferenceDestroy) \
  X(pref_set, cublasLtMatmulPreferenceSetAttribute) X(layout_create, cublasLtMatrixLayoutCreate)  \
  X(layout_destroy, cublasLtMatrixLayoutDestroy)

struct lt_api {
#define KILN_LT_MEMBER(field, symbol) decltype(&symbol) field = nullptr;
  KILN_LT_ENTRY_POINTS(KILN_LT_MEMBER)
#undef KILN_LT_MEMBER
};

struct lt_loaded {
  lt_api api;
  std::string error;  ///< why it could not be loaded; empty when it was
};

const lt_loaded& load_lt() {
  static lt_loaded l;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string name = "libcublasLt.so." KILN_STR(CUBLAS_VER_MAJOR);
    void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h && *KILN_CUDA_LIBRARY_DIR) h = ::dlopen((std::string(KILN_CUDA_LIBRARY_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = ::dlerror();
      l.error = "cannot load " + name + ": " + (e ? e : "not found");
      return;
    }
    auto bind = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, symbol));
      if (!fn && l.error.empty()) l.error = name + " lacks " + symbol;
    };
    lt_api& a = l.api;
#define KILN_LT_BIND(field, symbol) bind(a.field, #symbol);
    KILN_LT_ENTRY_POINTS(KILN_LT_BIND)
#undef KILN_LT_BIND
  });
  return l;
}

const lt_api& lt() { return load_lt().api; }

std::string status(const char* what, cublasStatus_t s) {
  return std::string(what) + " failed: cuBLAS status " + std::to_string(static_cast<int>(s));
}

// Owns the descriptors of one (T, N, K, type) problem and its chosen algorithm.
struct problem {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t chosen{};
  ~problem() {
    if (desc) lt().desc_destroy(desc);
    if (a) lt().layout_destroy(a);
    if (b) lt().layout_destroy(b);
    if (c) lt().layout_destroy(c);
  }
};

}  // namespace

struct gemm_runner::algo : problem {};

std::variant<std::unique_ptr<gemm_runner>, std::string> gemm_runner::create(std::size_t workspace_bytes) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return std::string("no CUDA device");
  if (const auto& l = load_lt(); !l.error.empty()) return l.error;
  std::unique_ptr<gemm_runner> g(new gemm_runner());
  cublasLtHandle_t h = nullptr;
  if (auto s = lt().create(&h); s != CUBLAS_STATUS_SUCCESS) return status("cublasLtCreate", s);
  g->handle_ = h;
  if (cudaMalloc(&g->workspace_, workspace_bytes) != cudaSuccess) return std::string("cannot allocate the GEMM workspace");
  g->workspace_bytes_ = workspace_bytes;
  return g;
}

gemm_runner::~gemm_runner() {
  algos_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) lt().destroy(static_cast<cublasLtHandle_t>(handle_));
}

std::string gemm_runner::library_error() { return load_lt().error; }

std::string gemm_runner::matmul_xwt(const void* x, const void* w, gemm_input type, float* y, int T, int N, int K,
                                    cudaStream_t stream) {
  if (T <= 0 || N <= 0 || K <= 0) return {};
  const auto key = std::make_tuple(T, N, K, static_cast<int>(type));
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    // Column-major view: y^T [N, T] = op_T(w as [K, N]) . (x as [K, T]).
    auto p = std::make_shared<algo>();
    const cudaDataType_t in = type == gemm_input::bf16 ? CUDA_R_16BF : type == gemm_input::f16 ? CUDA_R_16F : CUDA_R_32F;
    cublasStatus_t s = lt().desc_create(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s != CUBLAS_STATUS_SUCCESS) return status("cublasLtMatmulDescCreate", s);
    const cublasOperation_t trans = CUBLAS_OP_T;
    lt().desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans);
    if ((s = lt().layout_create(&p->a, in, K, N, K)) != CUBLAS_STATUS_SUCCESS) return status("layout A", s);
    if ((s = lt().layout_create(&p->b, in, K, T, K)) != CUBLAS_STATUS_SUCCESS) return status("layout B", s);
    if ((s = lt().layout_create(&p->c, CUDA_R_32F, N, T, N)) != CUBLAS_STATUS_SUCCESS) return status("layout C", s);
    cublasLtMatmulPreference_t pref = nullptr;
    lt().pref_create(&pref);
    lt().pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                         sizeof workspace_bytes_);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    s = lt().heuristic(static_cast<cublasLtHandle_t>(handle_), p->desc, p->a, p->b, p->c, p->c, pref, 1,
                                       &result, &found);
    lt().pref_destroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) return status("cublasLtMatmulAlgoGetHeuristic", s);
    p->chosen = result.algo;
    it = algos_.emplace(key, std::move(p)).first;
  }
  const algo& p = *it->second;
  const float alpha = 1.f, beta = 0.f;
  const cublasStatus_t s = lt().matmul(static_cast<cublasLtHandle_t>(handle_), p.desc, &alpha, w, p.a, x, p.b, &beta, y,
                                          p.c, y, p.c, &p.chosen, workspace_, workspace_bytes_, stream);
  return s == CUBLAS_STATUS_SUCCESS ? std::string() : status("cublasLtMatmul", s);
}

}  // namespace kiln::kernels
