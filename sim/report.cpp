#include "sim/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace kiln::sim {

namespace fs = std::filesystem;

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size()));
  const std::size_t i = std::min(rank < 1 ? 0 : static_cast<std::size_t>(rank) - 1, v.size() - 1);
  // The i-th smallest, without sorting the rest.
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

std::string file_safe(std::string s) {
  for (char& c : s)
    if (c == '/' || c == '@' || c == ' ') c = '_';
  return s;
}

std::string format_fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, std::isfinite(v) ? v : 0.0);
  return buf;
}

namespace {

std::string num(double v, int digits = 1) { return format_fixed(v, digits); }

const char* tier_name(engine::priority p) {
  switch (p) {
    case engine::priority::interactive: return "interactive";
    case engine::priority::batch: return "batch";
    default: return "standard";
  }
}

bool is_429(const request_record& r) { return r.outcome == "over_limit"; }
bool is_503(const request_record& r) { return r.outcome == "shed"; }

double tpot_ms(const request_record& r) {
  if (r.outcome != "completed" || r.output < 2 || r.first_token < 0) return -1;
  return (r.end - r.first_token) * 1e3 / (r.output - 1);
}

/// A pool's figures for one report interval.
struct interval_row {
  std::vector<double> ttft_ms, tpot;
  std::int64_t prompt = 0, cached = 0;
  std::size_t completed = 0, r429 = 0, r503 = 0, errors = 0;
};

std::size_t slot_of(double t, double interval, std::size_t n) {
  if (t < 0 || n == 0) return n;
  return std::min(n - 1, static_cast<std::size_t>(t / interval));
}

std::vector<interval_row> rows_of(const run_result& r, std::uint32_t pool, double interval) {
  const std::size_t n = r.samples[pool].size();
  std::vector<interval_row> rows(n);
  for (const auto& q : r.requests) {
    if (q.pool != pool) continue;
    if (const std::size_t i = slot_of(q.first_token, interval, n); i < n) {
      rows[i].ttft_ms.push_back((q.first_token - q.arrival) * 1e3);
      rows[i].prompt += q.prompt;
      rows[i].cached += q.cached;
    }
    if (const std::size_t i = slot_of(q.end, interval, n); i < n) {
      if (q.outcome == "completed") ++rows[i].completed;
      else if (is_429(q)) ++rows[i].r429;
      else if (is_503(q)) ++rows[i].r503;
      else ++rows[i].errors;
      if (const double t = tpot_ms(q); t >= 0) rows[i].tpot.push_back(t);
    }
  }
  return rows;
}

/// Output tokens per report interval of a pool: each stream's first token when it came, the
/// rest spread evenly to its end (so the series does not depend on how tokens were batched).
std::vector<double> tokens_by_interval(const run_result& r, std::uint32_t pool, double interval) {
  const std::size_t n = r.samples[pool].size();
  std::vector<double> out(n, 0.0);
  for (const auto& q : r.requests) {
    if (q.pool != pool || q.first_token < 0 || q.output <= 0) continue;
    if (const std::size_t i = slot_of(q.first_token, interval, n); i < n) out[i] += 1;
    const double rest = q.output - 1;
    if (rest <= 0 || q.end <= q.first_token) {
      if (const std::size_t i = slot_of(std::max(q.end, q.first_token), interval, n); i < n) out[i] += rest;
      continue;
    }
    const double rate = rest / (q.end - q.first_token);
    for (std::size_t i = slot_of(q.first_token, interval, n); i < n; ++i) {
      const double lo = std::max(q.first_token, static_cast<double>(i) * interval);
      const double hi = std::min(q.end, static_cast<double>(i + 1) * interval);
      if (hi > lo) out[i] += (hi - lo) * rate;
      if (q.end <= static_cast<double>(i + 1) * interval) break;
    }
  }
  return out;
}

double imbalance_of(const pool_sample& s) {
  if (s.reporting == 0 || s.tokens_in_flight <= 0) return 0;
  return static_cast<double>(s.busiest_tokens) / (static_cast<double>(s.tokens_in_flight) / s.reporting);
}

std::string write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  if (!out) return "cannot write " + p.string();
  out << text;
  return out ? "" : "cannot write " + p.string();
}

}  // namespace

run_summary summarize(const run_result& r, const scenario& s) {
  run_summary m;
  m.label = r.label;
  m.policy = r.policy;
  m.requests = r.requests.size();
  m.retried = r.retried;
  m.virtual_s = r.virtual_s;
  m.failover = summarize_failover(r);
  for (const auto& d : r.rollouts) {
    run_summary::decision x{d.t, d.version, d.stage, d.decision, d.reason, d.percent, -1};
    if (d.decision == "rollback") {
      ++m.rollbacks;
      for (auto it = m.rollouts.rbegin(); it != m.rollouts.rend(); ++it)
        if (it->version == d.version && it->stage == d.stage && it->decision == "start") {
          x.stage_s = d.t - it->t;
          break;
        }
    }
    m.rollouts.push_back(std::move(x));
  }
  std::vector<double> ttft, tpot, stream_rate;
  std::int64_t prompt = 0, cached = 0;
  for (const auto& q : r.requests) {
    if (q.outcome == "completed") ++m.completed;
    else if (is_429(q)) ++m.rejected_429;
    else if (is_503(q)) ++m.shed_503;
    else if (q.outcome.empty()) ++m.unfinished;
    else ++m.other_errors;
    if (q.mid_stream) ++m.mid_stream_errors;
    if (q.first_token >= 0) {
      ttft.push_back((q.first_token - q.arrival) * 1e3);
      prompt += q.prompt;
      cached += q.cached;
    }
    if (const double t = tpot_ms(q); t > 0) {
      tpot.push_back(t);
      stream_rate.push_back(1e3 / t);
    }
  }
  m.ttft_p50_ms = percentile(ttft, 0.50);
  m.ttft_p95_ms = percentile(ttft, 0.95);
  m.ttft_p99_ms = percentile(ttft, 0.99);
  m.tpot_p50_ms = percentile(tpot, 0.50);
  m.tpot_p95_ms = percentile(tpot, 0.95);
  m.slowest_stream_tokens_per_s_p5 = percentile(stream_rate, 0.05);
  // Over the report ticks that cover the arrivals (a trace may end before the duration).
  const double window =
      std::max(s.report_interval_s, std::ceil(std::min(s.duration_s, r.arrivals_end) / s.report_interval_s - 1e-9) *
                                        s.report_interval_s);
  double delivered = 0;
  for (std::uint32_t p = 0; p < r.pools.size(); ++p) {
    const auto tokens = tokens_by_interval(r, p, s.report_interval_s);
    for (std::size_t i = 0; i < tokens.size(); ++i)
      if (r.samples[p][i].t <= window + 1e-9) delivered += tokens[i];
  }
  m.output_tokens_per_s = delivered / window;
  double replicas = 0;
  for (const auto& p : s.fleet.pools) replicas += p.replicas;
  replicas *= static_cast<double>(s.regions.size());
  m.output_tokens_per_s_per_replica = m.output_tokens_per_s / std::max(1.0, replicas);
  m.hit_rate = prompt > 0 ? static_cast<double>(cached) / static_cast<double>(prompt) : 0;
  m.oracle_hit_rate = r.oracle.hit_rate();
  double sum = 0;
  int n = 0;
  for (const auto& series : r.samples)
    for (const auto& sm : series)
      if (const double im = imbalance_of(sm); im > 0) {
        sum += im;
        ++n;
      }
  m.imbalance = n > 0 ? sum / n : 0;
  std::map<std::string, std::pair<team_summary, std::vector<double>>> teams;
  for (const auto& q : r.requests) {
    auto& [t, ttfts] = teams[q.team];
    t.team = q.team;
    ++t.requests;
    if (q.outcome == "completed") ++t.completed;
    else if (is_429(q)) ++t.rejected_429;
    else if (is_503(q)) ++t.shed_503;
    else ++t.errors;
    if (q.first_token >= 0) ttfts.push_back((q.first_token - q.arrival) * 1e3);
  }
  for (auto& [name, tv] : teams) {
    tv.first.ttft_p95_ms = percentile(tv.second, 0.95);
    m.teams.push_back(tv.first);
  }
  return m;
}

std::string write_run(const run_result& r, const scenario& s, const std::string& dir) {
  const fs::path root = fs::path(dir) / file_safe(r.label);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return "cannot create " + root.string() + ": " + ec.message();
  const double interval = s.report_interval_s;
  std::vector<chart_series> load, replicas, queue, ttft95, hits, imbalance;
  for (std::uint32_t p = 0; p < r.pools.size(); ++p) {
    const auto rows = rows_of(r, p, interval);
    const auto tokens = tokens_by_interval(r, p, interval);
    std::ostringstream csv;
    csv << "time_s,replicas_serving,replicas_starting,replicas_loading,replicas_draining,replicas_failed,"
           "replicas_stopped,tokens_per_s,tokens_in_flight,queue_interactive,queue_standard,queue_batch,"
           "engine_waiting,ttft_p50_ms,ttft_p95_ms,ttft_p99_ms,tpot_p50_ms,tpot_p95_ms,prefix_hit_rate,imbalance,"
           "completed,rejected_429,shed_503,errors,replicas_warm\n";
    chart_series l{r.pools[p], {}, {}}, rep = l, q = l, t95 = l, h = l, im = l;
    for (std::size_t i = 0; i < r.samples[p].size(); ++i) {
      const pool_sample& sm = r.samples[p][i];
      const interval_row& row = rows[i];
      auto phase = [&](const char* k) {
        auto it = sm.phases.find(k);
        return it == sm.phases.end() ? 0 : it->second;
      };
      const double tps = tokens[i] / interval;
      const double hit = row.prompt > 0 ? static_cast<double>(row.cached) / static_cast<double>(row.prompt) : 0;
      const double p95 = percentile(row.ttft_ms, 0.95);
      const std::int64_t queued = sm.queued[0] + sm.queued[1] + sm.queued[2];
      csv << num(sm.t, 3) << ',' << phase("serving") << ',' << phase("starting") << ',' << phase("loading") << ','
          << phase("draining") << ',' << phase("failed") << ',' << phase("stopped") << ',' << num(tps) << ','
          << sm.tokens_in_flight << ',' << sm.queued[0] << ',' << sm.queued[1] << ',' << sm.queued[2] << ','
          << sm.engine_waiting << ',' << num(percentile(row.ttft_ms, 0.5)) << ',' << num(p95) << ','
          << num(percentile(row.ttft_ms, 0.99)) << ',' << num(percentile(row.tpot, 0.5), 2) << ','
          << num(percentile(row.tpot, 0.95), 2) << ',' << num(hit, 4) << ',' << num(imbalance_of(sm), 3) << ','
          << row.completed << ',' << row.r429 << ',' << row.r503 << ',' << row.errors << ',' << phase("warm") << '\n';
      for (auto* c : {&l, &rep, &q, &t95, &h, &im}) c->x.push_back(sm.t);
      l.y.push_back(tps);
      rep.y.push_back(phase("serving"));
      q.y.push_back(static_cast<double>(queued + sm.engine_waiting));
      t95.y.push_back(p95);
      h.y.push_back(hit);
      im.y.push_back(imbalance_of(sm));
    }
    if (auto e = write_file(root / ("pool_" + file_safe(r.pools[p]) + ".csv"), csv.str()); !e.empty()) return e;
    load.push_back(std::move(l));
    replicas.push_back(std::move(rep));
    queue.push_back(std::move(q));
    ttft95.push_back(std::move(t95));
    hits.push_back(std::move(h));
    imbalance.push_back(std::move(im));
  }
  // Per team and tier, per pool and interval: what they sent and how it ended.
  struct team_row {
    std::size_t requests = 0, completed = 0, r429 = 0, r503 = 0, errors = 0;
    std::vector<double> ttft;
  };
  std::map<std::tuple<std::size_t, std::uint32_t, std::string, std::string>, team_row> teams;
  for (const auto& q : r.requests) {
    const std::size_t n = r.samples[q.pool].size();
    const std::size_t i = slot_of(q.arrival, interval, n);
    if (i >= n) continue;
    team_row& row = teams[{i, q.pool, q.team, tier_name(q.tier)}];
    ++row.requests;
    if (q.outcome == "completed") ++row.completed;
    else if (is_429(q)) ++row.r429;
    else if (is_503(q)) ++row.r503;
    else if (!q.outcome.empty()) ++row.errors;
    if (q.first_token >= 0) row.ttft.push_back((q.first_token - q.arrival) * 1e3);
  }
  std::ostringstream tcsv;
  tcsv << "time_s,pool,team,tier,requests,completed,rejected_429,shed_503,errors,ttft_p95_ms\n";
  for (const auto& [k, row] : teams)
    tcsv << num((static_cast<double>(std::get<0>(k)) + 1) * interval, 3) << ',' << r.pools[std::get<1>(k)] << ','
         << std::get<2>(k) << ',' << std::get<3>(k) << ',' << row.requests << ',' << row.completed << ',' << row.r429
         << ',' << row.r503 << ',' << row.errors << ',' << num(percentile(row.ttft, 0.95)) << '\n';
  if (auto e = write_file(root / "teams.csv", tcsv.str()); !e.empty()) return e;
  std::string events;
  for (const auto& line : r.event_log) events += line + "\n";
  for (const auto& d : r.rollouts)
    events += num(d.t) + " s: " + d.model + "@" + d.version + " " + d.stage + " " + num(d.percent, 0) + "%: " + d.decision +
              " (" + d.reason + ", " + d.region + ")\n";
  if (!events.empty())
    if (auto e = write_file(root / "events.txt", events); !e.empty()) return e;
  const std::pair<const char*, std::pair<std::string, const std::vector<chart_series>*>> charts[] = {
      {"load.svg", {"output tokens/s", &load}},         {"replicas.svg", {"serving replicas", &replicas}},
      {"queue.svg", {"requests queued", &queue}},       {"ttft_p95.svg", {"p95 TTFT (ms)", &ttft95}},
      {"hit_rate.svg", {"prefix hit rate", &hits}},     {"imbalance.svg", {"busiest / mean tokens in flight", &imbalance}},
  };
  for (const auto& [file, what] : charts) {
    const std::string title = r.label + ": " + what.first;
    if (auto e = write_file(root / file, svg_chart(title, what.first, *what.second)); !e.empty()) return e;
  }
  return {};
}

}  // namespace kiln::sim
