#pragma once
// Asking an actor from outside any actor (the front's admin handlers): a one-shot actor
// sends the request and hands the answer, or the error, to a callback that runs on a CAF
// thread. Nothing blocks.
#include <functional>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/expected.hpp>
#include <caf/result.hpp>
#include <caf/typed_response_promise.hpp>

namespace kiln::actors {

template <class Reply, class Msg>
void ask(caf::actor_system& sys, const caf::actor& target, Msg msg, caf::timespan timeout,
         std::function<void(caf::expected<Reply>)> done) {
  if (!target) return done(caf::make_error(caf::sec::invalid_argument, "nothing answers this (kiln is stopping)"));
  sys.spawn([target, msg = std::move(msg), timeout, done = std::move(done)](caf::event_based_actor* self) {
    self->request(target, timeout, msg)
        .then(
            [self, done](Reply& r) {
              done(std::move(r));
              self->quit();
            },
            [self, done](caf::error& e) {
              done(std::move(e));
              self->quit();
            });
  });
}

/// Inside an actor: asks `target` and answers the request being handled with what it answers,
/// or with its error (a timeout included).
template <class Answer, class Self, class Msg>
caf::result<Answer> pass_on(Self* self, const caf::actor& target, Msg msg, caf::timespan timeout) {
  auto rp = self->template make_response_promise<Answer>();
  self->request(target, timeout, std::move(msg))
      .then([rp](Answer& a) mutable { rp.deliver(std::move(a)); }, [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

/// The text of an error's context (what make_error was given), else its rendering.
std::string error_text(caf::actor_system& sys, const caf::error& e);

}  // namespace kiln::actors
