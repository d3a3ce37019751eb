#pragma once
// A token bucket for one team's use of one model: `tokens_per_minute` flow in continuously up
// to `burst`; a request is charged prompt + max_tokens before it runs and refunded what it did
// not use when it ends. Time comes from the caller (the actor clock), so the bucket runs the
// same on real and virtual time. A plain class, tested as tables.
#include <chrono>
#include <cstdint>

namespace kiln::actors {

class token_bucket {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// `burst` 0: one minute's worth. Starts full.
  token_bucket(double tokens_per_minute, double burst, time_point now);

  /// Takes `n` tokens if they are there now; false (and nothing taken) otherwise.
  bool try_charge(std::int64_t n, time_point now);
  /// Gives back `n` tokens (never above the burst).
  void refund(std::int64_t n, time_point now);
  /// Whole seconds until a charge of `n` would fit (0: it fits now; -1: never, n > burst).
  std::int64_t retry_after_s(std::int64_t n, time_point now);
  /// Tokens available now, rounded down.
  std::int64_t remaining(time_point now);
  /// Seconds until the bucket is full again (0: full).
  double reset_s(time_point now);

  double rate_per_minute() const { return rate_per_s_ * 60; }
  double burst() const { return burst_; }
  /// A new limit takes effect at once; what is available is kept, up to the new burst.
  void set_limit(double tokens_per_minute, double burst, time_point now);

 private:
  void refill(time_point now);
  double rate_per_s_;
  double burst_;
  double level_;
  time_point last_;
};

}  // namespace kiln::actors
