// Every GPU kernel against its CPU twin on fresh random inputs. Errors are relative norms
// with the bound stated per dtype; the first mismatches are printed. Without a GPU every
// case says so and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/gemm.hpp"
#include "kernels/reference/elementwise.hpp"
#include "kernels/reference/ops.hpp"
#include "kernels/reference/quant.hpp"
#include "kernels/reference/rmsnorm.hpp"
#include "kernels/reference/sampling.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/sampling.hpp"

namespace k = kiln::kernels;
namespace ref = kiln::kernels::reference;

namespace {

bool have_gpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  if (!ok) MESSAGE("skipped: no CUDA device on this machine");
  return ok;
}

template <class T>
struct dbuf {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dbuf(std::size_t count) : n(count) { REQUIRE(cudaMalloc(&p, std::max<std::size_t>(1, n) * sizeof(T)) == cudaSuccess); }
  explicit dbuf(const std::vector<T>& host) : dbuf(host.size()) { put(host); }
  ~dbuf() { cudaFree(p); }
  void put(const std::vector<T>& host) { REQUIRE(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

std::vector<float> randn(std::mt19937& rng, std::size_t n, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Relative-norm error of got against want; prints the first mismatches beyond `bound`.
double compare(const char* what, const std::vector<float>& got, const std::vector<float>& want, double bound) {
  double err = 0, norm = 0;
  int shown = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    norm += static_cast<double>(want[i]) * want[i];
    if (std::fabs(d) > bound * (1 + std::fabs(want[i])) && shown < 5) {
      std::printf("%s: mismatch at %zu: gpu %.7g, cpu %.7g\n", what, i, got[i], want[i]);
      ++shown;
    }
  }
  const double rel = std::sqrt(err / std::max(norm, 1e-30));
  std::printf("%s: relative-norm error %.3g (bound %.1g)\n", what, rel, bound);
  return rel;
}

constexpr double kF32 = 1e-5;   // fp32 kernels: summation order only
constexpr double kBf16 = 1e-4;  // bf16 inputs, fp32 accumulation: rounding of the sums only

}  // namespace

TEST_CASE("gpu: RMSNorm, embedding gather, SwiGLU, residual add, KV append") {
  if (!have_gpu()) return;
  std::mt19937 rng(11);
  const int T = 37, D = 512, V = 1000;
  const auto table = randn(rng, static_cast<std::size_t>(V) * D);
  std::vector<std::int32_t> ids(T);
  for (auto& i : ids) i = static_cast<std::int32_t>(rng() % (V + 5)) - 2;  // some out of range
  std::vector<float> want(static_cast<std::size_t>(T) * D);
  ref::embedding_gather(table.data(), V, D, ids.data(), T, want.data());
  dbuf<float> dt(table), dout(want.size());
  dbuf<std::int32_t> did(ids);
  REQUIRE(k::launch_embedding_gather(dt.p, V, D, did.p, T, dout.p, nullptr) == cudaSuccess);
  CHECK(compare("embedding", dout.get(), want, kF32) == 0.0);

  const auto x = randn(rng, want.size()), w = randn(rng, D);
  std::vector<float> norm(want.size());
  ref::rmsnorm(x.data(), w.data(), norm.data(), T, D, 1e-5f);
  dbuf<float> dx(x), dw(w), dn(norm.size());
  REQUIRE(k::launch_rmsnorm(dx.p, dw.p, dn.p, T, D, 1e-5f, nullptr) == cudaSuccess);
  CHECK(compare("rmsnorm", dn.get(), norm, kF32) < kF32);

  const auto g = randn(rng, 4099), u = randn(rng, 4099);
  std::vector<float> sw(g.size());
  ref::silu_mul(g.data(), u.data(), sw.data(), g.size());
  dbuf<float> dg(g), du(u), dsw(g.size());
  REQUIRE(k::launch_silu_mul(dg.p, du.p, dsw.p, static_cast<std::int64_t>(g.size()), nullptr) == cudaSuccess);
  CHECK(compare("silu_mul", dsw.get(), sw, kF32) < kF32);
  auto sum = g;
  ref::residual_add(sum.data(), u.data(), sum.size());
  REQUIRE(k::launch_residual_add(dg.p, du.p, static_cast<std::int64_t>(g.size()), nullptr) == cudaSuccess);
  CHECK(compare("residual_add", dg.get(), sum, kF32) == 0.0);

  const int row = 2 * 64, slots_total = 64;
  const auto kk = randn(rng, static_cast<std::size_t>(T) * row), vv = randn(rng, static_cast<std::size_t>(T) * row);
  std::vector<std::int32_t> slots(T);
  std::vector<std::int32_t> perm(slots_total);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int t = 0; t < T; ++t) slots[static_cast<std::size_t>(t)] = t % 9 == 0 ? -1 : perm[static_cast<std::size_t>(t)];
  std::vector<float> kc(static_cast<std::size_t>(slots_total) * row, 0.f), vc = kc;
  ref::kv_append(kk.data(), vv.data(), slots.data(), T, row, kc.data(), vc.data());
  dbuf<float> dk(kk), dv(vv), dkc(std::vector<float>(kc.size(), 0.f)), dvc(std::vector<float>(vc.size(), 0.f));
  dbuf<std::int32_t> ds(slots);
  REQUIRE(k::launch_kv_append(dk.p, dv.p, ds.p, T, row, dkc.p, dvc.p, nullptr) == cudaSuccess);
  CHECK(compare("kv_append k", dkc.get(), kc, kF32) == 0.0);
  CHECK(compare("kv_append v", dvc.get(), vc, kF32) == 0.0);
}

TEST_CASE("gpu: INT8 dequantisation to BF16") {
  if (!have_gpu()) return;
  std::mt19937 rng(16);
  const int N = 300, K = 1024;
  const auto w = randn(rng, static_cast<std::size_t>(N) * K);
  std::vector<std::int8_t> q(w.size());
  std::vector<float> scales(N), want(w.size());
  ref::quantize_rows_int8(w.data(), N, K, q.data(), scales.data());
  ref::dequantize_rows_int8(q.data(), scales.data(), N, K, want.data());
  for (auto& x : want) x = __bfloat162float(__float2bfloat16_rn(x));
  dbuf<std::int8_t> dq(q);
  dbuf<float> ds(scales);
  dbuf<__nv_bfloat16> dout(w.size());
  REQUIRE(k::launch_dequant_int8_bf16(dq.p, ds.p, N, K, dout.p, nullptr) == cudaSuccess);
  const auto got_bf = dout.get();
  std::vector<float> got(got_bf.size());
  for (std::size_t i = 0; i < got.size(); ++i) got[i] = __bfloat162float(got_bf[i]);
  CHECK(compare("dequant int8", got, want, kF32) == 0.0);
}

TEST_CASE("gpu: RoPE with Llama 3 scaling") {
  if (!have_gpu()) return;
  std::mt19937 rng(12);
  const int T = 29, H = 8, hd = 128;
  std::vector<float> inv(hd / 2);
  ref::rope_inv_freq(hd, 500000, 8, 1, 4, 8192, inv.data());
  auto x = randn(rng, static_cast<std::size_t>(T) * H * hd);
  std::vector<std::int32_t> pos(T);
  for (auto& p : pos) p = static_cast<std::int32_t>(rng() % 100000);
  dbuf<float> dx(x), dinv(inv);
  dbuf<std::int32_t> dpos(pos);
  for (int t = 0; t < T; ++t) ref::rope(&x[static_cast<std::size_t>(t) * H * hd], H, hd, pos[static_cast<std::size_t>(t)], inv.data());
  REQUIRE(k::launch_rope(dx.p, T, H, hd, dpos.p, dinv.p, nullptr) == cudaSuccess);
  CHECK(compare("rope", dx.get(), x, kF32) < kF32);
}

TEST_CASE("gpu: paged decode (split along the context) and prefill attention with GQA") {
  if (!have_gpu()) return;
  std::mt19937 rng(13);
  for (auto [heads, kv_heads, hd, bs] : {std::tuple{8, 2, 64, 16}, {32, 8, 128, 16}, {4, 4, 40, 3}}) {
    const int seqs = 5, max_blocks = 64, num_blocks = seqs * max_blocks + 1;
    const std::size_t per_slot = static_cast<std::size_t>(kv_heads) * hd;
    const auto kc = randn(rng, static_cast<std::size_t>(num_blocks) * bs * per_slot);
    const auto vc = randn(rng, kc.size());
    // Block tables: a shuffled partition of the blocks.
    std::vector<std::int32_t> blocks(static_cast<std::size_t>(num_blocks - 1));
    std::iota(blocks.begin(), blocks.end(), 1);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::vector<std::int32_t> tables(blocks.begin(), blocks.begin() + seqs * max_blocks);
    // Rows: decode rows at random context lengths, and a prefill chunk of one sequence.
    std::vector<std::int32_t> row_seq, row_pos;
    for (int s = 0; s < seqs; ++s) {
      row_seq.push_back(s);
      row_pos.push_back(static_cast<std::int32_t>(rng() % static_cast<unsigned>(max_blocks * bs - 1)));
    }
    for (int p = 100; p < 117; ++p) {
      row_seq.push_back(2);
      row_pos.push_back(p);
    }
    const int rows = static_cast<int>(row_seq.size());
    const auto q = randn(rng, static_cast<std::size_t>(rows) * heads * hd);
    const float scale = 1.f / std::sqrt(static_cast<float>(hd));
    std::vector<float> want(q.size());
    ref::paged_kv_layer layer{const_cast<float*>(kc.data()), const_cast<float*>(vc.data()), static_cast<std::size_t>(bs),
                              static_cast<std::size_t>(kv_heads), static_cast<std::size_t>(hd)};
    for (int r = 0; r < rows; ++r) {
      std::vector<float> scratch(static_cast<std::size_t>(row_pos[static_cast<std::size_t>(r)]) + 1);
      ref::paged_attention_row(&q[static_cast<std::size_t>(r) * heads * hd], layer,
                               &tables[static_cast<std::size_t>(row_seq[static_cast<std::size_t>(r)]) * max_blocks],
                               scratch.size(), heads, scale, &want[static_cast<std::size_t>(r) * heads * hd], scratch.data());
    }
    dbuf<float> dk(kc), dv(vc), dq(q), dout(q.size());
    dbuf<std::int32_t> dtab(tables), dseq(row_seq), dpos(row_pos);
    const k::paged_kv_view view{dk.p, dv.p, bs, kv_heads, hd, dtab.p, max_blocks};
    const k::attention_rows r{dseq.p, dpos.p, rows};
    REQUIRE(k::launch_prefill_attention(dq.p, view, r, heads, scale, dout.p, nullptr) == cudaSuccess);
    CHECK(compare("prefill attention", dout.get(), want, kF32) < kF32);
    for (int splits : {2, 7}) {
      dbuf<float> work(static_cast<std::size_t>(k::decode_attention_workspace_floats(rows, heads, hd, splits)));
      dbuf<float> dsplit(q.size());
      REQUIRE(k::launch_paged_decode_attention(dq.p, view, r, heads, scale, splits, work.p, dsplit.p, nullptr) == cudaSuccess);
      CHECK(compare("decode attention (split)", dsplit.get(), want, kF32) < kF32);
    }
  }
}

TEST_CASE("gpu: sampling follows its twin") {
  if (!have_gpu()) return;
  std::mt19937 rng(14);
  const int rows = 512, vocab = 3001;
  auto logits = randn(rng, static_cast<std::size_t>(rows) * vocab, 2.f);
  for (int i = 0; i < 40; ++i) logits[static_cast<std::size_t>(i) * 7] = logits[1];  // ties
  std::vector<ref::sample_params> params(rows);
  for (int r = 0; r < rows; ++r) {
    auto& p = params[static_cast<std::size_t>(r)];
    p.seed = rng();
    p.position = r;
    p.temperature = std::array{0.f, 0.7f, 1.f, 1.5f}[r % 4];
    p.top_k = std::array{0, 1, 5, 50}[(r / 4) % 4];
    p.top_p = std::array{1.f, 0.9f, 0.5f}[(r / 16) % 3];
  }
  dbuf<float> dl(logits);
  dbuf<ref::sample_params> dp(params);
  dbuf<std::int32_t> dt(static_cast<std::size_t>(rows));
  REQUIRE(k::launch_sample(dl.p, rows, vocab, dp.p, dt.p, nullptr) == cudaSuccess);
  const auto got = dt.get();
  int same = 0;
  for (int r = 0; r < rows; ++r) {
    const auto want = ref::sample_row(&logits[static_cast<std::size_t>(r) * vocab], vocab, params[static_cast<std::size_t>(r)]);
    if (got[static_cast<std::size_t>(r)] == want) ++same;
    else if (rows - same < 6) std::printf("sampling: row %d gpu %d cpu %d\n", r, got[static_cast<std::size_t>(r)], want);
  }
  std::printf("sampling: %d of %d rows equal\n", same, rows);
  CHECK(same >= rows * 99 / 100);  // only float summation order may move a draw on a boundary
}

TEST_CASE("cuBLASLt is opened on first use, with every entry point the GEMMs call, and is not linked") {
  // Runs without a GPU: the toolkit's library is on this machine whenever this test is built.
  auto mapped = [] {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);)
      if (line.find("libcublasLt") != std::string::npos) return true;
    return false;
  };
  CHECK_FALSE(mapped());  // the cases before this one make no GEMM
  CHECK(k::gemm_runner::library_error() == "");
  CHECK(mapped());
}

TEST_CASE("gpu: cuBLASLt GEMM, BF16 inputs, FP32 accumulation") {
  if (!have_gpu()) return;
  auto runner = k::gemm_runner::create();
  REQUIRE(std::holds_alternative<std::unique_ptr<k::gemm_runner>>(runner));
  auto& g = *std::get<std::unique_ptr<k::gemm_runner>>(runner);
  std::mt19937 rng(15);
  for (auto [T, N, K] : {std::tuple{1, 4096, 4096}, {16, 1024, 4096}, {37, 1000, 768}, {256, 512, 512}}) {
    auto x = randn(rng, static_cast<std::size_t>(T) * K), w = randn(rng, static_cast<std::size_t>(N) * K, 0.05f);
    std::vector<__nv_bfloat16> xb(x.size()), wb(w.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = __bfloat162float(xb[i] = __float2bfloat16_rn(x[i]));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = __bfloat162float(wb[i] = __float2bfloat16_rn(w[i]));
    std::vector<float> want(static_cast<std::size_t>(T) * N);
    ref::matmul_xwt(x.data(), T, K, w.data(), nullptr, N, 0, N, want.data());
    dbuf<__nv_bfloat16> dx(xb), dw(wb);
    dbuf<float> dy(want.size());
    const std::string err = g.matmul_xwt(dx.p, dw.p, k::gemm_input::bf16, dy.p, T, N, K, nullptr);
    REQUIRE(err.empty());
    CHECK(compare("gemm bf16", dy.get(), want, kBf16) < kBf16);
  }
  // FP32 inputs (no TF32): as exact as the CPU twin up to summation order.
  const int T = 8, N = 300, K = 1000;
  const auto x = randn(rng, static_cast<std::size_t>(T) * K), w = randn(rng, static_cast<std::size_t>(N) * K);
  std::vector<float> want(static_cast<std::size_t>(T) * N);
  ref::matmul_xwt(x.data(), T, K, w.data(), nullptr, N, 0, N, want.data());
  dbuf<float> dx(x), dw(w), dy(want.size());
  REQUIRE(g.matmul_xwt(dx.p, dw.p, k::gemm_input::f32, dy.p, T, N, K, nullptr).empty());
  CHECK(compare("gemm f32", dy.get(), want, kF32) < kF32);
  CHECK(g.cached_algorithms() == 5);
}
