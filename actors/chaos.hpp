#pragma once
// Chaos on a live actor, for drills: freeze stops it answering for a while (its messages
// wait, unanswered, so only missed heartbeats reveal it); kill is an exit message.
#include <caf/fwd.hpp>

#include "actors/messages.hpp"

namespace kiln::actors {

/// Stops `self` answering anything but exits and down messages for `seconds`; then it goes
/// on with what waited, in order.
void freeze(caf::event_based_actor* self, double seconds);
/// Sends the exit a chaos kill means: untrappable, as a crash is.
void chaos_kill(const caf::actor& target);

}  // namespace kiln::actors
