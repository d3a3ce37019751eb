#pragma once
// A simulator scenario: one TOML file. [sim] names the run (seed, duration, report interval,
// regions, the routing policies and traces to compare), [arrivals] the traffic, [[events]]
// the chaos at given times, [capacity] a step-by-step rate search; every other key is a
// kiln config (pools, models, teams and their limits) that each region runs.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/config.hpp"
#include "sim/arrivals.hpp"

namespace kiln::sim {

/// Chaos at a virtual time: `count` targets of a model's pool, in each named region.
struct sim_event {
  double at_s = 0;
  std::string action = "kill";   ///< kill | freeze | slow | fail; canary | shadow | alias (rollouts)
  std::string target = "replica";  ///< replica | engine | router; region (kill only: the whole region)
  int count = 1;
  std::string model;             ///< empty: the first pool's model
  std::string region;            ///< empty: the first region
  double seconds = 5;            ///< freeze, slow: for how long
  double factor = 10;            ///< slow: step time multiplier
  std::string version;           ///< canary, shadow, alias: the version (a pool of the model)
  double percent = 0;            ///< canary, shadow: the share of requests (0 ends the stage)
  /// region kill: how long until the balancer knows (0: a killed process's connections close
  /// at once; a frozen node's is the middleman's connection timeout)
  double detect_s = 0;

  bool rollout() const { return action == "canary" || action == "shadow" || action == "alias"; }
  bool region_kill() const { return target == "region"; }
};

/// Raise the arrival rate step by step until a step misses the targets.
struct capacity_search {
  bool enabled = false;
  double start_rate = 10;
  double step_rate = 10;
  int max_steps = 10;
  double ttft_p95_limit_s = 1.0;
  double min_stream_tokens_per_s = 30;
};

/// One run of a scenario: its arrivals and the routing policy of every pool.
struct run_plan {
  std::string label;
  arrival_spec arrivals;
  std::string policy;  ///< empty: as the pools are configured
  std::uint64_t seed = 0;  ///< 0: the scenario's
};

struct scenario {
  std::string name;
  std::string description;
  std::uint64_t seed = 1;
  double duration_s = 60;
  std::int64_t start_unix = 0;        ///< the calendar at virtual time 0 ([sim] start_at, UTC)
  double drain_s = 120;               ///< after the last arrival, at most this long to finish
  double report_interval_s = 10;
  bool coast = true;                  ///< engines run steady decode in one go (false: step by step)
  int repeat = 1;                     ///< each run this many times, seeds seed, seed+1, ...
  /// Answers end at the pools' own lengths ([pools.sim_text]) rather than at max_tokens.
  bool natural_lengths = false;
  std::vector<std::string> regions{"local"};
  std::vector<std::string> policies;  ///< one run per policy (A/B); empty: as configured
  std::vector<std::string> traces;    ///< one run per trace; empty: [arrivals] as given
  std::vector<std::string> processes; ///< one run per arrival process (ramp, step...); empty: [arrivals]'s
  std::string compare_without;        ///< a team: each run again without its traffic (the baseline)
  arrival_spec arrivals;
  std::vector<sim_event> events;
  capacity_search capacity;
  config::kiln_config fleet;          ///< what each region runs

  /// The runs it makes (capacity steps are made as the search goes, from the first).
  std::vector<run_plan> runs() const;
};

/// Command-line overrides of a scenario.
struct sim_overrides {
  std::uint64_t seed = 0;      ///< 0: the scenario's
  std::string trace;           ///< replaces the scenario's traces and arrivals process
  double rate = 0;             ///< the arrival rate (or a trace's target rate)
  std::string policy;          ///< one policy instead of the scenario's list
};

/// Parses a scenario; relative trace paths are taken from `dir` (the scenario's folder).
std::variant<scenario, std::string> parse_scenario(std::string_view toml_text, std::string_view origin,
                                                   const std::string& dir);
std::variant<scenario, std::string> load_scenario(const std::string& path);
/// Applies the flags; an error names what is wrong.
std::string apply_overrides(scenario& s, const sim_overrides& o);

}  // namespace kiln::sim
