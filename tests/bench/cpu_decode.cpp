// cpu_decode: decode tokens/s of the CPU executor at batch 1 and 16 on a ~100M-parameter
// model (made with make-tiny-model --size 100m when absent), with the weights in F32, BF16
// and INT8 (each on the best kernels this CPU has, BF16 and INT8 with a BF16 KV cache),
// beside the memory bandwidth a triad loop measures in the same run (best of before and
// after). A decode step must read every weight once, so roofline step time = bytes read per
// step in the weights' own dtype / bandwidth; the fraction printed is that over the
// measured step time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/cpu_executor.hpp"
#include "engine/model_dir.hpp"

using namespace kiln::engine;
using clock_type = std::chrono::steady_clock;

namespace {

// /proc/cpuinfo's "model name", or "unknown".
std::string cpu_model_name() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "unknown";
  char line[512];
  std::string name = "unknown";
  while (std::fgets(line, sizeof line, f)) {
    const std::string l(line);
    if (l.rfind("model name", 0) == 0 && l.find(':') != std::string::npos) {
      name = l.substr(l.find(':') + 2);
      while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
      break;
    }
  }
  std::fclose(f);
  return name;
}

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// Best of `reps` of a[i] = b[i] + s * c[i] over n floats on `threads` threads; bytes/s
// counting the three arrays once each.
double triad_bandwidth(std::size_t n, int threads, int reps) {
  std::vector<float> a(n), b(n, 1.f), c(n, 2.f);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        const std::size_t lo = n * static_cast<std::size_t>(t) / static_cast<std::size_t>(threads);
        const std::size_t hi = n * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(threads);
        for (std::size_t i = lo; i < hi; ++i) a[i] = b[i] + 0.5f * c[i];
      });
    for (auto& th : ts) th.join();
    best = std::min(best, seconds_since(t0));
  }
  if (a[n / 2] != 2.f) std::fprintf(stderr, "triad check failed\n");
  return 3.0 * sizeof(float) * static_cast<double>(n) / best;
}

struct decode_result {
  double step_s = 0;
  double tokens_per_s = 0;
  double bytes_per_step = 0;
};

decode_result decode(std::shared_ptr<const cpu_model> w, kv_dtype kv_type, int batch, int prompt_len, int steps, int threads) {
  const kv_geometry kv{1 + batch * ((prompt_len + steps + 16) / 16 + 1), 16};
  scheduler sched({4096, batch, 0}, kv.num_blocks, kv.block_size);
  cpu_executor exec(w, kv, threads, kv_type);
  for (int b = 0; b < batch; ++b) {
    std::vector<token_id> prompt(static_cast<std::size_t>(prompt_len));
    for (int i = 0; i < prompt_len; ++i) prompt[static_cast<std::size_t>(i)] = (b * 131 + i * 7) % w->cfg.vocab;
    sched.add(static_cast<seq_id>(b + 1), priority::standard, prompt, steps + 2);
  }
  auto step = [&] {
    const step_plan plan = sched.schedule();
    std::vector<sample_slot> slots;
    for (const auto& item : plan.items)
      if (item.samples) slots.push_back({item.id, 1, sched.find(item.id)->generated, 0.0});
    const auto out = exec.run(plan, sched, slots);
    sched.update(plan, out.tokens);
    return plan;
  };
  step();  // prefill
  decode_result r;
  const auto t0 = clock_type::now();
  double kv_tokens = 0;
  for (int s = 0; s < steps; ++s) {
    const step_plan plan = step();
    for (const auto& item : plan.items) kv_tokens += item.context_before + 1;
  }
  const double elapsed = seconds_since(t0);
  const llama_config& c = w->cfg;
  const double kv_bytes_per_token = 2.0 * c.layers * c.kv_heads * c.head_dim * (kv_type == kv_dtype::bf16 ? 2 : 4);
  r.step_s = elapsed / steps;
  r.tokens_per_s = batch * steps / elapsed;
  r.bytes_per_step = static_cast<double>(w->bytes()) + kv_tokens / steps * kv_bytes_per_token;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/kiln-bench-100m";
  int threads = 2, steps = 32, prompt = 64;
  std::string only;  // one dtype (for profiling)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--model") dir = argv[i + 1];
    else if (f == "--threads") threads = std::atoi(argv[i + 1]);
    else if (f == "--steps") steps = std::atoi(argv[i + 1]);
    else if (f == "--prompt") prompt = std::atoi(argv[i + 1]);
    else if (f == "--only") only = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: cpu_decode [--model DIR] [--threads N] [--steps N] [--prompt N] [--only f32|bf16|int8]\n");
      return 2;
    }
  }
  if (!std::filesystem::exists(dir)) {
    std::printf("making a 100m model in %s\n", dir.c_str());
    if (auto e = make_tiny_model(dir, "100m"); !e.empty()) {
      std::fprintf(stderr, "%s\n", e.c_str());
      return 1;
    }
  }
  auto loaded = load_model_dir(dir);
  if (auto* e = std::get_if<std::string>(&loaded)) {
    std::fprintf(stderr, "%s\n", e->c_str());
    return 1;
  }
  auto w = std::get<loaded_model>(loaded).weights;
  std::size_t params = w->bytes() / sizeof(float) + (w->lm_head.empty() ? 0 : w->embed.size());
  std::printf("model: %s, %.1fM parameters, threads %d\ncpu: %s (%s)\n", dir.c_str(), static_cast<double>(params) / 1e6,
              threads, cpu_model_name().c_str(), kiln::kernels::cpu::features().summary().c_str());
  namespace kc = kiln::kernels::cpu;
  std::vector<std::shared_ptr<const cpu_model>> models;
  for (kc::wtype t : {kc::wtype::f32, kc::wtype::bf16, kc::wtype::int8})
    if (only.empty() || only == kc::to_string(t)) models.push_back(make_cpu_model(*w, t));
  w.reset();  // only the converted copies from here on
  std::vector<decode_result> results;
  double bw = triad_bandwidth(64u << 20, threads, 10);
  for (const auto& m : models)
    for (int batch : {1, 16})
      results.push_back(decode(m, m->type == kc::wtype::f32 ? kv_dtype::f32 : kv_dtype::bf16, batch, prompt, steps, threads));
  bw = std::max(bw, triad_bandwidth(64u << 20, threads, 10));
  std::printf("triad bandwidth (64M floats, best of 10 before and 10 after, %d threads): %.1f GB/s\n", threads, bw / 1e9);
  std::printf("%-28s %-6s %10s %10s %10s %12s %13s %9s %9s\n", "weights (kernels)", "batch", "step ms", "tokens/s",
              "x f32", "MB read/step", "roofline ms", "fraction", "of f32");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& m = *models[i / 2];
    const decode_result& r = results[i];
    const double roofline = r.bytes_per_step / bw;
    const std::string name = std::string(kc::to_string(m.type)) + " (" + std::string(kc::to_string(m.path)) + ")";
    std::printf("%-28s %-6d %10.2f %10.1f %9.2fx %12.1f %13.2f %8.0f%% %8.0f%%\n", name.c_str(), i % 2 ? 16 : 1,
                r.step_s * 1e3, r.tokens_per_s, r.tokens_per_s / results[i % 2].tokens_per_s, r.bytes_per_step / 1e6,
                roofline * 1e3, 100.0 * roofline / r.step_s, 100.0 * r.bytes_per_step / results[i % 2].bytes_per_step);
  }
  return 0;
}
