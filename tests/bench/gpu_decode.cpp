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
  cuda_options opts;
  opts.memory_fraction = 0.90;
  auto made = cuda_executor::create_random(c, opts, 7);
  if (auto* e = std::get_if<std::string>(&made)) return std::fprintf(stderr, "%s\n", e->c_str()), 1;
  auto& exec = *std::get<std::unique_ptr<cuda_executor>>(made);
  const double bw = copy_bandwidth();
  const double embed_bytes = 4.0 * c.vocab * c.hidden;  // gathered by row, not read whole
  const double kv_per_token = 2.0 * c.layers * c.kv_heads * c.head_dim * 4;
  std::printf("7B-shaped model: %.2f GB of weights on the device (made in %.2f s), %d KV blocks; copy bandwidth %.0f GB/s\n",
              exec.weight_bytes() / 1e9, exec.load().upload_s, exec.kv().num_blocks, bw / 1e9);
  const result one = measure(exec, 1, 1000, 64);
  const double floor_ms = (exec.weight_bytes() - embed_bytes + 1000 * kv_per_token) / bw * 1e3;
  std::vector<result> rs = {one, measure(exec, 64, 1000, 32), measure(exec, 256, 1000, 16)};
  std::printf("\n%-6s %10s %14s\n", "batch", "step ms", "tokens/s");
  for (const auto& r : rs) std::printf("%-6d %10.2f %14.0f\n", r.batch, r.step_ms, r.tokens_per_s);
  std::printf("batch 1: %.2f ms per step against a bandwidth floor of %.2f ms: %.0f%% of the floor\n", one.step_ms, floor_ms,
              100.0 * floor_ms / one.step_ms);
  return 0;
}
