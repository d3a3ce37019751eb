#pragma once
// A model's chat template: tokenizer_config.json's `chat_template` rendered by the Jinja
// subset with messages, bos/eos tokens and add_generation_prompt, as transformers does.
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/jinja/jinja.hpp"
#include "engine/tokenizer.hpp"

namespace kiln::engine {

class chat_template {
 public:
  static std::variant<chat_template, std::string> make(std::string_view text, std::string bos, std::string eos);
  /// Reads chat_template (a string, or the "default" of a named list), bos_token, eos_token.
  static std::variant<chat_template, std::string> from_tokenizer_config(const std::string& path);

  /// The prompt text, or the template's error (raise_exception's message, say).
  std::variant<std::string, std::string> render(const std::vector<chat_message>& messages,
                                                bool add_generation_prompt = true) const;
  const std::string& bos() const { return bos_; }
  const std::string& eos() const { return eos_; }

 private:
  jinja::program program_;
  std::string bos_, eos_;
};

}  // namespace kiln::engine
