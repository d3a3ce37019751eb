#pragma once
// Supervision in the OTP manner, on CAF monitors: child specs (id, start function, restart
// policy), a strategy (one_for_one, rest_for_one), and a restart intensity: more than
// `intensity` restarts within `period` and the supervisor gives up and escalates. The node
// supervisor, each pool supervisor and each replica (for its engine) hold one of these; what
// escalation means is theirs to decide (a replica exits, a pool turns degraded).
//
// `plan_restart` is the decision alone, a pure function tested as a table; `supervisor`
// applies it to live actors. Children end when their supervisor ends, however it ends.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_addr.hpp>
#include <caf/actor.hpp>
#include <caf/actor_clock.hpp>
#include <caf/fwd.hpp>

namespace kiln::actors {

enum class restart_policy : std::uint8_t {
  permanent,  ///< always restarted
  transient,  ///< restarted only when it ended abnormally
  temporary,  ///< never restarted
};

enum class restart_strategy : std::uint8_t {
  one_for_one,  ///< restart the child that ended
  rest_for_one, ///< restart it and every child started after it
};

struct child_spec {
  std::string id;
  std::function<caf::actor(caf::local_actor* parent)> start;  ///< spawns the child
  restart_policy restart = restart_policy::permanent;
};

struct supervisor_flags {
  restart_strategy strategy = restart_strategy::one_for_one;
  int intensity = 3;                             ///< restarts allowed within `period`
  caf::timespan period = std::chrono::seconds(5);
};

/// What to do about child `index` that ended.
struct restart_plan {
  std::vector<std::size_t> stop;   ///< children to stop first, latest started first
  std::vector<std::size_t> start;  ///< children to start again, in start order
  bool escalate = false;           ///< past the intensity: stop everything, give up
};

/// The restart decision. `history` holds the times of earlier restarts and gains `now` when
/// the plan restarts anything; entries older than the period are dropped.
restart_plan plan_restart(const supervisor_flags& flags, const std::vector<restart_policy>& policies,
                          std::size_t index, bool abnormal, caf::actor_clock::time_point now,
                          std::deque<caf::actor_clock::time_point>& history);

/// Whether an exit reason counts as abnormal (anything but normal and user_shutdown).
bool abnormal_exit(const caf::error& reason);

class supervisor {
 public:
  supervisor() = default;
  supervisor(supervisor_flags flags, std::vector<child_spec> specs);

  /// Starts every child in order and makes them end with `self`.
  void start_all(caf::local_actor* self);

  struct outcome {
    bool ours = false;                   ///< the actor was one of our children
    bool escalate = false;               ///< intensity exceeded: every child was stopped
    std::string id;                      ///< the child that ended
    std::vector<std::string> restarted;  ///< ids started again, in order
  };
  /// Handles a child's down message (anything else: ours = false).
  outcome on_down(caf::local_actor* self, const caf::actor_addr& who, const caf::error& reason);

  /// Stops a child and leaves it stopped (drain, operator action).
  void stop(caf::local_actor* self, const std::string& id);
  void stop_all(caf::local_actor* self);
  /// Adds a child after the others and starts it; false if the id is taken.
  bool add(caf::local_actor* self, child_spec spec);
  /// Starts a child that is not running; false if unknown or running.
  bool start(caf::local_actor* self, const std::string& id);
  /// Starts every child that is not running, with a fresh restart history.
  std::vector<std::string> revive(caf::local_actor* self);

  caf::actor child(const std::string& id) const;
  const std::vector<child_spec>& specs() const { return specs_; }
  std::uint64_t restarts() const { return restarts_; }

 private:
  struct running_child {
    caf::actor handle;
    caf::actor_addr addr;
  };
  void start_child(caf::local_actor* self, std::size_t i);
  void stop_child(std::size_t i);
  std::size_t index_of(const std::string& id) const;

  supervisor_flags flags_;
  std::vector<child_spec> specs_;
  std::vector<restart_policy> policies_;
  /// Shared with the functor that stops the children when the supervising actor ends.
  std::shared_ptr<std::vector<running_child>> children_ = std::make_shared<std::vector<running_child>>();
  std::deque<caf::actor_clock::time_point> history_;
  std::uint64_t restarts_ = 0;
  bool attached_ = false;
};

}  // namespace kiln::actors
