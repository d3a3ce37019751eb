#pragma once
// Latest per-engine, per-replica and per-pool figures for /metrics, and counters of how
// requests ended. Each actor writes only its own rows; the front reads a snapshot. An export
// point, not state the actors share with each other.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <caf/actor_clock.hpp>

namespace kiln::actors {

struct engine_gauge {
  std::string replica_id;
  std::string model;
  std::string version;
  int running = 0;
  int waiting = 0;
  std::int64_t tokens_in_flight = 0;
  std::uint64_t steps = 0;
  std::uint64_t preemptions = 0;
  int kv_blocks_free = 0;
  int kv_blocks_total = 0;
  double load_seconds = 0;  ///< reading the model plus putting its weights in place
  double weight_bytes = 0;
  std::int64_t prompt_tokens_total = 0;  ///< of the requests it admitted
  std::int64_t cached_tokens_total = 0;  ///< of those, found in its prefix cache
};

/// A team's use of one model so far.
struct team_usage {
  std::uint64_t prompt_tokens = 0;
  std::uint64_t cached_tokens = 0;
  std::uint64_t output_tokens = 0;
  std::uint64_t requests = 0;
  std::uint64_t shed = 0;
};

struct replica_gauge {
  std::string replica_id;
  std::string model;
  std::string version;
  std::string phase;
  std::uint64_t restarts = 0;  ///< engine restarts by this replica
  std::uint64_t starts = 0;    ///< times this replica was started (1 + restarts by its pool)
  double ready_seconds = -1;   ///< from its last start to serving (cold start, measured); -1: not yet
  bool warm = false;           ///< its pool holds it back from routing (set by the pool)
  /// The phase to show: a warm replica that could serve is "warm".
  std::string shown_phase() const { return warm && phase == "serving" ? "warm" : phase; }
};

struct pool_gauge {
  std::string model;
  std::string version;
  std::string status;          ///< loading | serving | degraded | failed
  std::uint64_t restarts = 0;  ///< children restarted by the pool's supervisor
  std::string weights;         ///< cpu executor: f32 | bf16 | int8 (empty until loaded; other executors)
  std::string kernels;         ///< cpu executor: the instruction-set path its products run
  std::string kv;              ///< cpu executor: the KV cache dtype
  int ranked = -1;             ///< replicas in its router's ranking (-1: not reported yet)
};

/// (model, version, outcome) -> count; outcomes: completed, retried, failed_mid_stream and
/// each error code. Also (team, model, tier) for sheds.
using outcome_key = std::tuple<std::string, std::string, std::string>;

/// One rollout decision, for /metrics and the simulator's report.
struct rollout_gauge {
  std::string model;
  std::string version;
  std::string stage;
  double percent = 0;
  std::string decision;
  std::string reason;
  caf::actor_clock::time_point at;
};

/// A region as the front's balancer sees it (clustered fronts only).
struct region_gauge {
  std::string region;
  int rank = 0;                  ///< place in the front's preference, 0 nearest
  bool up = false;               ///< a router node of it is reachable
  bool draining = false;         ///< an operator's drain: no new requests go there
  bool degraded = false;         ///< its router nodes report pools and none serves: drained while another region serves
  std::vector<std::string> unhealthy_models;  ///< models it has pools of, none serving: their requests go elsewhere first
  std::vector<std::string> nodes;  ///< its router nodes reachable now
  std::int64_t in_flight = 0;    ///< requests sent there, not ended
  std::uint64_t sent = 0;        ///< requests sent there (retries included)
  std::uint64_t retried = 0;     ///< requests moved away from it after its loss, before a token
  std::uint64_t failed_mid_stream = 0;  ///< requests lost with it after their first token
  std::uint64_t lost_tokens = 0;  ///< output tokens clients had received of those
  std::uint64_t lost = 0;        ///< times it went from up to down
};

/// The configuration a node serves from: its store (a control node), the control node's
/// latest snapshot, the last-known-good file, or its own config file.
struct config_state {
  std::string source;   ///< store | control | last-known-good | config
  std::string version;  ///< the snapshot's version (16 hex digits); empty: none
  std::string origin;   ///< the control node that made it
  std::int64_t made_unix = 0;
  std::string last_error;  ///< the latest snapshot refused, and why
  std::uint64_t received = 0;  ///< snapshots taken from a control node
  std::uint64_t refused = 0;   ///< snapshots refused (corrupt, unreadable)
};

/// Where an engine's row was found last (see fleet_gauges::update_engine): valid while no
/// row has been erased since.
struct engine_row_hint {
  engine_gauge* row = nullptr;
  std::uint64_t generation = 0;
};

class fleet_gauges {
 public:
  void set_config_state(config_state c) {
    std::lock_guard lock(mu_);
    config_ = std::move(c);
  }
  config_state config() const {
    std::lock_guard lock(mu_);
    return config_;
  }
  void set_regions(std::vector<region_gauge> r) {
    std::lock_guard lock(mu_);
    regions_ = std::move(r);
  }
  std::vector<region_gauge> regions() const {
    std::lock_guard lock(mu_);
    return regions_;
  }
  void note_rollout(rollout_gauge g) {
    std::lock_guard lock(mu_);
    rollouts_.push_back(std::move(g));
  }
  std::vector<rollout_gauge> rollouts() const {
    std::lock_guard lock(mu_);
    return rollouts_;
  }
  void set(const engine_gauge& g) {
    std::lock_guard lock(mu_);
    engines_[g.replica_id] = g;
  }
  /// set() in place: fill(row) writes an engine's row (made empty for a new replica id), so
  /// an engine that publishes after every step copies no strings.
  /// With a hint (one per publishing engine), the row is found once and then written where it
  /// is, until some row is erased (a map's rows stay put until then).
  template <class Fill>
  void update_engine(const std::string& replica_id, Fill fill, engine_row_hint* hint = nullptr) {
    std::lock_guard lock(mu_);
    if (hint && hint->row && hint->generation == engines_generation_) return fill(*hint->row);
    auto it = engines_.find(replica_id);
    if (it == engines_.end()) it = engines_.emplace(replica_id, engine_gauge{}).first;
    if (hint) *hint = {&it->second, engines_generation_};
    fill(it->second);
  }
  void erase(const std::string& replica_id) {
    std::lock_guard lock(mu_);
    engines_.erase(replica_id);
    ++engines_generation_;
  }
  void set_replica(const replica_gauge& g) {
    std::lock_guard lock(mu_);
    auto& row = replicas_[g.replica_id];
    const std::uint64_t starts = row.starts;
    const bool warm = row.warm;
    row = g;
    row.starts = std::max(starts, g.starts);
    row.warm = warm;
  }
  /// The pool holds a replica back from routing (warm), or lets it serve.
  void set_warm(const std::string& replica_id, bool warm) {
    std::lock_guard lock(mu_);
    replicas_[replica_id].warm = warm;
  }
  /// A replica's phase as it last published it ("" when unknown).
  std::string replica_phase(const std::string& replica_id) const {
    std::lock_guard lock(mu_);
    auto it = replicas_.find(replica_id);
    return it == replicas_.end() ? std::string() : it->second.phase;
  }
  /// A replica left its pool (scaled down): its rows go.
  void erase_replica(const std::string& replica_id) {
    std::lock_guard lock(mu_);
    replicas_.erase(replica_id);
    engines_.erase(replica_id);
    ++engines_generation_;
  }
  /// An autoscaler's action (stage "autoscale", decision add/drain/remove), for the log and
  /// the simulator's report.
  void note_scale(rollout_gauge g) {
    std::lock_guard lock(mu_);
    scale_events_.push_back(std::move(g));
  }
  std::vector<rollout_gauge> scale_events() const {
    std::lock_guard lock(mu_);
    return scale_events_;
  }
  /// A replica actor was started (again).
  void count_start(const std::string& replica_id) {
    std::lock_guard lock(mu_);
    ++replicas_[replica_id].starts;
  }
  void set_pool(const pool_gauge& g) {
    std::lock_guard lock(mu_);
    pool_gauge& p = pools_[g.model + "@" + g.version];
    const int ranked = p.ranked;
    p = g;
    if (g.ranked < 0) p.ranked = ranked;  // the router's figure, kept
  }
  /// The router's count of replicas in its ranking (published when it changes).
  void set_ranked(const std::string& model, const std::string& version, int n) {
    std::lock_guard lock(mu_);
    auto it = pools_.find(model + "@" + version);
    if (it != pools_.end()) it->second.ranked = n;
  }
  void count_outcome(const std::string& model, const std::string& version, const std::string& outcome) {
    std::lock_guard lock(mu_);
    ++outcomes_[{model, version, outcome}];
  }
  void add_team_usage(const std::string& team, const std::string& model, const team_usage& u) {
    std::lock_guard lock(mu_);
    auto& t = teams_[{team, model}];
    t.prompt_tokens += u.prompt_tokens;
    t.cached_tokens += u.cached_tokens;
    t.output_tokens += u.output_tokens;
    t.requests += u.requests;
    t.shed += u.shed;
  }
  /// A request refused by admission's overload order, by its tier (or "over_share").
  void count_shed(const std::string& team, const std::string& model, const std::string& why) {
    std::lock_guard lock(mu_);
    ++shed_[{team, model, why}];
  }
  /// How full a team's bucket is (0..1).
  void set_bucket(const std::string& team, const std::string& model, double fill) {
    std::lock_guard lock(mu_);
    buckets_[{team, model}] = fill;
  }
  void set_queue(const std::string& pool, const std::string& tier, std::size_t waiting) {
    std::lock_guard lock(mu_);
    queues_[{pool, tier}] = waiting;
  }
  std::map<std::pair<std::string, std::string>, team_usage> team_usages() const {
    std::lock_guard lock(mu_);
    return teams_;
  }
  std::map<outcome_key, std::uint64_t> sheds() const {
    std::lock_guard lock(mu_);
    return shed_;
  }
  std::map<std::pair<std::string, std::string>, double> buckets() const {
    std::lock_guard lock(mu_);
    return buckets_;
  }
  std::map<std::pair<std::string, std::string>, std::size_t> queues() const {
    std::lock_guard lock(mu_);
    return queues_;
  }
  std::vector<engine_gauge> engines() const { return values(engines_); }
  std::vector<replica_gauge> replicas() const { return values(replicas_); }
  std::vector<pool_gauge> pools() const { return values(pools_); }
  std::map<outcome_key, std::uint64_t> outcomes() const {
    std::lock_guard lock(mu_);
    return outcomes_;
  }

 private:
  template <class M>
  std::vector<typename M::mapped_type> values(const M& m) const {
    std::lock_guard lock(mu_);
    std::vector<typename M::mapped_type> out;
    for (const auto& [k, v] : m) out.push_back(v);
    return out;
  }
  mutable std::mutex mu_;
  std::vector<region_gauge> regions_;
  config_state config_;
  std::vector<rollout_gauge> rollouts_;
  std::vector<rollout_gauge> scale_events_;
  std::map<std::string, engine_gauge> engines_;
  std::uint64_t engines_generation_ = 1;  ///< moves on at every erase from engines_ (hints start at 0)
  std::map<std::string, replica_gauge> replicas_;
  std::map<std::string, pool_gauge> pools_;
  std::map<outcome_key, std::uint64_t> outcomes_;
  std::map<std::pair<std::string, std::string>, team_usage> teams_;  ///< (team, model)
  std::map<outcome_key, std::uint64_t> shed_;                        ///< (team, model, tier)
  std::map<std::pair<std::string, std::string>, double> buckets_;    ///< (team, model)
  std::map<std::pair<std::string, std::string>, std::size_t> queues_;  ///< (model@version, tier)
};

}  // namespace kiln::actors
