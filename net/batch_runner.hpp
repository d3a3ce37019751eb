#pragma once
// OpenAI batches on idle capacity. The node's batch manager hands each batch to its model's
// runner (one actor per model), which feeds the batch's lines to the endpoint's own handler
// (net/batch_exchange.hpp) at the batch tier, only while the model's online requests wait
// nowhere and leave room (admission's batch_room): up to batch.max_in_flight lines while no
// online request runs, a quarter of that beside online requests, and never past
// batch.idle_below of the pools' capacity with the online requests. Each answer is appended to the batch's
// output or error file as one whole line; what those files hold is what is done, so after a
// restart (or kill -9) a batch goes on from there: no line runs to an answer twice, none is
// lost. Lines not answered by the deadline end as batch_expired.
#include <cstdint>
#include <string>

#include <caf/actor.hpp>
#include <caf/meta/type_name.hpp>

#include "config/batch_rows.hpp"

namespace kiln::net {

struct front;

/// A stored batch to run (new, or found open after a restart).
struct batch_run {
  config::batch_row row;
};
/// Cancel a batch this node runs: answers its row (cancelling), or unknown_model when it is
/// not running here.
struct batch_cancel {
  std::string id;
  std::string team;
};

/// The node's manager: resumes this node's open batches from the store at start. `unix_now`:
/// the wall clock now, from which the actors count their timestamps on their own clock.
caf::actor spawn_batches(front& f, std::int64_t unix_now);

/// The ids a batch's files get: "file-" and 24 hex digits of the batch id and `what`.
std::string batch_file_id(const std::string& batch_id, const std::string& what);

}  // namespace kiln::net

#include <caf/allowed_unsafe_message_type.hpp>
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::net::batch_run)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(kiln::net::batch_cancel)
