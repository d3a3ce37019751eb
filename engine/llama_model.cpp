#include "engine/llama_model.hpp"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/safetensors.hpp"

namespace kiln::engine {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

bool read_text(const fs::path& p, std::string& out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return true;
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

namespace {

std::vector<int> eos_ids_in(const json& j) {
  std::vector<int> out;
  if (!j.is_object() || !j.contains("eos_token_id")) return out;
  const json& e = j["eos_token_id"];
  if (e.is_number_integer()) out.push_back(e.get<int>());
  if (e.is_array())
    for (const auto& x : e)
      if (x.is_number_integer()) out.push_back(x.get<int>());
  return out;
}

}  // namespace

std::optional<std::vector<int>> parse_eos_ids(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return eos_ids_in(j);
}

std::variant<llama_config, std::string> parse_llama_config(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::string("config.json is not a JSON object");
  llama_config c;
  if (!j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty() ||
      !j["architectures"][0].is_string())
    return std::string("config.json: 'architectures' is missing");
  c.architecture = j["architectures"][0].get<std::string>();
  static const std::set<std::string> known = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                              "Qwen3ForCausalLM"};
  if (!known.count(c.architecture))
    return "config.json: architecture '" + c.architecture +
           "' is not one kiln runs (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM are)";
  auto int_field = [&](const char* key, int& out, bool required) -> std::string {
    if (!j.contains(key) || j[key].is_null()) return required ? std::string("config.json: '") + key + "' is missing" : "";
    if (!j[key].is_number_integer() || j[key].get<std::int64_t>() <= 0 || j[key].get<std::int64_t>() > (1 << 30))
      return std::string("config.json: '") + key + "' must be a positive integer";
    out = j[key].get<int>();
    return "";
  };
  for (auto [key, field] : {std::pair{"hidden_size", &c.hidden}, {"intermediate_size", &c.intermediate},
                            {"num_hidden_layers", &c.layers}, {"num_attention_heads", &c.heads},
                            {"vocab_size", &c.vocab}})
    if (auto e = int_field(key, *field, true); !e.empty()) return e;
  c.kv_heads = c.heads;
  if (auto e = int_field("num_key_value_heads", c.kv_heads, false); !e.empty()) return e;
  c.head_dim = c.hidden / c.heads;
  if (auto e = int_field("head_dim", c.head_dim, false); !e.empty()) return e;
  if (auto e = int_field("max_position_embeddings", c.max_position, false); !e.empty()) return e;
  if (c.heads % c.kv_heads != 0) return std::string("config.json: num_attention_heads must be a multiple of num_key_value_heads");
  if (j.contains("rms_norm_eps") && j["rms_norm_eps"].is_number()) c.rms_eps = j["rms_norm_eps"].get<double>();
  if (j.contains("rope_theta") && j["rope_theta"].is_number()) c.rope_theta = j["rope_theta"].get<double>();
  if (j.contains("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean())
    c.tie_embeddings = j["tie_word_embeddings"].get<bool>();
  c.qkv_bias = c.architecture == "Qwen2ForCausalLM";
  if (j.contains("attention_bias") && j["attention_bias"].is_boolean()) c.qkv_bias = j["attention_bias"].get<bool>();
  c.qk_norm = c.architecture == "Qwen3ForCausalLM";
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const json& rs = j["rope_scaling"];
    const std::string type = rs.value("rope_type", rs.value("type", std::string()));
    if (type == "llama3") {
      c.scaling.llama3 = true;
      c.scaling.factor = rs.value("factor", 8.0);
      c.scaling.low_freq_factor = rs.value("low_freq_factor", 1.0);
      c.scaling.high_freq_factor = rs.value("high_freq_factor", 4.0);
      c.scaling.original_max_position = rs.value("original_max_position_embeddings", 8192);
    } else if (!type.empty() && type != "default") {
      return "config.json: rope_scaling type '" + type + "' is not supported (llama3 is)";
    }
  }
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_id = j["bos_token_id"].get<int>();
  c.eos_ids = eos_ids_in(j);
  return c;
}

std::size_t llama_weights::bytes() const {
  std::size_t n = final_norm.size() + lm_head.size() + (lm_head.empty() ? embed.size() : 0);
  for (const auto& l : layers)
    for (const auto* v : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv, &l.wo, &l.q_norm, &l.k_norm, &l.mlp_norm,
                          &l.w_gate, &l.w_up, &l.w_down})
      n += v->size();
  return n * sizeof(float);
}

std::variant<std::shared_ptr<const llama_weights>, std::string> load_llama(const std::string& dir_name,
                                                                           const weight_sink& sink) {
  const fs::path dir(dir_name);
  std::string text;
  if (!fs::is_directory(dir)) return dir_name + ": not a model directory";
  if (!read_text(dir / "config.json", text)) return dir_name + ": config.json is missing";
  auto parsed = parse_llama_config(text);
  if (auto* e = std::get_if<std::string>(&parsed)) return dir_name + ": " + *e;
  auto w = std::make_shared<llama_weights>();
  w->cfg = std::get<llama_config>(parsed);
  const llama_config& c = w->cfg;

  // The files holding the tensors: one, or the shards an index names.
  std::vector<std::shared_ptr<safetensors_file>> files;
  std::vector<std::string> names;
  if (fs::exists(dir / "model.safetensors")) {
    names.push_back("model.safetensors");
  } else if (read_text(dir / "model.safetensors.index.json", text)) {
    const json index = json::parse(text, nullptr, false);
    if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object())
      return dir_name + ": model.safetensors.index.json has no weight_map";
    std::set<std::string> shards;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
        return dir_name + ": model.safetensors.index.json names a bad shard for " + tensor;
      shards.insert(file.get<std::string>());
    }
    names.assign(shards.begin(), shards.end());
  } else {
    return dir_name + ": neither model.safetensors nor model.safetensors.index.json is present";
  }
  for (const auto& n : names) {
    auto f = safetensors_file::open((dir / n).string());
    if (auto* e = std::get_if<std::string>(&f)) return *e;
    files.push_back(std::get<std::shared_ptr<safetensors_file>>(f));
  }

  std::string error;
  auto take = [&](const std::string& name, std::vector<std::int64_t> shape, std::vector<float>& out, bool required = true) {
    if (!error.empty()) return;
    for (const auto& f : files) {
      if (const tensor_view* v = f->find(name)) {
        if (v->shape != shape) {
          error = dir_name + ": tensor " + name + " has shape " + shape_str(v->shape) + ", expected " + shape_str(shape);
          return;
        }
        out = to_f32(*v);
        if (name == "model.embed_tokens.weight")
          w->stored_dtype = v->type == dtype::bf16 ? "bf16" : v->type == dtype::f16 ? "f16" : "f32";
        if (sink && shape.size() == 2)
          sink(*w, out, static_cast<std::size_t>(shape[0]), static_cast<std::size_t>(shape[1]));
        return;
      }
    }
    if (required) error = dir_name + ": tensor " + name + " is missing";
  };
  const std::int64_t D = c.hidden, F = c.intermediate, V = c.vocab, hd = c.head_dim;
  const std::int64_t q = c.heads * hd, kv = c.kv_heads * hd;
  take("model.embed_tokens.weight", {V, D}, w->embed);
  take("model.norm.weight", {D}, w->final_norm);
  take("lm_head.weight", {V, D}, w->lm_head, !c.tie_embeddings);
  w->layers.resize(static_cast<std::size_t>(c.layers));
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto& l = w->layers[static_cast<std::size_t>(i)];
    take(p + "input_layernorm.weight", {D}, l.attn_norm);
    take(p + "self_attn.q_proj.weight", {q, D}, l.wq);
    take(p + "self_attn.k_proj.weight", {kv, D}, l.wk);
    take(p + "self_attn.v_proj.weight", {kv, D}, l.wv);
    take(p + "self_attn.o_proj.weight", {D, q}, l.wo);
    if (c.qkv_bias) {
      take(p + "self_attn.q_proj.bias", {q}, l.bq);
      take(p + "self_attn.k_proj.bias", {kv}, l.bk);
      take(p + "self_attn.v_proj.bias", {kv}, l.bv);
    }
    if (c.qk_norm) {
      take(p + "self_attn.q_norm.weight", {hd}, l.q_norm);
      take(p + "self_attn.k_norm.weight", {hd}, l.k_norm);
    }
    take(p + "post_attention_layernorm.weight", {D}, l.mlp_norm);
    take(p + "mlp.gate_proj.weight", {F, D}, l.w_gate);
    take(p + "mlp.up_proj.weight", {F, D}, l.w_up);
    take(p + "mlp.down_proj.weight", {D, F}, l.w_down);
  }
  if (!error.empty()) return error;
  return std::shared_ptr<const llama_weights>(std::move(w));
}

}  // namespace kiln::engine
