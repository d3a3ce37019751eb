#pragma once
// A batch line as an HTTP exchange: the runner hands it to the endpoint's own handler, so a
// line is parsed, admitted, charged, metered and answered exactly as the same request over
// HTTP would be. Its answer goes to the runner as a message instead of to a socket.
#include <functional>
#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>

#include "net/exchange.hpp"

namespace kiln::net {

/// A line's answer, for its batch's runner.
struct line_answer {
  std::string batch_id;
  std::size_t index = 0;
  int status = 0;
  std::string body;
  double retry_after_s = 0;  ///< from Retry-After, when the answer had one
};

/// Runs `fn` after `ms`: the runner's clock stands in for a socket's timer.
struct line_timer {
  int ms = 0;
  std::function<void()> fn;
};

using strand_fn = std::function<void(std::function<void()>)>;

class batch_exchange final : public exchange, public std::enable_shared_from_this<batch_exchange> {
 public:
  /// `runner` gets one line_answer (and line_timer calls); `strand` runs the exchange's work.
  batch_exchange(http_request req, caller who, caf::actor runner, std::string batch_id, std::size_t index, strand_fn strand);

  const http_request& request() const override { return req_; }
  const caller& who() const override { return who_; }
  void respond(int status, std::string body, std::string_view content_type = "application/json",
               const header_list& extra = {}) override;
  void begin_stream(const header_list& extra = {}) override;
  void stream(std::string_view) override {}
  void end_stream(int status, std::string_view last = {}) override;
  bool streaming() const override { return false; }
  void post(std::function<void()> fn) override;
  void on_interrupt(std::function<void(interruption)> fn) override { interrupt_ = std::move(fn); }
  void after(int ms, std::function<void()> fn) override;
  log_fields& log() override { return log_; }

  /// The runner gives up on it (shutting down): its handler ends the request.
  void interrupt();

 private:
  http_request req_;
  caller who_;
  caf::actor runner_;
  std::string batch_id_;
  std::size_t index_;
  strand_fn strand_;
  log_fields log_;
  std::function<void(interruption)> interrupt_;
  bool done_ = false;
};

}  // namespace kiln::net

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::net::line_answer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::net::line_timer)
