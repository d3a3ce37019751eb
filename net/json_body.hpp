#pragma once
// A request body that must be one JSON object (every OpenAI and admin call that takes one):
// parsed, or what is wrong with it in words a client can act on, the parser's position
// included and the bytes it choked on left out.
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace kiln::net {

/// Empty when `body` is a JSON object (then in `doc`); else the message for a 400: "We could
/// not parse the JSON body of your request: ... (line 1, column 14)." or "The request body
/// must be a JSON object." Never throws.
std::optional<std::string> parse_json_object(std::string_view body, nlohmann::json& doc);
/// The same, keeping the object's keys in the client's order.
std::optional<std::string> parse_json_object(std::string_view body, nlohmann::ordered_json& doc);

}  // namespace kiln::net
