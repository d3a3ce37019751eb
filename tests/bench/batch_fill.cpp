// What the batch tier does for the fleet: the same interactive load on the same pool for the
// same time, alone and with a large batch waiting on idle capacity, and a batch alone on every
// engine slot (the pool's full rate). Prints output tokens per second, utilisation (against the full rate),
// interactive p95 TTFT and USD per million output tokens (kiln's own /metrics figure).
// Usage: batch_fill [--seconds 40] [--rate 12] [--replicas 2] [--max-in-flight N (batch.max_in_flight)]
//                   [--batch-step-tokens N: one more run beside the batch with the pool's batch_step_tokens = N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tests/batch/batch_support.hpp"
#include "tests/support/kiln_process.hpp"
#include "tests/support/stream_client.hpp"

using namespace kiln::test;

namespace {

struct figures {
  double tokens_per_s = 0;
  double usd_per_mtok = 0;
  double p95_ttft_ms = -1;
  long batch_lines = 0;
};

std::vector<stream_spec> interactive(double seconds, double rate) {
  std::vector<stream_spec> specs;
  const int n = static_cast<int>(seconds * rate);
  for (int i = 0; i < n; ++i)
    specs.push_back({"{\"model\":\"chat-7b\",\"stream\":true,\"max_tokens\":120,\"messages\":[{\"role\":\"user\",\"content\":\"chat " +
                         std::to_string(i) + " about the weather and other things people ask\"}]}",
                     {"Authorization: Bearer key-search", "x-priority: interactive"}, static_cast<int>(i * 1000 / rate)});
  return specs;
}

figures run(const std::string& cfg, double seconds, double rate, bool with_batch, int batch_lines) {
  process_options opts;
  if (const char* log = std::getenv("BATCH_FILL_LOG")) opts.stderr_path = log;  // kiln's stderr, for a look
  kiln_process p(cfg, opts);
  figures out;
  std::string batch;
  if (with_batch) {
    std::string input;
    for (int i = 0; i < batch_lines; ++i) input += batch_input_line("b" + std::to_string(i), 120) + "\n";
    const auto up = upload_file(p.port(), "key-assistant", input);
    const auto made = up.status == 200 ? create_batch(p.port(), "key-assistant", nlohmann::json::parse(up.body)["id"]) : up;
    if (made.status != 200) {
      std::fprintf(stderr, "batch_fill: no batch: %d %s\n", made.status, made.body.c_str());
      std::exit(1);
    }
    batch = nlohmann::json::parse(made.body)["id"];
  }
  const double t0 = metric(p.port(), "kiln_tokens_streamed_total");
  const auto start = std::chrono::steady_clock::now();
  if (rate > 0) {
    const auto got = run_streams(p.port(), interactive(seconds, rate), static_cast<int>(seconds) + 60);
    std::vector<double> t;
    for (const auto& r : got)
      if (r.ttft_ms >= 0) t.push_back(r.ttft_ms);
    std::sort(t.begin(), t.end());
    if (!t.empty()) out.p95_ttft_ms = t[std::min(t.size() - 1, static_cast<std::size_t>(0.95 * static_cast<double>(t.size())))];
  }
  std::this_thread::sleep_until(start + std::chrono::milliseconds(static_cast<long>(seconds * 1000)));
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.tokens_per_s = (metric(p.port(), "kiln_tokens_streamed_total") - t0) / elapsed;
  out.usd_per_mtok = metric(p.port(), "kiln_model_usd_per_million_tokens{model=\"chat-7b\"");
  if (!batch.empty()) {
    const auto b = nlohmann::json::parse(request(p.port(), "GET", "/v1/batches/" + batch, "", {"Authorization: Bearer key-assistant"}).body,
                                         nullptr, false);
    if (b.contains("request_counts")) out.batch_lines = b["request_counts"].value("completed", 0L);
    else std::fprintf(stderr, "batch_fill: the batch: %s\n", b.dump().c_str());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 40, rate = 12;
  int replicas = 2;
  int max_in_flight = 0;  // 0: kiln's default
  int batch_step = -2;    // -2: no extra run
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rate")) rate = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--replicas")) replicas = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-in-flight")) max_in_flight = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch-step-tokens")) batch_step = std::atoi(argv[i + 1]);
  }
  const std::string base = test_config(replicas, 10000, 400);
  const std::string cfg = max_in_flight > 0 ? base + "[batch]\nmax_in_flight = " + std::to_string(max_in_flight) + "\n" : base;
  const int lines = static_cast<int>(seconds * 400);  // more than the pool can answer in the time
  const figures alone = run(cfg, seconds, rate, false, 0);
  const figures both = run(cfg, seconds, rate, true, lines);
  figures other;
  if (batch_step >= -1) {
    std::string c = cfg;
    const std::string at = "max_running = 128\n";
    c.insert(c.find(at) + at.size(), "batch_step_tokens = " + std::to_string(batch_step) + "\n");
    other = run(c, seconds, rate, true, lines);
  }
  // The full rate: a batch alone on every engine slot (2 x max_running lines at once).
  const figures full = run(base + "[batch]\nmax_in_flight = " + std::to_string(replicas * 128) + "\n", seconds, 0, true, lines);
  std::printf("batch_fill: %d sim replicas, %.0f s each, interactive %.1f requests/s of 120 tokens\n", replicas, seconds, rate);
  std::printf("%-28s %12s %12s %14s %12s %12s\n", "run", "tokens/s", "utilisation", "p95 TTFT ms", "USD/Mtok", "batch lines");
  auto row = [&](const char* name, const figures& f) {
    std::printf("%-28s %12.0f %11.0f%% %14.1f %12.3f %12ld\n", name, f.tokens_per_s, 100 * f.tokens_per_s / full.tokens_per_s,
                f.p95_ttft_ms, f.usd_per_mtok, f.batch_lines);
  };
  row("interactive alone", alone);
  row("interactive + batch", both);
  if (batch_step >= -1) row(("+ batch, batch_step_tokens " + std::to_string(batch_step)).c_str(), other);
  row("batch on every slot (full)", full);
  return 0;
}
