// The store writer's registry calls. A registration comes hashed by the node that registers
// it (reading every weight file takes seconds: never on the writer's thread, which other
// calls wait on, nor on a control node that does not hold the files).
#include "actors/registry_calls.hpp"

#include <caf/all.hpp>

#include "actors/request.hpp"
#include "actors/rollout.hpp"
#include "actors/store_writer.hpp"

namespace kiln::actors {

namespace {

using stateful = caf::stateful_actor<store_writer_state>;

struct registration {
  config::store::registered stored;
  std::string mismatch;  ///< the hashes given do not match the files (400)
};

std::string listing(const config::model_hashes& h) {
  std::string out;
  for (const auto& f : h.files) out += (out.empty() ? "" : ", ") + f.file + " " + f.sha256;
  return out;
}

registration register_hashed(config::store& s, config::model_version v, const config::model_hashes& h,
                             const std::string& where) {
  registration r;
  if (h.weights_hash != v.weights_hash) {
    r.mismatch = "weights_hash " + v.weights_hash + " does not match the files under " + where + " (weights hash " +
                 h.weights_hash + " over " + listing(h) + ")";
    return r;
  }
  if (h.tokenizer_hash != v.tokenizer_hash) {
    r.mismatch = "tokenizer_hash " + v.tokenizer_hash + " does not match " + where + "/tokenizer.json (" +
                 (h.tokenizer_hash.empty() ? std::string("missing") : h.tokenizer_hash) + ")";
    return r;
  }
  v.files = h.files;
  v.chat_template_hash = v.chat_template.empty() ? "" : config::sha256_hex(v.chat_template);
  r.stored = s.register_version(v);
  return r;
}

}  // namespace

caf::message_handler registry_calls(stateful* self) {
  return {
      [self](register_version_call& c) -> caf::result<version_registered> {
        auto rp = self->make_response_promise<version_registered>();
        on_disk<registration>(
            self, [c](config::store& s) { return register_hashed(s, c.version, c.hashed, c.where); },
            [rp](registration& r) mutable {
              if (!r.mismatch.empty()) {
                rp.deliver(make_error(errc::invalid_request, r.mismatch));
                return;
              }
              if (!r.stored.conflict.empty()) {
                rp.deliver(make_error(errc::conflict, r.stored.conflict));
                return;
              }
              if (!r.stored.error.empty())
                {
                rp.deliver(make_error(errc::internal, "The store refused the version: " + r.stored.error));
                return;
              }
              rp.deliver(version_registered{r.stored.version, r.stored.created});
            });
        return rp;
      },
      [self](versions_call& c) -> caf::result<std::vector<config::model_version>> {
        auto rp = self->make_response_promise<std::vector<config::model_version>>();
        on_disk<std::vector<config::model_version>>(
            self, [m = c.model](config::store& s) { return s.versions(m); },
            [rp](std::vector<config::model_version>& v) mutable { rp.deliver(std::move(v)); });
        return rp;
      },
      [self](version_call& c) -> caf::result<config::model_version> {
        auto rp = self->make_response_promise<config::model_version>();
        on_disk<std::optional<config::model_version>>(
            self, [c](config::store& s) { return s.version(c.model, c.version); },
            [rp, c](std::optional<config::model_version>& v) mutable {
              if (!v) {
                rp.deliver(make_error(errc::unknown_model, "No version " + c.model + "@" + c.version + " is registered."));
                return;
              }
              rp.deliver(std::move(*v));
            });
        return rp;
      },
      [self](route_write& w) -> caf::result<bool> {
        auto rp = self->make_response_promise<bool>();
        on_disk<std::optional<std::string>>(
            self,
            [w](config::store& s) { return s.put_route(w.route, w.keep_previous_s); },
            [self, rp](std::optional<std::string>& e) mutable {
              if (e) {
                rp.deliver(make_error(errc::internal, "The store refused the route: " + *e));
                return;
              }
              refresh_registry(self);
              rp.deliver(true);
            });
        return rp;
      },
      [self](rollout_write& w) -> caf::result<std::int64_t> {
        auto rp = self->make_response_promise<std::int64_t>();
        on_disk<std::int64_t>(
            self, [w](config::store& s) { return s.add_rollout(w.row); },
            [rp](std::int64_t& seq) mutable { rp.deliver(seq); });
        return rp;
      },
      [self](rollouts_call& c) -> caf::result<std::vector<config::rollout_row>> {
        auto rp = self->make_response_promise<std::vector<config::rollout_row>>();
        on_disk<std::vector<config::rollout_row>>(
            self, [m = c.model](config::store& s) { return s.rollouts(m); },
            [rp](std::vector<config::rollout_row>& v) mutable { rp.deliver(std::move(v)); });
        return rp;
      },
      [self](status_write& w) -> caf::result<bool> {
        auto rp = self->make_response_promise<bool>();
        on_disk<std::optional<std::string>>(
            self, [w](config::store& s) { return s.set_version_status(w.model, w.version, w.status); },
            [self, rp](std::optional<std::string>& e) mutable {
              if (e) {
                rp.deliver(make_error(errc::internal, "The store refused the status: " + *e));
                return;
              }
              refresh_registry(self);
              rp.deliver(true);
            });
        return rp;
      },
      [self](load_test_write& w) -> caf::result<config::model_version> {
        auto rp = self->make_response_promise<config::model_version>();
        on_disk<std::optional<config::model_version>>(
            self,
            [w](config::store& s) -> std::optional<config::model_version> {
              if (s.set_load_test(w.model, w.version, w.tokens_per_s, w.tokens_in_flight)) return std::nullopt;
              return s.version(w.model, w.version);
            },
            [self, rp, w](std::optional<config::model_version>& v) mutable {
              if (!v) {
                rp.deliver(make_error(errc::unknown_model, "No version " + w.model + "@" + w.version + " is registered."));
                return;
              }
              refresh_registry(self);
              rp.deliver(std::move(*v));
            });
        return rp;
      },
  };
}

}  // namespace kiln::actors
