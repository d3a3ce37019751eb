#include "actors/supervisor.hpp"

#include <caf/all.hpp>

namespace kiln::actors {

restart_plan plan_restart(const supervisor_flags& flags, const std::vector<restart_policy>& policies,
                          std::size_t index, bool abnormal, caf::actor_clock::time_point now,
                          std::deque<caf::actor_clock::time_point>& history) {
  restart_plan plan;
  bool restart = false;
  switch (policies[index]) {
    case restart_policy::permanent: restart = true; break;
    case restart_policy::transient: restart = abnormal; break;
    case restart_policy::temporary: restart = false; break;
  }
  if (!restart) return plan;
  while (!history.empty() && now - history.front() > flags.period) history.pop_front();
  if (static_cast<int>(history.size()) >= flags.intensity) {
    plan.escalate = true;
    for (std::size_t i = policies.size(); i-- > 0;)
      if (i != index) plan.stop.push_back(i);
    return plan;
  }
  history.push_back(now);
  switch (flags.strategy) {
    case restart_strategy::one_for_one:
      plan.start.push_back(index);
      break;
    case restart_strategy::rest_for_one:
      for (std::size_t i = policies.size(); i-- > index + 1;) plan.stop.push_back(i);
      plan.start.push_back(index);
      for (std::size_t i = index + 1; i < policies.size(); ++i)
        if (policies[i] != restart_policy::temporary) plan.start.push_back(i);
      break;
  }
  return plan;
}

bool abnormal_exit(const caf::error& reason) {
  return reason && reason != caf::exit_reason::normal && reason != caf::exit_reason::user_shutdown;
}

supervisor::supervisor(supervisor_flags flags, std::vector<child_spec> specs)
    : flags_(flags), specs_(std::move(specs)) {
  for (const auto& s : specs_) policies_.push_back(s.restart);
  children_->resize(specs_.size());
}

void supervisor::start_all(caf::local_actor* self) {
  if (!attached_) {
    attached_ = true;
    self->attach_functor([children = children_] {
      for (auto& c : *children)
        if (c.handle) caf::anon_send_exit(c.handle, caf::exit_reason::user_shutdown);
    });
  }
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (!(*children_)[i].handle) start_child(self, i);
}

void supervisor::start_child(caf::local_actor* self, std::size_t i) {
  caf::actor a = specs_[i].start(self);
  (*children_)[i] = {a, a.address()};
  if (a) self->monitor(a);
}

void supervisor::stop_child(std::size_t i) {
  auto& c = (*children_)[i];
  if (c.handle) caf::anon_send_exit(c.handle, caf::exit_reason::user_shutdown);
  c = {};  // its down message is no longer ours
}

std::size_t supervisor::index_of(const std::string& id) const {
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].id == id) return i;
  return specs_.size();
}

supervisor::outcome supervisor::on_down(caf::local_actor* self, const caf::actor_addr& who, const caf::error& reason) {
  outcome out;
  std::size_t i = 0;
  while (i < children_->size() && (*children_)[i].addr != who) ++i;
  if (i == children_->size() || !who) return out;
  out.ours = true;
  out.id = specs_[i].id;
  (*children_)[i] = {};
  const restart_plan plan = plan_restart(flags_, policies_, i, abnormal_exit(reason), self->clock().now(), history_);
  for (std::size_t k : plan.stop) stop_child(k);
  if (plan.escalate) {
    out.escalate = true;
    return out;
  }
  if (!plan.start.empty()) ++restarts_;
  for (std::size_t k : plan.start) {
    start_child(self, k);
    out.restarted.push_back(specs_[k].id);
  }
  return out;
}

void supervisor::stop(caf::local_actor*, const std::string& id) {
  if (const std::size_t i = index_of(id); i < specs_.size()) stop_child(i);
}

void supervisor::stop_all(caf::local_actor*) {
  for (std::size_t i = specs_.size(); i-- > 0;) stop_child(i);
}

bool supervisor::add(caf::local_actor* self, child_spec spec) {
  if (index_of(spec.id) < specs_.size()) return false;
  policies_.push_back(spec.restart);
  specs_.push_back(std::move(spec));
  children_->emplace_back();
  start_child(self, specs_.size() - 1);
  return true;
}

bool supervisor::start(caf::local_actor* self, const std::string& id) {
  const std::size_t i = index_of(id);
  if (i == specs_.size() || (*children_)[i].handle) return false;
  start_child(self, i);
  return true;
}

std::vector<std::string> supervisor::revive(caf::local_actor* self) {
  history_.clear();
  std::vector<std::string> started;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if ((*children_)[i].handle) continue;
    start_child(self, i);
    started.push_back(specs_[i].id);
  }
  return started;
}

caf::actor supervisor::child(const std::string& id) const {
  const std::size_t i = index_of(id);
  return i < specs_.size() ? (*children_)[i].handle : caf::actor{};
}

}  // namespace kiln::actors
