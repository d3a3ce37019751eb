#pragma once
// The tokenizer interface every executor's model provides, and a deterministic stand-in
// (words and punctuation over a fixed vocabulary) used by the sim executor.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/types.hpp"

namespace kiln::engine {

class tokenizer {
 public:
  virtual ~tokenizer() = default;
  virtual std::vector<token_id> encode(std::string_view text) const = 0;
  /// As encode, with the special tokens the tokenizer adds around a text (a BOS, say): what
  /// Hugging Face's encode gives with add_special_tokens. None unless the tokenizer says so.
  virtual std::vector<token_id> encode_special(std::string_view text) const { return encode(text); }
  /// The vocabulary's own string of one token (vLLM's token_strs); its text where none other.
  virtual std::string piece(token_id id) const { return decode(id); }
  /// Text of one token as it appears in a stream (leading space included where it has one).
  virtual std::string decode(token_id id) const = 0;
  virtual token_id eos() const = 0;
  /// Every id that ends an answer: eos() first, then the model's other end tokens (its
  /// generation config's, say: Llama 3.1's <|eom_id|>, Qwen's <|endoftext|>).
  virtual std::vector<token_id> stop_ids() const { return {eos()}; }
  /// Ids below this are ordinary generable tokens (eos excluded).
  virtual int vocab_size() const = 0;
};

/// Stand-in: splits text into words and single punctuation marks; known words map to their
/// vocabulary index, unknown ones to a stable hashed id above the vocabulary.
class word_tokenizer final : public tokenizer {
 public:
  word_tokenizer();
  std::vector<token_id> encode(std::string_view text) const override;
  std::string decode(token_id id) const override;
  token_id eos() const override { return 0; }
  int vocab_size() const override { return static_cast<int>(words_.size()); }

 private:
  std::vector<std::string> words_;
};

/// A chat message as the API receives it.
struct chat_message {
  std::string role;
  std::string content;
};

/// Stand-in chat template: role markers around each message, then the assistant's turn.
std::string render_chat_prompt(const std::vector<chat_message>& messages);

}  // namespace kiln::engine
