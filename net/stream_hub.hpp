#pragma once
// The front's one sink for every stream it serves: engines send it one message per step with
// the tokens of all its streams (stream_batch), owners and admission their ends, errors and
// limits. With one I/O thread it hands them on through an io_lane (in order, a slice at a time,
// first tokens ahead); with several, to each stream's connection strand. A request is attached before it is submitted and
// detached when its call ends; what arrives for a detached request is dropped.
#include <functional>
#include <memory>

#include <caf/actor.hpp>

#include "actors/request.hpp"
#include "actors/stream_sink.hpp"

namespace caf { class actor_system; }

namespace kiln::net {

/// Runs work where it must run (the I/O thread, or a connection's strand).
using run_fn = std::function<void(std::function<void()>)>;

/// `on_io_thread` (with one I/O thread, optional): true where the hub runs on the I/O thread
/// itself (the actors on the I/O thread); it then writes what waits behind nothing at once.
caf::actor spawn_stream_hub(caf::actor_system& sys, run_fn post_io, bool one_io_thread,
                            std::function<bool()> on_io_thread = nullptr);
/// A request's target (held until its end, error or detach) and how to reach its connection's
/// strand; before it is submitted.
void hub_attach(const caf::actor& hub, const actors::request_id& id, std::shared_ptr<actors::stream_target> target,
                run_fn on_strand);
void hub_detach(const caf::actor& hub, const actors::request_id& id);

/// A request's client handle: an actor that only lives; engines holding the request watch it,
/// and its end (the call is over: done, or its client gone) cancels the request.
caf::actor spawn_client_handle(caf::actor_system& sys);
void end_client_handle(const caf::actor& client);

}  // namespace kiln::net
