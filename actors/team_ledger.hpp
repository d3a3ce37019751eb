#pragma once
// What admission knows of each team's use of each model: its token bucket, its requests in
// flight and what each was charged. A request is charged prompt + max_tokens and takes a
// concurrency slot before it runs; when its owner reports its end, what it did not use goes
// back and the slot is free. A plain class: admission drives it with the actor clock.
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "actors/id_map.hpp"
#include "actors/messages.hpp"
#include "actors/token_bucket.hpp"
#include "config/store.hpp"

namespace kiln::actors {

class team_ledger {
 public:
  using time_point = token_bucket::time_point;

  explicit team_ledger(std::shared_ptr<const config::tenancy> tenants = std::make_shared<const config::tenancy>());
  // A charge points at its account: a copy would point into the original's (a move takes the
  // accounts' nodes along, so the charges stay right).
  team_ledger(const team_ledger&) = delete;
  team_ledger& operator=(const team_ledger&) = delete;
  team_ledger(team_ledger&&) = default;
  team_ledger& operator=(team_ledger&&) = default;
  /// New teams or limits take effect at once; buckets keep what they hold (up to a new burst).
  void set_tenancy(std::shared_ptr<const config::tenancy> tenants, time_point now);
  /// This region's share of each limit it shares with other regions, by (team, model); a
  /// limit absent from `shares` is whole here. Buckets run at limit x share at once.
  void set_region_shares(std::map<std::pair<std::string, std::string>, double> shares, time_point now);
  double region_share(const std::string& team, const std::string& model) const;
  /// Tokens asked (admitted or refused) per (team, model) with a limit since the last call,
  /// every limited pair of the tenancy included (0 when nothing was asked); counters restart.
  std::map<std::pair<std::string, std::string>, std::int64_t> take_asked();

  /// The tier a team may use: a more urgent ask is lowered to the team's highest tier.
  engine::priority clamp(const std::string& team, engine::priority asked) const;
  /// Charges prompt + max_tokens and takes a slot, or says why not (429 over_limit with
  /// Retry-After, or 400 when the charge can never fit the team's bucket).
  std::optional<stream_error> admit(const request& r, time_point now);
  /// The request has ended: refunds what it did not use, frees its slot. False: unknown id.
  bool release(const request_released& r, time_point now);
  /// The team's limit for the model as it stands (for the x-ratelimit-* headers).
  rate_limit_info limit_info(const request& r, time_point now);

  /// How full the team's bucket for the model is (0..1); -1 without a bucket.
  double fill(const std::string& team, const std::string& model, time_point now);
  /// The team's guaranteed share of the model's pool (0: none).
  double share(const std::string& team, const std::string& model) const;
  int in_flight(const std::string& team, const std::string& model) const;
  std::int64_t tokens_in_flight(const std::string& team, const std::string& model) const;
  std::size_t charges() const { return charges_.size(); }

 private:
  struct account {
    std::optional<token_bucket> bucket;
    int in_flight = 0;
    std::int64_t tokens_in_flight = 0;
    std::int64_t asked = 0;  ///< tokens asked since take_asked()
  };
  struct charge {
    account* acc = nullptr;  ///< accounts are never erased, so this stays valid
    std::int64_t tokens = 0;
  };
  const config::team_limit* limit(const std::string& team, const std::string& model) const;
  account& account_for(const std::string& team, const std::string& model, time_point now);
  /// Sets the account's bucket from its limit and this region's share (none without a limit).
  void fit_bucket(const std::string& team, const std::string& model, account& acc, time_point now);

  std::shared_ptr<const config::tenancy> tenants_;
  std::map<std::pair<std::string, std::string>, account> accounts_;
  id_map<charge> charges_;
  std::map<std::pair<std::string, std::string>, double> region_shares_;
};

}  // namespace kiln::actors
