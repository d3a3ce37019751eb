#pragma once
// Llama-family models from a Hugging Face directory: config.json (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM) and model.safetensors or shards listed in
// model.safetensors.index.json, F32/F16/BF16, memory-mapped and converted to F32.
// Anything wrong gives one clear error line.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kiln::engine {

struct rope_scaling {
  bool llama3 = false;
  double factor = 1;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int original_max_position = 8192;
};

struct llama_config {
  std::string architecture;
  int hidden = 0;
  int intermediate = 0;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  double rms_eps = 1e-5;
  double rope_theta = 10000;
  rope_scaling scaling;
  bool tie_embeddings = false;
  bool qkv_bias = false;  ///< Qwen2 (attention_bias)
  bool qk_norm = false;   ///< Qwen3: RMSNorm of each head's q and k before RoPE
  int max_position = 4096;
  int bos_id = -1;
  std::vector<int> eos_ids;
};

std::variant<llama_config, std::string> parse_llama_config(std::string_view json_text);
/// A config's eos_token_id (an id or a list of them; entries that are not integers left out)
/// from its JSON text (config.json's, generation_config.json's); nullopt when that is not JSON.
std::optional<std::vector<int>> parse_eos_ids(std::string_view json_text);

/// Weights as F32, row-major as stored ([out, in] for projections).
struct layer_weights {
  std::vector<float> attn_norm, wq, wk, wv, bq, bk, bv, wo;
  std::vector<float> q_norm, k_norm;  ///< [head_dim] each, Qwen3
  std::vector<float> mlp_norm, w_gate, w_up, w_down;
};

struct llama_weights {
  llama_config cfg;
  std::vector<float> embed;       ///< [vocab, hidden]
  std::vector<float> final_norm;  ///< [hidden]
  std::vector<float> lm_head;     ///< [vocab, hidden]; empty when tied to embed
  std::vector<layer_weights> layers;
  std::string stored_dtype = "f32";  ///< the files' dtype (of the embeddings): f32, f16 or bf16
  const float* head() const { return lm_head.empty() ? embed.data() : lm_head.data(); }
  std::size_t bytes() const;      ///< F32 bytes a forward step reads
};

/// Called for each matrix (embeddings, head, projections) as soon as it is read, as F32
/// [N, K] inside the weights being built; it may take the values and leave the vector empty
/// (the cpu executor converts each to its dtype at once, so no whole F32 copy ever exists).
using weight_sink = std::function<void(const llama_weights& w, std::vector<float>& m, std::size_t N, std::size_t K)>;

std::variant<std::shared_ptr<const llama_weights>, std::string> load_llama(const std::string& dir,
                                                                           const weight_sink& sink = {});

}  // namespace kiln::engine
