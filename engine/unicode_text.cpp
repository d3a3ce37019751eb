#include "engine/unicode_text.hpp"

#include <cstdlib>
#include <memory>

#include <utf8proc.h>

namespace kiln::engine {

normal_form normal_form_named(std::string_view name) {
  if (name == "NFC") return normal_form::nfc;
  if (name == "NFD") return normal_form::nfd;
  if (name == "NFKC") return normal_form::nfkc;
  if (name == "NFKD") return normal_form::nfkd;
  return normal_form::none;
}

std::string normalize(std::string_view text, normal_form f) {
  if (f == normal_form::none || text.empty()) return std::string(text);
  int options = UTF8PROC_STABLE;
  switch (f) {
    case normal_form::nfc: options |= UTF8PROC_COMPOSE; break;
    case normal_form::nfd: options |= UTF8PROC_DECOMPOSE; break;
    case normal_form::nfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case normal_form::nfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    case normal_form::none: break;
  }
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                              static_cast<utf8proc_ssize_t>(text.size()), &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(text);  // not valid UTF-8: callers pass valid text
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> hold(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

bool is_python_space(char32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F) || cp == 0x85) return true;
  if (cp < 0x80) return false;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

std::string strip_python_space(std::string_view s, bool left, bool right) {
  auto decode = [&](std::size_t i, char32_t& cp) -> std::size_t {
    utf8proc_int32_t c = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                    static_cast<utf8proc_ssize_t>(s.size() - i), &c);
    cp = n > 0 ? static_cast<char32_t>(c) : 0xFFFD;
    return n > 0 ? static_cast<std::size_t>(n) : 1;
  };
  std::size_t b = 0, e = s.size();
  if (left)
    while (b < e) {
      char32_t cp;
      const std::size_t n = decode(b, cp);
      if (!is_python_space(cp)) break;
      b += n;
    }
  if (right)
    while (e > b) {
      std::size_t start = e - 1;  // back to the first byte of the last character
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      char32_t cp;
      decode(start, cp);
      if (!is_python_space(cp)) break;
      e = start;
    }
  return std::string(s.substr(b, e - b));
}

std::string python_case(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    utf8proc_int32_t c = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                    static_cast<utf8proc_ssize_t>(s.size() - i), &c);
    if (n <= 0) {  // not UTF-8: the byte as it is
      out += s[i++];
      continue;
    }
    // Python applies the full mappings of SpecialCasing: the common ones that grow.
    if (upper && c == 0xDF) {
      out += "SS";
      i += static_cast<std::size_t>(n);
      continue;
    }
    if (!upper && c == 0x130) {
      out += "i\xcc\x87";
      i += static_cast<std::size_t>(n);
      continue;
    }
    const utf8proc_int32_t mapped = upper ? utf8proc_toupper(c) : utf8proc_tolower(c);
    utf8proc_uint8_t buf[4];
    out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(utf8proc_encode_char(mapped, buf)));
    i += static_cast<std::size_t>(n);
  }
  return out;
}

}  // namespace kiln::engine
