#include "net/json_body.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace kiln::net {

namespace {

// What a JSON parse error says, without the parser's prefix and without the bytes it last read
// (they may be the invalid ones): "syntax error while parsing value - invalid literal (line 1,
// column 3)", "number overflow parsing '1e400'".
std::string parse_failure(std::string_view what) {
  constexpr std::string_view kAt = "parse error at ", kLast = "; last read";
  std::string_view where, why = what;
  if (why.starts_with("[json.exception.")) why = why.substr(std::min(why.size(), why.find("] ") + 2));
  if (const auto at = why.find(kAt); at != std::string_view::npos) {
    const auto colon = why.find(": ", at);
    if (colon != std::string_view::npos) {
      where = why.substr(at + kAt.size(), colon - at - kAt.size());
      why = why.substr(colon + 2);
    }
  }
  if (const auto last = why.find(kLast); last != std::string_view::npos) why = why.substr(0, last);
  std::string out(why);
  if (!where.empty()) out += " (" + std::string(where) + ")";
  return out;
}

template <class Json>
std::optional<std::string> parse_object_into(std::string_view body, Json& doc) {
  try {
    doc = Json::parse(body);
  } catch (const nlohmann::json::exception& e) {  // a parse error, or a number past a double's range
    return "We could not parse the JSON body of your request: " + parse_failure(e.what()) + ".";
  }
  if (!doc.is_object()) return std::string("The request body must be a JSON object.");
  return std::nullopt;
}

}  // namespace

std::optional<std::string> parse_json_object(std::string_view body, nlohmann::json& doc) {
  return parse_object_into(body, doc);
}

std::optional<std::string> parse_json_object(std::string_view body, nlohmann::ordered_json& doc) {
  return parse_object_into(body, doc);
}

}  // namespace kiln::net
