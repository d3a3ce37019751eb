#pragma once
// The rollout guards as plain functions: which version a request goes to (a canary split by
// a hash of its conversation, so a conversation never changes version midway), and whether a
// candidate's outcomes over a sliding window are worse than the live version's by more than
// the configured margins. Tested as tables; the rollout controller applies them.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"
#include "config/registry.hpp"

namespace kiln::actors {

/// 0..9999: where a routing key falls; the same key always falls in the same place.
std::uint32_t split_point(std::string_view key);
/// The version for a request with routing key `key`: the canary when its point falls below
/// the canary's percentage (percent 50 sends points 0..4999), else the live version.
const std::string& version_for(const config::model_route& route, std::string_view key);
/// Whether a request with this key is copied to the shadow version.
bool shadow_copy(const config::model_route& route, std::string_view key);

/// One request's outcome on one version.
struct outcome_sample {
  double at = 0;  ///< seconds on the controller's clock
  bool failed = false;
  double ttft_s = -1;  ///< -1: no first token
  std::int32_t output_tokens = 0;
  bool completed = false;
};

/// What a version did over the window.
struct window_stats {
  std::int64_t requests = 0;
  double error_rate = 0;   ///< failed / requests
  double ttft_p95_s = 0;   ///< over those with a first token
  double mean_output = 0;  ///< tokens, over completed requests
};

/// A version's outcomes in time order, trimmed to the window.
class outcome_window {
 public:
  void add(const outcome_sample& s) { samples_.push_back(s); }
  void trim(double now, double window_s);
  window_stats stats() const;
  void clear() { samples_.clear(); }
  const std::deque<outcome_sample>& samples() const { return samples_; }

 private:
  std::deque<outcome_sample> samples_;
};

/// Which margins the candidate's point figures pass (every one named), or nothing (too few
/// requests on either side also gives nothing).
std::optional<std::string> guard_breach(const window_stats& live, const window_stats& candidate,
                                        const config::rollout_config& limits);

/// One-sided z statistics that the candidate is worse than the live version (error rate: two
/// proportions) or worse by more than the margin (p95 TTFT: the candidate's share of requests
/// slower than the live p95 times the margin, against the 5% it would be; mean output: two
/// means). Large when the breach is real, near or below zero when it is noise.
struct guard_evidence {
  double errors = 0, ttft = 0, output = 0;
};
guard_evidence evidence(const outcome_window& live, const outcome_window& candidate, const config::rollout_config& limits);

/// A rollback's reason: the margins passed, each with evidence of at least limits.guard_z;
/// nothing otherwise. What the controller acts on.
std::optional<std::string> confirmed_breach(const outcome_window& live, const outcome_window& candidate,
                                            const config::rollout_config& limits);

}  // namespace kiln::actors
