#pragma once
// What the admin handlers share (internal to net/): answering from a CAF thread, after an
// actor replied, on the connection's strand; and turning an actor's failure into an answer.
#include <memory>
#include <cctype>
#include <string>

#include <caf/actor.hpp>
#include <caf/error.hpp>
#include <nlohmann/json.hpp>

#include "net/errors.hpp"
#include "net/front.hpp"

namespace kiln::net {

inline void answer_json(const std::shared_ptr<exchange>& ex, int status, const nlohmann::json& body) {
  ex->post([ex, status, text = body.dump()]() mutable { ex->respond(status, std::move(text)); });
}

inline void answer_error(const std::shared_ptr<exchange>& ex, const api_error& e) {
  ex->post([ex, e] { ex->respond(e.status, error_json(e), "application/json", error_headers(e)); });
}

/// A name kiln can put in a URL and a label: letters, digits, '-', '_', '.', 1-64 of them.
inline bool good_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

/// 400 invalid_request_error naming the parameter, answered now (on the connection's strand).
inline void answer_bad_request(const std::shared_ptr<exchange>& ex, const std::string& msg, const std::string& param) {
  ex->respond(400, error_json({400, "invalid_request_error", msg, param, ""}));
}

/// The node's store writer and node supervisor, as named in the actor registry.
caf::actor store_of(front& f);
caf::actor node_of(front& f);

/// kiln's own errors map as everywhere (unknown names are 404 not_found); a bad name from
/// the node is 404 too; no answer at all is 503.
void answer_failure(front& f, const std::shared_ptr<exchange>& ex, const caf::error& err, const std::string& who);

/// GET, POST and DELETE /admin/pools/{model}/{version}/upstreams (admin_upstream_handlers.cpp).
void add_upstream_routes(front& f);

}  // namespace kiln::net
