#include "actors/token_bucket.hpp"

#include <algorithm>
#include <cmath>

namespace kiln::actors {

token_bucket::token_bucket(double tokens_per_minute, double burst, time_point now)
    : rate_per_s_(std::max(0.0, tokens_per_minute) / 60), burst_(burst > 0 ? burst : std::max(0.0, tokens_per_minute)),
      level_(burst_), last_(now) {}

void token_bucket::refill(time_point now) {
  if (now <= last_) return;
  const double dt = std::chrono::duration<double>(now - last_).count();
  level_ = std::min(burst_, level_ + dt * rate_per_s_);
  last_ = now;
}

namespace {
constexpr double kSlack = 1e-6;  // float error in refills never refuses a charge that fits
}

bool token_bucket::try_charge(std::int64_t n, time_point now) {
  refill(now);
  if (static_cast<double>(n) > level_ + kSlack) return false;
  level_ = std::max(0.0, level_ - static_cast<double>(n));
  return true;
}

void token_bucket::refund(std::int64_t n, time_point now) {
  refill(now);
  level_ = std::min(burst_, level_ + static_cast<double>(std::max<std::int64_t>(0, n)));
}

std::int64_t token_bucket::retry_after_s(std::int64_t n, time_point now) {
  refill(now);
  const double need = static_cast<double>(n) - level_;
  if (need <= kSlack) return 0;
  if (static_cast<double>(n) > burst_ + kSlack || rate_per_s_ <= 0) return -1;
  // Whole seconds, rounded up: a client that waits this long is admitted.
  return static_cast<std::int64_t>(std::ceil(need / rate_per_s_));
}

std::int64_t token_bucket::remaining(time_point now) {
  refill(now);
  return static_cast<std::int64_t>(std::floor(level_ + kSlack));
}

double token_bucket::reset_s(time_point now) {
  refill(now);
  if (rate_per_s_ <= 0) return 0;
  return (burst_ - level_) / rate_per_s_;
}

void token_bucket::set_limit(double tokens_per_minute, double burst, time_point now) {
  refill(now);
  rate_per_s_ = std::max(0.0, tokens_per_minute) / 60;
  burst_ = burst > 0 ? burst : std::max(0.0, tokens_per_minute);
  level_ = std::min(level_, burst_);
}

}  // namespace kiln::actors
