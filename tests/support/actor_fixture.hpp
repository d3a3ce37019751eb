#pragma once
// doctest fixture for actor tests: an actor system on CAF's test_coordinator (virtual time,
// one thread, deterministic), plus a stream target that records what a sink receives.
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "actors/stream_sink.hpp"
#include "sim/virtual_time.hpp"

namespace kiln::test {

struct virtual_config {
  caf::actor_system_config cfg;
  virtual_config() { sim::use_virtual_time(cfg); }
};

struct actor_fixture : virtual_config {
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  sim::virtual_time vt{sched};
};

/// Everything one sink received, in order.
struct recorded_stream : actors::stream_target {
  std::vector<actors::stream_tokens> tokens;
  std::vector<actors::stream_end> ends;
  std::vector<actors::stream_error> errors;
  std::vector<actors::rate_limit_info> rate_limits;
  std::vector<std::string> order;  ///< "tokens", "end", "error"

  void on_tokens(actors::stream_tokens ev) override {
    order.push_back("tokens");
    tokens.push_back(std::move(ev));
  }
  void on_end(actors::stream_end ev) override {
    order.push_back("end");
    ends.push_back(std::move(ev));
  }
  void on_error(actors::stream_error ev) override {
    order.push_back("error");
    errors.push_back(std::move(ev));
  }
  void on_rate_limit(actors::rate_limit_info ev) override { rate_limits.push_back(ev); }
  bool terminal() const { return !ends.empty() || !errors.empty(); }
  std::string text() const {
    std::string t;
    for (const auto& e : tokens) t += e.text;
    return t;
  }
};

}  // namespace kiln::test
