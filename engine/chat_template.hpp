#pragma once
// A model's chat template: tokenizer_config.json's `chat_template` rendered by the Jinja
// subset with messages, bos/eos tokens and add_generation_prompt, as transformers does.
#include <ctime>
#include <nlohmann/json_fwd.hpp>
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
  /// Reads chat_template (a string, or the "default" of a named list), bos_token, eos_token;
  /// `template_text`, when given, stands in for the file's template (which may then be absent).
  static std::variant<chat_template, std::string> from_tokenizer_config(const std::string& path,
                                                                       std::string_view template_text = {});

  /// The prompt text, or the template's error (raise_exception's message, say).
  std::variant<std::string, std::string> render(const std::vector<chat_message>& messages,
                                                bool add_generation_prompt = true) const;
  /// A conversation given as JSON, rendered the way transformers' apply_chat_template does:
  /// each key of `conversation` (messages, tools, documents, add_generation_prompt, ...) is
  /// a global beside bos_token and eos_token (add_generation_prompt defaults to true);
  /// strftime_now formats `now` (UTC).
  std::variant<std::string, std::string> render_json(const nlohmann::ordered_json& conversation, std::time_t now) const;
  const std::string& bos() const { return bos_; }
  const std::string& eos() const { return eos_; }

 private:
  jinja::program program_;
  std::string bos_, eos_;
};

}  // namespace kiln::engine
