#include "actors/request.hpp"

#include <cstdio>
#include <random>

#include <caf/make_message.hpp>
#include <caf/atom.hpp>

#include "actors/messages.hpp"

namespace kiln::actors {

std::string request_id::str() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(origin),
                static_cast<unsigned long long>(seq));
  return buf;
}

request_ids::request_ids() {
  std::random_device rd;
  origin_ = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

std::string_view to_string(errc e) {
  switch (e) {
    case errc::unauthenticated: return "unauthenticated";
    case errc::forbidden: return "forbidden";
    case errc::unknown_model: return "unknown_model";
    case errc::invalid_request: return "invalid_request";
    case errc::context_too_long: return "context_too_long";
    case errc::over_limit: return "over_limit";
    case errc::shed: return "shed";
    case errc::unavailable: return "unavailable";
    case errc::degraded: return "degraded";
    case errc::retry_budget: return "retry_budget";
    case errc::replica_lost: return "replica_lost";
    case errc::engine_failed: return "engine_failed";
    case errc::timed_out: return "timed_out";
    case errc::shutting_down: return "shutting_down";
    case errc::conflict: return "conflict";
    case errc::internal: return "internal";
  }
  return "internal";
}

bool retryable(errc e) {
  switch (e) {
    case errc::unavailable:
    case errc::replica_lost:
    case errc::engine_failed:
      return true;
    case errc::unauthenticated:
    case errc::forbidden:
    case errc::unknown_model:
    case errc::invalid_request:
    case errc::context_too_long:
    case errc::over_limit:
    case errc::shed:
    case errc::degraded:
    case errc::retry_budget:
    case errc::timed_out:
    case errc::shutting_down:
    case errc::conflict:
    case errc::internal:
      return false;
  }
  return false;
}

caf::error make_error(errc e, std::string message) {
  return caf::error(static_cast<std::uint8_t>(e), caf::atom("kiln"), caf::make_message(std::move(message)));
}

std::optional<errc> kiln_error(const caf::error& e) {
  if (e.category() != caf::atom("kiln")) return std::nullopt;
  return static_cast<errc>(e.code());
}

std::string_view to_string(replica_phase p) {
  switch (p) {
    case replica_phase::starting: return "starting";
    case replica_phase::loading: return "loading";
    case replica_phase::serving: return "serving";
    case replica_phase::draining: return "draining";
    case replica_phase::stopped: return "stopped";
    case replica_phase::failed: return "failed";
  }
  return "failed";
}

std::string_view to_string(chaos_action a) {
  switch (a) {
    case chaos_action::kill: return "kill";
    case chaos_action::freeze: return "freeze";
    case chaos_action::slow: return "slow";
    case chaos_action::fail: return "fail";
  }
  return "kill";
}

std::optional<chaos_action> chaos_action_from(std::string_view name) {
  for (auto a : {chaos_action::kill, chaos_action::freeze, chaos_action::slow, chaos_action::fail})
    if (to_string(a) == name) return a;
  return std::nullopt;
}

}  // namespace kiln::actors
