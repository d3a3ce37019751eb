#include "actors/router_shard.hpp"

#include <algorithm>

#include <caf/all.hpp>
#include <xxhash.h>

namespace kiln::actors {

namespace {

constexpr double kLoadBound = 1.25;     // seed 000: skip replicas above 1.25x the average
constexpr std::size_t kKeyTokens = 64;  // prompt tokens that make a key without a conversation id

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  const std::uint64_t both[2] = {a, b};
  return XXH3_64bits(both, sizeof both);
}

}  // namespace

std::uint64_t affinity_key(const chat_job& job) {
  const std::uint64_t team = XXH3_64bits(job.team.data(), job.team.size());
  if (!job.conversation_id.empty())
    return mix(team, XXH3_64bits(job.conversation_id.data(), job.conversation_id.size()));
  const std::size_t n = std::min(job.prompt.size(), kKeyTokens);
  return mix(team, XXH3_64bits(job.prompt.data(), n * sizeof(std::int32_t)));
}

int router_shard_state::pick(std::uint64_t key, std::int64_t tokens) const {
  if (replicas.empty()) return -1;
  std::int64_t total = tokens;
  for (const auto& e : replicas) total += e.load();
  const double bound = kLoadBound * static_cast<double>(total) / static_cast<double>(replicas.size());
  int best = -1, least = 0;
  std::uint64_t best_score = 0;
  for (std::size_t i = 0; i < replicas.size(); ++i) {
    const auto& e = replicas[i];
    if (e.load() < replicas[static_cast<std::size_t>(least)].load()) least = static_cast<int>(i);
    if (static_cast<double>(e.load()) > bound) continue;
    const std::uint64_t score = mix(key, XXH3_64bits(e.replica_id.data(), e.replica_id.size()));
    if (best < 0 || score > best_score) {
      best = static_cast<int>(i);
      best_score = score;
    }
  }
  return best >= 0 ? best : least;
}

void router_shard_state::on_report(const load_report& r) {
  for (auto& e : replicas) {
    if (e.replica_id != r.replica_id) continue;
    e.reported = r.tokens_in_flight;
    e.acked = std::max(e.acked, r.forwarded_tokens);
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
          st.replicas.push_back({set.replicas[i], set.ids[i], 0, 0, 0, 0});
      },
      [self](chat_job& job) {
        auto& st = self->state;
        const std::int64_t tokens = job_tokens(job);
        const int i = st.pick(affinity_key(job), tokens);
        if (i < 0) {
          self->send(job.sink, stream_error{job.id, 503, "server_error",
                                            "no replica is serving model " + st.model, "",
                                            "no_replica", job.team});
          return;
        }
        auto& e = st.replicas[static_cast<std::size_t>(i)];
        e.sent += tokens;
        self->send(e.replica, std::move(job));
      },
      [self](load_report& r) { self->state.on_report(r); },
  };
}

}  // namespace kiln::actors
