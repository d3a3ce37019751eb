#include "sim/fleet.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include <caf/all.hpp>
#include <xxhash.h>

#include "actors/loader.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/rollout.hpp"
#include "actors/stream_sink.hpp"
#include "config/store.hpp"
#include "sim/core_turns.hpp"
#include "sim/report.hpp"
#include "sim/virtual_time.hpp"

namespace kiln::sim {

namespace {

using clock_point = caf::actor_clock::time_point;

caf::timespan span_of(double s) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(s));
}

/// What the regions' sinks write into: one record per request, indexed by its id's counter.
struct run_book {
  std::vector<request_record> records;
  /// Requests ended, for the progress line: each region adds its count at its report ticks
  /// (one line of memory the regions' threads would otherwise hand back and forth per request).
  std::atomic<std::size_t> done{0};
};

/// The sink's target: every client of a region, recorded at virtual time.
class collector final : public actors::stream_target {
 public:
  collector(run_book& book, std::size_t& region_done, caf::scheduler::test_coordinator& sched, clock_point start)
      : book_(book), region_done_(region_done), sched_(sched), start_(start) {}
  /// Pool indexes by "model@version", so a request counts where it was served (a canary's).
  void set_pools(std::map<std::string, std::uint32_t> pools) {
    pools_ = std::move(pools);
    seen_.clear();
  }
  /// The region was killed: its clients heard nothing more from it.
  void close() { closed_ = true; }
  void on_tokens(actors::stream_tokens ev) override {
    if (closed_) return;
    request_record& r = at(ev.id);
    if (r.first_token < 0 && ev.tokens > 0) r.first_token = now();
    if (ev.prompt_tokens >= 0) r.prompt = ev.prompt_tokens;
    if (ev.cached_tokens >= 0) r.cached = ev.cached_tokens;
    r.output += ev.tokens;
  }
  void on_end(actors::stream_end ev) override {
    if (closed_) return;
    request_record& r = at(ev.id);
    if (!r.outcome.empty()) return;
    r.end = now();
    r.outcome = "completed";
    r.version = ev.model_version;
    if (const std::uint32_t* pool = pool_of(r.model, ev.model_version)) r.pool = *pool;
    r.prompt = ev.prompt_tokens;
    r.cached = ev.cached_tokens;
    r.attempts = ev.attempts;
    ++region_done_;
  }
  void on_error(actors::stream_error ev) override {
    if (closed_) return;
    request_record& r = at(ev.id);
    if (!r.outcome.empty()) return;
    r.end = now();
    r.outcome = std::string(actors::to_string(ev.code));
    r.mid_stream = r.output > 0;
    ++region_done_;
  }

 private:
  request_record& at(const actors::request_id& id) { return book_.records[id.seq - 1]; }
  /// The pool index of model@version (null: none here), remembered per pair seen.
  const std::uint32_t* pool_of(const std::string& model, const std::string& version) {
    for (const auto& p : seen_)
      if (p.model == model && p.version == version) return p.index;
    const auto it = pools_.find(model + "@" + version);
    seen_.push_back({model, version, it == pools_.end() ? nullptr : &it->second});
    return seen_.back().index;
  }
  double now() const { return std::chrono::duration<double>(sched_.clock().now() - start_).count(); }
  run_book& book_;
  std::size_t& region_done_;
  std::map<std::string, std::uint32_t> pools_;
  struct seen_pool {
    std::string model, version;
    const std::uint32_t* index = nullptr;  ///< into pools_; null: not served here
  };
  std::vector<seen_pool> seen_;  ///< pool_of()'s answers
  bool closed_ = false;
  caf::scheduler::test_coordinator& sched_;
  clock_point start_;
};

/// One region: a node on its own actor system and virtual clock.
struct region_rt {
  caf::actor_system_config sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::unique_ptr<virtual_time> vt;
  std::shared_ptr<actors::fleet_gauges> gauges = std::make_shared<actors::fleet_gauges>();
  std::shared_ptr<const config::kiln_config> cfg;
  caf::actor node, sink, admission;
  std::shared_ptr<collector> coll;
  clock_point start;

  region_rt(config::kiln_config c, run_book& book, std::size_t& done, std::int64_t start_unix) {
    use_virtual_time(sys_cfg);
    sys = std::make_unique<caf::actor_system>(sys_cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    vt = std::make_unique<virtual_time>(*sched);
    cfg = std::make_shared<const config::kiln_config>(std::move(c));
    start = vt->now();
    actors::node_deps d;
    d.cfg = cfg;
    d.gauges = gauges;
    d.calendar = {start, start_unix};
    d.loader = actors::make_inline_loader();
    config::tenancy tenants;
    tenants.teams = cfg->teams;  // limits by team name; no keys: nothing here authenticates
    tenants.index();
    d.tenants = std::make_shared<const config::tenancy>(std::move(tenants));
    node = actors::spawn_node(*sys, std::move(d));
    coll = std::make_shared<collector>(book, done, *sched, start);
    sink = actors::spawn_stream_sink(*sys, coll);
    vt->run_ready();
    admission = caf::actor_cast<caf::actor>(sys->registry().get(actors::admission_name));
  }
  ~region_rt() {
    actors::stop_node(node);
    actors::stop_sink(sink);
    vt->run_ready();
  }
  void advance_to(double t) {
    const clock_point target = start + span_of(t);
    if (target > vt->now()) vt->run_for(target - vt->now());
    else vt->run_ready();
  }
};

/// The replicas an event hits: the busiest of the model's live pool first.
std::vector<std::string> targets(const region_rt& r, const std::string& model, const std::string& version, int count) {
  auto engines = r.gauges->engines();
  std::erase_if(engines, [&](const auto& e) { return e.model != model || e.version != version; });
  std::sort(engines.begin(), engines.end(), [](const auto& a, const auto& b) {
    return a.tokens_in_flight != b.tokens_in_flight ? a.tokens_in_flight > b.tokens_in_flight : a.replica_id < b.replica_id;
  });
  std::vector<std::string> out;
  for (const auto& e : engines)
    if (static_cast<int>(out.size()) < count) out.push_back(e.replica_id);
  return out;
}

std::string fmt_time(double t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", t);
  return buf;
}

}  // namespace

namespace {

/// One region's share of a run: its arrivals and events, driven on its own thread. Regions
/// do not talk to each other, so each runs to its own end; what they share is written at
/// disjoint places (each request's record, each pool's samples) or merged after the join.
struct region_run {
  std::unique_ptr<region_rt> rt;
  std::string name;
  /// (when it is sent here, index into the run's arrivals), in time order
  std::vector<std::pair<double, std::size_t>> arrivals;
  std::vector<std::size_t> events;    ///< indexes into the sorted events
  std::vector<std::pair<std::size_t, std::string>> event_log;  ///< by event index
  std::size_t done = 0;  ///< its requests ended (counted by its collector)
  std::size_t done_counted = 0;  ///< of those, the ones added to run_book::done
  double now = 0;
  double tick = 0;
  bool killed = false;  ///< a region kill ended it: it reports nothing from then on
  std::string error;
  /// Where its arrivals for a model go, from the region's configuration (fixed for the run),
  /// looked up at a model's first arrival rather than at each.
  struct model_route {
    std::string model;
    const config::pool_config* pool = nullptr;
    std::uint32_t pool_index = 0;
  };
  std::vector<model_route> routes;
};

/// A region's processes end at the event's time. When the balancer notices (at once for a
/// killed process), each of its open streams that had tokens ends with one error event
/// (replica_lost); one without a token is sent to the survivor whole, as is every arrival from
/// the kill on (those before the balancer noticed, at that moment).
void kill_region(region_run& dead, region_run& to, const sim_event& e, run_book& book, region_kill_record& out) {
  const double at = e.at_s, seen = e.at_s + e.detect_s;
  dead.rt->advance_to(at);
  dead.now = at;
  dead.rt->coll->close();
  actors::stop_node(dead.rt->node);
  dead.rt->vt->run_ready();
  dead.killed = true;
  out = {dead.name, to.name, at, e.detect_s, 0, 0, 0};
  for (const auto& [when, i] : dead.arrivals) {
    request_record& r = book.records[i];
    if (when >= at) {
      to.arrivals.emplace_back(std::max(when, seen), i);
      r.redirected = true;
      ++out.redirected;
    } else if (r.outcome.empty() && r.output > 0) {
      r.outcome = std::string(actors::to_string(actors::errc::replica_lost));
      r.mid_stream = true;
      r.end = seen;
      ++out.lost_mid_stream;
      ++book.done;
    } else if (r.outcome.empty()) {
      r.moved_region = true;
      to.arrivals.emplace_back(seen, i);
      ++out.moved;
    }
  }
  std::stable_sort(to.arrivals.begin(), to.arrivals.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

}  // namespace

std::variant<run_result, std::string> run_once(const scenario& s, const run_plan& plan, const progress_fn& progress) {
  const auto real_start = std::chrono::steady_clock::now();
  // The run's memory (seed_fleet's: about 80 MB) stays in the kernel's 4 KB pages. Advised into
  // 2 MB pages it cost more than it saved: a host that takes freed memory back (a VM's free
  // page reporting) must back each fresh 2 MB page again, 2.6-3.1 ms per MB against 0.4-0.6
  // for 4 KB pages (BENCHMARKS.md, the simulator's speed, thirty-second session).
  // Each region runs the scenario's fleet; an answer is as long as the request asks.
  config::kiln_config fleet = s.fleet;
  for (auto& p : fleet.pools) {
    if (!s.natural_lengths) p.text = {1 << 30, 1 << 30};
    p.coast_steps = s.coast;
    if (!plan.policy.empty()) p.routing = plan.policy;
  }
  const std::string first_model = fleet.models.empty() ? fleet.pools.front().model : fleet.models.front().name;
  const int block_size = fleet.pools.front().block_size;
  const int vocab = fleet.pools.front().shape.vocab;

  run_result res;
  res.label = plan.label;
  res.policy = plan.policy.empty() ? fleet.pools.front().routing : plan.policy;
  run_book book;
  std::map<std::string, std::uint32_t> pool_index;  // "region/model@version"
  for (const auto& region : s.regions) {
    for (const auto& p : fleet.pools) {
      const std::string key = region + "/" + p.model + "@" + p.version;
      pool_index[key] = static_cast<std::uint32_t>(res.pools.size());
      res.pools.push_back(key);
      res.gpus_per_pool.push_back(static_cast<double>(p.replicas) * std::max(1, p.gpu.tensor_parallel));
    }
  }
  res.samples.resize(res.pools.size());

  std::vector<region_run> regions(s.regions.size());
  // Each region's fleet (its own actor system, engines and KV pools) is built on a thread of
  // its own, as each runs on one below, while this thread makes the arrivals.
  auto build = [&](std::size_t ri) {
    config::kiln_config c = fleet;
    c.region = s.regions[ri];
    regions[ri].name = s.regions[ri];
    regions[ri].tick = s.report_interval_s;
    regions[ri].rt = std::make_unique<region_rt>(std::move(c), book, regions[ri].done, s.start_unix);
    std::map<std::string, std::uint32_t> served_by;  // "model@version" -> pool index, this region's
    for (const auto& [key, idx] : pool_index)
      if (key.starts_with(s.regions[ri] + "/")) served_by[key.substr(s.regions[ri].size() + 1)] = idx;
    regions[ri].rt->coll->set_pools(std::move(served_by));
  };
  std::variant<std::vector<arrival>, std::string> made;
  {
    std::vector<std::thread> builders;
    for (std::size_t ri = 0; ri < regions.size(); ++ri) builders.emplace_back(build, ri);
    // The requests' records are made on a thread of their own as soon as their number is
    // known, while this thread makes the prompts and the fleets may still be building.
    std::future<void> records;
    made = make_arrivals(plan.arrivals, plan.seed ? plan.seed : s.seed, [&](std::size_t n) {
      records = std::async(std::launch::async, [&book, n] { book.records.resize(n); });
    });
    if (records.valid()) records.get();
    if (const auto* made_ok = std::get_if<std::vector<arrival>>(&made); made_ok && book.records.size() != made_ok->size())
      book.records.resize(made_ok->size());
    for (auto& th : builders) th.join();
  }
  if (auto* e = std::get_if<std::string>(&made)) return *e;
  const std::vector<arrival>& arrivals = std::get<std::vector<arrival>>(made);
  for (std::size_t ri = 0; ri < regions.size(); ++ri)
    if (!regions[ri].rt->admission) return "region " + s.regions[ri] + ": the node did not start its admission";
  // The global balancer: a conversation (or a request without one) keeps to one region.
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    const arrival& a = arrivals[i];
    const std::uint64_t key = a.conversation.empty() ? i : XXH3_64bits(a.conversation.data(), a.conversation.size());
    regions[static_cast<std::size_t>(key % regions.size())].arrivals.emplace_back(a.t, i);
  }
  std::vector<sim_event> events = s.events;
  std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.at_s < b.at_s; });
  for (std::size_t k = 0; k < events.size(); ++k) {
    const auto& e = events[k];
    if (e.region_kill()) continue;  // not an event inside the region: the run's (below)
    const std::size_t ri = e.region.empty() ? 0
                                            : static_cast<std::size_t>(std::find(s.regions.begin(), s.regions.end(), e.region) -
                                                                       s.regions.begin());
    regions[std::min(ri, regions.size() - 1)].events.push_back(k);
  }
  // A region killed during the run runs alone to its kill (below).
  const auto killed = std::find_if(events.begin(), events.end(), [](const sim_event& e) { return e.region_kill(); });

  // The oracle over every arrival (redone after the run over the served ones only when some
  // request never reached an engine). With a core to spare beside the regions that run at
  // once it runs beside them from the start; when every core drives a region, it waits for the
  // first region to finish and runs on that thread, on the core the others no longer need,
  // rather than taking a share of every core from the start. It goes a team at a time, so
  // each region that finishes takes the teams still left.
  const std::size_t at_once = regions.size() - (killed != events.end() && regions.size() > 1 ? 1 : 0);
  oracle_work oracle(arrivals, block_size, vocab);
  std::future<void> oracle_beside;
  if (std::thread::hardware_concurrency() > at_once) oracle_beside = std::async(std::launch::async, [&] { oracle.help(); });

  const double end_of_arrivals = arrivals.empty() ? 0 : arrivals.back().t;
  const double horizon = std::max(s.duration_s, end_of_arrivals) + s.drain_s;
  const std::uint64_t origin = 0x5133;

  auto sample = [&](region_run& rr, double t) {
    const region_rt& r = *rr.rt;
    if (rr.killed) {  // a killed region's pools: nothing left
      for (const auto& p : r.cfg->pools) {
        pool_sample ps;
        ps.t = t;
        res.samples[pool_index.at(rr.name + "/" + p.model + "@" + p.version)].push_back(std::move(ps));
      }
      return;
    }
    const auto engines = r.gauges->engines();
    const auto replicas = r.gauges->replicas();
    const auto queues = r.gauges->queues();
    for (const auto& p : r.cfg->pools) {
      const std::uint32_t idx = pool_index.at(rr.name + "/" + p.model + "@" + p.version);
      pool_sample ps;
      ps.t = t;
      for (const auto& e : engines) {
        if (e.model != p.model || e.version != p.version) continue;
        ps.tokens_in_flight += e.tokens_in_flight;
        ps.busiest_tokens = std::max(ps.busiest_tokens, e.tokens_in_flight);
        ps.engine_waiting += e.waiting;
        ++ps.reporting;
      }
      for (const auto& g : replicas)
        if (g.model == p.model && g.version == p.version) ++ps.phases[g.shown_phase()];
      const std::string key = p.model + "@" + p.version;
      const char* tiers[3] = {"interactive", "standard", "batch"};
      for (int k = 0; k < 3; ++k) {
        auto it = queues.find({key, tiers[k]});
        if (it != queues.end()) ps.queued[k] = static_cast<std::int64_t>(it->second);
      }
      res.samples[idx].push_back(std::move(ps));
    }
  };

  // One region to its end: every arrival sent, each of its requests ended, the duration past.
  // `turns` (made below, while regions run side by side) moves their threads among the cores.
  std::optional<core_turns> turns;
  auto drive = [&](region_run& rr, bool report, double until, std::size_t thread) {
    region_rt& r = *rr.rt;
    std::size_t next = 0, next_event = 0;
    while (true) {
      if (turns) turns->poll(thread);
      const double t_arrival = next < rr.arrivals.size() ? rr.arrivals[next].first : 1e300;
      const double t_event = next_event < rr.events.size() ? events[rr.events[next_event]].at_s : 1e300;
      const double t = std::min({t_arrival, t_event, rr.tick});
      if (t > horizon || t >= until) break;
      r.advance_to(t);
      rr.now = t;
      if (t == t_arrival) {
        const std::size_t i = rr.arrivals[next++].second;
        const arrival& a = arrivals[i];
        request_record& rec = book.records[i];
        rec.arrival = a.t;
        rec.team = a.team;
        rec.tier = a.tier;
        rec.asked_output = a.output_tokens;
        const std::string& model = a.model.empty() ? first_model : a.model;
        auto route = std::find_if(rr.routes.begin(), rr.routes.end(), [&](const auto& m) { return m.model == model; });
        if (route == rr.routes.end()) {
          const std::string version = r.cfg->live_version(model);
          const config::pool_config* pool = r.cfg->pool_for(model, version);
          if (!pool) {
            rr.error = "arrivals ask for model '" + model + "', which the fleet does not serve";
            return;
          }
          route = rr.routes.insert(rr.routes.end(), {model, pool, pool_index.at(rr.name + "/" + model + "@" + version)});
        }
        actors::request req;
        req.id = {origin, i + 1};
        req.team = a.team;
        req.model = model;
        rec.pool = route->pool_index;
        rec.model = model;
        req.priority = a.tier;
        req.conversation_id = a.conversation;
        req.sampling.max_tokens = std::max(1, a.output_tokens);
        req.sampling.temperature = 0.7;
        req.sampling.seed = i + 1;
        req.prompt = prompt_list_of(a, route->pool->shape.vocab);
        req.sink = r.sink;
        caf::anon_send(r.admission, std::move(req));
      } else if (t == t_event) {
        const std::size_t k = rr.events[next_event++];
        const sim_event& e = events[k];
        const std::string model = e.model.empty() ? first_model : e.model;
        if (e.rollout()) {
          if (e.action == "alias") caf::anon_send(r.node, actors::alias_order{model, e.version});
          else caf::anon_send(r.node, actors::rollout_order{model, e.version, e.action, e.percent});
          rr.event_log.emplace_back(k, fmt_time(t) + ": " + e.action + " " + model + "@" + e.version +
                                           (e.action == "alias" ? "" : " at " + format_fixed(e.percent, 0) + "%") + " (" +
                                           rr.name + ")");
          r.vt->run_ready();
          continue;
        }
        const std::string version = r.cfg->live_version(model);
        std::vector<std::string> ids;
        if (e.target == "router") ids.assign(static_cast<std::size_t>(e.count), model + "@" + version);
        else ids = targets(r, model, version, e.count);
        for (const auto& id : ids) {
          actors::chaos_request c;
          c.target = *actors::chaos_target_from(e.target);  // checked when the scenario was read
          c.id = id;
          c.action = *actors::chaos_action_from(e.action);
          c.order.action = c.action;
          c.order.seconds = e.seconds;
          c.order.factor = e.factor;
          caf::anon_send(r.node, c);
          rr.event_log.emplace_back(k, fmt_time(t) + ": " + e.action + " " + e.target + " " + id + " (" + rr.name + ")");
        }
        r.vt->run_ready();
      } else {
        sample(rr, t);
        rr.tick += s.report_interval_s;
        book.done += rr.done - std::exchange(rr.done_counted, rr.done);
        if (report && progress)
          progress(t, std::chrono::duration<double>(std::chrono::steady_clock::now() - real_start).count(), book.done.load(),
                   arrivals.size());
        if (next >= rr.arrivals.size() && rr.done >= rr.arrivals.size() && t >= s.duration_s) break;
      }
    }
  };
  // A killed region runs alone to its kill; what it leaves goes to the survivor, which then
  // runs with the others (until then no region's traffic touches another's).
  std::size_t dead = regions.size();
  if (killed != events.end()) {
    dead = static_cast<std::size_t>(std::find(s.regions.begin(), s.regions.end(), killed->region) - s.regions.begin());
    drive(regions[dead], dead == 0, killed->at_s, 0);
    kill_region(regions[dead], regions[(dead + 1) % regions.size()], *killed, book, res.region_kill);
    const auto& k = res.region_kill;
    regions[dead].event_log.emplace_back(
        static_cast<std::size_t>(killed - events.begin()),
        fmt_time(k.at_s) + ": kill region " + k.region + " (" + std::to_string(k.moved) + " open without a token moved to " +
            k.survivor + ", " + std::to_string(k.lost_mid_stream) + " ended mid-stream; arrivals from then on to " +
            k.survivor + ")");
  }
  {
    std::vector<std::thread> threads;
    std::size_t reporter = dead == 0 ? 1 : 0;
    turns.emplace(regions.size() - (dead < regions.size() ? 1 : 0), std::chrono::milliseconds(100));
    for (std::size_t ri = 0; ri < regions.size(); ++ri)
      if (ri != dead && ri != reporter) threads.emplace_back([&, ri, k = threads.size() + 1] {
          drive(regions[ri], false, 1e300, k);
          turns->leave(k);
          oracle.help();
        });
    drive(regions[reporter], true, 1e300, 0);
    turns->leave(0);
    oracle.help();
    for (auto& th : threads) th.join();
    turns.reset();
  }
  for (const auto& rr : regions)
    if (!rr.error.empty()) return rr.error;
  // The run ends when the last region does; the others report on, idle, to that time.
  double end = 0;
  for (const auto& rr : regions) end = std::max(end, rr.now);
  for (auto& rr : regions) {
    while (rr.now < end && rr.tick <= end) {
      if (!rr.killed) rr.rt->advance_to(rr.tick);
      rr.now = rr.tick;
      sample(rr, rr.tick);
      rr.tick += s.report_interval_s;
    }
  }
  res.virtual_s = end;
  res.arrivals_end = end_of_arrivals;
  std::vector<std::pair<std::size_t, std::string>> log;
  for (auto& rr : regions) {
    for (const auto& [key, n] : rr.rt->gauges->outcomes())
      if (std::get<2>(key) == "retried") res.retried += n;
    for (const auto& e : rr.rt->gauges->engines()) res.engine_steps += e.steps;
    log.insert(log.end(), std::make_move_iterator(rr.event_log.begin()), std::make_move_iterator(rr.event_log.end()));
    auto decisions = rr.rt->gauges->rollouts();
    for (auto& g : rr.rt->gauges->scale_events()) decisions.push_back(std::move(g));
    for (const auto& g : decisions)
      res.rollouts.push_back({std::chrono::duration<double>(g.at - rr.rt->start).count(), rr.name, g.model, g.version,
                              g.stage, g.percent, g.decision, g.reason});
  }
  std::stable_sort(res.rollouts.begin(), res.rollouts.end(), [](const auto& a, const auto& b) { return a.t < b.t; });
  std::stable_sort(log.begin(), log.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [k, line] : log) res.event_log.push_back(std::move(line));
  regions.clear();
  // The oracle over the same requests the engines served (a refused one was never there to hit).
  if (oracle_beside.valid()) oracle_beside.get();
  res.oracle = oracle.result();
  if (!std::all_of(book.records.begin(), book.records.end(), [](const auto& r) { return r.first_token >= 0; })) {
    std::vector<arrival> served;
    for (std::size_t i = 0; i < arrivals.size(); ++i)
      if (book.records[i].first_token >= 0) served.push_back(arrivals[i]);
    res.oracle = oracle_hit_rate(served, block_size, vocab);
  }
  res.requests = std::move(book.records);
  res.real_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - real_start).count();
  return res;
}

}  // namespace kiln::sim
