// `kiln sim`: runs a scenario's runs (one per trace and policy, or capacity steps), writes the
// reports and prints a progress line and a summary.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "sim/gate.hpp"
#include "sim/report.hpp"
#include "sim/sim.hpp"

namespace kiln::sim {

namespace {

std::string num(double v, int digits = 1) { return format_fixed(v, digits); }

bool parse_number(const std::string& s, double& out) {
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0' && std::isfinite(out);
}

}  // namespace

int run_sim(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0].rfind("--", 0) == 0) {
    err << "kiln: sim needs a scenario file\n";
    return 2;
  }
  const std::string file = args[0];
  sim_overrides o;
  std::string out_dir;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& f = args[i];
    if (i + 1 >= args.size()) {
      err << "kiln: " << f << (f.rfind("--", 0) == 0 ? " needs a value\n" : ": unexpected argument\n");
      return 2;
    }
    const std::string& v = args[++i];
    if (v.empty()) {
      err << "kiln: " << f << " needs a value, got ''\n";
      return 2;
    }
    double n = 0;
    if (f == "--seed") {
      if (!parse_number(v, n) || n < 1 || n > 9e15 || n != std::floor(n)) {
        err << "kiln: --seed must be a whole number from 1 to 9000000000000000, got '" << v << "'\n";
        return 2;
      }
      o.seed = static_cast<std::uint64_t>(n);
    } else if (f == "--rate") {
      if (!parse_number(v, n) || n <= 0) {
        err << "kiln: --rate must be a positive number of requests per second, got '" << v << "'\n";
        return 2;
      }
      o.rate = n;
    } else if (f == "--out") {
      out_dir = v;
    } else if (f == "--trace") {
      o.trace = v;
    } else if (f == "--policy") {
      o.policy = v;
    } else {
      err << "kiln: unknown option '" << f << "'\n";
      return 2;
    }
  }
  auto loaded = load_scenario(file);
  if (auto* e = std::get_if<std::string>(&loaded)) {
    err << "kiln: " << *e << "\n";
    return 1;
  }
  scenario s = std::move(std::get<scenario>(loaded));
  if (auto e = apply_overrides(s, o); !e.empty()) {
    err << "kiln: " << e << "\n";
    return 2;
  }
  if (out_dir.empty()) out_dir = "sim-out/" + s.name;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    err << "kiln: cannot create " << out_dir << ": " << ec.message() << "\n";
    return 1;
  }

  std::vector<run_plan> plans = s.runs();
  if (s.capacity.enabled) {
    // The steps replace the runs: the first run's arrivals at rising rates.
    run_plan base = plans.front();
    plans.clear();
    for (int k = 0; k < s.capacity.max_steps; ++k) {
      run_plan p = base;
      const double rate = s.capacity.start_rate + k * s.capacity.step_rate;
      p.arrivals.rate = rate;
      p.arrivals.trace_rate = rate;
      p.label = "rate-" + num(rate, rate == std::floor(rate) ? 0 : 2);
      plans.push_back(std::move(p));
    }
  }
  std::vector<run_summary> summaries;
  std::string capacity_note;
  double best_rate = -1;
  run_summary best;
  for (const auto& plan : plans) {
    auto last_print = std::chrono::steady_clock::now();
    auto progress = [&](double vt, double rt, std::size_t done, std::size_t all) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_print < std::chrono::milliseconds(200)) return;
      last_print = now;
      err << "\r[sim] " << plan.label << "  virtual " << num(vt) << " s  real " << num(rt) << " s  x"
          << num(rt > 0 ? vt / rt : 0, 0) << "  requests " << done << "/" << all << "   " << std::flush;
    };
    auto r = run_once(s, plan, progress);
    if (auto* e = std::get_if<std::string>(&r)) {
      err << "\nkiln: " << plan.label << ": " << *e << "\n";
      return 1;
    }
    const run_result& res = std::get<run_result>(r);
    if (auto e = write_run(res, s, out_dir); !e.empty()) {
      err << "\nkiln: " << e << "\n";
      return 1;
    }
    const run_summary m = summarize(res, s);
    summaries.push_back(m);
    err << "\r[sim] " << plan.label << "  virtual " << num(res.virtual_s) << " s  real " << num(res.real_s, 2)
        << " s  x" << num(res.real_s > 0 ? res.virtual_s / res.real_s : 0, 0) << "  requests " << m.requests
        << "            \n";
    out << plan.label << ": " << m.requests << " requests, " << m.completed << " completed, " << m.rejected_429
        << " 429, " << m.shed_503 << " 503, " << m.other_errors << " other errors (" << m.mid_stream_errors << " mid-stream), " << m.retried
        << " retried; TTFT p95 " << num(m.ttft_p95_ms) << " ms; hit rate " << num(100 * m.hit_rate) << "% of oracle "
        << num(100 * m.oracle_hit_rate) << "%; imbalance " << num(m.imbalance, 2) << "; " << num(m.output_tokens_per_s_per_replica)
        << " output tokens/s per replica; speed-up x" << num(res.real_s > 0 ? res.virtual_s / res.real_s : 0, 0)
        << " (" << res.engine_steps << " engine steps)\n";
    if (s.capacity.enabled) {
      if (!passes(m, s.capacity)) break;
      best_rate = plan.arrivals.rate;
      best = m;
    }
  }
  if (s.capacity.enabled) {
    capacity_note = best_rate < 0 ? "No step met the targets (p95 TTFT <= " + num(s.capacity.ttft_p95_limit_s, 2) +
                                        " s, streams >= " + num(s.capacity.min_stream_tokens_per_s, 0) + " tokens/s)."
                                  : "Highest passing step: " + num(best_rate, 2) + " requests/s, " +
                                        num(best.output_tokens_per_s_per_replica) +
                                        " output tokens/s per replica (p95 TTFT " + num(best.ttft_p95_ms) +
                                        " ms, 5th-percentile stream " + num(best.slowest_stream_tokens_per_s_p5) +
                                        " tokens/s).";
    out << capacity_note << "\n";
  }
  if (auto e = write_summary(summaries, s, out_dir, capacity_note); !e.empty()) {
    err << "kiln: " << e << "\n";
    return 1;
  }
  out << "reports in " << out_dir << "/summary.md\n";
  return 0;
}

}  // namespace kiln::sim
