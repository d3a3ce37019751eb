#pragma once
// Plain value types shared by the engine's scheduler, executors and its callers.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::engine {

using token_id = std::int32_t;
using seq_id = std::uint64_t;

/// Scheduling tier inside an engine; lower value runs first.
enum class priority : std::uint8_t { interactive = 0, standard = 1, batch = 2 };

/// Parses "interactive" | "standard" | "batch"; nullopt for anything else.
std::optional<priority> parse_priority(std::string_view s);
std::string_view to_string(priority p);

/// Why a sequence stopped producing tokens.
enum class finish_reason : std::uint8_t { none, stop, length, cancelled };
std::string_view to_string(finish_reason r);

/// What the caller asked of the sampler and of the stopping rules.
struct sampling_params {
  int max_tokens = 256;
  double temperature = 1.0;
  int top_k = 0;        ///< 0: off
  double top_p = 1.0;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
  int logprobs = -1;             ///< -1: none; 0-20: each token's log-probability and this many alternatives
  bool prompt_logprobs = false;  ///< the prompt's tokens' too (/v1/completions' echo); no prefix-cache reuse
  /// Penalties on tokens already in the answer (OpenAI's, -2 to 2: a token's logit loses
  /// presence once it has appeared and frequency for each time it has) and on tokens in the
  /// prompt or the answer (vLLM's repetition penalty; 1: none).
  double presence_penalty = 0;
  double frequency_penalty = 0;
  double repetition_penalty = 1;
  std::vector<std::pair<token_id, float>> logit_bias;  ///< added to those tokens' logits; by id, each once
  std::vector<token_id> stop_token_ids;  ///< vLLM's: these end the answer too (with no text), ignore_eos or not; sorted
  int min_tokens = 0;       ///< vLLM's: eos (and stop_token_ids) cannot be sampled before this many tokens
  bool ignore_eos = false;  ///< vLLM's: an eos sampled ends nothing (it counts, with no text): max_tokens ends the answer

  /// Whether any of the above changes the logits the sampler sees.
  bool adjusts_logits() const {
    return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1 || !logit_bias.empty() ||
           min_tokens > 0;
  }
  /// Tokens a modelled answer runs at least (the sim executor's).
  int answer_min() const { return ignore_eos ? max_tokens : min_tokens; }
};

/// One of a token's most likely alternatives.
struct token_alt {
  std::string token;  ///< its text (bytes as the tokenizer gives them)
  float logprob = 0;
};

/// A token's log-probability under the model (its raw distribution, before bias, penalties, temperature, top-k
/// and top-p) and the most likely alternatives at that position, most likely first.
struct token_logprob {
  std::string token;
  float logprob = 0;  ///< NaN: none (the first token of a prompt)
  std::vector<token_alt> top;
};

/// Token counts reported back to the client.
struct usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};

}  // namespace kiln::engine
