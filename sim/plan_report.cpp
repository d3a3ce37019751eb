// `kiln plan`: the assumptions file, the flags, and the derived tables as text.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <toml++/toml.h>

#include "engine/cost_model.hpp"
#include "sim/plan.hpp"

namespace kiln::sim {

namespace {

/// A key of the assumptions file and where its value goes: a text, or a number in the file's
/// unit (scaled on the way in) within [lo, hi], whole where the figure counts something.
struct field {
  std::function<void(double)> set_number;
  std::function<void(const std::string&)> set_text;
  double lo = 0, hi = 0;
  bool integral = false;
};

using table_fields = std::map<std::string, field, std::less<>>;

field num(double& x, double lo, double hi, double scale = 1) {
  return {[&x, scale](double v) { x = v * scale; }, {}, lo, hi, false};
}
field whole(int& x, double lo, double hi) {
  return {[&x](double v) { x = static_cast<int>(v); }, {}, lo, hi, true};
}
field text(std::string& x) { return {{}, [&x](const std::string& v) { x = v; }}; }

/// "1e+30", "0.5", "1048576": a value as the error names it.
std::string shown(double v) {
  char buf[32];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::map<std::string, table_fields, std::less<>> schema(plan_input& in) {
  plan_assumptions& a = in.sizing;
  fleet_assumptions& f = in.fleet;
  return {
      {"model",
       {{"params", num(a.params, 1e6, 1e15)}, {"layers", whole(a.layers, 1, 10000)}, {"d_model", whole(a.d_model, 1, 1 << 20)},
        {"heads", whole(a.heads, 1, 65536)}, {"kv_heads", whole(a.kv_heads, 1, 65536)}, {"head_dim", whole(a.head_dim, 1, 65536)},
        {"weight_dtype", text(a.weight_dtype)}, {"kv_dtype", text(a.kv_dtype)},
        {"activation_bytes", num(a.activation_bytes, 0.125, 8)}}},
      {"node",
       {{"gpus", whole(a.gpus_per_node, 1, 1024)}, {"hbm_gb_per_gpu", num(a.hbm_bytes_per_gpu, 0.001, 1e6, 1e9)},
        {"hbm_tb_per_s", num(a.hbm_bytes_per_s, 0.001, 1e4, 1e12)}, {"tflops", num(a.flops_per_s, 0.001, 1e7, 1e12)},
        {"runtime_reserve", num(a.runtime_reserve, 0, 0.99)}}},
      {"efficiency",
       {{"bandwidth", num(a.bandwidth_efficiency, 0.001, 1)}, {"flops", num(a.flops_efficiency, 0.001, 1)},
        {"end_to_end", num(a.end_to_end_efficiency, 0.001, 1)}}},
      {"fabric",
       {{"allreduce_gb_per_s", num(a.allreduce_bytes_per_s, 0.001, 1e6, 1e9)},
        {"allreduce_latency_us", num(a.allreduce_latency_s, 0, 1e6, 1e-6)}, {"fixed_step_ms", num(a.fixed_step_s, 0, 1e5, 1e-3)},
        {"tensor_parallel", whole(a.tensor_parallel, 1, 1024)}}},
      {"traffic",
       {{"peak_requests_per_s", num(a.peak_requests_per_s, 0.001, 1e7)}, {"input_tokens", num(a.input_tokens, 1, 1e7)},
        {"output_tokens", num(a.output_tokens, 1, 1e7)}, {"context_tokens", whole(a.context_tokens, 1, 1e7)},
        {"prefix_hit_rate", num(a.prefix_hit_rate, 0, 0.999)}, {"average_load", num(a.average_load, 0.001, 1)},
        {"gpu_hour_usd", num(a.gpu_hour_usd, 0, 1e6)}}},
      {"slo",
       {{"decode_batch", whole(a.decode_batch, 1, 1e6)}, {"tpot_ms", num(a.tpot_slo_s, 0.001, 1e6, 1e-3)},
        {"burst_headroom", num(a.burst_headroom, 1, 100)}, {"hours_per_month", whole(a.hours_per_month, 1, 744)}}},
      {"fleet",
       {{"chat_layers", whole(f.chat_layers, 1, 10000)}, {"chat_kv_heads", whole(f.chat_kv_heads, 1, 65536)},
        {"chat_head_dim", whole(f.chat_head_dim, 1, 65536)}, {"chat_kv_dtype_bytes", num(f.chat_kv_dtype_bytes, 0.125, 8)},
        {"chat_weight_gb", num(f.chat_weight_bytes, 0, 1e6, 1e9)}, {"gpu_memory_gb", num(f.gpu_memory, 0.001, 1e6, 1e9)},
        {"concurrent_streams", whole(f.concurrent_streams, 1, 1e9)}, {"stream_tokens_per_s", num(f.stream_tokens_per_s, 0.001, 1e6)},
        {"answer_tokens", num(f.answer_tokens, 1, 1e7)}, {"replica_tokens_per_s", num(f.replica_tokens_per_s, 0.001, 1e9)},
        {"one_gpu_tokens_per_s", num(f.one_gpu_tokens_per_s, 0.001, 1e9)}, {"prompt_tokens", num(f.prompt_tokens, 1, 1e7)},
        {"cached_prefix_tokens", num(f.cached_prefix_tokens, 0, 1e7)}, {"prefix_found", num(f.prefix_found, 0, 1)},
        {"stream_context", num(f.stream_context, 1, 1e7)}, {"reason_streams", whole(f.reason_streams, 0, 1e9)},
        {"reason_stream_tokens_per_s", num(f.reason_stream_tokens_per_s, 0.001, 1e6)},
        {"reason_replica_tokens_per_s", num(f.reason_replica_tokens_per_s, 0.001, 1e9)},
        {"reason_gpus_per_replica", whole(f.reason_gpus_per_replica, 1, 1024)}, {"regions", whole(f.regions, 1, 1000)},
        {"gpu_hour_usd", num(f.gpu_hour_usd, 0, 1e6)}, {"hours_per_month", whole(f.hours_per_month, 1, 744)},
        {"growth_per_minute", num(f.growth_per_minute, 0, 1)}, {"cold_start_minutes", num(f.cold_start_minutes, 0, 240)},
        {"scale_threshold", num(f.scale_threshold, 0.001, 1)}}},
  };
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// 1234567 -> "1,234,567"
std::string commas(double v) {
  std::string digits = fmt("%.0f", std::round(v));
  std::string out;
  const bool neg = !digits.empty() && digits[0] == '-';
  if (neg) digits.erase(0, 1);
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return neg ? "-" + out : out;
}

std::string ms(double s) { return fmt("%.2f ms", s * 1e3); }
std::string gb(double b) { return fmt("%.1f GB", b / 1e9); }

/// The assumptions that must hold for the tables to mean anything.
std::string check(const plan_input& in) {
  const plan_assumptions& a = in.sizing;
  if (dtype_bytes(a.weight_dtype) == 0) return "unknown weight dtype '" + a.weight_dtype + "' (bf16, fp16, fp8, int8, int4, fp32)";
  if (dtype_bytes(a.kv_dtype) == 0) return "unknown kv dtype '" + a.kv_dtype + "' (bf16, fp16, fp8, int8, int4, fp32)";
  if (a.params <= 0 || a.layers <= 0 || a.d_model <= 0 || a.heads <= 0 || a.kv_heads <= 0 || a.head_dim <= 0)
    return "the model shape must be positive";
  if (a.gpus_per_node <= 0 || a.tensor_parallel <= 0 || a.tensor_parallel > a.gpus_per_node)
    return "tensor_parallel must be from 1 to the node's GPUs (" + std::to_string(a.gpus_per_node) + ")";
  if (!engine::heads_split_evenly(a.heads, a.kv_heads, a.tensor_parallel))
    return "tensor_parallel " + std::to_string(a.tensor_parallel) + " does not split " + std::to_string(a.heads) +
           " attention heads and " + std::to_string(a.kv_heads) + " KV heads evenly over the GPUs";
  if (a.hbm_bytes_per_s <= 0 || a.flops_per_s <= 0 || a.allreduce_bytes_per_s <= 0)
    return "bandwidths and FLOP/s must be positive";
  for (double e : {a.bandwidth_efficiency, a.flops_efficiency, a.end_to_end_efficiency})
    if (e <= 0 || e > 1) return "efficiencies must be in (0, 1]";
  if (a.prefix_hit_rate < 0 || a.prefix_hit_rate >= 1) return "prefix_hit_rate must be in [0, 1)";
  if (a.average_load <= 0 || a.average_load > 1) return "average_load must be in (0, 1]";
  if (a.context_tokens <= 0 || a.decode_batch <= 0 || a.tpot_slo_s <= 0) return "context, batch and SLO must be positive";
  const fleet_assumptions& f = in.fleet;
  if (f.replica_tokens_per_s <= 0 || f.one_gpu_tokens_per_s <= 0 || f.answer_tokens <= 0 ||
      f.stream_tokens_per_s <= 0 || f.reason_replica_tokens_per_s <= 0)
    return "fleet rates must be positive";
  // What the figures need of each other.
  const plan_figures fig = derive(a);
  if (fig.kv_pool_bytes <= 0)
    return "the weights (" + gb(fig.node_hbm - fig.reserve - fig.kv_pool_bytes) + " on the node) and the runtime reserve (" +
           gb(fig.reserve) + ") leave none of the node's " + gb(fig.node_hbm) + " of HBM for the KV cache";
  if (f.chat_weight_bytes >= f.gpu_memory)
    return "fleet.chat_weight_gb (" + gb(f.chat_weight_bytes) + ") leaves none of fleet.gpu_memory_gb (" + gb(f.gpu_memory) +
           ") for the KV cache";
  if (f.cached_prefix_tokens > f.prompt_tokens)
    return "fleet.cached_prefix_tokens (" + commas(f.cached_prefix_tokens) + ") must not exceed fleet.prompt_tokens (" +
           commas(f.prompt_tokens) + ")";
  const fleet_figures g = derive_fleet(f);
  for (int n : {fig.fleet_nodes, g.chat_replicas, g.chat_replicas_at_one_gpu_rate, g.reason_replicas, g.gpus})
    if (n >= kMaxPlanCount)
      return "these assumptions need more than " + commas(kMaxPlanCount) + " nodes, replicas or GPUs; kiln plan sizes fewer";
  return {};
}


}  // namespace

std::variant<plan_input, std::string> parse_plan_assumptions(std::string_view toml_text, std::string_view origin) {
  plan_input in;
  try {
    const toml::table root = toml::parse(toml_text, origin);
    auto tables = schema(in);
    for (const auto& [tname, node] : root) {
      const std::string t(tname.str());
      auto ti = tables.find(t);
      if (ti == tables.end() || !node.is_table())
        return std::string(origin) + ": unknown table [" + t + "] (model, node, efficiency, fabric, traffic, slo, fleet)";
      for (const auto& [kname, value] : *node.as_table()) {
        const std::string k(kname.str());
        auto fi = ti->second.find(k);
        if (fi == ti->second.end()) return std::string(origin) + ": unknown key " + t + "." + k;
        if (fi->second.set_text) {
          if (!value.is_string()) return std::string(origin) + ": " + t + "." + k + " must be a string";
          fi->second.set_text(std::string(*value.value<std::string>()));
        } else {
          const field& fd = fi->second;
          auto v = value.value<double>();
          const std::string kind = fd.integral ? "a whole number" : "a number";
          const std::string range = kind + " from " + shown(fd.lo) + " to " + shown(fd.hi);
          if (!v) return std::string(origin) + ": " + t + "." + k + " must be " + range;
          if (!std::isfinite(*v) || *v < fd.lo || *v > fd.hi || (fd.integral && *v != std::floor(*v)))
            return std::string(origin) + ": " + t + "." + k + " must be " + range + " (got " + shown(*v) + ")";
          fd.set_number(*v);
        }
      }
    }
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ": " << e.description();
    return os.str();
  }
  if (auto e = check(in); !e.empty()) return std::string(origin) + ": " + e;
  return in;
}

std::string render_plan(const plan_input& in) {
  const plan_assumptions& a = in.sizing;
  const plan_figures f = derive(a);
  std::ostringstream o;
  o << "kiln plan: seed 001's sizing model\n\n";
  o << "Model " << fmt("%.0fB", a.params / 1e9) << ", " << a.layers << " layers, d_model " << a.d_model << ", "
    << a.kv_heads << " KV heads x " << a.head_dim << "; weights " << a.weight_dtype << ", KV " << a.kv_dtype
    << "; node " << a.gpus_per_node << " GPUs, TP=" << a.tensor_parallel << "\n\n";
  o << "## Memory\n";
  o << "  weight bytes            " << gb(f.weight_bytes) << "\n";
  o << "  KV bytes per token      " << commas(f.kv_bytes_per_token) << " B\n";
  o << "  node HBM                " << gb(f.node_hbm) << "  (reserve " << gb(f.reserve) << ")\n";
  o << "  KV pool                 " << gb(f.kv_pool_bytes) << " = " << commas(f.kv_pool_tokens) << " tokens\n";
  o << "  max sequences           " << commas(f.max_sequences) << " at " << commas(a.context_tokens) << " tokens\n\n";
  const decode_step& s = f.step;
  o << "## Decode step, batch " << s.batch << ", context " << commas(a.context_tokens) << "\n";
  o << "  bytes per GPU           " << gb(s.weight_bytes) << " weights + " << fmt("%.2f GB", s.kv_bytes / 1e9) << " KV\n";
  o << "  memory                  " << ms(s.memory) << "\n";
  o << "  compute                 " << ms(s.compute) << (s.memory_bound() ? "  (memory-bound)" : "  (compute-bound)") << "\n";
  o << "  all-reduce              " << ms(s.allreduce) << "\n";
  o << "  fixed                   " << ms(s.fixed) << "\n";
  o << "  roofline step           " << ms(s.roofline) << "\n";
  o << "  TPOT (x1/" << fmt("%.2f", a.end_to_end_efficiency) << ")         " << ms(s.tpot) << "\n";
  o << "  node decode throughput  " << commas(f.node_decode_tokens_per_s) << " tokens/s\n";
  o << "  knee                    " << commas(f.knee) << " at " << commas(a.context_tokens) << " context ("
    << commas(f.knee_8k) << " at 8k)\n";
  o << "  batch at the " << fmt("%.0f", a.tpot_slo_s * 1e3) << " ms SLO     " << f.batch_at_slo << " streams, "
    << commas(f.kv_tokens_at_slo) << " KV tokens\n\n";
  o << "## Prefill\n";
  o << "  prompt   linear TFLOP  attention TFLOP  attention share  at MFU     end to end\n";
  for (const prefill_time* p : {&f.prefill_2k, &f.prefill_32k})
    o << fmt("  %6.0f", static_cast<double>(p->tokens)) << fmt("   %12.1f", p->linear_flops / 1e12) << fmt("  %15.1f", p->attention_flops / 1e12)
      << fmt("  %14.1f%%", 100 * p->attention_share()) << fmt("  %6.0f ms", p->at_mfu_s * 1e3)
      << fmt("  %7.0f ms", p->end_to_end_s * 1e3) << "\n";
  o << "  node prefill rate       " << commas(f.node_prefill_tokens_per_s) << " tokens/s (2k, end to end)\n\n";
  o << "## Fleet\n";
  o << "  decode demand           " << commas(f.decode_demand) << " tokens/s -> " << fmt("%.1f", f.decode_nodes) << " nodes\n";
  o << "  prefill demand          " << commas(f.prefill_demand) << " x (1 - " << fmt("%.2f", a.prefix_hit_rate)
    << ") = " << commas(f.prefill_after_cache) << " tokens/s -> " << fmt("%.1f", f.prefill_nodes) << " nodes\n";
  o << "  capacity                " << fmt("%.1f", f.capacity_nodes) << " nodes; x" << fmt("%.2f", a.burst_headroom)
    << " headroom -> " << f.fleet_nodes << " nodes (" << commas(static_cast<double>(f.fleet_nodes) * a.gpus_per_node) << " GPUs)\n";
  o << "  cost                    " << commas(f.usd_per_hour) << " USD/hour, " << commas(f.usd_per_month) << " USD/month\n";
  o << "  at " << fmt("%.0f%%", a.average_load * 100) << " load             "
    << fmt("%.2f", f.usd_per_million_output) << " USD per 1M output tokens, " << fmt("%.2f", f.usd_per_million_input)
    << " per 1M input\n\n";
  o << "## Parallelism, at the " << fmt("%.0f", a.tpot_slo_s * 1e3) << " ms TPOT SLO\n";
  o << "  config          weights on node  KV pool     batch  node tokens/s\n";
  for (const tp_option* t : {&f.tp_half, &f.tp_full}) {
    o << "  TP=" << t->tp << ", " << t->replicas_per_node << (t->replicas_per_node == 1 ? " replica " : " replicas")
      << fmt("  %9.1f GB", t->weights_on_node / 1e9);
    if (t->kv_pool_bytes <= 0) {  // the node's HBM holds this many copies of the weights and no KV
      o << "  none: the weights leave no HBM for the KV cache\n";
      continue;
    }
    o << fmt("  %8.1f GB", t->kv_pool_bytes / 1e9) << fmt("  %5.0f", t->batch_at_slo) << "  "
      << commas(t->node_tokens_per_s_at_slo) << "\n";
  }

  const fleet_figures g = derive_fleet(in.fleet);
  const fleet_assumptions& b = in.fleet;
  o << "\n# seed 000's fleet: chat-7b and reason-70b in " << b.regions << " regions\n";
  o << "  KV bytes per token (7B) " << commas(g.kv_bytes_per_token) << " B; " << fmt("%.0f", std::floor(g.streams_per_replica))
    << " streams of " << commas(b.stream_context) << " tokens hold " << gb(g.kv_bytes_of_streams) << "\n";
  o << "  output                  " << commas(g.output_tokens_per_s) << " tokens/s = " << commas(g.requests_per_s)
    << " requests/s\n";
  o << "  chat replicas           " << g.chat_replicas << " at " << commas(b.replica_tokens_per_s) << " tokens/s each; "
    << g.chat_replicas_at_one_gpu_rate << " at " << commas(b.one_gpu_tokens_per_s) << "\n";
  o << "  prefill                 " << commas(g.prompt_tokens_per_s) << " prompt tokens/s; "
    << commas(g.prefill_after_cache) << " after the cached prefix\n";
  o << "  reason replicas         " << g.reason_replicas << " (" << b.reason_gpus_per_replica << " GPUs each)\n";
  o << "  GPUs                    " << g.gpus << "; " << commas(g.usd_per_month) << " USD/month\n";
  o << "  chat USD per 1M tokens  " << fmt("%.2f", g.usd_per_million_full) << " full, "
    << fmt("%.2f", g.usd_per_million_half) << " half busy\n";
  o << "  cold start growth       " << fmt("%.2f", 1 + b.growth_per_minute) << "^" << fmt("%.0f", b.cold_start_minutes)
    << " = " << fmt("%.2f", g.cold_start_growth) << "; load when the replica arrives " << fmt("%.2f", g.load_at_arrival)
    << "\n";
  return o.str();
}

int run_plan(int argc, const char* const* argv, std::string& out, std::string& err) {
  std::string file, weight, kv;
  int tp = 0;
  for (int i = 0; i < argc; ++i) {
    const std::string f = argv[i];
    if ((f == "--assumptions" || f == "--weight-dtype" || f == "--kv-dtype" || f == "--tp") &&
        (i + 1 >= argc || argv[i + 1][0] == '\0')) {
      err = f + " needs a value";  // an empty one would quietly mean seed 001's
      return 2;
    }
    if (f == "--assumptions") file = argv[++i];
    else if (f == "--weight-dtype") weight = argv[++i];
    else if (f == "--kv-dtype") kv = argv[++i];
    else if (f == "--tp") {
      const std::string v = argv[++i];
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 1024) {
        err = "--tp must be a whole number from 1 to 1024, got '" + v + "'";
        return 2;
      }
      tp = static_cast<int>(n);
    } else {
      err = "unknown option '" + f + "'";
      return 2;
    }
  }
  std::string text;
  std::string origin = "<seed 001>";
  if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      err = "cannot read " + file;
      return 1;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    origin = file;
  }
  auto parsed = parse_plan_assumptions(text, origin);
  if (auto* e = std::get_if<std::string>(&parsed)) {
    err = *e;
    return 1;
  }
  plan_input in = std::get<plan_input>(parsed);
  if (!weight.empty()) in.sizing.weight_dtype = weight;
  if (!kv.empty()) in.sizing.kv_dtype = kv;
  if (tp > 0) in.sizing.tensor_parallel = tp;
  if (auto e = check(in); !e.empty()) {
    err = e;
    return 1;
  }
  out = render_plan(in);
  return 0;
}

}  // namespace kiln::sim
