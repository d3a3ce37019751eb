#include "engine/tiny_model.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

namespace kiln::engine {

namespace {

std::vector<float> normal(std::mt19937_64& rng, std::size_t n, double scale, double mean = 0) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(mean + scale * d(rng));
  return v;
}

}  // namespace

llama_weights random_llama(const llama_config& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  llama_weights w;
  w.cfg = c;
  const auto D = static_cast<std::size_t>(c.hidden), F = static_cast<std::size_t>(c.intermediate);
  const auto q = static_cast<std::size_t>(c.heads * c.head_dim), kv = static_cast<std::size_t>(c.kv_heads * c.head_dim);
  const auto V = static_cast<std::size_t>(c.vocab);
  const double in_d = 1.0 / std::sqrt(static_cast<double>(D));
  w.embed = normal(rng, V * D, 1.0);
  w.final_norm = normal(rng, D, 0.05, 1.0);
  if (!c.tie_embeddings) w.lm_head = normal(rng, V * D, in_d);
  for (int l = 0; l < c.layers; ++l) {
    layer_weights L;
    L.attn_norm = normal(rng, D, 0.05, 1.0);
    L.wq = normal(rng, q * D, in_d);
    L.wk = normal(rng, kv * D, in_d);
    L.wv = normal(rng, kv * D, in_d);
    if (c.qkv_bias) {
      L.bq = normal(rng, q, 0.1);
      L.bk = normal(rng, kv, 0.1);
      L.bv = normal(rng, kv, 0.1);
    }
    if (c.qk_norm) {
      L.q_norm = normal(rng, static_cast<std::size_t>(c.head_dim), 0.05, 1.0);
      L.k_norm = normal(rng, static_cast<std::size_t>(c.head_dim), 0.05, 1.0);
    }
    L.wo = normal(rng, D * q, 1.0 / std::sqrt(static_cast<double>(q)));
    L.mlp_norm = normal(rng, D, 0.05, 1.0);
    L.w_gate = normal(rng, F * D, in_d);
    L.w_up = normal(rng, F * D, in_d);
    L.w_down = normal(rng, D * F, 1.0 / std::sqrt(static_cast<double>(F)));
    w.layers.push_back(std::move(L));
  }
  return w;
}

std::string save_llama(const std::string& dir_name, const llama_weights& w, dtype type, int shards) {
  namespace fs = std::filesystem;
  const fs::path dir(dir_name);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return dir_name + ": " + ec.message();
  const llama_config& c = w.cfg;
  nlohmann::json cfg = {
      {"architectures", {c.architecture}}, {"model_type", c.architecture == "Qwen2ForCausalLM"     ? "qwen2"
                     : c.architecture == "Qwen3ForCausalLM"   ? "qwen3"
                     : c.architecture == "MistralForCausalLM" ? "mistral"
                                                              : "llama"},
      {"hidden_size", c.hidden}, {"intermediate_size", c.intermediate}, {"num_hidden_layers", c.layers},
      {"num_attention_heads", c.heads}, {"num_key_value_heads", c.kv_heads}, {"head_dim", c.head_dim},
      {"vocab_size", c.vocab}, {"rms_norm_eps", c.rms_eps}, {"rope_theta", c.rope_theta},
      {"max_position_embeddings", c.max_position}, {"tie_word_embeddings", c.tie_embeddings},
      {"torch_dtype", type == dtype::f32 ? "float32" : type == dtype::f16 ? "float16" : "bfloat16"},
      {"attention_bias", c.qkv_bias}};
  if (c.bos_id >= 0) cfg["bos_token_id"] = c.bos_id;
  if (!c.eos_ids.empty()) cfg["eos_token_id"] = c.eos_ids.size() == 1 ? nlohmann::json(c.eos_ids[0]) : nlohmann::json(c.eos_ids);
  if (c.scaling.llama3)
    cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", c.scaling.factor}, {"low_freq_factor", c.scaling.low_freq_factor},
                           {"high_freq_factor", c.scaling.high_freq_factor},
                           {"original_max_position_embeddings", c.scaling.original_max_position}};
  std::ofstream(dir / "config.json") << cfg.dump(2) << "\n";

  std::vector<tensor_out> all;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape, const std::vector<float>& v) {
    if (!v.empty()) all.push_back({name, std::move(shape), v, type});
  };
  const std::int64_t D = c.hidden, F = c.intermediate, V = c.vocab;
  const std::int64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  add("model.embed_tokens.weight", {V, D}, w.embed);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const layer_weights& L = w.layers[static_cast<std::size_t>(l)];
    add(p + "input_layernorm.weight", {D}, L.attn_norm);
    add(p + "self_attn.q_proj.weight", {q, D}, L.wq);
    add(p + "self_attn.k_proj.weight", {kv, D}, L.wk);
    add(p + "self_attn.v_proj.weight", {kv, D}, L.wv);
    add(p + "self_attn.q_proj.bias", {q}, L.bq);
    add(p + "self_attn.k_proj.bias", {kv}, L.bk);
    add(p + "self_attn.v_proj.bias", {kv}, L.bv);
    add(p + "self_attn.o_proj.weight", {D, q}, L.wo);
    add(p + "self_attn.q_norm.weight", {c.head_dim}, L.q_norm);
    add(p + "self_attn.k_norm.weight", {c.head_dim}, L.k_norm);
    add(p + "post_attention_layernorm.weight", {D}, L.mlp_norm);
    add(p + "mlp.gate_proj.weight", {F, D}, L.w_gate);
    add(p + "mlp.up_proj.weight", {F, D}, L.w_up);
    add(p + "mlp.down_proj.weight", {D, F}, L.w_down);
  }
  add("model.norm.weight", {D}, w.final_norm);
  add("lm_head.weight", {V, D}, w.lm_head);
  if (shards <= 1) return write_safetensors((dir / "model.safetensors").string(), all);
  nlohmann::json map = nlohmann::json::object();
  const std::size_t per = (all.size() + static_cast<std::size_t>(shards) - 1) / static_cast<std::size_t>(shards);
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<tensor_out> part;
    for (std::size_t i = static_cast<std::size_t>(s) * per; i < std::min(all.size(), (static_cast<std::size_t>(s) + 1) * per); ++i) {
      part.push_back(all[i]);
      map[all[i].name] = name;
    }
    if (auto e = write_safetensors((dir / name).string(), part); !e.empty()) return e;
  }
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump(2);
  return {};
}

}  // namespace kiln::engine
