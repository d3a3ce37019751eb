#pragma once
// BPE tokenizers from Hugging Face tokenizer.json: byte-level (GPT-2, Llama 3, Qwen2: a
// pre-tokenizer regex run through PCRE2, bytes mapped to printable characters, merges by
// rank) and Metaspace with byte fallback (Llama 2, Mistral: spaces become U+2581, unknown
// characters become <0xXX> byte tokens). Added and special tokens are matched in the text
// before the model sees it.
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "engine/tokenizer.hpp"
#include "engine/unicode_text.hpp"

namespace kiln::engine {

class bpe_tokenizer final : public tokenizer {
 public:
  /// Parses tokenizer.json text; one error line on failure.
  static std::variant<std::shared_ptr<bpe_tokenizer>, std::string> from_json(std::string_view text);
  static std::variant<std::shared_ptr<bpe_tokenizer>, std::string> load(const std::string& path);
  ~bpe_tokenizer() override;

  std::vector<token_id> encode(std::string_view text) const override;
  /// As encode, with the special tokens tokenizer.json's post_processor adds (Llama's BOS).
  std::vector<token_id> encode_special(std::string_view text) const override;
  /// The vocabulary's own string of one token ("Ġthe" in byte-level vocabularies).
  std::string piece(token_id id) const override;
  /// Bytes of one token (special tokens decode to nothing); may be part of a UTF-8 character.
  std::string decode(token_id id) const override;
  token_id eos() const override { return eos_; }
  int vocab_size() const override { return static_cast<int>(id_to_token_.size()); }

  /// Whole-sequence decode, special tokens included when asked.
  std::string decode_all(const std::vector<token_id>& ids, bool skip_special = true) const;
  std::optional<token_id> token_to_id(std::string_view token) const;
  bool is_special(token_id id) const;
  void set_eos(token_id id) { eos_ = id; }
  /// Other ids that end an answer besides eos (those outside the vocabulary, and eos, are left out).
  void set_more_stops(const std::vector<token_id>& ids);
  std::vector<token_id> stop_ids() const override;
  bool byte_level() const { return byte_level_; }

 private:
  bpe_tokenizer() = default;
  void encode_piece(const std::string& piece, std::vector<token_id>& out) const;
  void encode_plain(std::string_view text, bool first, std::vector<token_id>& out) const;
  std::vector<std::string> split_literal(const std::string& text) const;

  bool byte_level_ = true;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool add_prefix_space_ = false;
  std::string metaspace_ = "\xe2\x96\x81";  // U+2581
  std::string prepend_scheme_ = "always";
  bool metaspace_split_ = false;
  normal_form normal_form_ = normal_form::none;  ///< the normalizer's NFC / NFD / NFKC / NFKD
  std::string literal_split_;                   ///< a Split pre-tokenizer by a plain string
  std::string split_behavior_ = "Isolated";
  std::optional<token_id> unk_;
  token_id eos_ = -1;
  std::vector<token_id> more_stops_;
  std::unordered_map<std::string, token_id> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int> merge_rank_;  ///< "left right" -> rank
  struct added {
    std::string content;
    token_id id;
    bool special;
  };
  std::vector<added> added_;  ///< longest first
  std::array<std::vector<std::uint32_t>, 256> added_by_byte_;  ///< indexes into added_ by first byte
  std::vector<bool> special_;
  std::vector<token_id> prefix_, suffix_;  ///< the post_processor's special tokens around a text
  void* regex_ = nullptr;     ///< pcre2_code*, the pre-tokenizer split pattern
};

/// The printable character standing for each byte in byte-level vocabularies (GPT-2's map).
const std::string& byte_to_unicode(unsigned char b);

/// Trains a byte-level BPE on `corpus` (GPT-2 pre-tokenization) up to `vocab_size` tokens,
/// plus `specials` as added tokens at the end; returns tokenizer.json text.
std::string train_byte_level_bpe(const std::string& corpus, int vocab_size, const std::vector<std::string>& specials);

}  // namespace kiln::engine
