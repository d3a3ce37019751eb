// kiln: the one binary. `kiln serve` runs a node; `kiln config show` prints the config.
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/chaos_cli.hpp"
#include "cluster/ops_cli.hpp"
#include "cluster/tokenize_cli.hpp"
#include "cluster/node.hpp"
#include "config/config.hpp"
#include "engine/model_dir.hpp"
#include "sim/plan.hpp"
#include "sim/sim.hpp"

namespace {

constexpr std::string_view kUsage =
    "usage:\n"
    "  kiln serve [--config FILE] [--port N] [--store FILE] [--capture FILE]\n"
    "                                          run one node: one region, every role (the store\n"
    "                                          file holds teams, keys, limits and usage; the\n"
    "                                          capture file gets every served request, for replay)\n"
    "  kiln config show [--config FILE]       print the configuration (the embedded default\n"
    "                                          when no file is given)\n"
    "  kiln make-tiny-model DIR [--size S] [--arch A] [--tokenizer-from D]\n"
    "                                          write a small model with random weights (S: tiny, small,\n"
    "                                          100m; A: llama, qwen2, qwen3) and a trained BPE\n"
    "                                          tokenizer, or the tokenizer files of model directory D\n"
    "  kiln chaos --url URL --admin-key K [--every 2s] [--for 60s] [--target replica|engine|router]\n"
    "             [--action kill|freeze|slow|fail] [--seconds 5s]\n"
    "                                          a drill against a running kiln: hit a random target\n"
    "                                          every period, print it and the pool state after\n"
    "  kiln chaos --url FRONT --admin-key K --region R [--action kill|drain|undrain] [--seconds S]\n"
    "                                          the region drill through a clustered front: kill\n"
    "                                          every router node of R, or drain it (S: for how long)\n"
    "  kiln ops [--url URL] [--admin-key K] [--json] COMMAND ...\n"
    "                                          operators' calls: pools, teams, limits, versions,\n"
    "                                          register, rollout, decisions, alias, drain, chaos\n"
    "                                          (kiln ops help lists them)\n"
    "  kiln sim SCENARIO.toml [--seed N] [--out DIR] [--trace FILE] [--rate R] [--policy P]\n"
    "                                          run kiln's actors on virtual time over a scenario's\n"
    "                                          arrivals; CSV series, charts and summary.md in DIR\n"
    "  kiln plan [--assumptions FILE] [--weight-dtype D] [--kv-dtype D] [--tp N]\n"
    "                                          the sizing model: KV bytes, step time, knee, batch at\n"
    "                                          the SLO, prefill, fleet and cost (seed 001's assumptions\n"
    "                                          unless a file or flag changes them)\n"
    "  kiln tokenize --model-dir DIR (--chat FILE | --text TEXT [--add-special-tokens] | --corpus FILE) [--template FILE] [--json]\n"
    "                                          a model's chat template and tokenizer: the rendered\n"
    "                                          prompt and its token ids (a chat file: messages, or\n"
    "                                          an object with messages, tools, ...)\n"
    "  kiln help\n";

int usage_error(const std::string& msg) {
  std::cerr << "kiln: " << msg << "\n" << kUsage;
  return 2;
}

struct args {
  std::string config_file;
  int port = -1;
  std::string store;
  std::string capture;
};

bool parse_flags(const std::vector<std::string>& v, std::size_t from, args& a, std::string& err) {
  for (std::size_t i = from; i < v.size(); ++i) {
    const std::string& f = v[i];
    if ((f == "--config" || f == "--port" || f == "--store" || f == "--capture") && (i + 1 >= v.size() || v[i + 1].empty())) {
      err = f + " needs a value";  // an empty one would quietly mean the default
      return false;
    }
    if (f == "--config") {
      a.config_file = v[++i];
    } else if (f == "--store") {
      a.store = v[++i];
    } else if (f == "--capture") {
      a.capture = v[++i];
    } else if (f == "--port") {
      const std::string& p = v[++i];
      char* end = nullptr;
      const long n = std::strtol(p.c_str(), &end, 10);
      if (p.empty() || *end != '\0' || n < 0 || n > 65535) {
        err = "--port must be a number from 0 to 65535, got '" + p + "'";
        return false;
      }
      a.port = static_cast<int>(n);
    } else {
      err = "unknown option '" + f + "'";
      return false;
    }
  }
  return true;
}

std::variant<kiln::config::kiln_config, kiln::config::config_error> load(const args& a) {
  if (a.config_file.empty()) return kiln::config::parse_config(kiln::config::embedded_default_config(), "<embedded default>");
  return kiln::config::load_config_file(a.config_file);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> v(argv + 1, argv + argc);
  if (v.empty() || v[0] == "help" || v[0] == "--help" || v[0] == "-h") {
    std::cout << kUsage;
    return v.empty() ? 2 : 0;
  }
  // `kiln COMMAND --help`: the usage, not an unknown option (ops lists its own commands).
  if (v.size() >= 2 && (v[1] == "--help" || v[1] == "-h")) {
    if (v[0] == "ops") return kiln::cluster::run_ops({"help"}, std::cout, std::cerr);
    std::cout << kUsage;
    return 0;
  }
  args a;
  std::string err;
  if (v[0] == "serve") {
    if (!parse_flags(v, 1, a, err)) return usage_error(err);
    auto cfg = load(a);
    if (auto* e = std::get_if<kiln::config::config_error>(&cfg)) {
      std::cerr << "kiln: " << e->message << "\n";
      return 1;
    }
    return kiln::cluster::serve(std::get<kiln::config::kiln_config>(cfg), {a.port, a.store, a.capture}, std::cout);
  }
  if (v[0] == "chaos") {
    const int rc = kiln::cluster::run_chaos({v.begin() + 1, v.end()}, std::cout, std::cerr);
    if (rc == 2) std::cerr << kUsage;
    return rc;
  }
  if (v[0] == "tokenize") {
    const int rc = kiln::cluster::run_tokenize({v.begin() + 1, v.end()}, std::cout, std::cerr);
    if (rc == 2) std::cerr << kUsage;
    return rc;
  }
  if (v[0] == "ops") return kiln::cluster::run_ops({v.begin() + 1, v.end()}, std::cout, std::cerr);
  if (v[0] == "sim") {
    const int rc = kiln::sim::run_sim({v.begin() + 1, v.end()}, std::cout, std::cerr);
    if (rc == 2) std::cerr << kUsage;
    return rc;
  }
  if (v[0] == "plan") {
    std::vector<const char*> rest;
    for (std::size_t i = 1; i < v.size(); ++i) rest.push_back(v[i].c_str());
    std::string out;
    const int rc = kiln::sim::run_plan(static_cast<int>(rest.size()), rest.data(), out, err);
    if (rc == 2) return usage_error(err);
    if (rc != 0) std::cerr << "kiln: " << err << "\n";
    std::cout << out;
    return rc;
  }
  if (v[0] == "make-tiny-model") {
    if (v.size() < 2 || v[1].empty() || v[1].rfind("--", 0) == 0) return usage_error("make-tiny-model needs a directory");
    std::string size = "tiny", arch = "llama", tokenizer_dir;
    for (std::size_t i = 2; i < v.size(); ++i) {
      if (v[i] == "--size" && i + 1 < v.size()) size = v[++i];
      else if (v[i] == "--arch" && i + 1 < v.size()) arch = v[++i];
      else if (v[i] == "--tokenizer-from" && i + 1 < v.size()) tokenizer_dir = v[++i];
      else return usage_error("unknown option '" + v[i] + "'");
    }
    if (!kiln::engine::tiny_model_size_known(size)) return usage_error("--size must be tiny, small or 100m");
    if (!kiln::engine::tiny_model_architecture_known(arch)) return usage_error("--arch must be llama, qwen2 or qwen3");
    if (auto e = kiln::engine::make_tiny_model(v[1], size, arch, tokenizer_dir); !e.empty()) {
      std::cerr << "kiln: " << e << "\n";
      return 1;
    }
    std::cout << "wrote " << size << " model to " << v[1] << "\n";
    return 0;
  }
  if (v[0] == "config" && v.size() >= 2 && v[1] == "show") {
    if (!parse_flags(v, 2, a, err)) return usage_error(err);
    auto cfg = load(a);
    if (auto* e = std::get_if<kiln::config::config_error>(&cfg)) {
      std::cerr << "kiln: " << e->message << "\n";
      return 1;
    }
    std::cout << std::get<kiln::config::kiln_config>(cfg).source;
    return 0;
  }
  return usage_error("unknown command '" + v[0] + "'");
}
