// Loading Hugging Face model directories: dtypes, shards, and one clear line for each way a
// directory can be wrong.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/model_dir.hpp"
#include "engine/tiny_model.hpp"

using namespace kiln::engine;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    char tmpl[] = "/tmp/kiln-model-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() { fs::remove_all(path); }
  std::string str(const char* sub = "") const { return (path / sub).string(); }
};

llama_config tiny() {
  llama_config c;
  c.architecture = "Qwen2ForCausalLM";
  c.qkv_bias = true;
  c.hidden = 16;
  c.intermediate = 24;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 4;
  c.vocab = 50;
  c.eos_ids = {3, 4};
  c.bos_id = 1;
  return c;
}

std::string load_error(const std::string& dir) {
  auto r = load_llama(dir);
  auto* e = std::get_if<std::string>(&r);
  return e ? *e : std::string();
}

void rewrite(const std::string& path, const std::string& from, const std::string& to) {
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  s.replace(s.find(from), from.size(), to);
  std::ofstream(path) << s;
}

}  // namespace

TEST_CASE("half and bfloat16 conversions round to nearest and come back") {
  for (float f : {0.f, 1.f, -2.5f, 65504.f, 1e-7f, 3.14159f}) {
    CHECK(half_to_float(float_to_half(f)) == doctest::Approx(f).epsilon(1e-3));
    CHECK(bf16_to_float(float_to_bf16(f)) == doctest::Approx(f).epsilon(1e-2));
  }
  CHECK(std::isinf(half_to_float(float_to_half(1e6f))));
  CHECK(half_to_float(0x3c00) == 1.f);
  CHECK(bf16_to_float(0x3f80) == 1.f);
}

TEST_CASE("a saved model loads back: F32 exactly, F16/BF16 within rounding, shards too") {
  const llama_weights w = random_llama(tiny(), 5);
  for (auto [type, shards, tol] : {std::tuple{dtype::f32, 1, 0.0}, {dtype::f16, 1, 2e-3}, {dtype::bf16, 3, 2e-2}}) {
    temp_dir d;
    REQUIRE(save_llama(d.str(), w, type, shards).empty());
    if (shards > 1) CHECK(fs::exists(d.path / "model.safetensors.index.json"));
    auto r = load_llama(d.str());
    REQUIRE(std::holds_alternative<std::shared_ptr<const llama_weights>>(r));
    const auto& got = *std::get<std::shared_ptr<const llama_weights>>(r);
    CHECK(got.cfg.architecture == "Qwen2ForCausalLM");
    CHECK(got.cfg.qkv_bias);
    CHECK(got.cfg.kv_heads == 2);
    CHECK(got.cfg.eos_ids == std::vector<int>{3, 4});
    REQUIRE(got.layers.size() == 2);
    REQUIRE(got.layers[1].bk.size() == w.layers[1].bk.size());
    double worst = 0;
    for (std::size_t i = 0; i < w.layers[1].w_down.size(); ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(got.layers[1].w_down[i] - w.layers[1].w_down[i])) /
                                  std::max(1e-3, std::fabs(static_cast<double>(w.layers[1].w_down[i]))));
    CHECK(worst <= tol);
  }
}

TEST_CASE("a Qwen3 model (per-head q/k norms, no qkv bias) saves and loads back; an unknown architecture is named") {
  llama_config c = tiny();
  c.architecture = "Qwen3ForCausalLM";
  c.qkv_bias = false;
  c.qk_norm = true;
  const llama_weights w = random_llama(c, 6);
  REQUIRE(w.layers[0].q_norm.size() == 4);
  temp_dir d;
  REQUIRE(save_llama(d.str(), w, dtype::f32, 1).empty());
  auto r = load_llama(d.str());
  REQUIRE(std::holds_alternative<std::shared_ptr<const llama_weights>>(r));
  const auto& got = *std::get<std::shared_ptr<const llama_weights>>(r);
  CHECK(got.cfg.qk_norm);
  CHECK_FALSE(got.cfg.qkv_bias);
  CHECK(got.layers[1].bq.empty());
  CHECK(got.layers[1].k_norm == w.layers[1].k_norm);
  CHECK(got.bytes() == w.bytes());
  // A Qwen3 directory without its norms is refused, naming the tensor.
  fs::remove(d.path / "model.safetensors");
  llama_weights without = w;
  for (auto& l : without.layers) l.q_norm.clear();
  REQUIRE(save_llama(d.str(), without, dtype::f32, 1).empty());
  CHECK(load_error(d.str()).find("self_attn.q_norm.weight is missing") != std::string::npos);
  CHECK(std::get<std::string>(parse_llama_config(R"({"architectures":["GemmaForCausalLM"]})")) ==
        "config.json: architecture 'GemmaForCausalLM' is not one kiln runs (LlamaForCausalLM, MistralForCausalLM, "
        "Qwen2ForCausalLM, Qwen3ForCausalLM are)");
}

TEST_CASE("a broken model directory gives one clear error line") {
  const llama_weights w = random_llama(tiny(), 6);
  CHECK(load_error("/nonexistent/model") == "/nonexistent/model: not a model directory");
  {
    temp_dir d;
    CHECK(load_error(d.str()) == d.str() + ": config.json is missing");
  }
  {
    temp_dir d;
    REQUIRE(save_llama(d.str(), w).empty());
    rewrite(d.str("config.json"), "Qwen2ForCausalLM", "GPTNeoXForCausalLM");
    CHECK(load_error(d.str()).find("architecture 'GPTNeoXForCausalLM' is not one kiln runs") != std::string::npos);
  }
  {
    temp_dir d;
    REQUIRE(save_llama(d.str(), w).empty());
    rewrite(d.str("config.json"), "\"intermediate_size\": 24", "\"intermediate_size\": 32");
    CHECK(load_error(d.str()) == d.str() + ": tensor model.layers.0.mlp.gate_proj.weight has shape [24,16], expected [32,16]");
  }
  {
    temp_dir d;
    REQUIRE(save_llama(d.str(), w).empty());
    fs::resize_file(d.path / "model.safetensors", fs::file_size(d.path / "model.safetensors") - 100);
    const std::string e = load_error(d.str());
    CHECK(e.find("model.safetensors: tensor '") != std::string::npos);
    CHECK(e.find("lies outside the file (truncated?)") != std::string::npos);
  }
  {
    temp_dir d;
    REQUIRE(save_llama(d.str(), w).empty());
    fs::resize_file(d.path / "model.safetensors", 5);
    CHECK(load_error(d.str()).find("truncated: 5 bytes, no header") != std::string::npos);
  }
  {
    temp_dir d;
    REQUIRE(save_llama(d.str(), w).empty());
    rewrite(d.str("config.json"), "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
    CHECK(load_error(d.str()) == d.str() + ": tensor model.layers.2.input_layernorm.weight is missing");
  }
  {
    temp_dir d;
    REQUIRE(save_llama(d.str(), w).empty());
    std::ofstream(d.path / "model.safetensors", std::ios::binary) << std::string("\x10\0\0\0\0\0\0\0{not json}......", 24);
    CHECK(load_error(d.str()).find("header is not a JSON object") != std::string::npos);
  }
  {
    temp_dir d;
    REQUIRE(save_llama(d.str(), w).empty());
    fs::remove(d.path / "model.safetensors");
    CHECK(load_error(d.str()).find("neither model.safetensors nor model.safetensors.index.json") != std::string::npos);
  }
  CHECK(std::get<std::string>(parse_llama_config("{\"architectures\":[\"LlamaForCausalLM\"]}")) ==
        "config.json: 'hidden_size' is missing");
}

TEST_CASE("a model directory's end tokens: the template's eos, then config.json's and generation_config.json's") {
  temp_dir d;
  REQUIRE(make_tiny_model(d.str()).empty());
  auto stops = [&]() -> std::variant<std::vector<token_id>, std::string> {
    auto m = load_model_dir(d.str());
    if (auto* e = std::get_if<std::string>(&m)) return *e;
    return std::get<loaded_model>(m).tokenizer->stop_ids();
  };
  const auto first = stops();
  REQUIRE(std::holds_alternative<std::vector<token_id>>(first));
  auto m = std::get<loaded_model>(load_model_dir(d.str()));
  const token_id end = *m.tokenizer->token_to_id("<|im_end|>"), text_end = *m.tokenizer->token_to_id("<|endoftext|>");
  CHECK(m.tokenizer->eos() == end);
  CHECK(std::get<std::vector<token_id>>(first) == std::vector<token_id>{end, text_end});  // as Qwen's
  // Ids outside the vocabulary, repeats and non-integers are left out; config.json's stay.
  std::ofstream(d.path / "generation_config.json") << R"({"eos_token_id": [7, 999999, 7, "x", -3], "do_sample": true})";
  CHECK(std::get<std::vector<token_id>>(stops()) == std::vector<token_id>{end, 7});
  std::ofstream(d.path / "generation_config.json") << R"({"eos_token_id": 9})";
  CHECK(std::get<std::vector<token_id>>(stops()) == std::vector<token_id>{end, 9});
  fs::remove(d.path / "generation_config.json");
  CHECK(std::get<std::vector<token_id>>(stops()) == std::vector<token_id>{end});
  std::ofstream(d.path / "generation_config.json") << "{not json";
  CHECK(std::get<std::string>(stops()) == d.str() + ": generation_config.json is not valid JSON");
}
