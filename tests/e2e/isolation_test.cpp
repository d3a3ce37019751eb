// Isolation against the real binary: one team sends ten times its token limit; the other
// teams' p95 time to first token stays within 10% of a run without it, they get no 429, the
// noisy team gets 429s with Retry-After, and nothing else is shed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"
#include "tests/support/stream_client.hpp"

using namespace kiln::test;

namespace {

// Steps of a fixed 40 ms: time to first token is set by step boundaries, not by scheduling
// noise, so a 10% comparison means something on a shared machine.
std::string isolation_config() {
  std::string c = test_config(2);
  c.replace(c.find("[[pools]]"), 9,
            "[[teams]]\nname = \"noisy\"\napi_key = \"key-noisy\"\n[[teams.limits]]\nmodel = \"chat-7b\"\n"
            "tokens_per_minute = 3000\nburst = 300\n[[pools]]");
  const std::string text = "min_output_tokens = 200\nmax_output_tokens = 400\n";
  c.replace(c.find(text), text.size(), "min_output_tokens = 20\nmax_output_tokens = 20\n");
  return c + "[pools.gpu]\nhbm_bytes_per_s = 1e18\nflops_per_s = 1e18\nfixed_step_s = 0.04\n";
}

// `per_second` requests a second for `seconds`, each asking 20 tokens; starts evenly spaced.
void add_load(std::vector<stream_spec>& specs, std::vector<std::string>& team_of, const std::string& team, int per_second,
              int seconds, int run) {
  const int n = per_second * seconds;
  for (int i = 0; i < n; ++i) {
    specs.push_back({"{\"model\":\"chat-7b\",\"stream\":true,\"max_tokens\":20,\"messages\":[{\"role\":\"user\",\"content\":\"" +
                         team + " run " + std::to_string(run) + " request " + std::to_string(i) + "\"}]}",
                     {"Authorization: Bearer key-" + team}, i * 1000 / per_second});
    team_of.push_back(team);
  }
}

double p95(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(0.95 * static_cast<double>(v.size() - 1) + 0.5))];
}

struct team_figures {
  std::vector<double> ttft;
  int ok = 0, too_many = 0, other = 0, without_retry_after = 0;
};

std::map<std::string, team_figures> run(int port, bool with_noisy, int run_index) {
  std::vector<stream_spec> specs;
  std::vector<std::string> team_of;
  add_load(specs, team_of, "search", 12, 8, run_index);
  add_load(specs, team_of, "assistant", 12, 8, run_index);
  // The noisy team's limit is 3,000 tokens a minute (50 a second, ~1.7 requests of ~30
  // tokens); it sends ten times that.
  if (with_noisy) add_load(specs, team_of, "noisy", 17, 8, run_index);
  const auto got = run_streams(port, specs, 60);
  std::map<std::string, team_figures> out;
  for (std::size_t i = 0; i < got.size(); ++i) {
    auto& f = out[team_of[i]];
    const auto& g = got[i];
    if (g.status == 200 && g.finished && g.done) {
      ++f.ok;
      f.ttft.push_back(g.ttft_ms);
    } else if (g.status == 429) {
      ++f.too_many;
      if (g.retry_after <= 0) ++f.without_retry_after;
    } else {
      ++f.other;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("isolation e2e: a team at ten times its limit moves no one else's p95 TTFT; only it gets 429s") {
  kiln_process p(isolation_config());
  const auto quiet = run(p.port(), false, 1);
  const auto noisy = run(p.port(), true, 2);
  for (const char* team : {"search", "assistant"}) {
    CAPTURE(team);
    const auto& a = quiet.at(team);
    const auto& b = noisy.at(team);
    std::printf("isolation: %s p95 TTFT %.1f ms alone, %.1f ms beside the noisy team; ok %d/%d, 429 %d/%d, other %d/%d\n",
                team, p95(a.ttft), p95(b.ttft), a.ok, b.ok, a.too_many, b.too_many, a.other, b.other);
    CHECK(a.too_many == 0);
    CHECK(b.too_many == 0);
    CHECK(a.other == 0);
    CHECK(b.other == 0);
    CHECK(p95(b.ttft) <= 1.10 * p95(a.ttft));
  }
  const auto& n = noisy.at("noisy");
  std::printf("isolation: noisy team ok %d, 429 %d, other %d\n", n.ok, n.too_many, n.other);
  CHECK(n.too_many > n.ok);  // most of ten times the limit is refused
  CHECK(n.ok > 0);           // what its limit allows runs
  CHECK(n.without_retry_after == 0);
  CHECK(n.other == 0);       // refused with 429, never shed with 503
  CHECK(metric(p.port(), "kiln_team_shed_total") == 0);
}
