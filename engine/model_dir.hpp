#pragma once
// A whole Hugging Face model directory for the CPU (and later cuda) executor: weights,
// tokenizer.json, and tokenizer_config.json's chat template and eos token.
#include <memory>
#include <string>
#include <variant>

#include "engine/bpe_tokenizer.hpp"
#include "engine/chat_template.hpp"
#include "engine/llama_model.hpp"

namespace kiln::engine {

struct loaded_model {
  std::shared_ptr<const llama_weights> weights;
  std::shared_ptr<const bpe_tokenizer> tokenizer;
  std::shared_ptr<const chat_template> tmpl;
  double load_seconds = 0;  ///< reading, checking and converting it all
};

/// Loads everything; one error line naming the file at fault.
/// `sink`: as load_llama's (the matrices handed over as they are read). `text_only`: the
/// config, tokenizer and chat template without the weights (`weights` then holds the config
/// alone: a node that tokenizes but runs no engine).
std::variant<loaded_model, std::string> load_model_dir(const std::string& dir, const weight_sink& sink = {},
                                                       bool text_only = false);

/// Sizes of `make-tiny-model`: "tiny" (a few hundred thousand parameters, for tests),
/// "small" (a few million), "100m" (about 100 million, for the CPU decode benchmark).
bool tiny_model_size_known(const std::string& size);

/// Writes a small Llama-architecture model into `dir`: deterministic random weights, a
/// byte-level BPE tokenizer.json trained on generated text, and tokenizer_config.json with
/// a ChatML template. An error line, or empty on success.
std::string make_tiny_model(const std::string& dir, const std::string& size = "tiny");

/// The same with a choice of architecture ("llama", "qwen2": qkv bias, "qwen3": per-head q/k
/// norms) and, when `tokenizer_dir` is given, a real model's tokenizer.json and
/// tokenizer_config.json copied from it (the vocabulary and eos token follow them).
std::string make_tiny_model(const std::string& dir, const std::string& size, const std::string& architecture,
                            const std::string& tokenizer_dir);
bool tiny_model_architecture_known(const std::string& architecture);

}  // namespace kiln::engine
