#include "actors/replica.hpp"

#include <chrono>

#include <caf/all.hpp>

namespace kiln::actors {

namespace {
constexpr auto kReportEvery = std::chrono::seconds(1);
}

caf::behavior replica(caf::stateful_actor<replica_state>* self, std::string replica_id,
                      caf::actor engine, caf::actor router) {
  self->state.replica_id = std::move(replica_id);
  self->state.engine = engine;
  self->state.router = router;
  // The replica lives and dies with its engine (supervision comes with the failover work).
  self->link_to(engine);
  self->send(self, tick_atom::value);
  return {
      [self](chat_job& job) {
        self->state.forwarded_tokens += job_tokens(job);
        self->send(self->state.engine, std::move(job));
      },
      [self](tick_atom) {
        // The engine answers after every job forwarded so far: its figures include them.
        const std::int64_t forwarded = self->state.forwarded_tokens;
        self->request(self->state.engine, caf::infinite, stats_atom::value)
            .then([self, forwarded](std::int32_t waiting, std::int32_t running, std::int64_t in_flight) {
              self->send(self->state.router,
                         load_report{self->state.replica_id, waiting, running, in_flight, forwarded});
            });
        self->delayed_send(self, kReportEvery, tick_atom::value);
      },
  };
}

}  // namespace kiln::actors
