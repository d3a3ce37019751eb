#include "actors/router_shard.hpp"

#include <caf/all.hpp>

namespace kiln::actors {

int router_shard_state::pick() const {
  int best = -1;
  std::int64_t best_load = 0;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    const std::int64_t load = replicas[i].reported + replicas[i].sent_since;
    if (best < 0 || load < best_load) {
      best = static_cast<int>(i);
      best_load = load;
    }
  }
  return best;
}

void router_shard_state::on_report(const load_report& r) {
  for (auto& e : replicas) {
    if (e.replica_id != r.replica_id) continue;
    e.reported = r.tokens_in_flight;
    e.sent_since = 0;
    e.queue_depth = r.queue_depth;
  }
}

caf::behavior router_shard(caf::stateful_actor<router_shard_state>* self, std::string model) {
  self->state.model = std::move(model);
  return {
      [self](replica_set& set) {
        auto& st = self->state;
        st.replicas.clear();
        for (std::size_t i = 0; i < set.replicas.size(); ++i)
          st.replicas.push_back({set.replicas[i], set.ids[i], 0, 0, 0});
      },
      [self](chat_job& job) {
        auto& st = self->state;
        const int i = st.pick();
        if (i < 0) {
          self->send(job.sink, stream_error{job.id, 503, "server_error",
                                            "no replica is serving model " + st.model, "",
                                            "no_replica", job.team});
          return;
        }
        auto& e = st.replicas[static_cast<std::size_t>(i)];
        e.sent_since += static_cast<std::int64_t>(job.prompt.size()) + job.max_tokens;
        self->send(e.replica, std::move(job));
      },
      [self](load_report& r) { self->state.on_report(r); },
  };
}

}  // namespace kiln::actors
