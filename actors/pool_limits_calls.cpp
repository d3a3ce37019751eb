// The store writer's calls for the `pools` table: operators set a pool's bounds and warm
// replicas; each autoscaler reads them with its version's gated capacity.
#include <caf/all.hpp>

#include "actors/registry_calls.hpp"
#include "actors/request.hpp"
#include "actors/store_writer.hpp"
#include "actors/upstream_calls.hpp"

namespace kiln::actors {

namespace {

using stateful = caf::stateful_actor<store_writer_state>;

struct limits_stored {
  std::string error;
  config::pool_limits row;
};

}  // namespace

caf::message_handler pool_limits_calls(stateful* self) {
  return {
      [self](pool_limits_write& w) -> caf::result<config::pool_limits> {
        auto rp = self->make_response_promise<config::pool_limits>();
        if (auto why = config::check_pool_limits(w.limits); !why.empty()) {
          rp.deliver(make_error(errc::invalid_request, why));
          return rp;
        }
        on_disk<limits_stored>(
            self,
            [l = w.limits](config::store& s) {
              limits_stored out;
              if (auto e = s.put_pool_limits(l)) out.error = *e;
              else if (auto row = s.pool_limits_of(l.model, l.version, l.region)) out.row = *row;
              return out;
            },
            [rp](limits_stored& r) mutable {
              if (!r.error.empty()) rp.deliver(make_error(errc::internal, "The store refused the pool's limits: " + r.error));
              else rp.deliver(std::move(r.row));
            });
        return rp;
      },
      [self](pool_upstreams_write& w) -> caf::result<bool> {
        auto rp = self->make_response_promise<bool>();
        on_disk<std::string>(
            self,
            [w](config::store& s) { return s.put_pool_upstreams(w.model, w.version, w.region, w.urls).value_or(""); },
            [rp](std::string& error) mutable {
              if (!error.empty()) rp.deliver(make_error(errc::internal, "The store refused the pool's upstreams: " + error));
              else rp.deliver(true);
            });
        return rp;
      },
      [self](pool_upstreams_call& c) -> caf::result<pool_upstreams> {
        auto rp = self->make_response_promise<pool_upstreams>();
        on_disk<pool_upstreams>(
            self,
            [c](config::store& s) {
              pool_upstreams out;
              if (auto urls = s.pool_upstreams_of(c.model, c.version, c.region)) {
                out.stored = true;
                out.urls = std::move(*urls);
              }
              return out;
            },
            [rp](pool_upstreams& u) mutable { rp.deliver(std::move(u)); });
        return rp;
      },
      [self](pool_limits_call&) -> caf::result<std::vector<config::pool_limits>> {
        auto rp = self->make_response_promise<std::vector<config::pool_limits>>();
        on_disk<std::vector<config::pool_limits>>(
            self, [](config::store& s) { return s.all_pool_limits(); },
            [rp](std::vector<config::pool_limits>& v) mutable { rp.deliver(std::move(v)); });
        return rp;
      },
      [self](scale_settings_call& c) -> caf::result<scale_settings> {
        auto rp = self->make_response_promise<scale_settings>();
        on_disk<scale_settings>(
            self,
            [c](config::store& s) {
              scale_settings out;
              if (auto l = s.pool_limits_of(c.model, c.version, c.region)) {
                out.has_limits = true;
                out.limits = *l;
              }
              if (auto v = s.version(c.model, c.version)) out.gated_tokens_in_flight = v->load_test_tokens_in_flight;
              return out;
            },
            [rp](scale_settings& v) mutable { rp.deliver(std::move(v)); });
        return rp;
      },
  };
}

}  // namespace kiln::actors
