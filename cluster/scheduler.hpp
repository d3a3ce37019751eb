#pragma once
// The actor system's scheduler for a serving node: CAF's work-stealing workers with a timer
// that sleeps until the earliest deadline and is woken only when a new deadline comes before
// it. CAF's own timer thread is woken by every delayed message and timeout it is given (and
// then again when it is due): at 1,000 streams the engines' steps alone give it about 400
// such messages a second, each a futex call on the sender's thread and two context switches
// on the timer's. Here a new deadline costs the sender a lock and a map insert.
//
// With several workers the timer is a thread of its own. A lone worker (the default on two
// cores) keeps the deadlines itself: it delivers what is due each time it looks for its next
// job and, idle, blocks only until the next deadline, so an engine step's end is one wakeup
// of the worker rather than one of a timer thread that then wakes the worker.
#include <caf/actor_system_config.hpp>

namespace kiln::cluster {

/// Makes `cfg`'s actor systems use that scheduler (work stealing, as CAF's default); the
/// lone-worker form where `scheduler.max-threads` is 1.
void use_lazy_timer_scheduler(caf::actor_system_config& cfg);

}  // namespace kiln::cluster
