// What the remote hop costs: the same streams sent straight to an upstream kiln (sim executor)
// and through a second kiln whose pool is `remote` to it, alternating round by round on one
// machine. Prints TTFT p50/p95 for both, the hop's added TTFT, and CPU microseconds per
// output token of the upstream alone, of the front (the hop itself) and of both together.
// Usage: remote_hop [--rounds 3] [--streams 48] [--rate 16] [--max-tokens 64]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/support/kiln_process.hpp"
#include "tests/support/stream_client.hpp"

using namespace kiln::test;

namespace {

const std::string kHead = R"(admin_key = "key-admin"
[server]
host = "127.0.0.1"
port = 0
[[teams]]
name = "search"
api_key = "key-search"
[[pools]]
model = "chat-7b"
)";

struct sample {
  std::vector<double> ttft;
  long tokens = 0;
  double upstream_cpu = 0;
  double front_cpu = 0;
  int failed = 0;
};

double pct(std::vector<double> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

void run(int port, const std::string& label, int streams, double rate, int max_tokens, const kiln_process& upstream,
         const kiln_process* front, sample& out) {
  std::vector<stream_spec> specs;
  for (int i = 0; i < streams; ++i)
    specs.push_back({"{\"model\":\"chat-7b\",\"stream\":true,\"max_tokens\":" + std::to_string(max_tokens) +
                         ",\"messages\":[{\"role\":\"user\",\"content\":\"" + label + " " + std::to_string(i) +
                         " tell me about rivers, mountains and the weather\"}]}",
                     {"Authorization: Bearer key-search"}, static_cast<int>(i * 1000 / rate)});
  const double up0 = process_cpu_seconds(upstream.pid());
  const double fr0 = front ? process_cpu_seconds(front->pid()) : 0;
  const auto got = run_streams(port, specs, 120);
  out.upstream_cpu += process_cpu_seconds(upstream.pid()) - up0;
  if (front) out.front_cpu += process_cpu_seconds(front->pid()) - fr0;
  for (const auto& g : got) {
    if (g.status != 200 || !g.done) {
      ++out.failed;
      continue;
    }
    out.ttft.push_back(g.ttft_ms);
    out.tokens += std::max(0, g.completion_tokens);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3, streams = 48, max_tokens = 64;
  double rate = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--streams")) streams = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rate")) rate = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-tokens")) max_tokens = std::atoi(argv[i + 1]);
  }
  kiln_process upstream("region = \"up\"\n" + kHead + "version = \"v1\"\nreplicas = 2\n");
  kiln_process front("region = \"local\"\n" + kHead + "version = \"r1\"\nexecutor = \"remote\"\nupstreams = [\"http://127.0.0.1:" +
                     std::to_string(upstream.port()) + "/v1\"]\nupstream_model = \"chat-7b\"\nupstream_api_key = \"key-search\"\n");
  sample direct, via;
  // Warm both paths (connections, the upstream's scheduler) before measuring.
  sample warm;
  run(upstream.port(), "warm-d", 8, rate, 8, upstream, nullptr, warm);
  run(front.port(), "warm-v", 8, rate, 8, upstream, &front, warm);
  for (int r = 0; r < rounds; ++r) {
    sample d, v;
    run(upstream.port(), "direct-" + std::to_string(r), streams, rate, max_tokens, upstream, nullptr, d);
    run(front.port(), "via-" + std::to_string(r), streams, rate, max_tokens, upstream, &front, v);
    std::printf("round %d: ttft p50/p95/max direct %.1f/%.1f/%.1f ms, via %.1f/%.1f/%.1f ms\n", r, pct(d.ttft, 0.5),
                pct(d.ttft, 0.95), pct(d.ttft, 1), pct(v.ttft, 0.5), pct(v.ttft, 0.95), pct(v.ttft, 1));
    for (auto [from, to] : {std::pair{&d, &direct}, std::pair{&v, &via}}) {
      to->ttft.insert(to->ttft.end(), from->ttft.begin(), from->ttft.end());
      to->tokens += from->tokens;
      to->upstream_cpu += from->upstream_cpu;
      to->front_cpu += from->front_cpu;
      to->failed += from->failed;
    }
  }
  auto us_per_token = [](double cpu, long tokens) { return tokens > 0 ? cpu * 1e6 / static_cast<double>(tokens) : -1; };
  std::printf("remote_hop: %d rounds x %d streams at %.0f/s, max_tokens %d (failed: direct %d, via %d)\n", rounds,
              streams, rate, max_tokens, direct.failed, via.failed);
  std::printf("%-8s %10s %10s %12s %14s %14s\n", "path", "ttft_p50", "ttft_p95", "tokens", "upstream_us/t", "front_us/t");
  std::printf("%-8s %8.1fms %8.1fms %12ld %14.1f %14s\n", "direct", pct(direct.ttft, 0.5), pct(direct.ttft, 0.95),
              direct.tokens, us_per_token(direct.upstream_cpu, direct.tokens), "-");
  std::printf("%-8s %8.1fms %8.1fms %12ld %14.1f %14.1f\n", "via", pct(via.ttft, 0.5), pct(via.ttft, 0.95), via.tokens,
              us_per_token(via.upstream_cpu, via.tokens), us_per_token(via.front_cpu, via.tokens));
  std::printf("added by the hop: ttft p50 %+.1f ms, p95 %+.1f ms; cpu %.1f us per output token (the front kiln)\n",
              pct(via.ttft, 0.5) - pct(direct.ttft, 0.5), pct(via.ttft, 0.95) - pct(direct.ttft, 0.95),
              us_per_token(via.front_cpu, via.tokens));
  return direct.failed + via.failed > 0 ? 1 : 0;
}
