#pragma once
// POST /tokenize and /detokenize (vLLM's shapes) ask admission, which holds every pool's
// tokenizer and chat template: a model (alias or model@version) and a prompt, a
// conversation or token ids; the answer is the ids (and the rendered prompt) or the text.
#include <cstdint>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>

#include "actors/request.hpp"

namespace kiln::actors {

struct admission_state;

struct tokenize_request {
  std::string model;
  bool detokenize = false;
  std::string prompt;                ///< tokenize this text as it is (no template) ...
  std::string chat_json;             ///< ... or render this conversation first
  std::int64_t created_unix = 0;     ///< strftime_now in the template
  std::vector<std::int32_t> tokens;  ///< detokenize these
  bool add_special = false;          ///< the tokenizer's special tokens around the text (a BOS)
  bool token_strs = false;           ///< answer each token's vocabulary string too
};

struct tokenize_result {
  bool ok = true;
  errc code = errc::internal;  ///< when not ok
  std::string message;         ///< why not
  std::string param;
  std::vector<std::int32_t> tokens;
  std::string text;  ///< the rendered prompt, or the detokenized text
  std::vector<std::string> token_strs;  ///< when asked
  std::int64_t max_model_len = 0;
};

/// Runs inside admission: resolves the model to a pool that has loaded, then tokenizes.
tokenize_result run_tokenize(const admission_state& st, const tokenize_request& q);

}  // namespace kiln::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::tokenize_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::actors::tokenize_result)
