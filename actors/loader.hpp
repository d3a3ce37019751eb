#pragma once
// Where blocking work runs: reading a model, putting weights on a device, allocating KV.
// Never on the actor scheduler's threads. The work ends by sending a message itself. `kiln
// serve` uses threads of the loader's own; actor tests and the simulator run it inline, so
// what they see stays deterministic. Where actors are wired decides which.
#include <functional>
#include <memory>

namespace kiln::actors {

class loader {
 public:
  virtual ~loader() = default;
  virtual void run(std::function<void()> work) = 0;
  /// Finishes queued work and ends the loader's threads (work run later is dropped). A
  /// thread that sent to actors holds the actor system's logger until it ends, so a node
  /// stops its loaders before its actor system, whoever still holds them.
  virtual void stop() {}
};

/// `threads` threads of its own; the destructor finishes queued work, then joins them.
std::shared_ptr<loader> make_thread_loader(int threads);
/// Runs the work on the calling thread (for virtual time).
std::shared_ptr<loader> make_inline_loader();

}  // namespace kiln::actors
