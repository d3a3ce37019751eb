#pragma once
// One simulator run: each region is kiln's own node (admission, team buckets, pools, router
// shards that own the requests, replicas, sim engines, supervisors) in an actor system on
// CAF's test coordinator; the regions' virtual clocks move together. Requests enter where
// the front hands them to admission; one sink per region records what each client received.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/types.hpp"
#include "sim/arrivals.hpp"
#include "sim/scenario.hpp"

namespace kiln::sim {

/// What one client saw.
struct request_record {
  double arrival = 0;
  double first_token = -1;  ///< seconds; -1: none
  double end = -1;          ///< when its end or error arrived
  std::int32_t prompt = 0;
  std::int32_t cached = 0;
  std::int32_t output = 0;  ///< tokens received
  std::int32_t asked_output = 0;
  std::string team;
  engine::priority tier = engine::priority::standard;
  std::uint32_t pool = 0;       ///< index into run_result::pools (where it was served, once it ends)
  std::string model;
  std::string version;          ///< the version that served it ("" until it ends)
  std::string outcome;          ///< "" while open; "completed" or the error code's name
  bool mid_stream = false;      ///< an error after tokens had arrived
  std::int32_t attempts = 1;
  bool moved_region = false;    ///< its region was killed before its first token: sent to another
  bool redirected = false;      ///< it arrived for a region already killed: sent to another
};

/// One pool (in one region) at one report tick.
struct pool_sample {
  double t = 0;
  std::map<std::string, int> phases;  ///< replicas by phase
  std::int64_t tokens_in_flight = 0;
  std::int64_t busiest_tokens = 0;    ///< the replica with the most tokens in flight
  int reporting = 0;                  ///< replicas with an engine
  std::int64_t queued[3] = {0, 0, 0}; ///< admission queue by tier (interactive, standard, batch)
  std::int64_t engine_waiting = 0;
};

/// A rollout controller's decision or an autoscaler's action (stage "autoscale"), at virtual time.
struct rollout_record {
  double t = 0;
  std::string region;
  std::string model;
  std::string version;
  std::string stage;
  double percent = 0;
  std::string decision;  ///< start, advance, end, rollback, promote, alias, retire; add N, drain R, remove R
  std::string reason;
};

/// A region killed in the run: what the balancer did with its requests.
struct region_kill_record {
  std::string region;    ///< empty: none was killed
  std::string survivor;  ///< where its traffic went (the next region by preference)
  double at_s = 0;
  double detect_s = 0;
  std::size_t moved = 0;            ///< open, no token yet: sent to the survivor
  std::size_t lost_mid_stream = 0;  ///< open with tokens: one error event each
  std::size_t redirected = 0;       ///< arrivals from then on that went to the survivor
};

struct run_result {
  std::string label;
  std::string policy;
  std::vector<std::string> pools;  ///< "region/model@version"
  std::vector<double> gpus_per_pool;
  std::vector<request_record> requests;
  std::vector<std::vector<pool_sample>> samples;  ///< per pool
  oracle_result oracle;  ///< over the requests that reached an engine
  double virtual_s = 0;
  double arrivals_end = 0;  ///< the last arrival's time
  double real_s = 0;
  std::uint64_t retried = 0;
  std::uint64_t engine_steps = 0;
  std::vector<std::string> event_log;  ///< what each event hit, with its time
  std::vector<rollout_record> rollouts;  ///< in time order
  region_kill_record region_kill;
};

/// Progress while it runs: virtual seconds, real seconds, requests done of all.
using progress_fn = std::function<void(double, double, std::size_t, std::size_t)>;

/// Runs one plan of a scenario to its end (every request ended, or the drain time spent).
std::variant<run_result, std::string> run_once(const scenario& s, const run_plan& plan, const progress_fn& progress = {});

}  // namespace kiln::sim
