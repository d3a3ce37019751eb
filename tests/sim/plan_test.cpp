// kiln plan against the figures seed 001 and seed 000 derive from their assumptions.
#include <doctest/doctest.h>

#include <cctype>

#include "sim/plan.hpp"

using namespace kiln::sim;

namespace {

/// Within 1% of the seed's figure.
void near(double got, double seed) {
  CAPTURE(got);
  CAPTURE(seed);
  CHECK(std::abs(got - seed) <= 0.01 * std::abs(seed));
}

}  // namespace

TEST_CASE("plan: seed 001's memory and decode figures") {
  const plan_figures f = derive(plan_assumptions{});
  CHECK(f.kv_bytes_per_token == 327680);
  near(f.weight_bytes, 140e9);
  near(f.kv_pool_bytes, 1165.6e9);
  near(f.kv_pool_tokens, 3557129);
  near(f.max_sequences, 1737);
  near(f.step.memory * 1e3, 9.06);
  near(f.step.compute * 1e3, 6.46);
  near(f.step.allreduce * 1e3, 4.22);
  near(f.step.roofline * 1e3, 14.77);
  near(f.step.tpot * 1e3, 24.62);
  CHECK(f.step.memory_bound());
  near(f.node_decode_tokens_per_s, 7797);
  near(f.knee, 209);
  near(f.knee_8k, 52);
  CHECK(f.batch_at_slo == 277);
  near(f.kv_tokens_at_slo, 567296);
}

TEST_CASE("plan: seed 001's prefill, fleet and cost") {
  const plan_figures f = derive(plan_assumptions{});
  near(f.prefill_2k.linear_flops / 1e12, 286.7);
  near(f.prefill_2k.attention_flops / 1e12, 11.0);
  near(f.prefill_2k.end_to_end_s * 1e3, 119);
  near(f.prefill_32k.linear_flops / 1e12, 4587.5);
  near(f.prefill_32k.attention_flops / 1e12, 2814.7);
  near(f.prefill_32k.attention_share(), 0.38);
  // The seed's 32k row is at the A5 MFU alone (its 2k row also divides by A6).
  near(f.prefill_32k.at_mfu_s * 1e3, 1779);
  near(f.node_prefill_tokens_per_s, 17170);
  near(f.prefill_after_cache, 180000);
  near(f.decode_nodes, 9.6);
  near(f.prefill_nodes, 10.5);
  near(f.capacity_nodes, 20.1);
  CHECK(f.fleet_nodes == 26);
  near(f.usd_per_month, 449280);
  near(f.output_tokens_per_hour, 121.5e6);
  near(f.input_tokens_per_hour, 729e6);
  near(f.usd_per_million_output, 2.45);
  near(f.usd_per_million_input, 0.45);
}

TEST_CASE("plan: fp8 weights and KV move decode onto the compute roof") {
  plan_assumptions a;
  a.weight_dtype = "fp8";
  a.kv_dtype = "fp8";
  const plan_figures f = derive(a);
  near(f.weight_bytes, 70e9);
  CHECK(f.kv_bytes_per_token == 163840);
  near(f.kv_pool_tokens, 7541504);
  near(f.step.memory * 1e3, 4.53);
  near(f.step.roofline * 1e3, 12.18);
  CHECK_FALSE(f.step.memory_bound());
  near(f.node_decode_tokens_per_s, 9460);
}

TEST_CASE("plan: TP=4 with two replicas against TP=8 at the 30 ms SLO") {
  const plan_figures f = derive(plan_assumptions{});
  CHECK(f.tp_half.tp == 4);
  CHECK(f.tp_half.replicas_per_node == 2);
  near(f.tp_half.weights_on_node, 280e9);
  near(f.tp_half.kv_pool_bytes, 1025.6e9);
  CHECK(f.tp_half.batch_at_slo >= 95);
  CHECK(f.tp_half.batch_at_slo <= 105);  // the seed's "~100 per replica"
  CHECK(f.tp_half.node_tokens_per_s_at_slo == doctest::Approx(6600).epsilon(0.02));
  CHECK(f.tp_full.batch_at_slo == 277);
  CHECK(f.tp_full.node_tokens_per_s_at_slo > f.tp_half.node_tokens_per_s_at_slo);
  // A looser SLO lets both run larger batches; TP=4 gains more of it (twice the replicas).
  plan_assumptions relaxed;
  relaxed.tpot_slo_s = 0.040;
  const plan_figures r = derive(relaxed);
  CHECK(r.tp_half.node_tokens_per_s_at_slo / f.tp_half.node_tokens_per_s_at_slo >
        r.tp_full.node_tokens_per_s_at_slo / f.tp_full.node_tokens_per_s_at_slo);
}

TEST_CASE("plan: the batch at the SLO is the largest that meets it") {
  const plan_assumptions a;
  const int b = batch_at_slo(a, 8);
  CHECK(decode_at(a, b, a.context_tokens, 8).tpot <= a.tpot_slo_s);
  CHECK(decode_at(a, b + 1, a.context_tokens, 8).tpot > a.tpot_slo_s);
  plan_assumptions tight;
  tight.tpot_slo_s = 0.001;  // below the fixed step alone: no batch meets it
  CHECK(batch_at_slo(tight, 8) == 0);
}

TEST_CASE("plan: seed 000's fleet") {
  const fleet_figures g = derive_fleet(fleet_assumptions{});
  CHECK(g.kv_bytes_per_token == 131072);
  CHECK(g.requests_per_s == doctest::Approx(100));
  CHECK(g.chat_replicas == 12);
  CHECK(g.chat_replicas_at_one_gpu_rate == 38);
  near(g.kv_bytes_of_streams, 16.3e9);
  CHECK(g.prompt_tokens_per_s == doctest::Approx(120000));
  CHECK(g.prefill_after_cache == doctest::Approx(56000));
  CHECK(g.reason_replicas == 3);
  CHECK(g.gpus == 36);
  CHECK(g.usd_per_month == doctest::Approx(64800));
  near(g.usd_per_million_full, 0.28);
  near(g.usd_per_million_half, 0.56);
  near(g.cold_start_growth, 1.34);
  near(g.load_at_arrival, 0.94);
}

TEST_CASE("plan: the assumptions file, its errors, and the flags") {
  auto same = parse_plan_assumptions("[model]\nparams = 70e9\n[node]\nhbm_gb_per_gpu = 192\n", "a.toml");
  REQUIRE(std::holds_alternative<plan_input>(same));
  CHECK(derive(std::get<plan_input>(same).sizing).batch_at_slo == 277);

  auto small = parse_plan_assumptions("[fleet]\nreplica_tokens_per_s = 800\n[traffic]\nprefix_hit_rate = 0.8\n", "b.toml");
  REQUIRE(std::holds_alternative<plan_input>(small));
  CHECK(derive_fleet(std::get<plan_input>(small).fleet).chat_replicas == 38);
  near(derive(std::get<plan_input>(small).sizing).prefill_after_cache, 90000);  // the seed's lever 1

  for (const char* bad : {"[model]\nparms = 1\n", "[wat]\nx = 1\n", "[model]\nweight_dtype = \"fp7\"\n",
                          "[model]\nlayers = \"many\"\n", "[efficiency]\nbandwidth = 1.5\n", "[fabric]\ntensor_parallel = 16\n",
                          "[model\n"}) {
    CAPTURE(bad);
    auto r = parse_plan_assumptions(bad, "bad.toml");
    REQUIRE(std::holds_alternative<std::string>(r));
    CHECK(std::get<std::string>(r).find("bad.toml") == 0);
  }

  std::string out, err;
  const char* fp8[] = {"--weight-dtype", "fp8", "--kv-dtype", "fp8"};
  REQUIRE(run_plan(4, fp8, out, err) == 0);
  CHECK(out.find("9,46") != std::string::npos);  // 9,46x tokens/s
  CHECK(out.find("compute-bound") != std::string::npos);
  const char* tp4[] = {"--tp", "4"};
  REQUIRE(run_plan(2, tp4, out, err) == 0);
  CHECK(out.find("TP=4") != std::string::npos);
  for (const char* n : {"0", "1025", "-2", "4x"}) {  // 1024 is the most it takes
    const char* badtp[] = {"--tp", n};
    CHECK(run_plan(2, badtp, out, err) == 2);
    CHECK(err == std::string("--tp must be a whole number from 1 to 1024, got '") + n + "'");
  }
  const char* most[] = {"--tp", "1024"};
  CHECK(run_plan(2, most, out, err) == 1);  // read, then refused by the shape: not a flag error
  const char* toobig[] = {"--tp", "16"};
  CHECK(run_plan(2, toobig, out, err) == 1);
  CHECK(err.find("tensor_parallel") != std::string::npos);
  // Heads split evenly: 64 attention and 8 KV heads over 2, 4, 8 GPUs; not over 3 or 6.
  for (const char* n : {"1", "2", "8"}) {
    const char* ok[] = {"--tp", n};
    CHECK(run_plan(2, ok, out, err) == 0);
  }
  for (const char* n : {"3", "6"}) {
    const char* uneven[] = {"--tp", n};
    CHECK(run_plan(2, uneven, out, err) == 1);
    CHECK(err.find("does not split 64 attention heads and 8 KV heads") != std::string::npos);
  }
  for (const char* flag : {"--assumptions", "--weight-dtype", "--kv-dtype", "--tp"}) {
    const char* empty[] = {flag, ""};
    CHECK(run_plan(2, empty, out, err) == 2);
    CHECK(err == std::string(flag) + " needs a value");
  }
  const char* missing[] = {"--assumptions", "/nonexistent/plan.toml"};
  CHECK(run_plan(2, missing, out, err) == 1);
}

TEST_CASE("plan: every number of the assumptions file has a range, each bound taken and one past it refused") {
  auto read = [](const std::string& text) { return parse_plan_assumptions(text, "r.toml"); };
  auto refused = [&](const std::string& text, const std::string& says) {
    CAPTURE(text);
    auto r = read(text);
    REQUIRE(std::holds_alternative<std::string>(r));
    CHECK(std::get<std::string>(r) == "r.toml: " + says);
  };
  // Each bound is taken; a step past it is refused, naming the key, the range and the value.
  struct bound {
    const char* table;
    const char* key;
    const char* lo;
    const char* below;
    const char* hi;
    const char* above;
    const char* range;
  };
  for (const bound& b : {bound{"model", "layers", "1", "0", "10000", "10001", "a whole number from 1 to 10000"},
                         bound{"traffic", "prefix_hit_rate", "0", "-0.001", "0.999", "1", "a number from 0 to 0.999"},
                         bound{"slo", "hours_per_month", "1", "0", "744", "745", "a whole number from 1 to 744"},
                         bound{"fleet", "regions", "1", "0", "1000", "1001", "a whole number from 1 to 1000"},
                         bound{"fleet", "cold_start_minutes", "0", "-1", "240", "241", "a number from 0 to 240"},
                         bound{"efficiency", "bandwidth", "0.001", "0.0009", "1", "1.01", "a number from 0.001 to 1"}}) {
    const std::string head = std::string("[") + b.table + "]\n" + b.key + " = ";
    CHECK(std::holds_alternative<plan_input>(read(head + b.lo + "\n")));
    CHECK(std::holds_alternative<plan_input>(read(head + b.hi + "\n")));
    refused(head + b.below + "\n", std::string(b.table) + "." + b.key + " must be " + b.range + " (got " + b.below + ")");
    refused(head + b.above + "\n", std::string(b.table) + "." + b.key + " must be " + b.range + " (got " + b.above + ")");
  }
  // A count is whole; a value too large for any count (once an int's overflow) is refused.
  refused("[node]\ngpus = 2.5\n", "node.gpus must be a whole number from 1 to 1024 (got 2.5)");
  refused("[model]\nd_model = 1e30\n", "model.d_model must be a whole number from 1 to 1048576 (got 1e+30)");
  refused("[model]\nheads = true\n", "model.heads must be a whole number from 1 to 65536");
  refused("[traffic]\ninput_tokens = nan\n", "traffic.input_tokens must be a number from 1 to 10000000 (got nan)");
  // What the figures need of each other.
  refused("[node]\nhbm_gb_per_gpu = 10\n",
          "the weights (140.0 GB on the node) and the runtime reserve (12.0 GB) leave none of the node's 80.0 GB of HBM "
          "for the KV cache");
  refused("[fleet]\nchat_weight_gb = 80\n", "fleet.chat_weight_gb (80.0 GB) leaves none of fleet.gpu_memory_gb (80.0 GB) for the KV cache");
  CHECK(std::holds_alternative<plan_input>(read("[fleet]\ncached_prefix_tokens = 1200\n")));
  refused("[fleet]\ncached_prefix_tokens = 1201\n", "fleet.cached_prefix_tokens (1,201) must not exceed fleet.prompt_tokens (1,200)");
  // A large fleet is sized; one past a billion replicas is refused (it overflowed an int once).
  const std::string streams = "[fleet]\nconcurrent_streams = 1000000\nstream_tokens_per_s = 1000\nreplica_tokens_per_s = ";
  auto fits = read(streams + "1000\n");
  REQUIRE(std::holds_alternative<plan_input>(fits));
  CHECK(derive_fleet(std::get<plan_input>(fits).fleet).chat_replicas == 1'000'000);
  refused(streams + "0.001\n", "these assumptions need more than 1,000,000,000 nodes, replicas or GPUs; kiln plan sizes fewer");
  // A node that holds TP=8's one copy of the weights but not TP=4's two says so in the comparison.
  auto tight = read("[node]\nhbm_gb_per_gpu = 30\n");
  REQUIRE(std::holds_alternative<plan_input>(tight));
  const std::string tight_text = render_plan(std::get<plan_input>(tight));
  CHECK(tight_text.find("TP=4, 2 replicas      280.0 GB  none: the weights leave no HBM for the KV cache") != std::string::npos);
  CHECK(tight_text.find("TP=8, 1 replica       140.0 GB      64.0 GB") != std::string::npos);
  // A large fleet that fits prints without a negative or overflowed figure.
  auto big = read("[traffic]\npeak_requests_per_s = 1e7\n");
  REQUIRE(std::holds_alternative<plan_input>(big));
  const std::string text = render_plan(std::get<plan_input>(big));
  CHECK(text.find("837583 nodes (6,700,664 GPUs)") != std::string::npos);
  for (std::size_t at = text.find('-'); at != std::string::npos; at = text.find('-', at + 1)) {
    CAPTURE(text.substr(at > 20 ? at - 20 : 0, 40));
    const bool figure = at + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[at + 1])) &&
                        (at == 0 || !std::isalpha(static_cast<unsigned char>(text[at - 1])));  // not "chat-7b"
    CHECK_FALSE(figure);  // no negative figure
  }
}
