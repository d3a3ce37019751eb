#include "actors/ownership.hpp"

#include <algorithm>

namespace kiln::actors {

owned_request* ownership::find(const request_id& id) {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

owned_request* ownership::find(const request_id& id, std::uint8_t attempt) {
  owned_request* o = find(id);
  return o && o->req.attempt == attempt ? o : nullptr;
}

owned_request& ownership::add(request r, caf::actor_clock::time_point now) {
  const request_id id = r.id;
  owned_request o;
  o.req = std::move(r);
  o.since = now;
  auto [it, fresh] = by_id_.insert_or_assign(id, std::move(o));
  return it->second;
}

void ownership::erase(const request_id& id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  if (it->second.retried) --retrying_;
  by_id_.erase(it);
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
  std::vector<request_id> out;
  for (const auto& [id, o] : by_id_)
    if (o.engine && o.engine.address() == engine) out.push_back(id);
  return out;
}

}  // namespace kiln::actors
