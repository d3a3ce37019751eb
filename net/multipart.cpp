#include "net/multipart.hpp"

#include <cctype>

namespace kiln::net {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A parameter of a header value (`name="x"` or `name=x`), unquoted; "" when absent.
std::string param(std::string_view value, std::string_view name) {
  std::size_t pos = 0;
  while ((pos = value.find(';', pos)) != std::string_view::npos) {
    std::string_view rest = trim(value.substr(pos + 1));
    pos += 1;
    const auto eq = rest.find('=');
    if (eq == std::string_view::npos || lower(trim(rest.substr(0, eq))) != name) continue;
    std::string_view v = trim(rest.substr(eq + 1));
    if (!v.empty() && v.front() == '"') {
      std::string out;
      for (std::size_t i = 1; i < v.size() && v[i] != '"'; ++i) {
        if (v[i] == '\\' && i + 1 < v.size()) ++i;
        out += v[i];
      }
      return out;
    }
    return std::string(v.substr(0, v.find(';')));
  }
  return {};
}

}  // namespace

std::string form_boundary(std::string_view content_type) {
  const auto semi = content_type.find(';');
  if (lower(trim(content_type.substr(0, semi))) != "multipart/form-data") return {};
  std::string b = param(content_type, "boundary");
  if (b.size() > 70) return {};
  return b;
}

std::variant<std::vector<form_part>, std::string> parse_form(std::string_view body, std::string_view boundary) {
  if (boundary.empty()) return std::string("the multipart form has no boundary");
  const std::string delim = "--" + std::string(boundary);
  std::vector<form_part> parts;
  std::size_t pos = body.find(delim);
  if (pos == std::string_view::npos) return std::string("the multipart form holds no part");
  while (true) {
    pos += delim.size();
    if (body.substr(pos, 2) == "--") break;  // the closing delimiter
    if (body.substr(pos, 2) != "\r\n") return std::string("a multipart delimiter is not followed by a line break");
    pos += 2;
    form_part part;
    // Headers, up to an empty line.
    while (true) {
      const auto eol = body.find("\r\n", pos);
      if (eol == std::string_view::npos) return std::string("a multipart part's headers do not end");
      const std::string_view line = body.substr(pos, eol - pos);
      pos = eol + 2;
      if (line.empty()) break;
      const auto colon = line.find(':');
      if (colon == std::string_view::npos) return std::string("a multipart header has no ':'");
      const std::string name = lower(trim(line.substr(0, colon)));
      const std::string_view value = trim(line.substr(colon + 1));
      if (name == "content-disposition") {
        if (lower(trim(value.substr(0, value.find(';')))) != "form-data")
          return std::string("a multipart part is not form-data");
        part.name = param(value, "name");
        part.filename = param(value, "filename");
      } else if (name == "content-type") {
        part.content_type = std::string(value);
      }
    }
    const auto next = body.find("\r\n" + delim, pos);
    if (next == std::string_view::npos) return std::string("a multipart part does not end (no closing boundary)");
    part.data = body.substr(pos, next - pos);
    if (part.name.empty()) return std::string("a multipart part has no name");
    parts.push_back(part);
    pos = next + 2;
  }
  return parts;
}

}  // namespace kiln::net
