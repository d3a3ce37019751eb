#pragma once
// The requests a router shard owns: where each runs now, which replicas it has tried, and
// whether its first token has left for the client. Plain bookkeeping, tested without actors.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>

#include "actors/id_map.hpp"
#include "actors/request.hpp"

namespace kiln::actors {

struct owned_request {
  request req;                      ///< kept whole for a retry
  std::vector<std::string> tried;   ///< replica ids, in the order it was sent to them
  caf::actor engine;                ///< where it runs now (null: not sent yet)
  caf::actor admission;             ///< hears how it ended (refund, slot)
  bool first_token = false;         ///< tokens may have reached the client: no retry
  bool retried = false;             ///< counts against the retry budget until it ends
  caf::actor_clock::time_point since;
  double ttft_s = -1;               ///< seconds from `since` to its first token
};

/// At most this many attempts per request (the first and two retries).
inline constexpr std::size_t kMaxAttempts = 3;

class ownership {
 public:
  owned_request* find(const request_id& id);
  /// The request, if `attempt` is its current attempt (stale reports find nothing).
  owned_request* find(const request_id& id, std::uint8_t attempt);
  owned_request& add(request r, caf::actor_clock::time_point now);
  void erase(const request_id& id);
  /// Marks a request as about to be sent again (its retry is in flight until it ends).
  void begin_retry(owned_request& o);

  std::size_t active() const { return by_id_.size(); }
  std::size_t retrying() const { return retrying_; }
  /// Retries in flight stay within 20% of active requests, and 3 are always allowed.
  bool retry_allowed() const;
  /// Requests running on `engine`, in id order.
  std::vector<request_id> on_engine(const caf::actor_addr& engine) const;
  /// Every request's id, in id order (the order they came in).
  std::vector<request_id> ids() const;

 private:
  /// Each record on the heap of its own: the pointers find() gives stay good while others
  /// come and go.
  id_map<std::unique_ptr<owned_request>> by_id_;
  std::size_t retrying_ = 0;
};

}  // namespace kiln::actors
