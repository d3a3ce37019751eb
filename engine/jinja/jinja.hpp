#pragma once
// A small Jinja subset, enough for the chat templates of Hugging Face tokenizer_config.json
// files (Llama 3, Qwen2 / ChatML, Mistral): {{ }}, {% if/elif/else %}, {% for %} with loop.*,
// {% set %} (and namespace attributes), filters and tests these templates use, string
// methods, raise_exception, whitespace control, trim_blocks and lstrip_blocks as HF sets them.
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "engine/jinja/ast.hpp"
#include "engine/jinja/value.hpp"

namespace kiln::engine::jinja {

struct template_error {
  std::string message;
};

class program {
 public:
  /// Parses a template; a syntax error names its line.
  static std::variant<program, template_error> parse(std::string_view text);
  /// Renders with `context` as the global variables; strftime_now(format) formats `now`
  /// (seconds since the epoch, UTC).
  std::variant<std::string, template_error> render(const dict& context, std::time_t now = 0) const;

 private:
  body root_;
  friend class parser;
};

}  // namespace kiln::engine::jinja
