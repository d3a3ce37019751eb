#include "actors/team_ledger.hpp"

#include <algorithm>
#include <cmath>

namespace kiln::actors {

team_ledger::team_ledger(std::shared_ptr<const config::tenancy> tenants) : tenants_(std::move(tenants)) {}

void team_ledger::set_tenancy(std::shared_ptr<const config::tenancy> tenants, time_point now) {
  tenants_ = std::move(tenants);
  for (auto& [key, acc] : accounts_) fit_bucket(key.first, key.second, acc, now);
}

void team_ledger::set_region_shares(std::map<std::pair<std::string, std::string>, double> shares, time_point now) {
  region_shares_ = std::move(shares);
  for (auto& [key, acc] : accounts_) fit_bucket(key.first, key.second, acc, now);
}

double team_ledger::region_share(const std::string& team, const std::string& model) const {
  auto it = region_shares_.find({team, model});
  return it == region_shares_.end() ? 1.0 : std::clamp(it->second, 0.0, 1.0);
}

void team_ledger::fit_bucket(const std::string& team, const std::string& model, account& acc, time_point now) {
  const config::team_limit* l = limit(team, model);
  if (!l || l->tokens_per_minute <= 0) {
    acc.bucket.reset();
    return;
  }
  const double share = region_share(team, model);
  const double rate = l->tokens_per_minute * share;
  const double burst = (l->burst > 0 ? l->burst : l->tokens_per_minute) * share;
  if (acc.bucket) acc.bucket->set_limit(rate, burst, now);
  else acc.bucket.emplace(rate, burst, now);
}

std::map<std::pair<std::string, std::string>, std::int64_t> team_ledger::take_asked() {
  std::map<std::pair<std::string, std::string>, std::int64_t> out;
  for (const auto& t : tenants_->teams)
    for (const auto& l : t.limits)
      if (l.tokens_per_minute > 0) out[{t.name, l.model}] = 0;
  for (auto& [key, acc] : accounts_) {
    if (out.count(key)) out[key] = acc.asked;
    acc.asked = 0;
  }
  return out;
}

const config::team_limit* team_ledger::limit(const std::string& team, const std::string& model) const {
  const config::team_config* t = tenants_->team(team);
  return t ? t->limit_for(model) : nullptr;
}

team_ledger::account& team_ledger::account_for(const std::string& team, const std::string& model, time_point now) {
  auto [it, fresh] = accounts_.try_emplace({team, model});
  if (fresh) fit_bucket(team, model, it->second, now);
  return it->second;
}

engine::priority team_ledger::clamp(const std::string& team, engine::priority asked) const {
  const config::team_config* t = tenants_->team(team);
  if (!t) return asked;
  return static_cast<std::uint8_t>(asked) < static_cast<std::uint8_t>(t->max_priority) ? t->max_priority : asked;
}

std::optional<stream_error> team_ledger::admit(const request& r, time_point now) {
  account& acc = account_for(r.team, r.model, now);
  const config::team_limit* l = limit(r.team, r.model);
  if (l && l->max_concurrency > 0 && acc.in_flight >= l->max_concurrency) {
    return stream_error{r.id, errc::over_limit,
                        "Team " + r.team + " has " + std::to_string(acc.in_flight) + " requests to " + r.model +
                            " in flight, its limit (max_concurrency " + std::to_string(l->max_concurrency) + ").",
                        "", 1};
  }
  const std::int64_t tokens = request_tokens(r);
  acc.asked += tokens;
  if (acc.bucket) {
    // Never fits: past the whole limit's burst (a regional share smaller than the request
    // only makes it wait, as the share follows what is asked).
    const double whole = l ? (l->burst > 0 ? l->burst : l->tokens_per_minute) : acc.bucket->burst();
    if (static_cast<double>(tokens) > whole) {
      return stream_error{r.id, errc::invalid_request,
                          "The request needs " + std::to_string(tokens) + " tokens (prompt + max_tokens), more than team " +
                              r.team + "'s limit of " + std::to_string(static_cast<long long>(whole)) + " for " + r.model +
                              " at once; lower max_tokens.",
                          "max_tokens", 0};
    }
    if (!acc.bucket->try_charge(tokens, now)) {
      const std::int64_t wait = acc.bucket->retry_after_s(tokens, now);
      const double share = region_share(r.team, r.model);
      const std::string across =
          share < 1 && l ? "; this region's share, " + std::to_string(static_cast<int>(std::lround(share * 100))) + "%, of " +
                               std::to_string(static_cast<long long>(l->tokens_per_minute)) + " across regions"
                         : "";
      return stream_error{r.id, errc::over_limit,
                          "Team " + r.team + " is over its limit of " +
                              std::to_string(static_cast<long long>(acc.bucket->rate_per_minute())) + " tokens per minute for " +
                              r.model + " (tokens_per_minute" + across + "); this request needs " + std::to_string(tokens) + ".",
                          "", static_cast<std::int32_t>(std::max<std::int64_t>(1, wait))};
    }
  }
  ++acc.in_flight;
  acc.tokens_in_flight += tokens;
  charges_[r.id] = {&acc, tokens};
  return std::nullopt;
}

bool team_ledger::release(const request_released& r, time_point now) {
  const std::optional<charge> taken = charges_.take(r.id);
  if (!taken) return false;
  const charge& c = *taken;
  account& acc = *c.acc;
  --acc.in_flight;
  acc.tokens_in_flight -= c.tokens;
  if (acc.bucket && r.usage_known) {
    const std::int64_t used = static_cast<std::int64_t>(r.usage.prompt_tokens) + r.usage.completion_tokens;
    acc.bucket->refund(std::max<std::int64_t>(0, c.tokens - used), now);
  }
  return true;
}

rate_limit_info team_ledger::limit_info(const request& r, time_point now) {
  rate_limit_info info;
  info.id = r.id;
  account& acc = account_for(r.team, r.model, now);
  if (!acc.bucket) return info;
  info.limit_tokens = static_cast<std::int64_t>(acc.bucket->rate_per_minute());
  info.remaining_tokens = acc.bucket->remaining(now);
  info.reset_s = acc.bucket->reset_s(now);
  return info;
}

double team_ledger::fill(const std::string& team, const std::string& model, time_point now) {
  auto it = accounts_.find({team, model});
  if (it == accounts_.end() || !it->second.bucket || it->second.bucket->burst() <= 0) return -1;
  return static_cast<double>(it->second.bucket->remaining(now)) / it->second.bucket->burst();
}

double team_ledger::share(const std::string& team, const std::string& model) const {
  const config::team_limit* l = limit(team, model);
  return l ? l->guaranteed_share : 0;
}

int team_ledger::in_flight(const std::string& team, const std::string& model) const {
  auto it = accounts_.find({team, model});
  return it == accounts_.end() ? 0 : it->second.in_flight;
}

std::int64_t team_ledger::tokens_in_flight(const std::string& team, const std::string& model) const {
  auto it = accounts_.find({team, model});
  return it == accounts_.end() ? 0 : it->second.tokens_in_flight;
}

}  // namespace kiln::actors
