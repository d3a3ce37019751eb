#include <algorithm>
#include <caf/all.hpp>
#include <cstdio>

#include "actors/node_supervisor.hpp"
#include "actors/registry_calls.hpp"
#include "actors/request.hpp"
#include "actors/rollout.hpp"

namespace kiln::actors {

namespace {

using stateful = caf::stateful_actor<rollout_state>;
using check_atom = caf::atom_constant<caf::atom("gcheck")>;
using retire_atom = caf::atom_constant<caf::atom("retire")>;

double now_s(stateful* self) { return std::chrono::duration<double>(self->clock().now().time_since_epoch()).count(); }

std::string stats_json(const window_stats& w) {
  char buf[200];
  std::snprintf(buf, sizeof buf, R"({"requests":%lld,"error_rate":%.4f,"ttft_p95_s":%.4f,"mean_output":%.2f})",
                static_cast<long long>(w.requests), w.error_rate, w.ttft_p95_s, w.mean_output);
  return buf;
}

// Writes to the store and waits for its answer (the store answers every call; a plain send
// would bring that answer back as a message nobody expects). A refusal is logged: the route
// in memory stays the one that counts until the next write.
// The store writer as registered now (a restarted one registers again); null without one.
caf::actor store_of(stateful* self) {
  if (!self->state.d.stored) return {};
  return caf::actor_cast<caf::actor>(self->system().registry().get(store_name));
}

template <class Answer = bool, class Write>
void store_write(stateful* self, Write w) {
  const caf::actor store = store_of(self);
  if (!store) return;
  self->request(store, std::chrono::seconds(30), std::move(w))
      .then([](Answer&) {},
            [self](caf::error& e) {
              std::fprintf(stderr, "kiln: rollout %s: the store refused a write: %s\n", self->state.d.model.c_str(),
                           caf::to_string(e).c_str());
            });
}

rollout_view view_of(stateful* self) {
  auto& st = self->state;
  return {st.d.route, st.live.stats(), st.canary.stats(), st.shadow.stats(), st.shadow_live.stats(), st.decisions};
}

void publish(stateful* self, double keep_previous_s = 0) {
  auto& st = self->state;
  self->send(st.d.node, route_update{st.d.route, caf::actor_cast<caf::actor>(self)});
  store_write(self, route_write{st.d.route, keep_previous_s});
}

void decide(stateful* self, const std::string& version, const std::string& stage, double percent,
            const std::string& decision, const std::string& reason, std::string metrics = "{}") {
  auto& st = self->state;
  config::rollout_row row;
  row.model = st.d.model;
  row.version = version;
  row.stage = stage;
  row.percent = percent;
  row.decision = decision;
  row.reason = reason;
  row.guard_metrics = std::move(metrics);
  st.decisions.push_back(row);
  if (st.d.gauges) st.d.gauges->note_rollout({row.model, row.version, row.stage, row.percent, row.decision, row.reason, self->clock().now()});
  store_write<std::int64_t>(self, rollout_write{std::move(row)});
}

void arm_check(stateful* self) {
  auto& st = self->state;
  const bool active = (!st.d.route.canary.empty() && st.d.route.canary_percent > 0) ||
                      (!st.d.route.shadow.empty() && st.d.route.shadow_percent > 0);
  if (!active || st.check_armed) return;
  st.check_armed = true;
  self->delayed_send(
      self, std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(st.d.limits.check_interval_s)),
      check_atom::value);
}

void arm_retire(stateful* self, double seconds) {
  auto& st = self->state;
  ++st.retire_epoch;
  if (st.d.route.previous.empty()) return;
  self->delayed_send(self,
                     std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(std::max(0.0, seconds))),
                     retire_atom::value, st.retire_epoch);
}

// Runs `then` with the registered version, or answers the promise with why there is none.
template <class Then>
void with_version(stateful* self, const std::string& version, caf::response_promise rp, Then then) {
  auto& st = self->state;
  // A configured version is known without the store; a registered one is looked up there.
  for (const auto& v : st.d.known)
    if (v.version == version) {
      then(v);
      return;
    }
  const caf::actor store = store_of(self);
  if (!store) {
    rp.deliver(make_error(errc::unknown_model, "No version " + st.d.model + "@" + version + " is known."));
    return;
  }
  self->request(store, std::chrono::seconds(30), version_call{st.d.model, version})
      .then([then](config::model_version& v) mutable { then(v); },
            [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
}

// Compares one stage's candidate with its baseline; past a guard the stage ends, with a row.
void guard_stage(stateful* self, std::string& version, double& percent, outcome_window& cand_window,
                 outcome_window& base_window, const char* stage, bool clear_base) {
  auto& st = self->state;
  if (version.empty() || percent <= 0) return;
  const window_stats base = base_window.stats(), cand = cand_window.stats();
  auto why = confirmed_breach(base_window, cand_window, st.d.limits);
  if (!why) return;
  const std::string v = version;
  const double pct = percent;
  version.clear();
  percent = 0;
  cand_window.clear();
  if (clear_base) base_window.clear();
  decide(self, v, stage, pct, "rollback", *why,
         R"({"live":)" + stats_json(base) + R"(,"candidate":)" + stats_json(cand) + "}");
  publish(self);
}

void check_guards(stateful* self) {
  auto& st = self->state;
  st.check_armed = false;
  const double now = now_s(self);
  for (auto* win : {&st.live, &st.canary, &st.shadow, &st.shadow_live}) win->trim(now, st.d.limits.guard_window_s);
  auto& r = st.d.route;
  guard_stage(self, r.canary, r.canary_percent, st.canary, st.live, "canary", false);
  guard_stage(self, r.shadow, r.shadow_percent, st.shadow, st.shadow_live, "shadow", true);
  arm_check(self);
}

// Runs `then` with the pool status of a registered, not retired version, after asking the
// node to start its pool; otherwise answers the promise with why not.
template <class Then>
void with_pool(stateful* self, const std::string& model, const std::string& version, caf::response_promise rp,
               Then then) {
  with_version(self, version, rp, [self, model, version, rp, then](const config::model_version& v) mutable {
    if (v.status == "retired") {
      rp.deliver(make_error(errc::conflict, model + "@" + version + " is retired."));
      return;
    }
    self->request(self->state.d.node, std::chrono::seconds(30), ensure_pool{v})
        .then([then](std::string& status) mutable { then(status); },
              [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  });
}

// An order by hand changes the stored route: it waits for a store that answers (a router node
// whose control node is away refuses it with the store's error; the guards' own decisions
// still apply there).
template <class Then>
void when_store_answers(stateful* self, caf::response_promise rp, Then then) {
  const caf::actor store = store_of(self);
  if (!store) return then();
  self->request(store, std::chrono::seconds(5), rollouts_call{self->state.d.model})
      .then([then](std::vector<config::rollout_row>&) mutable { then(); },
            [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
}

caf::result<rollout_view> on_rollout(stateful* self, rollout_order& o) {
  auto& st = self->state;
  if (o.stage != "canary" && o.stage != "shadow")
    return make_error(errc::invalid_request, "'stage' must be shadow or canary.");
  if (!(o.percent >= 0 && o.percent <= 100))
    return make_error(errc::invalid_request, "'percent' must be from 0 to 100.");
  if (o.version == st.d.route.live)
    return make_error(errc::conflict, o.model + "@" + o.version + " is the live version already.");
  auto rp = self->make_response_promise<rollout_view>();
  when_store_answers(self, rp, [self, o, rp]() mutable {
    with_pool(self, o.model, o.version, rp, [self, o, rp](std::string&) mutable {
      auto& st = self->state;
      auto& r = st.d.route;
      const bool canary = o.stage == "canary";
      std::string& ver = canary ? r.canary : r.shadow;
      double& pct = canary ? r.canary_percent : r.shadow_percent;
      std::string decision = o.percent == 0 ? "end" : ver != o.version || pct == 0 ? "start" : "advance";
      if (ver != o.version) {
        (canary ? st.canary : st.shadow).clear();
        if (!canary) st.shadow_live.clear();
      }
      ver = o.percent == 0 ? "" : o.version;
      pct = o.percent;
      decide(self, o.version, o.stage, o.percent, decision, "by hand");
      publish(self);
      arm_check(self);
      rp.deliver(view_of(self));
    });
  });
  return rp;
}

caf::result<rollout_view> on_alias(stateful* self, alias_order& o) {
  auto& st = self->state;
  if (o.version == st.d.route.live) return view_of(self);
  auto rp = self->make_response_promise<rollout_view>();
  // The pool must exist and serve before the alias moves: the old version stays loaded.
  when_store_answers(self, rp, [self, o, rp]() mutable {
    with_pool(self, o.model, o.version, rp, [self, o, rp](std::string& status) mutable {
      auto& st = self->state;
      if (status != "serving") {
        rp.deliver(make_error(errc::unavailable,
                              o.model + "@" + o.version + " is " + status + "; the alias moves once it serves."));
        return;
      }
      auto& r = st.d.route;
      const bool was_canary = r.canary == o.version;
      const bool back = r.previous == o.version;
      r.previous = r.live;
      r.live = o.version;
      if (r.canary == o.version) r.canary.clear(), r.canary_percent = 0;
      if (r.shadow == o.version) r.shadow.clear(), r.shadow_percent = 0;
      st.live.clear();
      st.canary.clear();
      st.shadow.clear();
      st.shadow_live.clear();
      decide(self, o.version, "live", 100,
             was_canary ? "promote"
             : back     ? "rollback"
                        : "alias",
             "by hand; " + r.previous + " kept loaded");
      store_write(self, status_write{st.d.model, o.version, "live"});
      const double keep = st.d.limits.keep_previous_hours * 3600;
      publish(self, keep);
      arm_retire(self, keep);
      arm_check(self);
      rp.deliver(view_of(self));
    });
  });
  return rp;
}

}  // namespace

caf::behavior rollout_controller(stateful* self, rollout_deps deps) {
  auto& st = self->state;
  st.d = std::move(deps);
  self->send(st.d.node, route_update{st.d.route, caf::actor_cast<caf::actor>(self)});
  // A stored route may name registered versions no configured pool serves: start them.
  for (const std::string* v : {&st.d.route.live, &st.d.route.canary, &st.d.route.shadow, &st.d.route.previous}) {
    if (v->empty() || std::any_of(st.d.known.begin(), st.d.known.end(), [&](const auto& k) { return k.version == *v; }))
      continue;
    auto received = std::find_if(st.d.registered.begin(), st.d.registered.end(), [&](const auto& r) { return r.version == *v; });
    if (received != st.d.registered.end()) {
      self->request(st.d.node, std::chrono::seconds(30), ensure_pool{*received}).then([](std::string&) {}, [](caf::error&) {});
      continue;
    }
    const caf::actor store = store_of(self);
    if (!store) continue;
    self->request(store, std::chrono::seconds(30), version_call{st.d.model, *v})
        .then(
            [self](config::model_version& mv) {
              self->request(self->state.d.node, std::chrono::seconds(30), ensure_pool{mv})
                  .then([](std::string&) {}, [](caf::error&) {});
            },
            [self, v = *v](caf::error&) {
              std::fprintf(stderr, "kiln: rollout %s: the stored route names %s, which is not registered\n",
                           self->state.d.model.c_str(), v.c_str());
            });
  }
  arm_check(self);
  if (!st.d.route.previous.empty() && st.d.previous_left_s >= 0) arm_retire(self, st.d.previous_left_s);
  return {
      [self](rollout_order& o) { return on_rollout(self, o); },
      [self](alias_order& o) { return on_alias(self, o); },
      [self](rollout_query&) { return view_of(self); },
      [self](outcome_report& r) {
        auto& st = self->state;
        r.sample.at = now_s(self);
        if (r.shadow) {
          if (r.version == st.d.route.shadow) st.shadow.add(r.sample);
          return;
        }
        if (r.version == st.d.route.live) {
          st.live.add(r.sample);
          if (!st.d.route.shadow.empty()) st.shadow_live.add(r.sample);
        } else if (r.version == st.d.route.canary) {
          st.canary.add(r.sample);
        }
      },
      [self](check_atom) { check_guards(self); },
      [self](retire_atom, std::uint64_t epoch) {
        auto& st = self->state;
        auto& r = st.d.route;
        if (epoch != st.retire_epoch || r.previous.empty() || r.previous == r.live || r.previous == r.canary ||
            r.previous == r.shadow)
          return;
        const std::string v = r.previous;
        r.previous.clear();
        r.previous_until = 0;
        decide(self, v, "retired", 0, "retire", "kept loaded for its time after the alias moved; drained");
        store_write(self, status_write{st.d.model, v, "retired"});
        self->send(st.d.node, retire_pool{st.d.model, v});
        publish(self);
      },
  };
}

}  // namespace kiln::actors
