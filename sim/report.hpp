#pragma once
// What a simulator run shows: per-interval series per pool and per team (CSV), headline
// figures, SVG charts, and summary.md. Everything here is a function of the run's records,
// so the same scenario and seed give byte-identical files (real time is printed, not written).
#include <string>
#include <vector>

#include "sim/fleet.hpp"

namespace kiln::sim {

/// A run label as a file or folder name ('/', '@' and ' ' become '_').
std::string file_safe(std::string s);

/// A number with `digits` decimals ("%.*f"; non-finite as 0).
std::string format_fixed(double v, int digits = 1);

/// Nearest-rank percentile (q in [0, 1]) of unsorted values; 0 when empty.
double percentile(std::vector<double> v, double q);

/// A team's part of a run.
struct team_summary {
  std::string team;
  std::size_t requests = 0, completed = 0, rejected_429 = 0, shed_503 = 0, errors = 0;
  double ttft_p95_ms = 0;
};

/// A region kill's figures: what the balancer did with the region's requests, how long the
/// kill's errors went on, what overload refused after it (the survivor sheds batch first),
/// interactive and batch TTFT in the minute after against the minute before, and when the
/// survivor's autoscaler added replicas and they served. Empty region: none killed.
struct failover_summary {
  std::string region, survivor;
  double at_s = 0, detect_s = 0;
  std::size_t moved = 0, lost_mid_stream = 0, redirected = 0;
  std::size_t moved_completed = 0;
  /// Ended from the kill on with an error that is not an overload refusal (429, 503, a
  /// wait run out): what the kill itself caused.
  std::size_t errors_after = 0;
  double errors_stop_s = 0;  ///< from the kill to the last of those
  /// Overload refusals (429, 503, a wait run out) of requests arriving from the kill on, by tier.
  std::size_t refused_interactive = 0, refused_standard = 0, refused_batch = 0;
  std::size_t batch_after = 0;  ///< batch requests arriving from the kill on
  double interactive_ttft_p95_before_ms = 0, interactive_ttft_p95_shift_ms = 0;
  double batch_ttft_p95_before_ms = 0, batch_ttft_p95_shift_ms = 0;
  double first_scale_up_s = -1;      ///< from the kill to the survivor's first autoscaler add; -1: none
  double new_replicas_serve_s = -1;  ///< from the kill to the first report with more serving; -1: none
  std::size_t lost = 0;              ///< requests with no end at all (must be 0)
};

/// The minute before and after a region kill that TTFT is compared over.
inline constexpr double kShiftWindowS = 60;

failover_summary summarize_failover(const run_result& r);

/// One run's headline.
struct run_summary {
  std::string label;
  std::string policy;
  std::size_t requests = 0, completed = 0, rejected_429 = 0, shed_503 = 0, other_errors = 0, unfinished = 0;
  std::size_t mid_stream_errors = 0;
  std::uint64_t retried = 0;
  double ttft_p50_ms = 0, ttft_p95_ms = 0, ttft_p99_ms = 0;
  double tpot_p50_ms = 0, tpot_p95_ms = 0;
  double output_tokens_per_s = 0;       ///< delivered while requests arrived, over that time
  double output_tokens_per_s_per_replica = 0;
  double hit_rate = 0, oracle_hit_rate = 0;
  double imbalance = 0;                 ///< mean over ticks with load
  double virtual_s = 0;
  double slowest_stream_tokens_per_s_p5 = 0;  ///< 5th percentile of streams' tokens/s
  std::vector<team_summary> teams;
  /// Rollout decisions; for a rollback, `stage_s` is how long its stage had run.
  struct decision {
    double t = 0;
    std::string version, stage, decision, reason;
    double percent = 0;
    double stage_s = -1;
  };
  std::vector<decision> rollouts;
  std::size_t rollbacks = 0;
  failover_summary failover;
};

run_summary summarize(const run_result& r, const scenario& s);
/// summary.md's section on region kills ("" when no run had one).
std::string failover_section(const std::vector<run_summary>& runs);

/// Writes <dir>/<label>/pool_*.csv, teams.csv, events.txt and the charts; "" or the error.
std::string write_run(const run_result& r, const scenario& s, const std::string& dir);
/// Writes <dir>/summary.md over every run (capacity: the steps and the highest passing rate).
std::string write_summary(const std::vector<run_summary>& runs, const scenario& s, const std::string& dir,
                          const std::string& capacity_note);

/// A line chart as SVG: one polyline per series.
struct chart_series {
  std::string name;
  std::vector<double> x, y;
};
std::string svg_chart(const std::string& title, const std::string& y_label, const std::vector<chart_series>& series);

}  // namespace kiln::sim
