#include "actors/stream_sink.hpp"

#include <caf/all.hpp>

#include "actors/node_supervisor.hpp"
#include "actors/one_way.hpp"

namespace kiln::actors {

namespace {

caf::behavior stream_sink(caf::event_based_actor*, std::shared_ptr<stream_target> target) {
  return {
      [target](stream_tokens& ev) -> one_way {
        target->on_tokens(std::move(ev));
        return handled;
      },
      [target](stream_batch& b) -> one_way {
        for (auto& ev : b.items) target->on_tokens(std::move(ev));
        return handled;
      },
      [target](stream_end& ev) -> one_way {
        target->on_end(std::move(ev));
        return handled;
      },
      [target](stream_error& ev) -> one_way {
        target->on_error(std::move(ev));
        return handled;
      },
      [target](rate_limit_info& ev) -> one_way {
        target->on_rate_limit(ev);
        return handled;
      },
  };
}

}  // namespace

caf::actor spawn_stream_sink(caf::actor_system& sys, std::shared_ptr<stream_target> target) {
  return sys.spawn(stream_sink, std::move(target));
}

void stop_sink(const caf::actor& sink) {
  if (sink) caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

bool submit(caf::actor_system& sys, request r) {
  auto admission = caf::actor_cast<caf::actor>(sys.registry().get(balancer_name));
  if (!admission) admission = caf::actor_cast<caf::actor>(sys.registry().get(admission_name));
  if (!admission) return false;
  caf::anon_send(admission, std::move(r));
  return true;
}

}  // namespace kiln::actors
