#include "actors/ownership.hpp"

#include <algorithm>

namespace kiln::actors {

owned_request* ownership::find(const request_id& id) {
  const auto* o = by_id_.find(id);
  return o ? o->get() : nullptr;
}

owned_request* ownership::find(const request_id& id, std::uint8_t attempt) {
  owned_request* o = find(id);
  return o && o->req.attempt == attempt ? o : nullptr;
}

owned_request& ownership::add(request r, caf::actor_clock::time_point now) {
  std::unique_ptr<owned_request>& kept = by_id_[r.id];
  kept = std::make_unique<owned_request>();  // an id added again starts afresh
  owned_request& o = *kept;
  o.req = std::move(r);
  o.since = now;
  return o;
}

void ownership::erase(const request_id& id) {
  const auto gone = by_id_.take(id);
  if (gone && (*gone)->retried) --retrying_;
}

void ownership::begin_retry(owned_request& o) {
  if (o.retried) return;  // a second retry is the same retry still in flight
  o.retried = true;
  ++retrying_;
}

bool ownership::retry_allowed() const {
  const std::size_t budget = std::max<std::size_t>(3, by_id_.size() / 5);
  return retrying_ < budget;
}

std::vector<request_id> ownership::on_engine(const caf::actor_addr& engine) const {
  return by_id_.sorted_keys([&](const request_id&, const std::unique_ptr<owned_request>& o) {
    return o->engine && o->engine.address() == engine;
  });
}

std::vector<request_id> ownership::ids() const { return by_id_.sorted_keys(); }

}  // namespace kiln::actors
