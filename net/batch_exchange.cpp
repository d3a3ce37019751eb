#include "net/batch_exchange.hpp"

#include <cstdlib>

#include <caf/send.hpp>

namespace kiln::net {

batch_exchange::batch_exchange(http_request req, caller who, caf::actor runner, std::string batch_id, std::size_t index,
                               strand_fn strand)
    : req_(std::move(req)), who_(std::move(who)), runner_(std::move(runner)), batch_id_(std::move(batch_id)), index_(index),
      strand_(std::move(strand)) {}

void batch_exchange::respond(int status, std::string body, std::string_view, const header_list& extra) {
  if (done_) return;
  done_ = true;
  double retry_after = 0;
  for (const auto& [k, v] : extra)
    if (k == "Retry-After" || k == "retry-after") retry_after = std::atof(v.c_str());
  caf::anon_send(runner_, line_answer{batch_id_, index_, status, std::move(body), retry_after});
}

void batch_exchange::begin_stream(const header_list&) {
  respond(500, R"({"error":{"message":"A batch line cannot stream.","type":"server_error","param":null,"code":null}})");
}

void batch_exchange::end_stream(int status, std::string_view last) {
  if (!done_) respond(status >= 400 ? status : 500, std::string(last));
}

void batch_exchange::post(std::function<void()> fn) {
  strand_([self = shared_from_this(), fn = std::move(fn)] {
    if (!self->done_) fn();
  });
}

void batch_exchange::after(int ms, std::function<void()> fn) {
  caf::anon_send(runner_, line_timer{ms, [self = shared_from_this(), fn = std::move(fn)]() mutable { self->post(std::move(fn)); }});
}

void batch_exchange::interrupt() {
  strand_([self = shared_from_this()] {
    if (self->done_ || !self->interrupt_) return;
    self->interrupt_(interruption::shutdown);
  });
}

}  // namespace kiln::net
