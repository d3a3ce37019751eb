#include "net/errors.hpp"

namespace kiln::net {

api_error to_api_error(actors::errc code, std::string message, std::string param, int retry_after_s) {
  using actors::errc;
  api_error e;
  e.message = std::move(message);
  e.param = std::move(param);
  auto set = [&](int status, const char* type, const char* c) {
    e.status = status;
    e.type = type;
    e.code = c;
  };
  switch (code) {
    case errc::unauthenticated: set(401, "invalid_request_error", "invalid_api_key"); break;
    case errc::forbidden: set(403, "invalid_request_error", "forbidden"); break;
    case errc::unknown_model: set(404, "invalid_request_error", "model_not_found"); break;
    case errc::invalid_request: set(400, "invalid_request_error", "invalid_request"); break;
    case errc::context_too_long: set(400, "invalid_request_error", "context_length_exceeded"); break;
    case errc::over_limit: set(429, "requests", "rate_limit_exceeded"); break;
    case errc::shed: set(503, "server_error", "overloaded"); break;
    case errc::unavailable: set(503, "server_error", "model_unavailable"); break;
    case errc::degraded: set(503, "server_error", "pool_degraded"); break;
    case errc::retry_budget: set(503, "server_error", "retry_budget_exhausted"); break;
    case errc::replica_lost: set(503, "server_error", "replica_lost"); break;
    case errc::engine_failed: set(503, "server_error", "engine_failed"); break;
    case errc::timed_out: set(504, "server_error", "timeout"); break;
    case errc::shutting_down: set(503, "server_error", "shutting_down"); break;
    case errc::conflict: set(409, "invalid_request_error", "conflict"); break;
    case errc::internal: set(500, "server_error", "internal_error"); break;
  }
  if (e.status == 429 || e.status == 503) e.retry_after_s = retry_after_s > 0 ? retry_after_s : 1;
  return e;
}

header_list error_headers(const api_error& e) {
  if (e.retry_after_s <= 0) return {};
  return {{"Retry-After", std::to_string(e.retry_after_s)}};
}

}  // namespace kiln::net
