// gpu_decode: decode of a 7B-shaped model (Mistral-7B shape, random BF16 weights made on the
// device: no download) with the cuda executor. Batch 1: step time against the bandwidth floor
// (bytes read per step / measured device copy bandwidth). Batch 64 and 256 with 1,000-token
// contexts: output tokens/s. A short table last.
#include <chrono>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "engine/cuda_executor.hpp"
#include "tests/device/decode_harness.hpp"

using namespace kiln::engine;
using clock_type = std::chrono::steady_clock;

namespace {

double copy_bandwidth() {
  const std::size_t bytes = 2ull << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0;
  cudaMemset(a, 1, bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best = 1e30f;
  for (int i = 0; i < 10; ++i) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    best = std::min(best, ms);
  }
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (best / 1e3);  // read + write
}

struct result {
  int batch;
  double step_ms;
  double tokens_per_s;
};

result measure(cuda_executor& exec, int batch, int context, int steps) {
  const kv_geometry kv = exec.kv();
  scheduler sched({16384, batch, 0}, kv.num_blocks, kv.block_size);
  for (int b = 0; b < batch; ++b) {
    std::vector<token_id> prompt(static_cast<std::size_t>(context));
    for (int i = 0; i < context; ++i) prompt[static_cast<std::size_t>(i)] = (b * 7919 + i * 31) % 32000;
    sched.add(static_cast<seq_id>(b + 1), priority::standard, prompt, steps + 1);
  }
  // Prefill until every sequence decodes.
  while (true) {
    bool all_decoding = true;
    for (int b = 1; b <= batch; ++b) all_decoding = all_decoding && sched.find(static_cast<seq_id>(b))->generated > 0;
    if (all_decoding) break;
    kiln::device::drive(sched, exec, 1);
  }
  const auto t0 = clock_type::now();
  const auto run = kiln::device::drive(sched, exec, steps);
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (!run.error.empty()) std::fprintf(stderr, "step failed: %s\n", run.error.c_str());
  return {batch, s / run.steps * 1e3, static_cast<double>(batch) * run.steps / s};
}

}  // namespace

int main() {
  llama_config c;
  c.architecture = "MistralForCausalLM";
  c.hidden = 4096, c.intermediate = 14336, c.layers = 32, c.heads = 32, c.kv_heads = 8, c.head_dim = 128, c.vocab = 32000;
  const double bw = copy_bandwidth();
  const double embed_bytes = 4.0 * c.vocab * c.hidden;  // gathered by row, not read whole
  const double kv_per_token = 2.0 * c.layers * c.kv_heads * c.head_dim * 4;
  std::printf("device copy bandwidth (2 GiB, best of 10, read + write): %.0f GB/s\n", bw / 1e9);
  struct row {
    const char* weights;
    result r;
    double floor_ms;
  };
  std::vector<row> rows;
  // One executor at a time: each takes what memory is left for its KV pool.
  for (auto [mode, name] : {std::pair{cuda_weights::bf16, "BF16"}, {cuda_weights::int8, "INT8"}}) {
    cuda_options opts;
    opts.weights = mode;
    opts.max_step_tokens = 16384;
    opts.max_batch = 256;
    opts.max_context = 4096;
    auto made = cuda_executor::create_random(c, opts, 7);
    if (auto* e = std::get_if<std::string>(&made)) return std::fprintf(stderr, "%s\n", e->c_str()), 1;
    auto& exec = *std::get<std::unique_ptr<cuda_executor>>(made);
    std::printf("7B-shaped model, %s weights: %.2f GB on the device (made in %.2f s), %d KV blocks\n", name,
                exec.weight_bytes() / 1e9, exec.report().upload_s, exec.kv().num_blocks);
    const double floor_ms = (exec.weight_bytes() - embed_bytes + 1000 * kv_per_token) / bw * 1e3;
    if (mode == cuda_weights::bf16) {
      exec.set_graphs(false);
      const result plain = measure(exec, 1, 1000, 64);
      std::printf("BF16 batch 1 without CUDA graphs: %.2f ms per step (%.0f%% of the floor)\n", plain.step_ms,
                  100.0 * floor_ms / plain.step_ms);
      exec.set_graphs(true);
    }
    rows.push_back({name, measure(exec, 1, 1000, 64), floor_ms});
    rows.push_back({name, measure(exec, 64, 1000, 32), 0});
    if (mode == cuda_weights::bf16) rows.push_back({name, measure(exec, 256, 1000, 16), 0});
  }
  std::printf("\n%-8s %-6s %10s %14s %16s %12s\n", "weights", "batch", "step ms", "tokens/s", "floor ms (b=1)", "of floor");
  for (const auto& x : rows) {
    if (x.floor_ms > 0)
      std::printf("%-8s %-6d %10.2f %14.0f %16.2f %11.0f%%\n", x.weights, x.r.batch, x.r.step_ms, x.r.tokens_per_s, x.floor_ms,
                  100.0 * x.floor_ms / x.r.step_ms);
    else
      std::printf("%-8s %-6d %10.2f %14.0f\n", x.weights, x.r.batch, x.r.step_ms, x.r.tokens_per_s);
  }
  return 0;
}
