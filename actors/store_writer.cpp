#include "actors/store_writer.hpp"

#include <cstdio>
#include <optional>

#include <caf/all.hpp>

#include "actors/admission.hpp"
#include "actors/batch_calls.hpp"
#include "actors/node_supervisor.hpp"
#include "actors/region_limits.hpp"
#include "config/snapshot.hpp"

namespace kiln::actors {

namespace {

using stateful = caf::stateful_actor<store_writer_state>;

// What a call that changes the tenancy brings back: an error, or the tenancy after it.
struct changed {
  std::optional<std::string> error;
  config::tenancy tenants;
};

void publish(stateful* self, config::tenancy t) {
  auto& st = self->state;
  st.board->set(t);
  if (st.node) self->send(st.node, tenancy_update{st.board->get()});
}

bool team_known(stateful* self, const std::string& team) { return self->state.board->get()->team(team) != nullptr; }

// A store that other nodes share changes under this node too: its tenancy is read again every
// few seconds and published when it differs (by content) from what the board holds.
using reread_atom = caf::atom_constant<caf::atom("reread")>;
constexpr auto kRereadEvery = std::chrono::seconds(2);

// Limits across regions: every few seconds, what this region's teams asked for goes into the
// shared store and this region's shares come back to its admission (config/region_shares.hpp).
using shares_atom = caf::atom_constant<caf::atom("shares")>;
constexpr std::int64_t kRegionUseFresh_s = 30;  ///< a region that reported within this is live

using shares = std::map<std::pair<std::string, std::string>, double>;

// What a region's teams asked for goes into the store; the region's shares come back.
void record_use(stateful* self, region_use_report rep, std::function<void(shares&)> then) {
  on_disk<shares>(
      self,
      [rep = std::move(rep), limits = self->state.board->get()](config::store& s) {
        if (auto e = s.put_region_use(rep.region, rep.rows))
          std::fprintf(stderr, "kiln: cannot record region %s's use: %s\n", rep.region.c_str(), e->c_str());
        return config::region_shares(rep.region, s.region_use(kRegionUseFresh_s), *limits);
      },
      std::move(then));
}

void exchange_shares(stateful* self) {
  self->delayed_send(self, kRegionSharesEvery, shares_atom::value);
  exchange_region_shares(self, caf::actor_cast<caf::actor>(self->system().registry().get(admission_name)),
                         caf::actor_cast<caf::actor>(self));
}

std::uint64_t digest(const config::tenancy& t) {
  config::config_snapshot s;
  s.tenants = t;
  return config::content_version(s);
}

}  // namespace

void refresh_registry(stateful* self) {
  if (!self->state.registry) return;
  on_disk<config::registry_view>(
      self,
      [](config::store& s) {
        config::registry_view v;
        v.routes = s.routes();
        for (const auto& r : v.routes)
          for (const std::string* name : {&r.live, &r.canary, &r.shadow, &r.previous})
            if (!name->empty())
              if (auto mv = s.version(r.model, *name)) v.versions.push_back(std::move(*mv));
        return v;
      },
      [self](config::registry_view& v) { self->state.registry->set(std::move(v)); });
}

caf::behavior store_writer(stateful* self, std::shared_ptr<config::store> db, std::shared_ptr<config::tenancy_board> board,
                           caf::actor node, std::shared_ptr<config::registry_board> registry) {
  auto& st = self->state;
  st.registry = std::move(registry);
  st.db = std::move(db);
  st.thread = make_thread_loader(1);
  st.board = std::move(board);
  st.node = std::move(node);
  refresh_registry(self);
  if (st.db->shared()) {
    self->send(self, reread_atom::value);
    self->send(self, shares_atom::value);
  }
  caf::message_handler tenancy_calls{
      [self](shares_atom) { exchange_shares(self); },
      [self](region_use_report& rep) -> caf::result<region_shares_update> {
        // A router node apart from this control node (cluster/control_link).
        auto rp = self->make_response_promise<region_shares_update>();
        record_use(self, std::move(rep), [rp](shares& sh) mutable { rp.deliver(region_shares_update{std::move(sh)}); });
        return rp;
      },
      [self](reread_atom) {
        on_disk<config::tenancy>(
            self, [](config::store& s) { return s.load_tenancy(); },
            [self](config::tenancy& t) {
              if (digest(t) != digest(*self->state.board->get())) publish(self, std::move(t));
              self->delayed_send(self, kRereadEvery, reread_atom::value);
            });
      },
      [self](stored_atom, std::uint64_t ticket) {
        auto it = self->state.pending.find(ticket);
        if (it == self->state.pending.end()) return;
        auto done = std::move(it->second);
        self->state.pending.erase(it);
        done();
      },
      [self](get_limits& q) -> caf::result<std::vector<config::team_limit>> {
        const auto t = self->state.board->get();
        const config::team_config* team = t->team(q.team);
        if (!team) return make_error(errc::unknown_model, "No team named " + q.team + ".");
        return team->limits;
      },
      [self](put_limit& p) -> caf::result<std::vector<config::team_limit>> {
        const auto t = self->state.board->get();
        if (!t->team(p.team)) return make_error(errc::unknown_model, "No team named " + p.team + ".");
        double shares = p.limit.guaranteed_share;
        for (const auto& other : t->teams)
          if (other.name != p.team)
            if (const auto* l = other.limit_for(p.limit.model)) shares += l->guaranteed_share;
        if (shares > 1 + 1e-9)
          return make_error(errc::invalid_request, "The guaranteed shares of " + p.limit.model +
                                                       " would add up to more than 1.");
        auto rp = self->make_response_promise<std::vector<config::team_limit>>();
        on_disk<changed>(
            self,
            [p](config::store& s) {
              changed c;
              c.error = s.put_limit(p.team, p.limit);
              c.tenants = s.load_tenancy();
              return c;
            },
            [self, rp, team = p.team](changed& c) mutable {
              if (c.error) {
                rp.deliver(make_error(errc::internal, "The store refused the limit: " + *c.error));
                return;
              }
              publish(self, c.tenants);
              rp.deliver(c.tenants.team(team)->limits);
            });
        return rp;
      },
      [self](create_team& c) -> caf::result<team_created> {
        if (team_known(self, c.team)) return make_error(errc::invalid_request, "Team " + c.team + " exists already.");
        auto rp = self->make_response_promise<team_created>();
        const std::string key = config::new_api_key();
        on_disk<std::pair<changed, std::string>>(
            self,
            [c, key](config::store& s) {
              std::pair<changed, std::string> out;
              out.first.error = s.add_team(c.team, c.name.empty() ? c.team : c.name, c.max_priority);
              if (!out.first.error) {
                auto id = s.add_key(c.team, key);
                if (id.index() == 1) out.first.error = std::get<1>(id);
                else out.second = std::get<0>(id);
              }
              out.first.tenants = s.load_tenancy();
              return out;
            },
            [self, rp, team = c.team, key](std::pair<changed, std::string>& r) mutable {
              if (r.first.error) {
                rp.deliver(make_error(errc::internal, "The store refused the team: " + *r.first.error));
                return;
              }
              publish(self, r.first.tenants);
              rp.deliver(team_created{team, key, r.second});
            });
        return rp;
      },
      [self](revoke_key& r) -> caf::result<std::string> {
        if (!team_known(self, r.team)) return make_error(errc::unknown_model, "No team named " + r.team + ".");
        auto rp = self->make_response_promise<std::string>();
        on_disk<std::pair<bool, config::tenancy>>(
            self,
            [r](config::store& s) {
              const bool revoked = s.revoke_key(r.team, r.key_id);  // before the tenancy is read back
              return std::make_pair(revoked, s.load_tenancy());
            },
            [self, rp, r](std::pair<bool, config::tenancy>& out) mutable {
              if (!out.first) {
                rp.deliver(make_error(errc::unknown_model, "Team " + r.team + " has no live key " + r.key_id + "."));
                return;
              }
              publish(self, out.second);
              rp.deliver(r.key_id);
            });
        return rp;
      },
      [self](usage_fold& f) -> caf::result<std::uint64_t> {
        auto rp = self->make_response_promise<std::uint64_t>();
        on_disk<std::variant<config::usage_folded, std::string>>(
            self, [f](config::store& s) { return s.fold_usage(f.ledger, f.from_seq, f.through_seq, f.records); },
            [rp](std::variant<config::usage_folded, std::string>& r) mutable {
              if (auto* err = std::get_if<std::string>(&r)) {
                rp.deliver(make_error(errc::internal, "The store refused usage rows: " + *err));
                return;
              }
              const auto& done = std::get<config::usage_folded>(r);
              if (done.duplicates > 0)
                std::fprintf(stderr, "kiln: usage: %lld records of requests another node had metered counted once\n",
                             static_cast<long long>(done.duplicates));
              rp.deliver(done.watermark);
            });
        return rp;
      },
      [self](usage_query& q) -> caf::result<std::vector<config::usage_row>> {
        if (!team_known(self, q.team)) return make_error(errc::unknown_model, "No team named " + q.team + ".");
        auto rp = self->make_response_promise<std::vector<config::usage_row>>();
        on_disk<std::vector<config::usage_row>>(
            self, [q](config::store& s) { return s.usage(q.team, q.model, q.from_minute, q.to_minute); },
            [rp](std::vector<config::usage_row>& rows) mutable { rp.deliver(std::move(rows)); });
        return rp;
      },
  };
  return caf::behavior{
      tenancy_calls.or_else(registry_calls(self)).or_else(pool_limits_calls(self)).or_else(batch_calls(self))};
}

}  // namespace kiln::actors
