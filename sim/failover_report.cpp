// A region kill's figures, from the run's records: the balancer's moves, how long errors
// went on, interactive TTFT and batch work around the kill, and the survivor's scale-up.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "sim/report.hpp"

namespace kiln::sim {

failover_summary summarize_failover(const run_result& r) {
  failover_summary f;
  const region_kill_record& k = r.region_kill;
  if (k.region.empty()) return f;
  f.region = k.region;
  f.survivor = k.survivor;
  f.at_s = k.at_s;
  f.detect_s = k.detect_s;
  f.moved = k.moved;
  f.lost_mid_stream = k.lost_mid_stream;
  f.redirected = k.redirected;
  std::vector<double> inter_before, inter_shift, batch_before, batch_shift;
  for (const auto& q : r.requests) {
    if (q.outcome.empty()) ++f.lost;
    const bool refused = q.outcome == "over_limit" || q.outcome == "shed" || q.outcome == "timed_out";
    if (!q.outcome.empty() && q.outcome != "completed" && !refused && q.end >= k.at_s) {
      ++f.errors_after;
      f.errors_stop_s = std::max(f.errors_stop_s, q.end - k.at_s);
    }
    if (refused && q.arrival >= k.at_s) {
      if (q.tier == engine::priority::interactive) ++f.refused_interactive;
      else if (q.tier == engine::priority::batch) ++f.refused_batch;
      else ++f.refused_standard;
    }
    if (q.tier == engine::priority::batch && q.arrival >= k.at_s) ++f.batch_after;
    if (q.moved_region && q.outcome == "completed") ++f.moved_completed;
    if (q.first_token < 0) continue;
    const double ttft_ms = (q.first_token - q.arrival) * 1e3;
    const bool before = q.arrival >= k.at_s - kShiftWindowS && q.arrival < k.at_s;
    const bool shift = q.arrival >= k.at_s && q.arrival < k.at_s + kShiftWindowS;
    auto& into = q.tier == engine::priority::interactive ? (before ? inter_before : inter_shift)
                                                         : (before ? batch_before : batch_shift);
    if ((before || shift) && q.tier != engine::priority::standard) into.push_back(ttft_ms);
  }
  f.interactive_ttft_p95_before_ms = percentile(inter_before, 0.95);
  f.interactive_ttft_p95_shift_ms = percentile(inter_shift, 0.95);
  f.batch_ttft_p95_before_ms = percentile(batch_before, 0.95);
  f.batch_ttft_p95_shift_ms = percentile(batch_shift, 0.95);
  // The survivor's first scale-up after the kill: its replicas serve once the survivor serves
  // as many as it had (in any phase but stopped or failed) before the action, plus those added.
  double up_at = -1;
  int added = 0;
  for (const auto& d : r.rollouts)
    if (d.region == k.survivor && d.stage == "autoscale" && d.decision.starts_with("add ") && d.t >= k.at_s) {
      up_at = d.t;
      added = std::atoi(d.decision.c_str() + 4);
      break;
    }
  if (up_at < 0) return f;
  f.first_scale_up_s = up_at - k.at_s;
  std::map<double, std::pair<int, int>> counts;  // report time -> (serving, live)
  for (std::size_t p = 0; p < r.pools.size(); ++p) {
    if (!r.pools[p].starts_with(k.survivor + "/")) continue;
    for (const auto& smp : r.samples[p])
      for (const auto& [phase, n] : smp.phases) {
        if (phase == "serving") counts[smp.t].first += n;
        if (phase != "stopped" && phase != "failed") counts[smp.t].second += n;
      }
  }
  int live_before = 0;
  for (const auto& [t, c] : counts) {
    if (t < up_at) {
      live_before = c.second;
    } else if (c.first >= live_before + added) {
      f.new_replicas_serve_s = t - k.at_s;
      break;
    }
  }
  return f;
}

std::string failover_section(const std::vector<run_summary>& runs) {
  if (std::none_of(runs.begin(), runs.end(), [](const run_summary& m) { return !m.failover.region.empty(); })) return "";
  std::ostringstream o;
  auto ms = [](double v) { return format_fixed(v, 0); };
  auto after = [](double v) { return v < 0 ? std::string("none") : format_fixed(v, 0) + " s"; };
  o << "\n## Region failover\n\nA region killed with its traffic: open streams without a token move to the "
       "survivor whole, open streams with tokens end with one error event, arrivals from then on go to the survivor. "
       "Errors are what the kill caused (not overload refusals); refusals (429, 503, a wait run out) are of arrivals "
       "from the kill on, by tier (interactive / standard / batch). TTFT is over the minute before the kill and the "
       "minute after (arrivals), from the client's first send.\n\n"
       "| run | killed | at s | survivor | moved | completed after moving | errored mid-stream | redirected | "
       "errors | errors stop after | refused i / s / b | batch arriving after | interactive TTFT p95 ms before / "
       "during | batch TTFT p95 ms before / during | first scale-up | new replicas serve | lost |\n"
       "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|---:|---:|---:|\n";
  for (const auto& m : runs) {
    const failover_summary& f = m.failover;
    if (f.region.empty()) continue;
    o << "| " << m.label << " | " << f.region << " | " << format_fixed(f.at_s) << " | " << f.survivor << " | " << f.moved
      << " | " << f.moved_completed << " | " << f.lost_mid_stream << " | " << f.redirected << " | " << f.errors_after
      << " | " << format_fixed(f.errors_stop_s) << " s | " << f.refused_interactive << " / " << f.refused_standard
      << " / " << f.refused_batch << " | " << f.batch_after << " | " << ms(f.interactive_ttft_p95_before_ms) << " / "
      << ms(f.interactive_ttft_p95_shift_ms) << " | " << ms(f.batch_ttft_p95_before_ms) << " / "
      << ms(f.batch_ttft_p95_shift_ms) << " | " << after(f.first_scale_up_s) << " | " << after(f.new_replicas_serve_s)
      << " | " << f.lost << " |\n";
  }
  return o.str();
}

}  // namespace kiln::sim
