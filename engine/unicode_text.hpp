#pragma once
// Unicode text operations that tokenizers and chat templates need, over UTF-8 (utf8proc):
// the four normalization forms, and whitespace as Python's str.isspace() sees it.
#include <string>
#include <string_view>

namespace kiln::engine {

enum class normal_form { none, nfc, nfd, nfkc, nfkd };

/// "NFC", "NFD", "NFKC" or "NFKD" (Hugging Face's normalizer type names); none otherwise.
normal_form normal_form_named(std::string_view name);

/// `text` (valid UTF-8) in normal form `f`; as it is for normal_form::none.
std::string normalize(std::string_view text, normal_form f);

/// Python's str.isspace() for one code point: the ASCII ones, U+001C-U+001F, U+0085 and
/// every Unicode space separator, line and paragraph separator.
bool is_python_space(char32_t cp);

/// Python's str.strip() / lstrip() / rstrip() with no argument.
std::string strip_python_space(std::string_view s, bool left, bool right);

/// Python's str.upper() / str.lower(): code point by code point, with the full mappings of
/// ß (upper: SS) and İ (lower: i + U+0307).
std::string python_case(std::string_view s, bool upper);

}  // namespace kiln::engine
