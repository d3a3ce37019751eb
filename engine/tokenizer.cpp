#include "engine/tokenizer.hpp"

#include <cctype>
#include <unordered_map>

#include <xxhash.h>

namespace kiln::engine {

namespace {

constexpr const char* kWords[] = {
    "<eos>", "the", "a", "kiln", "model", "token", "stream", "of", "and", "to", "in", "is",
    "that", "it", "for", "on", "with", "as", "at", "by", "from", "this", "be", "are", "was",
    "we", "you", "they", "can", "will", "each", "one", "two", "three", "many", "more", "fire",
    "clay", "heat", "glaze", "pot", "bowl", "cup", "shape", "form", "wheel", "hand", "time",
    "team", "share", "batch", "step", "cache", "block", "prefix", "route", "replica", "region",
    "answer", "question", "light", "warm", "slow", "fast", "quiet", "bright", "small", "large",
    "new", "old", "good", "simple", "careful", "steady", "open", "close", "here", "there",
    "then", "now", "again", "always", "never", "often", "under", "over", "between", "through",
    "after", "before", "because", "while", "when", "where", "which", "what", "how", "why",
    "so", "but", "or", "if", "not", "all", "some", "every", "same", "other", "first", "last",
    "next", "long", "short", "high", "low", "left", "right", "make", "made", "keep", "kept",
    "turn", "send", "read", "write", "serve", "learn", "build", "test", "run", "wait", "start",
    "finish", "rest", "cool", "dry", "wet", "earth", "water", "air", "stone", "wood", "ash",
    "smoke", "flame", "ember", "spark", "door", "wall", "floor", "room", "shelf", "table",
    ".", ",", "!", "?", ":", ";", "-", "'", "\"", "(", ")"};

bool is_word_char(unsigned char c) { return std::isalnum(c) || c >= 0x80 || c == '_'; }

const std::unordered_map<std::string_view, token_id>& word_index() {
  static const auto index = [] {
    std::unordered_map<std::string_view, token_id> m;
    for (token_id i = 1; i < static_cast<token_id>(std::size(kWords)); ++i) m.emplace(kWords[i], i);
    return m;
  }();
  return index;
}

constexpr token_id kHashedRange = 1 << 20;

}  // namespace

word_tokenizer::word_tokenizer() : words_(std::begin(kWords), std::end(kWords)) {}

std::vector<token_id> word_tokenizer::encode(std::string_view text) const {
  std::vector<token_id> out;
  const auto& index = word_index();
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (std::isspace(c)) { ++i; continue; }
    std::size_t j = i + 1;
    if (is_word_char(c))
      while (j < text.size() && is_word_char(static_cast<unsigned char>(text[j]))) ++j;
    const std::string_view piece = text.substr(i, j - i);
    if (auto it = index.find(piece); it != index.end()) {
      out.push_back(it->second);
    } else {
      const auto h = XXH32(piece.data(), piece.size(), 0);
      out.push_back(vocab_size() + static_cast<token_id>(h % kHashedRange));
    }
    i = j;
  }
  return out;
}

std::string word_tokenizer::decode(token_id id) const {
  if (id == eos()) return {};
  if (id > 0 && id < vocab_size()) {
    const std::string& w = words_[static_cast<std::size_t>(id)];
    const bool punct = w.size() == 1 && !is_word_char(static_cast<unsigned char>(w[0]));
    return punct ? w : " " + w;
  }
  return " <" + std::to_string(id) + ">";
}

std::string render_chat_prompt(const std::vector<chat_message>& messages) {
  std::string out;
  for (const auto& m : messages) {
    out += "<|" + m.role + "|>\n";
    out += m.content;
    out += "\n";
  }
  out += "<|assistant|>\n";
  return out;
}

}  // namespace kiln::engine
