#include "config/config.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <toml++/toml.h>

#include "config/db.hpp"
#include "engine/model_dir.hpp"
#include "engine/upstream_protocol.hpp"

namespace kiln::config {

namespace {

struct bad_config : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Reads one TOML table: typed getters with ranges, and a check that no key is unknown.
class reader {
 public:
  reader(const toml::table& t, std::string path) : t_(t), path_(std::move(path)) {}

  void text(std::string_view key, std::string& out, bool required = false) {
    seen_.insert(std::string(key));
    const toml::node* n = t_.get(key);
    if (!n) {
      if (required) fail(key, "is required");
      return;
    }
    auto v = n->value<std::string>();
    if (!v) fail(key, "must be a string");
    out = *v;
  }

  template <class T>
  void number(std::string_view key, T& out, double lo, double hi) {
    seen_.insert(std::string(key));
    const toml::node* n = t_.get(key);
    if (!n) return;
    std::optional<double> v;
    if (n->is_integer()) v = static_cast<double>(*n->value<std::int64_t>());
    else if (n->is_floating_point()) v = *n->value<double>();
    if (!v) fail(key, "must be a number");
    if constexpr (std::is_integral_v<T>) {
      if (n->is_floating_point()) fail(key, "must be an integer");
    }
    if (!(*v >= lo && *v <= hi)) {  // NaN and infinities fail too
      std::ostringstream m;
      m << "must be between " << lo << " and " << hi << " (got " << *v << ")";
      fail(key, m.str());
    }
    out = static_cast<T>(*v);
  }

  void boolean(std::string_view key, bool& out) {
    seen_.insert(std::string(key));
    const toml::node* n = t_.get(key);
    if (!n) return;
    if (!n->is_boolean()) fail(key, "must be true or false");
    out = *n->value<bool>();
  }

  /// An array of strings.
  void texts(std::string_view key, std::vector<std::string>& out) {
    seen_.insert(std::string(key));
    const toml::node* n = t_.get(key);
    if (!n) return;
    const toml::array* a = n->as_array();
    if (!a) fail(key, "must be an array of strings");
    out.clear();
    for (const auto& e : *a) {
      auto v = e.value<std::string>();
      if (!v || !e.is_string()) fail(key, "must be an array of strings");
      out.push_back(*v);
    }
  }

  const toml::table* table(std::string_view key) {
    seen_.insert(std::string(key));
    const toml::node* n = t_.get(key);
    if (!n) return nullptr;
    if (!n->is_table()) fail(key, "must be a table");
    return n->as_table();
  }

  const toml::array* array(std::string_view key) {
    seen_.insert(std::string(key));
    const toml::node* n = t_.get(key);
    if (!n) return nullptr;
    if (!n->is_array()) fail(key, "must be an array of tables ([[" + std::string(key) + "]])");
    return n->as_array();
  }

  void no_unknown_keys() const {
    for (const auto& [k, v] : t_) {
      if (!seen_.count(std::string(k.str()))) throw bad_config(qualified(k.str()) + ": unknown key");
    }
  }

  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw bad_config(qualified(key) + " " + what);
  }

 private:
  std::string qualified(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  const toml::table& t_;
  std::string path_;
  std::set<std::string> seen_;
};

/// Calls `fn(table, "key[i]", i)` for each table of the array `key` ([[key]]).
template <class F>
void each_table(reader& r, std::string_view key, F fn) {
  const auto* arr = r.array(key);
  if (!arr) return;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const std::string path = std::string(key) + "[" + std::to_string(i) + "]";
    const auto* t = (*arr)[i].as_table();
    if (!t) throw bad_config(path + " must be a table");
    fn(*t, path, i);
  }
}


constexpr double kBig = 1e18;

server_config read_server(const toml::table& t) {
  server_config s;
  reader r(t, "server");
  r.text("host", s.host);
  r.number("port", s.port, 0, 65535);
  r.number("max_body_bytes", s.max_body_bytes, 64, 1e9);
  r.number("max_header_bytes", s.max_header_bytes, 256, 1e7);
  r.number("request_timeout_ms", s.request_timeout_ms, 1, 3.6e6);
  r.number("shutdown_grace_ms", s.shutdown_grace_ms, 0, 3.6e6);
  r.number("io_threads", s.io_threads, 1, 64);
  r.number("actor_threads", s.actor_threads, 0, 64);
  r.number("actor_sleep_polls", s.actor_sleep_polls, 0, 1e6);
  if (t.contains("actors_on_io_thread")) {
    bool on = false;
    r.boolean("actors_on_io_thread", on);
    s.actors_on_io_thread = on;
  }
  if (s.actors_on_io_thread.value_or(false) && (s.io_threads != 1 || s.actor_threads > 1))
    r.fail("actors_on_io_thread", "needs io_threads = 1 and actor_threads 0 or 1 (the one thread runs both)");
  r.number("write_timeout_ms", s.write_timeout_ms, 1, 3.6e6);
  r.number("max_buffered_bytes", s.max_buffered_bytes, 4096, 1e9);
  r.no_unknown_keys();
  return s;
}

cluster_config read_cluster(const toml::table& t) {
  cluster_config c;
  reader r(t, "cluster");
  r.text("node", c.node);
  std::vector<std::string> roles;
  r.texts("roles", roles);
  if (t.get("roles")) {
    if (roles.empty()) r.fail("roles", "must name at least one role");
    c.roles = 0;
    for (const auto& name : roles) {
      auto role = node_role_from(name);
      if (!role) r.fail("roles", "has an unknown role \"" + name + "\" (front, router, worker, control)");
      c.roles |= role_bit(*role);
    }
  }
  std::string listen;
  r.text("listen", listen);
  if (!listen.empty() && !parse_endpoint(listen, c.listen))
    r.fail("listen", "must be host:port with a port from 1 to 65535 (got \"" + listen + "\")");
  std::vector<std::string> seeds;
  r.texts("seeds", seeds);
  for (const auto& s : seeds) {
    cluster_endpoint e;
    if (!parse_endpoint(s, e)) r.fail("seeds", "must hold host:port entries (got \"" + s + "\")");
    c.seeds.push_back(e);
  }
  r.texts("regions", c.regions);
  r.number("heartbeat_ms", c.heartbeat_ms, 50, 60000);
  r.number("connection_timeout_ms", c.connection_timeout_ms, 100, 600000);
  r.no_unknown_keys();
  if (c.connection_timeout_ms <= c.heartbeat_ms)
    throw bad_config("cluster.connection_timeout_ms must be longer than cluster.heartbeat_ms");
  if (c.listen.port == 0 && !c.seeds.empty()) throw bad_config("cluster.seeds needs cluster.listen");
  if (c.listen.port == 0 && c.roles != all_roles) throw bad_config("cluster.roles needs cluster.listen (a node alone has every role)");
  if (c.has(node_role::worker) && !c.has(node_role::router) && c.has(node_role::front))
    throw bad_config("cluster.roles: a worker node without the router role runs no front (its region's router node does)");
  if (c.has(node_role::router) && !c.has(node_role::control) && c.seeds.empty())
    throw bad_config("cluster.seeds: a router node without the control role needs seeds to find its control node");
  if (!c.has(node_role::router) && !c.has(node_role::control) && c.seeds.empty())
    throw bad_config(std::string("cluster.seeds: a ") + (c.has(node_role::worker) ? "worker" : "front") +
                     "-only node needs seeds to find its " + (c.has(node_role::worker) ? "region's router node" : "regions"));
  return c;
}

rollout_config read_rollout(const toml::table& t) {
  rollout_config o;
  reader r(t, "rollout");
  r.number("guard_window_s", o.guard_window_s, 1, 86400);
  r.number("guard_min_requests", o.guard_min_requests, 1, 1e9);
  r.number("check_interval_s", o.check_interval_s, 0.1, 3600);
  r.number("error_rate_points", o.error_rate_points, 0, 100);
  r.number("ttft_p95_increase", o.ttft_p95_increase, 0, 100);
  r.number("output_length_change", o.output_length_change, 0, 100);
  r.number("guard_z", o.guard_z, 0, 100);
  r.number("keep_previous_hours", o.keep_previous_hours, 0, 8760);
  r.no_unknown_keys();
  return o;
}

void read_shape(const toml::table& t, const std::string& path, engine::model_shape& m) {
  reader r(t, path);
  r.number("layers", m.layers, 1, 1000);
  r.number("d_model", m.d_model, 1, 1e6);
  r.number("heads", m.heads, 1, 1e4);
  r.number("kv_heads", m.kv_heads, 1, 1e4);
  r.number("head_dim", m.head_dim, 1, 1e4);
  r.number("ffn_dim", m.ffn_dim, 1, 1e7);
  r.number("vocab", m.vocab, 1, 1e8);
  r.number("params", m.params, 0, 1e15);
  r.number("dtype_bytes", m.dtype_bytes, 0.125, 8);
  r.number("kv_dtype_bytes", m.kv_dtype_bytes, 0.125, 8);
  r.number("activation_bytes", m.activation_bytes, 0.125, 8);
  r.no_unknown_keys();
}

void read_gpu(const toml::table& t, const std::string& path, engine::gpu_assumptions& g) {
  reader r(t, path);
  r.number("hbm_bytes_per_s", g.hbm_bytes_per_s, 1e6, kBig);
  r.number("flops_per_s", g.flops_per_s, 1e6, kBig);
  r.number("bandwidth_efficiency", g.bandwidth_efficiency, 0.001, 1);
  r.number("flops_efficiency", g.flops_efficiency, 0.001, 1);
  r.number("end_to_end_efficiency", g.end_to_end_efficiency, 0.001, 1);
  r.number("allreduce_bytes_per_s", g.allreduce_bytes_per_s, 1e3, kBig);
  r.number("allreduce_latency_s", g.allreduce_latency_s, 0, 1);
  r.number("fixed_step_s", g.fixed_step_s, 0, 10);
  r.number("tensor_parallel", g.tensor_parallel, 1, 64);
  r.number("hbm_capacity_bytes", g.hbm_capacity_bytes, 1e6, kBig);
  r.number("kv_memory_fraction", g.kv_memory_fraction, 0.01, 1);
  r.no_unknown_keys();
}

// A remote pool's upstreams (one replica each), model name, key and connection bound; the
// keys are refused on any other executor.
void read_upstreams(reader& r, pool_config& p) {
  r.texts("upstreams", p.upstreams);
  for (std::size_t i = 0; i < p.upstreams.size(); ++i) {
    if (auto why = upstream_url_problem(p.upstreams[i]); !why.empty()) r.fail("upstreams", why);
    if (std::find(p.upstreams.begin(), p.upstreams.begin() + static_cast<std::ptrdiff_t>(i), p.upstreams[i]) !=
        p.upstreams.begin() + static_cast<std::ptrdiff_t>(i))
      r.fail("upstreams", "lists " + p.upstreams[i] + " twice");
  }
  r.text("upstream_model", p.upstream_model);
  r.text("upstream_api_key", p.upstream_api_key);
  r.number("upstream_connections", p.upstream_connections, 1, 4096);
  const bool remote = p.executor == executor_kind::remote;
  if (remote && p.upstreams.empty()) r.fail("upstreams", "must name at least one upstream for the remote executor");
  if (!remote && (!p.upstreams.empty() || !p.upstream_model.empty() || !p.upstream_api_key.empty()))
    r.fail("upstreams", "are for the remote executor only");
  if (remote) p.replicas = static_cast<int>(p.upstreams.size());
}

pool_config read_pool(const toml::table& t, std::size_t index) {
  pool_config p;
  const std::string path = "pools[" + std::to_string(index) + "]";
  reader r(t, path);
  r.text("model", p.model, true);
  r.text("version", p.version, true);
  r.number("replicas", p.replicas, 1, 1024);
  std::string executor = "sim";
  r.text("executor", executor);
  if (executor == "cpu") p.executor = executor_kind::cpu;
  else if (executor == "cuda") p.executor = executor_kind::cuda;
  else if (executor == "remote") p.executor = executor_kind::remote;
  else if (executor != "sim")
    r.fail("executor", "must be \"sim\", \"cpu\", \"cuda\" or \"remote\" (got \"" + executor + "\")");
  read_upstreams(r, p);
  r.text("weights_dtype", p.weights_dtype);
  if (!p.weights_dtype.empty() && p.weights_dtype != "bf16" && p.weights_dtype != "f32" && p.weights_dtype != "int8" &&
      !(p.weights_dtype == "f16" && p.executor == executor_kind::cpu))
    r.fail("weights_dtype", p.executor == executor_kind::cpu ? "must be bf16, f16, f32 or int8" : "must be bf16, f32 or int8");
  r.text("kv_dtype", p.kv_dtype);
  if (!p.kv_dtype.empty() && p.kv_dtype != "bf16" && p.kv_dtype != "f32") r.fail("kv_dtype", "must be bf16 or f32");
  r.number("gpu_memory_fraction", p.gpu_memory_fraction, 0.05, 0.99);
  r.text("model_dir", p.model_dir);
  r.text("make_if_absent", p.make_if_absent);
  r.number("threads", p.threads, 1, 256);
  if ((p.executor == executor_kind::cpu || p.executor == executor_kind::cuda) && p.model_dir.empty()) r.fail("model_dir", "is required for the " + executor + " executor");
  if (!p.make_if_absent.empty() && !engine::tiny_model_size_known(p.make_if_absent))
    r.fail("make_if_absent", "must be tiny, small or 100m (got \"" + p.make_if_absent + "\")");
  r.number("max_tokens_per_step", p.limits.max_tokens_per_step, 1, 1e7);
  r.number("max_running", p.limits.max_running, 1, 1e6);
  r.number("kv_reserve_blocks", p.limits.kv_reserve_blocks, 0, 1e8);
  r.number("block_size", p.block_size, 1, 4096);
  r.number("kv_blocks", p.kv_blocks, 0, 1e9);
  r.number("default_max_tokens", p.default_max_tokens, 1, 1e7);
  r.text("tool_call_format", p.tool_call_format);
  if (p.tool_call_format != "none" && p.tool_call_format != "hermes" && p.tool_call_format != "llama3_json")
    r.fail("tool_call_format", "must be none, hermes or llama3_json (got \"" + p.tool_call_format + "\")");
  r.number("max_context", p.max_context, 1, 1e8);
  r.number("heartbeat_ms", p.heartbeat_ms, 10, 60000);
  r.number("first_token_timeout_ms", p.first_token_timeout_ms, 1, 8.64e7);
  r.number("request_timeout_ms", p.request_timeout_ms, 1, 8.64e7);
  r.number("restart_intensity", p.restart_intensity, 0, 1e6);
  r.number("restart_period_ms", p.restart_period_ms, 1, 8.64e7);
  r.number("capacity_tokens", p.capacity_tokens, 0, 1e12);
  r.number("queue_limit", p.queue_limit, 0, 1e7);
  r.number("gpu_hour_usd", p.gpu_hour_usd, 0, 1e6);
  r.text("routing", p.routing);
  r.number("fault_fraction", p.fault_fraction, 0, 1);
  if (p.routing != "prefix_affinity_bounded" && p.routing != "round_robin" && p.routing != "least_tokens")
    r.fail("routing", "must be prefix_affinity_bounded, round_robin or least_tokens (got \"" + p.routing + "\")");
  if (const auto* s = r.table("shape")) read_shape(*s, path + ".shape", p.shape);
  if (const auto* g = r.table("gpu")) read_gpu(*g, path + ".gpu", p.gpu);
  // -1 (the default): a GPU's knee, from the roofline of the pool's shape and GPU, for the
  // executors that model or run on one; no bound on the CPU, where every token costs.
  int batch_step = -1;
  r.number("batch_step_tokens", batch_step, -1, 1e7);
  const bool gpu_like = p.executor == executor_kind::sim || p.executor == executor_kind::cuda;
  p.limits.batch_step_tokens =
      batch_step >= 0 ? batch_step : gpu_like ? engine::cost_model(p.shape, p.gpu).memory_bound_tokens() : 0;
  if (const int tp = p.gpu.tensor_parallel; !engine::heads_split_evenly(p.shape.heads, p.shape.kv_heads, tp))
    throw bad_config(path + ".gpu.tensor_parallel: " + std::to_string(tp) + " does not split " + std::to_string(p.shape.heads) +
                     " attention heads and " + std::to_string(p.shape.kv_heads) + " KV heads evenly over the GPUs");
  if (const auto* s = r.table("sim_text")) {
    reader st(*s, path + ".sim_text");
    st.number("min_output_tokens", p.text.min_output_tokens, 1, 1e7);
    st.number("max_output_tokens", p.text.max_output_tokens, 1, 1e7);
    st.no_unknown_keys();
    if (p.text.max_output_tokens < p.text.min_output_tokens)
      st.fail("max_output_tokens", "must be at least min_output_tokens");
  }
  if (const auto* c = r.table("cold_start")) {
    reader cr(*c, path + ".cold_start");
    cr.number("node_start_s", p.cold_start.node_start_s, 0, 1e5);
    cr.number("weight_copy_s", p.cold_start.weight_copy_s, 0, 1e5);
    cr.number("load_s", p.cold_start.load_s, 0, 1e5);
    cr.number("warmup_s", p.cold_start.warmup_s, 0, 1e5);
    cr.no_unknown_keys();
  }
  if (const auto* a = r.table("autoscale")) {
    reader ar(*a, path + ".autoscale");
    auto& x = p.autoscale;
    x.enabled = true;
    ar.number("min_replicas", x.min_replicas, 0, 1e5);
    ar.number("max_replicas", x.max_replicas, 0, 1e5);
    ar.number("scale_up_at", x.scale_up_at, 0.01, 10);
    ar.number("queue_trigger", x.queue_trigger, 0, 1e9);
    ar.number("scale_down_at", x.scale_down_at, 0, 10);
    ar.number("down_every_s", x.down_every_s, 0, 1e7);
    ar.number("interval_s", x.interval_s, 0.01, 1e5);
    ar.number("capacity_tokens", x.capacity_tokens, 0, 1e12);
    ar.number("warm_replicas", x.warm_replicas, 0, 1e4);
    each_table(ar, "schedule", [&](const toml::table& t, const std::string& at, std::size_t) {
      reader sr(t, path + ".autoscale." + at);
      std::string when;
      sr.text("cron", when, true);
      scale_schedule e;
      auto parsed = parse_cron(when);
      if (auto* why = std::get_if<std::string>(&parsed)) sr.fail("cron", *why);
      e.when = std::get<cron_spec>(parsed);
      sr.number("min_replicas", e.min_replicas, 1, 1e5);
      sr.number("lead_s", e.lead_s, 0, 86400);
      sr.number("hold_s", e.hold_s, 60, 7 * 86400);
      sr.no_unknown_keys();
      if (e.lead_s < 0) e.lead_s = p.cold_start.total_s() + 2 * x.interval_s;
      x.schedule.push_back(std::move(e));
    });
    ar.no_unknown_keys();
    if (p.executor == executor_kind::remote)
      r.fail("autoscale", "is not for the remote executor: its replicas are its upstreams (add them through the admin API)");
    if (x.max_replicas == 0) x.max_replicas = std::max(p.replicas, x.min_replicas);
    if (x.max_replicas < x.min_replicas) ar.fail("max_replicas", "must be at least min_replicas");
    if (x.scale_down_at >= x.scale_up_at) ar.fail("scale_down_at", "must be below scale_up_at");
    for (const auto& e : x.schedule)
      if (e.min_replicas > x.max_replicas)
        ar.fail("schedule", "asks for " + std::to_string(e.min_replicas) + " replicas at '" + e.when.text +
                                "', more than max_replicas " + std::to_string(x.max_replicas));
  }
  r.no_unknown_keys();
  if (p.model.empty() || p.version.empty()) r.fail("model", "and version must not be empty");
  if (p.engine_kv_blocks() < 2 + p.limits.kv_reserve_blocks) {
    const engine::cost_model m(p.shape, p.gpu);
    std::ostringstream msg;
    msg << "leaves no room for the KV cache: " << m.weight_bytes() / 1e9 << " GB of weights on "
        << p.gpu.tensor_parallel << " x " << p.gpu.hbm_capacity_bytes / 1e9 << " GB at kv_memory_fraction "
        << p.gpu.kv_memory_fraction << " (or set kv_blocks)";
    throw bad_config(path + " " + msg.str());
  }
  return p;
}

kiln_config read_root(const toml::table& root) {
  kiln_config c;
  reader r(root, "");
  r.text("region", c.region);
  r.text("admin_key", c.admin_key);
  r.text("store_path", c.store_path);
  r.text("usage_log", c.usage_log);
  if (const auto* s = r.table("server")) c.server = read_server(*s);
  if (const auto* s = r.table("rollout")) c.rollout = read_rollout(*s);
  if (const auto* s = r.table("cluster")) c.cluster = read_cluster(*s);
  if (const auto* s = r.table("artifacts")) {
    reader ar(*s, "artifacts");
    ar.text("dir", c.artifacts.dir);
    ar.text("cache_dir", c.artifacts.cache_dir);
    ar.text("key", c.artifacts.key);
    ar.no_unknown_keys();
    if (c.artifacts.cache_dir.empty()) throw bad_config("artifacts.cache_dir must not be empty");
  }
  if (const auto* s = r.table("batch")) {
    reader br(*s, "batch");
    br.text("files_dir", c.batch.files_dir);
    br.number("max_file_bytes", c.batch.max_file_bytes, 1024, 1e11);
    br.number("max_lines", c.batch.max_lines, 1, 1e7);
    br.number("max_in_flight", c.batch.max_in_flight, 1, 100000);
    br.number("idle_below", c.batch.idle_below, 0, 1);
    br.no_unknown_keys();
  }
  each_table(r, "teams", [&](const toml::table& t, const std::string& path, std::size_t) {
    team_config team;
    reader tr(t, path);
    tr.text("name", team.name, true);
    tr.text("api_key", team.api_key, true);
    std::string prio = "interactive";
    tr.text("max_priority", prio);
    const auto p = engine::parse_priority(prio);
    if (!p) tr.fail("max_priority", "must be interactive, standard or batch (got \"" + prio + "\")");
    team.max_priority = *p;
    each_table(tr, "limits", [&](const toml::table& lt, const std::string& lpath, std::size_t) {
      team_limit l;
      reader lr(lt, path + "." + lpath);
      lr.text("model", l.model, true);
      lr.number("tokens_per_minute", l.tokens_per_minute, 0, 1e12);
      lr.number("burst", l.burst, 0, 1e12);
      lr.number("max_concurrency", l.max_concurrency, 0, 1e7);
      lr.number("guaranteed_share", l.guaranteed_share, 0, 1);
      lr.no_unknown_keys();
      if (team.limit_for(l.model)) lr.fail("model", "\"" + l.model + "\" has two limits");
      team.limits.push_back(l);
    });
    tr.no_unknown_keys();
    if (team.api_key.empty()) tr.fail("api_key", "must not be empty");
    if (c.team_by_key(team.api_key)) tr.fail("api_key", "is used by another team");
    c.teams.push_back(team);
  });
  each_table(r, "pools", [&](const toml::table& t, const std::string& path, std::size_t i) {
    pool_config p = read_pool(t, i);
    if (p.model.find('@') != std::string::npos || p.version.find('@') != std::string::npos)
      throw bad_config(path + ": model and version must not contain '@'");
    if (c.pool_for(p.model, p.version)) throw bad_config(path + ": " + p.model + "@" + p.version + " is defined twice");
    c.pools.push_back(std::move(p));
  });
  each_table(r, "models", [&](const toml::table& t, const std::string& path, std::size_t) {
    model_config m;
    reader mr(t, path);
    mr.text("name", m.name, true);
    mr.text("live_version", m.live_version, true);
    mr.no_unknown_keys();
    if (!c.pool_for(m.name, m.live_version))
      mr.fail("live_version", "\"" + m.live_version + "\" of model \"" + m.name + "\" has no [[pools]] entry");
    for (const auto& other : c.models)
      if (other.name == m.name) mr.fail("name", "\"" + m.name + "\" is listed twice");
    c.models.push_back(std::move(m));
  });
  // A model with one version needs no [[models]] entry; with several it must name the live one.
  for (const auto& p : c.pools) {
    bool listed = false;
    int versions = 0;
    for (const auto& m : c.models) listed = listed || m.name == p.model;
    for (const auto& q : c.pools) versions += q.model == p.model;
    if (listed) continue;
    if (versions > 1)
      throw bad_config("models: \"" + p.model + "\" has several versions; add [[models]] name = \"" + p.model +
                       "\" with its live_version");
    c.models.push_back({p.model, p.version});
  }
  r.no_unknown_keys();
  if (!c.admin_key.empty() && c.team_by_key(c.admin_key)) throw bad_config("admin_key is also a team's api_key");
  if (c.store_path.empty()) throw bad_config("store_path must not be empty");
  // Guaranteed shares of one model cannot promise more than the whole pool.
  for (const auto& m : c.models) {
    double shares = 0;
    for (const auto& t : c.teams)
      if (const team_limit* l = t.limit_for(m.name)) shares += l->guaranteed_share;
    if (shares > 1 + 1e-9) throw bad_config("teams: the guaranteed shares of model \"" + m.name + "\" add up to more than 1");
  }
  if (c.region.empty()) throw bad_config("region must not be empty");
  if (c.cluster.node.empty()) c.cluster.node = c.region;
  if (std::find(c.cluster.regions.begin(), c.cluster.regions.end(), c.region) == c.cluster.regions.end())
    c.cluster.regions.insert(c.cluster.regions.begin(), c.region);
  if (c.pools.empty()) throw bad_config("pools: at least one [[pools]] entry is required");
  // A worker-only node serves no requests: its teams would go unused.
  const bool worker_only = c.cluster.has(node_role::worker) && !c.cluster.has(node_role::router);
  if (c.teams.empty() && !worker_only) throw bad_config("teams: at least one [[teams]] entry is required");
  return c;
}

}  // namespace

const team_config* kiln_config::team_by_key(std::string_view key) const {
  for (const auto& t : teams)
    if (t.api_key == key) return &t;
  return nullptr;
}

int pool_config::engine_kv_blocks() const {
  if (kv_blocks > 0) return kv_blocks + 1;
  if (executor == executor_kind::cpu) return 1024 + 1;
  if (executor == executor_kind::cuda) return 2 + limits.kv_reserve_blocks;  // sized on the device at start
  if (executor == executor_kind::remote) return 2 + limits.kv_reserve_blocks;  // the upstream's own
  return engine::cost_model(shape, gpu).kv_blocks(block_size) + 1;
}

namespace {
}  // namespace

std::string expand_home(const std::string& path) {
  if (path.rfind("~/", 0) != 0) return path;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + path.substr(1);
}

std::string upstream_url_problem(std::string_view url) {
  if (!engine::upstream::parse_endpoint(url))
    return "must be http://host:port/base (got \"" + std::string(url) + "\")";
  if (url.find_first_of(" \t\r\n?#") != std::string_view::npos)
    return "must be a plain base URL without spaces, query or fragment (got \"" + std::string(url) + "\")";
  return {};
}

std::string pool_config::resolved_model_dir() const { return expand_home(model_dir); }

namespace {
int half_the_cores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2); }
}  // namespace

bool server_config::runs_actors_on_io_thread() const {
  if (actors_on_io_thread) return *actors_on_io_thread;
  return io_threads == 1 && (actor_threads == 0 ? half_the_cores() : actor_threads) == 1;
}

int server_config::scheduler_threads() const {
  if (runs_actors_on_io_thread()) return 1;
  if (actor_threads > 0) return actor_threads;
  return half_the_cores();
}

std::int64_t pool_config::pool_capacity_tokens() const {
  if (capacity_tokens > 0) return capacity_tokens * replicas;
  if (executor == executor_kind::cuda || executor == executor_kind::remote) return 0;  // sized elsewhere
  return static_cast<std::int64_t>(engine_kv_blocks() - 1) * block_size * replicas;
}

bool parse_endpoint(const std::string& text, cluster_endpoint& out) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return false;
  const std::string port = text.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  const int n = std::stoi(port);
  if (n < 1 || n > 65535) return false;
  out = {text.substr(0, colon), static_cast<std::uint16_t>(n)};
  return true;
}

std::string_view to_string(node_role r) {
  switch (r) {
    case node_role::front: return "front";
    case node_role::router: return "router";
    case node_role::worker: return "worker";
    case node_role::control: return "control";
  }
  return "?";
}

std::optional<node_role> node_role_from(std::string_view name) {
  for (auto r : {node_role::front, node_role::router, node_role::worker, node_role::control})
    if (to_string(r) == name) return r;
  return std::nullopt;
}

std::pair<std::string, std::string> split_model_ref(std::string_view ref) {
  const auto at = ref.find('@');
  if (at == std::string_view::npos) return {std::string(ref), {}};
  return {std::string(ref.substr(0, at)), std::string(ref.substr(at + 1))};
}

const pool_config* kiln_config::pool_for(std::string_view model, std::string_view version) const {
  for (const auto& p : pools)
    if (p.model == model && p.version == version) return &p;
  return nullptr;
}

std::string kiln_config::live_version(std::string_view model) const {
  for (const auto& m : models)
    if (m.name == model) return m.live_version;
  return {};
}

const team_limit* team_config::limit_for(std::string_view model) const {
  for (const auto& l : limits)
    if (l.model == model) return &l;
  return nullptr;
}

std::string kiln_config::resolved_store_path() const { return expand_home(store_path); }

std::string kiln_config::resolved_files_dir() const {
  if (!batch.files_dir.empty()) return expand_home(batch.files_dir);
  if (is_postgres_uri(store_path)) return expand_home("~/.kiln/files");
  return resolved_store_path() + ".files";
}

int kiln_config::longest_request_ms() const {
  int longest = 0;
  for (const auto& p : pools) longest = std::max(longest, p.request_timeout_ms);
  return longest;
}

std::variant<kiln_config, config_error> parse_config(std::string_view toml_text, std::string_view origin) {
  try {
    toml::table root = toml::parse(toml_text, origin);
    kiln_config c = read_root(root);
    c.source = std::string(toml_text);
    return c;
  } catch (const toml::parse_error& e) {
    std::ostringstream m;
    m << origin << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    return config_error{m.str()};
  } catch (const bad_config& e) {
    return config_error{std::string(origin) + ": " + e.what()};
  }
}

std::variant<kiln_config, config_error> load_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return config_error{path + ": cannot open config file"};
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path);
}

}  // namespace kiln::config
