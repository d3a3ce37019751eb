#include "engine/cuda_executor.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <cmath>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/reference/ops.hpp"
#include "kernels/reference/quant.hpp"
#include "kernels/reference/sampling.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/sampling.hpp"
#include "engine/sampler.hpp"

namespace kiln::engine {

namespace {

namespace k = kiln::kernels;
using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

std::string cuda_error(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

// Device memory that grows on demand.
struct dmem {
  void* p = nullptr;
  std::size_t bytes = 0;
  dmem() = default;
  dmem(const dmem&) = delete;
  dmem& operator=(const dmem&) = delete;
  dmem(dmem&& o) noexcept : p(std::exchange(o.p, nullptr)), bytes(std::exchange(o.bytes, 0)) {}
  ~dmem() {
    if (p) cudaFree(p);
  }
  cudaError_t ensure(std::size_t n) {
    if (n <= bytes) return cudaSuccess;
    if (p) cudaFree(p);
    p = nullptr;
    bytes = 0;
    const cudaError_t e = cudaMalloc(&p, n);
    if (e == cudaSuccess) bytes = n;
    return e;
  }
  float* f() const { return static_cast<float*>(p); }
  std::int32_t* i() const { return static_cast<std::int32_t*>(p); }
};

// A projection on the device: BF16, F32 or INT8 data (+ per-row scales for INT8).
struct weight_dev {
  dmem data, scales;
};

struct layer_dev {
  dmem attn_norm, bq, bk, bv, q_norm, k_norm, mlp_norm;
  weight_dev wq, wk, wv, wo, w_gate, w_up, w_down;
};

}  // namespace

struct cuda_executor::device_state {
  cudaStream_t stream = nullptr;
  std::unique_ptr<k::gemm_runner> gemm;
  cuda_weights mode = cuda_weights::bf16;
  dmem embed, final_norm, inv_freq, wscratch;
  weight_dev head;
  std::vector<layer_dev> layers;
  std::vector<dmem> k_cache, v_cache;
  dmem x, h, hb, q, kk, vv, attn, o, gate, up, xs, xsn, logits, work;
  dmem ids, pos, slots, row_seq, row_pos, sample_rows, tables, params, tokens;
  void* pinned = nullptr;
  std::size_t pinned_bytes = 0;
  std::map<int, cudaGraphExec_t> graphs;  ///< decode steps by batch size
  std::set<int> warmed;                   ///< batch sizes run once without capture
  std::vector<void*> buffers_seen;        ///< step buffer addresses the graphs were captured with

  ~device_state() {
    clear_graphs();
    if (stream) cudaStreamDestroy(stream);
    if (pinned) cudaFreeHost(pinned);
  }
  void clear_graphs() {
    for (auto& [b, g] : graphs) cudaGraphExecDestroy(g);
    graphs.clear();
    warmed.clear();
  }
  std::vector<void*> step_buffers() const {
    return {x.p, h.p, hb.p, q.p, kk.p, vv.p, attn.p, o.p, gate.p, up.p, xs.p, xsn.p, logits.p, work.p, wscratch.p,
            ids.p, pos.p, slots.p, row_seq.p, sample_rows.p, tables.p, params.p, tokens.p, pinned};
  }
  cudaError_t ensure_pinned(std::size_t n) {
    if (n <= pinned_bytes) return cudaSuccess;
    if (pinned) cudaFreeHost(pinned);
    pinned = nullptr;
    pinned_bytes = 0;
    const cudaError_t e = cudaMallocHost(&pinned, n);
    if (e == cudaSuccess) pinned_bytes = n;
    return e;
  }

  // y[T, N] = x[T, K] . w^T through the weights' dtype.
  std::string gemm_xwt(const float* x, int T, int K, const weight_dev& w, int N, float* y) {
    if (mode == cuda_weights::f32) return gemm->matmul_xwt(x, w.data.p, k::gemm_input::f32, y, T, N, K, stream);
    if (auto e = hb.ensure(static_cast<std::size_t>(T) * K * 2); e != cudaSuccess) return cuda_error("activations", e);
    if (auto e = k::launch_f32_to_bf16(x, static_cast<__nv_bfloat16*>(hb.p), static_cast<std::int64_t>(T) * K, stream);
        e != cudaSuccess)
      return cuda_error("f32_to_bf16", e);
    const void* weights = w.data.p;
    if (mode == cuda_weights::int8) {
      if (auto e = wscratch.ensure(static_cast<std::size_t>(N) * K * 2); e != cudaSuccess) return cuda_error("dequant scratch", e);
      if (auto e = k::launch_dequant_int8_bf16(static_cast<const std::int8_t*>(w.data.p), w.scales.f(), N, K,
                                               static_cast<__nv_bfloat16*>(wscratch.p), stream);
          e != cudaSuccess)
        return cuda_error("dequant_int8_bf16", e);
      weights = wscratch.p;
    }
    return gemm->matmul_xwt(hb.p, weights, k::gemm_input::bf16, y, T, N, K, stream);
  }
};

namespace {

// Copies host bytes to the device through pinned staging, converting each chunk with
// `convert(first, count, staging)`; times conversion and copies apart.
template <class Convert>
std::string stage(cuda_executor::device_state& d, std::size_t n, std::size_t elem, dmem& dst, cuda_load_report& load,
                  Convert convert) {
  if (auto e = dst.ensure(n * elem); e != cudaSuccess) return cuda_error("weights", e);
  constexpr std::size_t kChunk = 16u << 20;  // elements per staging round
  if (auto e = d.ensure_pinned(kChunk * 4); e != cudaSuccess) return cuda_error("pinned staging", e);
  for (std::size_t off = 0; off < n; off += kChunk) {
    const std::size_t m = std::min(kChunk, n - off);
    const auto t0 = clock_type::now();
    convert(off, m, d.pinned);
    load.convert_s += since(t0);
    const auto t1 = clock_type::now();
    cudaError_t e = cudaMemcpyAsync(static_cast<char*>(dst.p) + off * elem, d.pinned, m * elem, cudaMemcpyHostToDevice, d.stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d.stream);
    if (e != cudaSuccess) return cuda_error("upload", e);
    load.upload_s += since(t1);
  }
  load.bytes += static_cast<double>(n * elem);
  return {};
}

// Host F32 values to the device as F32 or BF16.
std::string upload(cuda_executor::device_state& d, const std::vector<float>& v, bool as_bf16, dmem& dst,
                   cuda_load_report& load) {
  if (v.empty()) return {};
  return stage(d, v.size(), as_bf16 ? 2 : 4, dst, load, [&](std::size_t off, std::size_t m, void* out) {
    if (!as_bf16) return static_cast<void>(std::memcpy(out, v.data() + off, m * 4));
    auto* o = static_cast<__nv_bfloat16*>(out);
    for (std::size_t i = 0; i < m; ++i) o[i] = __float2bfloat16_rn(v[off + i]);
  });
}

// A projection [N, K] in the executor's weight format.
std::string upload_weight(cuda_executor::device_state& d, const std::vector<float>& v, int N, int K, weight_dev& dst,
                          cuda_load_report& load) {
  if (d.mode != cuda_weights::int8) return upload(d, v, d.mode == cuda_weights::bf16, dst.data, load);
  const auto t0 = clock_type::now();
  std::vector<std::int8_t> q(v.size());
  std::vector<float> scales(static_cast<std::size_t>(N));
  k::reference::quantize_rows_int8(v.data(), static_cast<std::size_t>(N), static_cast<std::size_t>(K), q.data(), scales.data());
  load.convert_s += since(t0);
  if (auto e = stage(d, q.size(), 1, dst.data, load,
                     [&](std::size_t off, std::size_t m, void* out) { std::memcpy(out, q.data() + off, m); });
      !e.empty())
    return e;
  return upload(d, scales, false, dst.scales, load);
}

std::string random_fill(cuda_executor::device_state& d, dmem& dst, std::size_t n, bool as_bf16, std::uint64_t seed,
                        float scale, float mean, cuda_load_report& load) {
  if (auto e = dst.ensure(n * (as_bf16 ? 2 : 4)); e != cudaSuccess) return cuda_error("weights", e);
  if (auto e = k::launch_fill_random(dst.p, as_bf16, static_cast<std::int64_t>(n), seed, scale, mean, d.stream); e != cudaSuccess)
    return cuda_error("fill_random", e);
  load.bytes += static_cast<double>(n * (as_bf16 ? 2 : 4));
  return {};
}

// Random weights in the executor's format; INT8 rows get the scale that makes their spread `scale`.
std::string random_weight(cuda_executor::device_state& d, weight_dev& dst, std::size_t rows, std::size_t n, std::uint64_t seed,
                          float scale, cuda_load_report& load) {
  if (d.mode != cuda_weights::int8) return random_fill(d, dst.data, n, d.mode == cuda_weights::bf16, seed, scale, 0.f, load);
  if (auto e = dst.data.ensure(n); e != cudaSuccess) return cuda_error("weights", e);
  if (auto e = k::launch_fill_random_int8(static_cast<std::int8_t*>(dst.data.p), static_cast<std::int64_t>(n), seed, d.stream);
      e != cudaSuccess)
    return cuda_error("fill_random_int8", e);
  load.bytes += static_cast<double>(n);
  return random_fill(d, dst.scales, rows, false, seed, 0.f, scale / 73.3f, load);  // uniform [-127, 127] has sd 73.3
}

std::string start(cuda_executor::device_state& d, const llama_config& c, const cuda_options& opts) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return "no CUDA device";
  if (c.head_dim > k::kMaxAttentionHeadDim) return "head_dim above " + std::to_string(k::kMaxAttentionHeadDim);
  if (auto e = cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking); e != cudaSuccess) return cuda_error("stream", e);
  auto g = k::gemm_runner::create();
  if (auto* e = std::get_if<std::string>(&g)) return *e;
  d.gemm = std::move(std::get<std::unique_ptr<k::gemm_runner>>(g));
  d.mode = opts.weights;
  std::vector<float> inv(static_cast<std::size_t>(c.head_dim / 2));
  k::reference::rope_inv_freq(static_cast<std::size_t>(c.head_dim), c.rope_theta, c.scaling.llama3 ? c.scaling.factor : 0,
                              c.scaling.low_freq_factor, c.scaling.high_freq_factor, c.scaling.original_max_position, inv.data());
  if (auto e = d.inv_freq.ensure(inv.size() * 4); e != cudaSuccess) return cuda_error("inv_freq", e);
  if (auto e = cudaMemcpy(d.inv_freq.p, inv.data(), inv.size() * 4, cudaMemcpyHostToDevice); e != cudaSuccess)
    return cuda_error("inv_freq", e);
  return {};
}

// The KV pool: what the memory fraction leaves after the weights (and a reserve for step
// buffers), in blocks of F32 K and V for every layer.
std::string allocate_kv(cuda_executor::device_state& d, const llama_config& c, const cuda_options& opts, int& blocks) {
  std::size_t free = 0, total = 0;
  if (auto e = cudaMemGetInfo(&free, &total); e != cudaSuccess) return cuda_error("cudaMemGetInfo", e);
  const double used = static_cast<double>(total - free);
  const double reserve = 2.0e9;  // step buffers, cuBLASLt workspace, fragmentation
  const double budget = static_cast<double>(total) * opts.memory_fraction - used - reserve;
  const double per_block = 2.0 * c.layers * opts.block_size * c.kv_heads * c.head_dim * sizeof(float);
  const int fit = budget > per_block ? static_cast<int>(std::min(budget / per_block, 1e8)) : 0;
  blocks = opts.kv_blocks > 0 ? std::min(opts.kv_blocks + 1, fit) : fit;
  if (blocks < 2) return "no device memory left for the KV cache";
  const std::size_t layer_bytes = static_cast<std::size_t>(blocks) * opts.block_size * c.kv_heads * c.head_dim * sizeof(float);
  d.k_cache.resize(static_cast<std::size_t>(c.layers));
  d.v_cache.resize(static_cast<std::size_t>(c.layers));
  for (int l = 0; l < c.layers; ++l) {
    if (auto e = d.k_cache[static_cast<std::size_t>(l)].ensure(layer_bytes); e != cudaSuccess) return cuda_error("KV", e);
    if (auto e = d.v_cache[static_cast<std::size_t>(l)].ensure(layer_bytes); e != cudaSuccess) return cuda_error("KV", e);
  }
  return {};
}

}  // namespace

std::variant<std::unique_ptr<cuda_executor>, std::string> cuda_executor::create(std::shared_ptr<const llama_weights> w,
                                                                                cuda_options opts) {
  std::unique_ptr<cuda_executor> ex(new cuda_executor());
  ex->d_ = std::make_unique<device_state>();
  ex->cfg_ = w->cfg;
  ex->opts_ = opts;
  auto& d = *ex->d_;
  const llama_config& c = w->cfg;
  if (auto e = start(d, c, opts); !e.empty()) return e;
  cuda_load_report& load = ex->load_;
  std::string e;
  auto up = [&](const std::vector<float>& v, dmem& dst) {
    if (e.empty()) e = upload(d, v, false, dst, load);
  };
  auto upw = [&](const std::vector<float>& v, int N, int K, weight_dev& dst) {
    if (e.empty()) e = upload_weight(d, v, N, K, dst, load);
  };
  const int D = c.hidden, F = c.intermediate, q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  up(w->embed, d.embed);
  upw(w->lm_head.empty() ? w->embed : w->lm_head, c.vocab, D, d.head);
  up(w->final_norm, d.final_norm);
  d.layers.resize(w->layers.size());
  for (std::size_t l = 0; l < w->layers.size(); ++l) {
    const layer_weights& L = w->layers[l];
    layer_dev& Ld = d.layers[l];
    up(L.attn_norm, Ld.attn_norm);
    upw(L.wq, q, D, Ld.wq);
    upw(L.wk, kv, D, Ld.wk);
    upw(L.wv, kv, D, Ld.wv);
    upw(L.wo, D, q, Ld.wo);
    up(L.bq, Ld.bq);
    up(L.bk, Ld.bk);
    up(L.bv, Ld.bv);
    up(L.q_norm, Ld.q_norm);
    up(L.k_norm, Ld.k_norm);
    up(L.mlp_norm, Ld.mlp_norm);
    upw(L.w_gate, F, D, Ld.w_gate);
    upw(L.w_up, F, D, Ld.w_up);
    upw(L.w_down, D, F, Ld.w_down);
  }
  if (!e.empty()) return e;
  ex->weight_bytes_ = load.bytes;
  if (auto err = allocate_kv(d, ex->cfg_, opts, load.kv_blocks); !err.empty()) return err;
  if (auto err = ex->reserve_steps(); !err.empty()) return err;
  return ex;
}

std::variant<std::unique_ptr<cuda_executor>, std::string> cuda_executor::create_random(const llama_config& c, cuda_options opts,
                                                                                      std::uint64_t seed) {
  std::unique_ptr<cuda_executor> ex(new cuda_executor());
  ex->d_ = std::make_unique<device_state>();
  ex->cfg_ = c;
  ex->opts_ = opts;
  auto& d = *ex->d_;
  if (auto e = start(d, c, opts); !e.empty()) return e;
  cuda_load_report& load = ex->load_;
  const auto D = static_cast<std::size_t>(c.hidden), F = static_cast<std::size_t>(c.intermediate), V = static_cast<std::size_t>(c.vocab);
  const auto q = static_cast<std::size_t>(c.heads * c.head_dim), kv = static_cast<std::size_t>(c.kv_heads * c.head_dim);
  const float in_d = 1.f / std::sqrt(static_cast<float>(D));
  std::string e;
  std::uint64_t s = seed;
  auto fill = [&](dmem& dst, std::size_t n, float scale, float mean) {
    if (e.empty()) e = random_fill(d, dst, n, false, ++s, scale, mean, load);
  };
  auto fillw = [&](weight_dev& dst, std::size_t rows, std::size_t n, float scale) {
    if (e.empty()) e = random_weight(d, dst, rows, n, ++s, scale, load);
  };
  const auto t0 = clock_type::now();
  fill(d.embed, V * D, 1.f, 0.f);
  fillw(d.head, V, V * D, in_d);
  fill(d.final_norm, D, 0.05f, 1.f);
  d.layers.resize(static_cast<std::size_t>(c.layers));
  for (auto& L : d.layers) {
    fill(L.attn_norm, D, 0.05f, 1.f);
    fillw(L.wq, q, q * D, in_d);
    fillw(L.wk, kv, kv * D, in_d);
    fillw(L.wv, kv, kv * D, in_d);
    fillw(L.wo, D, D * q, 1.f / std::sqrt(static_cast<float>(q)));
    fill(L.mlp_norm, D, 0.05f, 1.f);
    fillw(L.w_gate, F, F * D, in_d);
    fillw(L.w_up, F, F * D, in_d);
    fillw(L.w_down, D, D * F, 1.f / std::sqrt(static_cast<float>(F)));
  }
  if (!e.empty()) return e;
  if (auto err = cudaStreamSynchronize(d.stream); err != cudaSuccess) return cuda_error("fill", err);
  load.upload_s = since(t0);
  ex->weight_bytes_ = load.bytes;
  if (auto err = allocate_kv(d, c, opts, load.kv_blocks); !err.empty()) return err;
  if (auto err = ex->reserve_steps(); !err.empty()) return err;
  return ex;
}

cuda_executor::~cuda_executor() = default;

#define KILN_STEP_TRY(expr)                                              \
  do {                                                                   \
    if (const cudaError_t kiln_e_ = (expr); kiln_e_ != cudaSuccess) {    \
      out.error = cuda_error(#expr, kiln_e_);                            \
      return out;                                                        \
    }                                                                    \
  } while (0)
#define KILN_GEMM_TRY(expr)                          \
  do {                                               \
    if (std::string kiln_g_ = (expr); !kiln_g_.empty()) { \
      out.error = kiln_g_;                           \
      return out;                                    \
    }                                                \
  } while (0)

namespace {

// The shape of one step as its kernels see it.
struct step_shape {
  int T = 0;       ///< rows (tokens computed)
  int S = 0;       ///< rows that sample
  int stride = 1;  ///< block-table entries per sequence
  int splits = 1;  ///< context splits of the attention
};

std::size_t f4(long long n) { return static_cast<std::size_t>(n) * 4; }

// Step buffers for `T` rows and `S` samplers (they only grow).
cudaError_t reserve(cuda_executor::device_state& d, const llama_config& c, int T, int S, int seqs, int stride, int splits) {
  const int D = c.hidden, F = c.intermediate, qdim = c.heads * c.head_dim, kvdim = c.kv_heads * c.head_dim;
  S = std::max(S, 1);
  const std::pair<dmem*, std::size_t> want[] = {
      {&d.x, f4(1LL * T * D)}, {&d.h, f4(1LL * T * D)}, {&d.hb, f4(1LL * T * std::max(F, qdim)) / 2 + 64},
      {&d.q, f4(1LL * T * qdim)}, {&d.kk, f4(1LL * T * kvdim)}, {&d.vv, f4(1LL * T * kvdim)},
      {&d.attn, f4(1LL * T * qdim)}, {&d.o, f4(1LL * T * D)}, {&d.gate, f4(1LL * T * F)}, {&d.up, f4(1LL * T * F)},
      {&d.xs, f4(1LL * S * D)}, {&d.xsn, f4(1LL * S * D)}, {&d.logits, f4(1LL * S * c.vocab)},
      {&d.work, f4(k::decode_attention_workspace_floats(T, c.heads, c.head_dim, splits))}, {&d.ids, f4(T)},
      {&d.pos, f4(T)}, {&d.slots, f4(T)}, {&d.row_seq, f4(T)}, {&d.sample_rows, f4(S)},
      {&d.tables, f4(1LL * seqs * stride)}, {&d.params, sizeof(k::reference::sample_params) * static_cast<std::size_t>(S)},
      {&d.tokens, f4(S)}};
  for (auto [buf, bytes] : want)
    if (auto e = buf->ensure(bytes); e != cudaSuccess) return e;
  return d.ensure_pinned(f4(S));
}

}  // namespace

std::string cuda_executor::reserve_steps() {
  // Sized once for the pool's limits, so graphs keep valid pointers.
  const int T = std::max(opts_.max_step_tokens, opts_.max_batch);
  const int stride = (opts_.max_context + opts_.block_size - 1) / opts_.block_size;
  if (auto e = reserve(*d_, cfg_, T, opts_.max_batch, opts_.max_batch, stride, 16); e != cudaSuccess)
    return cuda_error("step buffers", e);
  if (d_->mode == cuda_weights::int8) {
    const std::size_t largest = static_cast<std::size_t>(std::max(
        {1LL * cfg_.intermediate * cfg_.hidden, 1LL * cfg_.vocab * cfg_.hidden, 1LL * cfg_.heads * cfg_.head_dim * cfg_.hidden}));
    if (auto e = d_->wscratch.ensure(largest * 2); e != cudaSuccess) return cuda_error("dequant scratch", e);
  }
  d_->buffers_seen = d_->step_buffers();
  return {};
}

void cuda_executor::set_graphs(bool on) {
  opts_.graphs = on;
  d_->clear_graphs();
}

std::size_t cuda_executor::captured_graphs() const { return d_->graphs.size(); }

#define KILN_ENQ_TRY(expr)                                              \
  do {                                                                  \
    if (const cudaError_t kiln_e_ = (expr); kiln_e_ != cudaSuccess) return cuda_error(#expr, kiln_e_); \
  } while (0)
#define KILN_ENQ_GEMM(expr)                                   \
  do {                                                        \
    if (std::string kiln_g_ = (expr); !kiln_g_.empty()) return kiln_g_; \
  } while (0)

// Every kernel of one step, on the stream, ending with the sampled tokens copied to pinned
// memory: run directly, or captured once into a graph per decode batch size.
static std::string enqueue(cuda_executor::device_state& d, const llama_config& c, int block_size, const step_shape& sh) {
  const int D = c.hidden, F = c.intermediate, H = c.heads, KVH = c.kv_heads, hd = c.head_dim, V = c.vocab;
  const int qdim = H * hd, kvdim = KVH * hd, T = sh.T, S = sh.S;
  const auto eps = static_cast<float>(c.rms_eps);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  KILN_ENQ_TRY(k::launch_embedding_gather(d.embed.f(), V, D, d.ids.i(), T, d.x.f(), d.stream));
  for (std::size_t l = 0; l < d.layers.size(); ++l) {
    const layer_dev& L = d.layers[l];
    KILN_ENQ_TRY(k::launch_rmsnorm(d.x.f(), L.attn_norm.f(), d.h.f(), static_cast<std::size_t>(T), static_cast<std::size_t>(D), eps, d.stream));
    KILN_ENQ_GEMM(d.gemm_xwt(d.h.f(), T, D, L.wq, qdim, d.q.f()));
    KILN_ENQ_GEMM(d.gemm_xwt(d.h.f(), T, D, L.wk, kvdim, d.kk.f()));
    KILN_ENQ_GEMM(d.gemm_xwt(d.h.f(), T, D, L.wv, kvdim, d.vv.f()));
    if (L.bq.p) {
      KILN_ENQ_TRY(k::launch_add_bias(d.q.f(), L.bq.f(), T, qdim, d.stream));
      KILN_ENQ_TRY(k::launch_add_bias(d.kk.f(), L.bk.f(), T, kvdim, d.stream));
      KILN_ENQ_TRY(k::launch_add_bias(d.vv.f(), L.bv.f(), T, kvdim, d.stream));
    }
    if (L.q_norm.p) {  // Qwen3: each head's q and k normalized in place before RoPE
      KILN_ENQ_TRY(k::launch_rmsnorm(d.q.f(), L.q_norm.f(), d.q.f(), static_cast<std::size_t>(T) * H,
                                     static_cast<std::size_t>(hd), eps, d.stream));
      KILN_ENQ_TRY(k::launch_rmsnorm(d.kk.f(), L.k_norm.f(), d.kk.f(), static_cast<std::size_t>(T) * KVH,
                                     static_cast<std::size_t>(hd), eps, d.stream));
    }
    KILN_ENQ_TRY(k::launch_rope(d.q.f(), T, H, hd, d.pos.i(), d.inv_freq.f(), d.stream));
    KILN_ENQ_TRY(k::launch_rope(d.kk.f(), T, KVH, hd, d.pos.i(), d.inv_freq.f(), d.stream));
    KILN_ENQ_TRY(k::launch_kv_append(d.kk.f(), d.vv.f(), d.slots.i(), T, kvdim, d.k_cache[l].f(), d.v_cache[l].f(), d.stream));
    const k::paged_kv_view view{d.k_cache[l].f(), d.v_cache[l].f(), block_size, KVH, hd, d.tables.i(), sh.stride};
    const k::attention_rows rows{d.row_seq.i(), d.pos.i(), T};
    KILN_ENQ_TRY(k::launch_paged_decode_attention(d.q.f(), view, rows, H, scale, sh.splits, d.work.f(), d.attn.f(), d.stream));
    KILN_ENQ_GEMM(d.gemm_xwt(d.attn.f(), T, qdim, L.wo, D, d.o.f()));
    KILN_ENQ_TRY(k::launch_residual_add(d.x.f(), d.o.f(), static_cast<std::int64_t>(T) * D, d.stream));
    KILN_ENQ_TRY(k::launch_rmsnorm(d.x.f(), L.mlp_norm.f(), d.h.f(), static_cast<std::size_t>(T), static_cast<std::size_t>(D), eps, d.stream));
    KILN_ENQ_GEMM(d.gemm_xwt(d.h.f(), T, D, L.w_gate, F, d.gate.f()));
    KILN_ENQ_GEMM(d.gemm_xwt(d.h.f(), T, D, L.w_up, F, d.up.f()));
    KILN_ENQ_TRY(k::launch_silu_mul(d.gate.f(), d.up.f(), d.gate.f(), static_cast<std::int64_t>(T) * F, d.stream));
    KILN_ENQ_GEMM(d.gemm_xwt(d.gate.f(), T, F, L.w_down, D, d.o.f()));
    KILN_ENQ_TRY(k::launch_residual_add(d.x.f(), d.o.f(), static_cast<std::int64_t>(T) * D, d.stream));
  }
  if (S == 0) return {};
  // The sampling rows' hidden states, normalised, through the head, then sampled.
  KILN_ENQ_TRY(k::launch_embedding_gather(d.x.f(), T, D, d.sample_rows.i(), S, d.xs.f(), d.stream));
  KILN_ENQ_TRY(k::launch_rmsnorm(d.xs.f(), d.final_norm.f(), d.xsn.f(), static_cast<std::size_t>(S), static_cast<std::size_t>(D), eps, d.stream));
  KILN_ENQ_GEMM(d.gemm_xwt(d.xsn.f(), S, D, d.head, V, d.logits.f()));
  KILN_ENQ_TRY(k::launch_sample(d.logits.f(), S, V, static_cast<const k::reference::sample_params*>(d.params.p), d.tokens.i(), d.stream));
  KILN_ENQ_TRY(cudaMemcpyAsync(d.pinned, d.tokens.p, f4(S), cudaMemcpyDeviceToHost, d.stream));
  return {};
}

step_execution cuda_executor::run(const step_plan& plan, const scheduler& sched, std::span<const sample_slot> slots) {
  const auto started = clock_type::now();
  step_execution out;
  device_state& d = *d_;
  const int bs = opts_.block_size;

  // Host side of the batch: ids, positions, cache slots, rows, block tables, samplers.
  std::vector<std::int32_t> ids, pos, slot, row_seq, sample_rows;
  std::vector<const seq_status*> seqs;
  bool pure_decode = true;
  for (const plan_item& item : plan.items) {
    const seq_status* s = sched.find(item.id);
    const auto local = static_cast<std::int32_t>(seqs.size());
    seqs.push_back(s);
    pure_decode = pure_decode && item.tokens == 1 && item.samples;
    for (int j = 0; j < item.tokens; ++j) {
      const int p = item.context_before + j;
      ids.push_back(s->tokens[static_cast<std::size_t>(p)]);
      pos.push_back(p);
      slot.push_back(s->blocks[static_cast<std::size_t>(p / bs)] * bs + p % bs);
      row_seq.push_back(local);
    }
    if (item.samples) sample_rows.push_back(static_cast<std::int32_t>(ids.size()) - 1);
  }
  step_shape sh;
  sh.T = static_cast<int>(ids.size());
  sh.S = static_cast<int>(sample_rows.size());
  if (sh.T == 0) return out;
  int max_blocks = 1, max_context = 1;
  for (const auto* s : seqs) max_blocks = std::max(max_blocks, static_cast<int>(s->blocks.size()));
  for (int p : pos) max_context = std::max(max_context, p + 1);
  const int fixed_stride = (opts_.max_context + bs - 1) / bs;
  // Graphs replay fixed kernel arguments: the table stride and split count are fixed then,
  // and the attention kernel finds each split's range from the positions on the device.
  const bool graph = opts_.graphs && pure_decode && max_blocks <= fixed_stride && sh.T <= opts_.max_batch;
  sh.stride = graph ? fixed_stride : max_blocks;
  sh.splits = graph ? 8 : std::clamp(max_context / 256, 1, 16);
  std::vector<std::int32_t> tables(seqs.size() * static_cast<std::size_t>(sh.stride), 0);
  for (std::size_t i = 0; i < seqs.size(); ++i)
    std::copy(seqs[i]->blocks.begin(), seqs[i]->blocks.end(), tables.begin() + static_cast<std::ptrdiff_t>(i * sh.stride));
  std::vector<k::reference::sample_params> params;
  for (int i = 0; i < sh.S && i < static_cast<int>(slots.size()); ++i) {
    const sample_slot& sl = slots[static_cast<std::size_t>(i)];
    params.push_back({sl.rng_seed, sl.position, static_cast<float>(sl.temperature), sl.top_k, static_cast<float>(sl.top_p)});
  }

  KILN_STEP_TRY(reserve(d, cfg_, sh.T, sh.S, static_cast<int>(seqs.size()), sh.stride, sh.splits));
  if (d.step_buffers() != d.buffers_seen) {  // a buffer moved: captured graphs point at the old one
    d.clear_graphs();
    d.buffers_seen = d.step_buffers();
  }
  auto put = [&](dmem& dst, const void* src, std::size_t bytes) {
    return bytes == 0 ? cudaSuccess : cudaMemcpyAsync(dst.p, src, bytes, cudaMemcpyHostToDevice, d.stream);
  };
  KILN_STEP_TRY(put(d.ids, ids.data(), f4(sh.T)));
  KILN_STEP_TRY(put(d.pos, pos.data(), f4(sh.T)));
  KILN_STEP_TRY(put(d.slots, slot.data(), f4(sh.T)));
  KILN_STEP_TRY(put(d.row_seq, row_seq.data(), f4(sh.T)));
  KILN_STEP_TRY(put(d.sample_rows, sample_rows.data(), f4(sh.S)));
  KILN_STEP_TRY(put(d.tables, tables.data(), f4(static_cast<long long>(tables.size()))));
  KILN_STEP_TRY(put(d.params, params.data(), params.size() * sizeof(k::reference::sample_params)));

  std::string err;
  if (graph && d.graphs.count(sh.T)) {
    KILN_STEP_TRY(cudaGraphLaunch(d.graphs[sh.T], d.stream));
  } else if (graph && d.warmed.count(sh.T)) {
    // Second time at this batch size (GEMM algorithms chosen): capture, then replay.
    KILN_STEP_TRY(cudaStreamBeginCapture(d.stream, cudaStreamCaptureModeThreadLocal));
    err = enqueue(d, cfg_, bs, sh);
    cudaGraph_t g = nullptr;
    const cudaError_t end = cudaStreamEndCapture(d.stream, &g);
    cudaGraphExec_t exec = nullptr;
    if (err.empty() && end == cudaSuccess && cudaGraphInstantiate(&exec, g, 0) == cudaSuccess) {
      d.graphs[sh.T] = exec;
      KILN_STEP_TRY(cudaGraphLaunch(exec, d.stream));
    } else {
      opts_.graphs = false;  // capture does not work here: run plainly from now on
      cudaGetLastError();
      err = enqueue(d, cfg_, bs, sh);
    }
    if (g) cudaGraphDestroy(g);
  } else {
    err = enqueue(d, cfg_, bs, sh);
    if (graph) d.warmed.insert(sh.T);
  }
  if (!err.empty()) {
    out.error = err;
    return out;
  }
  KILN_STEP_TRY(cudaStreamSynchronize(d.stream));
  const auto* tok = static_cast<const std::int32_t*>(d.pinned);
  out.tokens.assign(tok, tok + sh.S);
  // Log-probabilities, where asked, from the logits rows copied back (the kernel leaves them as they are).
  std::vector<float> row(static_cast<std::size_t>(cfg_.vocab));
  for (std::size_t i = 0; i < out.tokens.size() && i < slots.size(); ++i) {
    if (slots[i].logprobs < 0) continue;
    KILN_STEP_TRY(cudaMemcpy(row.data(), d.logits.f() + i * row.size(), f4(cfg_.vocab), cudaMemcpyDeviceToHost));
    out.logprobs.resize(out.tokens.size());
    out.logprobs[i] = logprobs_of(row, out.tokens[i], slots[i].logprobs);
  }
  out.seconds = since(started);
  return out;
}

}  // namespace kiln::engine
