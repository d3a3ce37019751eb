#pragma once
// Token log-probabilities in OpenAI's two shapes: chat completions'
// {"content":[{"token","logprob","bytes","top_logprobs":[...]}]} and /v1/completions'
// {"tokens","token_logprobs","top_logprobs","text_offset"}. No networking here.
#include <cstddef>
#include <string>
#include <vector>

#include "engine/types.hpp"

namespace kiln::net {

class logprobs_writer {
 public:
  explicit logprobs_writer(bool text_completion) : text_completion_(text_completion) {}
  /// The logprobs object of these tokens. /v1/completions' text offsets continue from the
  /// previous call's tokens (a stream's chunks), counted in characters as Python counts them.
  std::string object(const std::vector<engine::token_logprob>& tokens);
  /// What a chunk puts after its content or text: the logprobs object and the chunk's end.
  std::string chunk_suffix(const std::vector<engine::token_logprob>& tokens);

 private:
  bool text_completion_;
  std::size_t offset_ = 0;
};

/// A log-probability as JSON: shortest round-trip form; NaN (none) is null, -inf -9999.0.
void append_logprob(std::string& out, float lp);

}  // namespace kiln::net
