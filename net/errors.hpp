#pragma once
// The one place where kiln's internal error enum becomes HTTP: status, OpenAI error type and
// code, and Retry-After (every 429 and 503 carries one).
#include <string>

#include "actors/request.hpp"
#include "net/exchange.hpp"
#include "net/openai.hpp"

namespace kiln::net {

/// `retry_after_s` <= 0 takes the code's default where it needs one.
api_error to_api_error(actors::errc code, std::string message, std::string param = {}, int retry_after_s = 0);
/// Retry-After for an error that has one.
header_list error_headers(const api_error& e);

}  // namespace kiln::net
