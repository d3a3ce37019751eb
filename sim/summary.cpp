// summary.md: the headline table over a scenario's runs, with the oracle hit rate beside the
// measured one, and links to each run's series and charts.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/report.hpp"

namespace kiln::sim {

namespace {

std::string num(double v, int digits = 1) { return format_fixed(v, digits); }

std::string pct(double v) { return num(100 * v) + "%"; }

}  // namespace

std::string write_summary(const std::vector<run_summary>& runs, const scenario& s, const std::string& dir,
                          const std::string& capacity_note) {
  std::ostringstream o;
  o << "# " << s.name << "\n\n";
  if (!s.description.empty()) o << s.description << "\n\n";
  int replicas = 0;
  for (const auto& p : s.fleet.pools) replicas += p.replicas;
  o << "Seed " << s.seed << "; " << s.regions.size() << " region(s), " << replicas << " replica(s) in each; "
    << "arrivals for " << num(s.duration_s, 0) << " s of virtual time; reports every " << num(s.report_interval_s, 0)
    << " s.\n\n";
  o << "| run | policy | requests | completed | 429 | 503 | other errors | retried | mid-stream errors | "
       "TTFT p50 ms | TTFT p95 ms | TTFT p99 ms | TPOT p95 ms | output tokens/s per replica | prefix hit rate | "
       "oracle hit rate | fraction of oracle | imbalance |\n";
  o << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& m : runs) {
    const double fraction = m.oracle_hit_rate > 0 ? m.hit_rate / m.oracle_hit_rate : 0;
    o << "| " << m.label << " | " << m.policy << " | " << m.requests << " | " << m.completed << " | " << m.rejected_429
      << " | " << m.shed_503 << " | " << m.other_errors + m.unfinished << " | " << m.retried << " | "
      << m.mid_stream_errors << " | " << num(m.ttft_p50_ms) << " | " << num(m.ttft_p95_ms) << " | "
      << num(m.ttft_p99_ms) << " | " << num(m.tpot_p95_ms, 2) << " | " << num(m.output_tokens_per_s_per_replica)
      << " | " << pct(m.hit_rate) << " | " << pct(m.oracle_hit_rate) << " | " << pct(fraction) << " | "
      << num(m.imbalance, 2) << " |\n";
  }
  o << "\nThe oracle hit rate is what an unlimited cache would serve for the same arrivals (every reusable "
       "prompt block found); the fraction reads a routing result against the possible. Imbalance is the busiest "
       "replica's tokens in flight over the pool's mean, averaged over the report ticks.\n";
  if (!capacity_note.empty()) o << "\n" << capacity_note << "\n";
  if (std::any_of(runs.begin(), runs.end(), [](const run_summary& m) { return !m.rollouts.empty(); })) {
    o << "\n## Rollouts and scaling\n\nEach rollout controller's decisions (a rollback's stage time is how long the "
         "candidate ran at its stage before a guard tripped) and each autoscaler's actions.\n\n| run | time s | version | stage | percent | decision | stage time s "
         "| reason |\n|---|---:|---|---|---:|---|---:|---|\n";
    std::size_t rollbacks = 0;
    for (const auto& m : runs) {
      rollbacks += m.rollbacks;
      for (const auto& d : m.rollouts)
        o << "| " << m.label << " | " << num(d.t) << " | " << d.version << " | " << d.stage << " | " << num(d.percent, 0)
          << " | " << d.decision << " | " << (d.stage_s >= 0 ? num(d.stage_s) : "") << " | " << d.reason << " |\n";
    }
    o << "\n" << rollbacks << " rollback(s) over " << runs.size() << " run(s).\n";
  }
  o << failover_section(runs);
  o << "\n## Runs\n";
  for (const auto& m : runs) {
    const std::string d = file_safe(m.label);
    o << "\n### " << m.label << "\n\n";
    if (m.unfinished > 0) o << m.unfinished << " request(s) had not ended when the drain time ran out.\n\n";
    o << "| team | requests | completed | 429 | 503 | other errors | TTFT p95 ms |\n|---|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& t : m.teams)
      o << "| " << t.team << " | " << t.requests << " | " << t.completed << " | " << t.rejected_429 << " | "
        << t.shed_503 << " | " << t.errors << " | " << num(t.ttft_p95_ms) << " |\n";
    o << "\n";
    o << "Series: `" << d << "/pool_*.csv`, `" << d << "/teams.csv`";
    if (std::filesystem::exists(std::filesystem::path(dir) / d / "events.txt")) o << ", events in `" << d << "/events.txt`";
    o << ".\n\n";
    for (const char* c : {"load", "replicas", "queue", "ttft_p95", "hit_rate", "imbalance"})
      o << "![" << c << "](" << d << "/" << c << ".svg)\n";
  }
  const auto path = std::filesystem::path(dir) / "summary.md";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return "cannot write " + path.string();
  out << o.str();
  return out ? "" : "cannot write " + path.string();
}

}  // namespace kiln::sim
