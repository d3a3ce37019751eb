// gpu_decode_check: a greedy decode of the tiny model on the GPU (FP32 weights) must give the
// CPU executor's tokens, sequence for sequence, in one batch. Also reports how far BF16
// weights stay with them. Exit 0 only when the FP32 tokens are equal.
#include <cstdio>
#include <string>

#include "engine/cpu_executor.hpp"
#include "engine/cuda_executor.hpp"
#include "engine/model_dir.hpp"
#include "tests/device/decode_harness.hpp"

using namespace kiln::engine;

int main() {
  const std::string dir = "/tmp/kiln-device-tiny";
  if (auto e = make_tiny_model(dir, "small"); !e.empty()) return std::fprintf(stderr, "%s\n", e.c_str()), 1;
  auto loaded = load_model_dir(dir);
  if (auto* e = std::get_if<std::string>(&loaded)) return std::fprintf(stderr, "%s\n", e->c_str()), 1;
  const auto& m = std::get<loaded_model>(loaded);
  const char* prompts[] = {"Hello", "How hot is the kiln?", "Tell me about clay and glaze in three short sentences.",
                           "Why", "What does the team share?", "Start the fire, then wait.", "a b c d e f g", "Thanks!"};
  auto run = [&](executor& exec, kv_geometry kv) {
    scheduler sched({512, 8, 0}, kv.num_blocks, kv.block_size);
    seq_id id = 1;
    for (const char* p : prompts) {
      auto text = std::get<0>(m.tmpl->render({{"user", p}}));
      sched.add(id++, priority::standard, m.tokenizer->encode(text), 24);
    }
    return kiln::device::drive(sched, exec);
  };
  const kv_geometry kv{512, 16};
  cpu_executor cpu(m.weights, kv, 8);
  const auto want = run(cpu, kv);
  int status = 0;
  for (auto dtype : {cuda_weights::f32, cuda_weights::bf16, cuda_weights::int8}) {
    cuda_options opts;
    opts.weights = dtype;
    opts.kv_blocks = kv.num_blocks - 1;
    opts.max_step_tokens = 512;
    opts.max_batch = 8;
    opts.max_context = 2048;
    auto made = cuda_executor::create(m.weights, opts);
    if (auto* e = std::get_if<std::string>(&made)) return std::fprintf(stderr, "cuda executor: %s\n", e->c_str()), 1;
    auto& gpu = *std::get<std::unique_ptr<cuda_executor>>(made);
    if (dtype == cuda_weights::f32) {
      // Without graphs first: the plain path must already agree.
      gpu.set_graphs(false);
      const auto plain = run(gpu, gpu.kv());
      if (!plain.error.empty()) return std::fprintf(stderr, "gpu step failed: %s\n", plain.error.c_str()), 1;
      const bool equal = plain.tokens == want.tokens;
      std::printf("greedy decode, F32 weights, no graphs: %s the CPU executor\n", equal ? "equal to" : "DIFFERENT from");
      if (!equal) status = 1;
      gpu.set_graphs(true);
    }
    const auto got = run(gpu, gpu.kv());
    if (!got.error.empty()) return std::fprintf(stderr, "gpu step failed: %s\n", got.error.c_str()), 1;
    std::printf("decode graphs captured: %zu\n", gpu.captured_graphs());
    int same_seqs = 0, same_tokens = 0, total = 0;
    for (const auto& [id, toks] : want.tokens) {
      const auto& g = got.tokens.at(id);
      same_seqs += g == toks;
      for (std::size_t i = 0; i < toks.size(); ++i) {
        if (i < g.size() && g[i] == toks[i]) ++same_tokens;
        else break;
      }
      total += static_cast<int>(toks.size());
    }
    const bool f32 = dtype == cuda_weights::f32;
    std::printf("greedy decode, %s weights: %d of %zu sequences equal to the CPU executor; %d of %d tokens before the first difference\n",
                f32 ? "F32" : dtype == cuda_weights::bf16 ? "BF16" : "INT8", same_seqs, want.tokens.size(), same_tokens, total);
    if (f32 && same_seqs != static_cast<int>(want.tokens.size())) status = 1;
  }
  std::printf("gpu_decode_check: %s\n", status == 0 ? "PASS" : "FAIL");
  return status;
}
