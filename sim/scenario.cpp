#include "sim/scenario.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "actors/pool_supervisor.hpp"

namespace kiln::sim {

namespace {

struct bad_scenario {
  std::string message;
};

/// Reads one table's keys, remembering which it used; any other key is an error.
class keys {
 public:
  keys(const toml::table& t, std::string path) : t_(t), path_(std::move(path)) {}
  ~keys() noexcept(false) {
    if (std::uncaught_exceptions() > 0) return;
    for (const auto& [k, v] : t_)
      if (!used_.count(std::string(k.str()))) throw bad_scenario{path_ + "." + std::string(k.str()) + ": unknown key"};
  }
  template <class T>
  void number(std::string_view k, T& out, double lo, double hi) {
    const toml::node* n = get(k);
    if (!n) return;
    auto v = n->value<double>();
    if (!v || !std::isfinite(*v) || *v < lo || *v > hi)
      throw bad_scenario{path_ + "." + std::string(k) + " must be a number from " + trim(lo) + " to " + trim(hi)};
    out = static_cast<T>(*v);
  }
  void text(std::string_view k, std::string& out) {
    const toml::node* n = get(k);
    if (!n) return;
    if (!n->is_string()) throw bad_scenario{path_ + "." + std::string(k) + " must be a string"};
    out = *n->value<std::string>();
  }
  void boolean(std::string_view k, bool& out) {
    const toml::node* n = get(k);
    if (!n) return;
    if (!n->is_boolean()) throw bad_scenario{path_ + "." + std::string(k) + " must be true or false"};
    out = *n->value<bool>();
  }
  void texts(std::string_view k, std::vector<std::string>& out) {
    const toml::node* n = get(k);
    if (!n) return;
    const auto* a = n->as_array();
    if (!a) throw bad_scenario{path_ + "." + std::string(k) + " must be an array of strings"};
    out.clear();
    for (const auto& e : *a) {
      if (!e.is_string()) throw bad_scenario{path_ + "." + std::string(k) + " must be an array of strings"};
      out.push_back(*e.value<std::string>());
    }
  }
  const toml::array* tables(std::string_view k) {
    const toml::node* n = get(k);
    if (!n) return nullptr;
    const auto* a = n->as_array();
    if (!a || !a->is_array_of_tables()) throw bad_scenario{path_ + "." + std::string(k) + " must be [[tables]]"};
    return a;
  }
  [[noreturn]] void fail(std::string_view k, const std::string& why) {
    throw bad_scenario{path_ + "." + std::string(k) + " " + why};
  }

 private:
  static std::string trim(double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  }
  const toml::node* get(std::string_view k) {
    used_.insert(std::string(k));
    return t_.get(k);
  }
  const toml::table& t_;
  std::string path_;
  std::set<std::string> used_;
};

engine::priority tier_of(keys& r, const std::string& name) {
  if (name == "interactive") return engine::priority::interactive;
  if (name == "standard") return engine::priority::standard;
  if (name == "batch") return engine::priority::batch;
  r.fail("tier", "must be interactive, standard or batch (got \"" + name + "\")");
}

bool known_policy(const std::string& p) {
  return p == "prefix_affinity_bounded" || p == "round_robin" || p == "least_tokens";
}

std::string resolve(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || dir.empty()) return path;
  return dir + "/" + path;
}

void read_arrivals(const toml::table& t, arrival_spec& a, const std::string& dir) {
  keys r(t, "arrivals");
  std::string process = "poisson";
  r.text("process", process);
  if (process == "poisson") a.process = arrival_process::poisson;
  else if (process == "ramp") a.process = arrival_process::ramp;
  else if (process == "step") a.process = arrival_process::step;
  else if (process == "daily") a.process = arrival_process::daily;
  else if (process == "trace") a.process = arrival_process::trace;
  else r.fail("process", "must be poisson, ramp, step, daily or trace (got \"" + process + "\")");
  r.number("rate", a.rate, 1e-6, 1e7);
  r.number("ramp_per_minute", a.ramp_per_minute, -0.99, 10);
  r.number("step_at_s", a.step_at_s, 0, 1e9);
  r.number("step_factor", a.step_factor, 0, 1e4);
  r.number("daily_period_s", a.daily_period_s, 1, 1e9);
  r.number("daily_trough", a.daily_trough, 0, 1);
  r.text("trace", a.trace);
  a.trace = resolve(dir, a.trace);
  r.number("trace_rate", a.trace_rate, 0, 1e7);
  r.number("prompt_tokens", a.prompt_tokens, 1, 1e7);
  r.number("output_tokens", a.output_tokens, 1, 1e7);
  r.number("conversation_turns", a.conversation_turns, 1, 1e6);
  r.number("max_prompt_tokens", a.max_prompt_tokens, 0, 1e8);
  if (a.process == arrival_process::trace && a.trace.empty()) r.fail("trace", "is required when process = \"trace\"");
  if (const auto* teams = r.tables("teams")) {
    for (std::size_t i = 0; i < teams->size(); ++i) {
      keys tr(*(*teams)[i].as_table(), "arrivals.teams[" + std::to_string(i) + "]");
      team_rule t;
      tr.text("name", t.name);
      if (t.name.empty()) tr.fail("name", "is required");
      tr.text("model", t.model);
      tr.number("weight", t.weight, 0, 1e9);
      std::string tier = "standard";
      tr.text("tier", tier);
      t.tier = tier_of(tr, tier);
      tr.number("system_prompt_tokens", t.system_prompt_tokens, 0, 1e7);
      tr.number("rate_multiplier", t.rate_multiplier, 0, 1e6);
      a.teams.push_back(std::move(t));
    }
  }
}

void read_events(const toml::array& arr, std::vector<sim_event>& out) {
  for (std::size_t i = 0; i < arr.size(); ++i) {
    keys r(*arr[i].as_table(), "events[" + std::to_string(i) + "]");
    sim_event e;
    r.number("at_s", e.at_s, 0, 1e9);
    r.text("action", e.action);
    if (!actors::chaos_action_from(e.action) && !e.rollout())
      r.fail("action", "must be kill, freeze, slow, fail, canary, shadow or alias (got \"" + e.action + "\")");
    r.text("target", e.target);
    if (!actors::chaos_target_from(e.target) && !e.region_kill())
      r.fail("target", "must be replica, engine, router or region (got \"" + e.target + "\")");
    if (e.region_kill() && e.action != "kill") r.fail("action", "must be kill for a region (got \"" + e.action + "\")");
    r.number("count", e.count, 1, 1e6);
    r.text("model", e.model);
    r.text("region", e.region);
    r.number("seconds", e.seconds, 0, 1e9);
    r.number("factor", e.factor, 1, 1e6);
    r.text("version", e.version);
    r.number("percent", e.percent, 0, 100);
    r.number("detect_s", e.detect_s, 0, 3600);
    if (e.rollout() && e.version.empty()) r.fail("version", "is required for a " + e.action + " event");
    out.push_back(std::move(e));
  }
}

// At most one region is killed in a run, by name, with another left to take its traffic;
// nothing else may happen in it from then on.
void check_region_kill(const scenario& s) {
  const sim_event* kill = nullptr;
  for (const auto& e : s.events) {
    if (!e.region_kill()) continue;
    if (kill) throw bad_scenario{"events: one region kill per run (" + kill->region + " and " + e.region + ")"};
    if (e.region.empty()) throw bad_scenario{"events: a region kill names its region"};
    if (s.regions.size() < 2) throw bad_scenario{"events: a region kill needs a second region in sim.regions to take its traffic"};
    kill = &e;
  }
  if (!kill) return;
  for (const auto& e : s.events)
    if (&e != kill && (e.region.empty() ? s.regions.front() : e.region) == kill->region && e.at_s >= kill->at_s) {
      char at[32];
      std::snprintf(at, sizeof at, "%g", kill->at_s);
      throw bad_scenario{"events: region " + kill->region + " is killed at " + at + " s; no later event may hit it"};
    }
}

scenario read(toml::table root, const std::string& dir, std::string_view origin) {
  scenario s;
  if (const auto* t = root.get_as<toml::table>("sim")) {
    keys r(*t, "sim");
    r.text("name", s.name);
    r.text("description", s.description);
    r.number("seed", s.seed, 0, 9e15);
    r.number("duration_s", s.duration_s, 1e-3, 1e9);
    std::string start_at;
    r.text("start_at", start_at);
    if (!start_at.empty()) {
      std::tm tm{};
      char z = 0;
      if (std::sscanf(start_at.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                      &tm.tm_min, &tm.tm_sec, &z) != 7 || z != 'Z' || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
          tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        r.fail("start_at", "must be a UTC time like 2026-12-01T08:00:00Z (got \"" + start_at + "\")");
      tm.tm_year -= 1900;
      tm.tm_mon -= 1;
      s.start_unix = static_cast<std::int64_t>(timegm(&tm));
    }
    r.number("drain_s", s.drain_s, 0, 1e9);
    r.number("report_interval_s", s.report_interval_s, 1e-3, 1e9);
    r.boolean("coast", s.coast);
    r.number("repeat", s.repeat, 1, 10000);
    r.boolean("natural_lengths", s.natural_lengths);
    r.texts("regions", s.regions);
    if (s.regions.empty()) r.fail("regions", "must name at least one region");
    if (std::set<std::string>(s.regions.begin(), s.regions.end()).size() != s.regions.size())
      r.fail("regions", "must not name a region twice");
    r.texts("policies", s.policies);
    for (const auto& p : s.policies)
      if (!known_policy(p)) r.fail("policies", "names an unknown policy \"" + p + "\"");
    r.texts("traces", s.traces);
    r.texts("processes", s.processes);
    for (const auto& name : s.processes)
      if (name != "poisson" && name != "ramp" && name != "step" && name != "daily")
        r.fail("processes", "names an unknown process \"" + name + "\" (poisson, ramp, step or daily)");
    r.text("compare_without", s.compare_without);
    for (auto& t : s.traces) t = resolve(dir, t);
  }
  if (const auto* t = root.get_as<toml::table>("arrivals")) read_arrivals(*t, s.arrivals, dir);
  s.arrivals.duration_s = s.duration_s;
  if (const auto* a = root.get_as<toml::array>("events")) {
    if (!a->is_array_of_tables()) throw bad_scenario{"events must be [[events]] tables"};
    read_events(*a, s.events);
  }
  if (const auto* t = root.get_as<toml::table>("capacity")) {
    keys r(*t, "capacity");
    s.capacity.enabled = true;
    r.number("start_rate", s.capacity.start_rate, 1e-6, 1e7);
    r.number("step_rate", s.capacity.step_rate, 1e-6, 1e7);
    r.number("max_steps", s.capacity.max_steps, 1, 1000);
    r.number("ttft_p95_limit_s", s.capacity.ttft_p95_limit_s, 1e-6, 1e6);
    r.number("min_stream_tokens_per_s", s.capacity.min_stream_tokens_per_s, 0, 1e6);
  }
  for (const char* k : {"sim", "arrivals", "events", "capacity"}) root.erase(k);
  // What is left is the fleet: a kiln config, checked as `kiln serve` checks one.
  std::ostringstream rest;
  rest << root;
  auto cfg = config::parse_config(rest.str(), origin);
  if (auto* e = std::get_if<config::config_error>(&cfg)) throw bad_scenario{e->message};
  s.fleet = std::move(std::get<config::kiln_config>(cfg));
  for (const auto& p : s.fleet.pools)
    if (p.executor != config::executor_kind::sim)
      throw bad_scenario{"pool " + p.model + "@" + p.version +
                         ": the simulator runs the sim executor only (its step time is the cost model)"};
  check_region_kill(s);
  for (const auto& e : s.events) {
    if (!e.region.empty() && std::find(s.regions.begin(), s.regions.end(), e.region) == s.regions.end())
      throw bad_scenario{"events: unknown region \"" + e.region + "\""};
    if (!e.model.empty() && s.fleet.live_version(e.model).empty())
      throw bad_scenario{"events: unknown model \"" + e.model + "\""};
    const std::string model = !e.model.empty()         ? e.model
                              : !s.fleet.models.empty() ? s.fleet.models.front().name
                              : s.fleet.pools.empty()   ? ""
                                                        : s.fleet.pools.front().model;
    if (e.rollout() && !s.fleet.pool_for(model, e.version))
      throw bad_scenario{"events: " + e.action + " names " + model + "@" + e.version + ", which no pool serves"};
  }
  if (!s.compare_without.empty() &&
      std::none_of(s.arrivals.teams.begin(), s.arrivals.teams.end(),
                   [&](const team_rule& t) { return t.name == s.compare_without; }))
    throw bad_scenario{"sim.compare_without names \"" + s.compare_without + "\", which is not in [[arrivals.teams]]"};
  if (s.name.empty()) s.name = "scenario";
  return s;
}

}  // namespace

std::vector<run_plan> scenario::runs() const {
  std::vector<run_plan> out;
  std::vector<arrival_spec> sources;
  std::vector<std::string> source_names;
  if (traces.empty() && processes.empty()) {
    sources.push_back(arrivals);
    source_names.push_back(arrivals.process == arrival_process::trace ? arrivals.trace : "");
  }
  for (const auto& name : processes) {
    arrival_spec a = arrivals;
    a.process = name == "ramp"   ? arrival_process::ramp
                : name == "step" ? arrival_process::step
                : name == "daily" ? arrival_process::daily
                                  : arrival_process::poisson;
    sources.push_back(a);
    source_names.push_back(name);  // the run's label
  }
  for (const auto& t : traces) {
    arrival_spec a = arrivals;
    a.process = arrival_process::trace;
    a.trace = t;
    sources.push_back(a);
    source_names.push_back(t);
  }
  const std::vector<std::string> pols = policies.empty() ? std::vector<std::string>{""} : policies;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    std::string base = source_names[i];
    if (const auto slash = base.find_last_of('/'); slash != std::string::npos) base = base.substr(slash + 1);
    if (const auto dot = base.find_last_of('.'); dot != std::string::npos) base.resize(dot);
    if (base.empty()) base = name;
    for (const auto& p : pols) {
      out.push_back({p.empty() ? base : base + "-" + p, sources[i], p});
      if (compare_without.empty()) continue;
      // The same arrivals for everyone else (each team draws its own), without this team's.
      run_plan quiet = out.back();
      quiet.label += "-without-" + compare_without;
      for (auto& t : quiet.arrivals.teams)
        if (t.name == compare_without) t.rate_multiplier = 0;
      out.push_back(std::move(quiet));
    }
  }
  if (repeat <= 1) return out;
  std::vector<run_plan> repeated;
  for (const auto& plan : out)
    for (int k = 0; k < repeat; ++k) {
      run_plan r = plan;
      r.seed = seed + static_cast<std::uint64_t>(k);
      r.label += "-seed-" + std::to_string(r.seed);
      repeated.push_back(std::move(r));
    }
  return repeated;
}

std::variant<scenario, std::string> parse_scenario(std::string_view text, std::string_view origin, const std::string& dir) {
  try {
    return read(toml::parse(text, origin), dir, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ": " << e.description();
    return os.str();
  } catch (const bad_scenario& e) {
    const std::string o(origin);
    return e.message.rfind(o, 0) == 0 ? e.message : o + ": " + e.message;
  }
}

std::variant<scenario, std::string> load_scenario(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot read scenario " + path;
  std::ostringstream ss;
  ss << in.rdbuf();
  const auto slash = path.find_last_of('/');
  return parse_scenario(ss.str(), path, slash == std::string::npos ? "." : path.substr(0, slash));
}

std::string apply_overrides(scenario& s, const sim_overrides& o) {
  if (o.seed != 0) s.seed = o.seed;
  if (!o.policy.empty()) {
    if (!known_policy(o.policy)) return "--policy must be prefix_affinity_bounded, round_robin or least_tokens";
    s.policies = {o.policy};
  }
  if (!o.trace.empty()) {
    s.traces.clear();
    s.arrivals.process = arrival_process::trace;
    s.arrivals.trace = o.trace;
  }
  if (o.rate < 0) return "--rate must be positive";
  if (o.rate > 0) {
    s.arrivals.rate = o.rate;
    s.arrivals.trace_rate = o.rate;
    s.capacity.start_rate = o.rate;
  }
  return {};
}

}  // namespace kiln::sim
