#pragma once
// The control-plane store: one SQLite file (WAL mode), or a PostgreSQL server that several
// nodes share (store_path postgresql://...), with seed 000's schema (models, model_versions,
// pools, replicas, teams, team_limits, usage, rollouts) and api_keys, which holds SHA-256
// hashes of keys, never keys. The same versioned migrations on both (config/db.hpp).
// Blocking: kiln opens it before its actors start, and afterwards only the store writer's own
// thread touches it.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "config/batch_rows.hpp"
#include "config/board.hpp"
#include "config/config.hpp"
#include "config/registry.hpp"

namespace kiln::config {

class db;
struct region_use_row;

/// SHA-256 of an API key, as 64 hex digits.
std::string key_hash(std::string_view key);
/// A new API key ("kiln-" + 48 hex digits from the OS's random source).
std::string new_api_key();

/// Everything kiln knows of the teams: who they are, their keys (hashed) and limits.
struct tenancy {
  struct key {
    std::string key_id;
    std::string team;
    std::string hash;
  };
  std::vector<team_config> teams;  ///< api_key empty: keys live in `keys`
  std::vector<key> keys;           ///< not revoked

  const team_config* team(std::string_view name) const;
  /// The team a presented key belongs to (by its hash), or null.
  const team_config* team_by_key(std::string_view presented) const;
  /// Rebuilds the index team_by_key uses (after changing `keys` or `teams`).
  void index();

 private:
  std::unordered_map<std::string, std::size_t> by_hash_;  ///< hash -> index in teams
};

/// Where the current tenancy is published: the store writer replaces it after each change,
/// the front reads it on each request's head.
using tenancy_board = board<tenancy>;

/// One row of usage: a team's use of one model version in one minute.
struct usage_row {
  std::string team;
  std::string model;
  std::string version;
  std::int64_t minute = 0;  ///< unix seconds / 60
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_tokens = 0;
  std::int64_t output_tokens = 0;
  std::int64_t requests = 0;
  std::int64_t shed = 0;  ///< 429 + 503
};

/// One finished request (or refusal) as a meter logs it (config/usage_wal.hpp).
struct usage_record {
  std::uint64_t seq = 0;  ///< increasing across restarts
  std::uint64_t id_origin = 0;
  std::uint64_t id_seq = 0;  ///< the request's id
  std::string team;
  std::string model;
  std::string version;
  std::int64_t minute = 0;
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_tokens = 0;
  std::int64_t output_tokens = 0;
  std::int64_t requests = 0;
  std::int64_t shed = 0;
};

/// What a meter's fold did: the ledger's watermark after it, whether its records went in, and
/// how many of them another ledger had metered already (the same request id).
struct usage_folded {
  std::uint64_t watermark = 0;
  bool applied = false;
  std::int64_t duplicates = 0;
};

class store {
 public:
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  /// Opens the file (creating it and its directory) or connects to the PostgreSQL server a
  /// postgres:// or postgresql:// path names, and migrates it to the current schema. `ledger`
  /// names this node's usage watermark in a store nodes share ("": a single node's).
  static std::variant<std::unique_ptr<store>, std::string> open(const std::string& path, const std::string& ledger = "");
  static constexpr int kSchemaVersion = 9;
  int schema_version();
  const std::string& path() const { return path_; }
  /// Whether other nodes may share it (PostgreSQL).
  bool shared() const;

  /// Whether the store has no team yet (a new store, to be seeded from config).
  bool empty();
  /// Teams, their keys (hashed) and limits from config. Error text, or nothing.
  std::optional<std::string> seed(const kiln_config& cfg);
  tenancy load_tenancy();

  std::optional<std::string> add_team(const std::string& team, const std::string& name, engine::priority max_priority);
  /// Adds a key (stored hashed); returns its id.
  std::variant<std::string, std::string> add_key(const std::string& team, const std::string& key);
  /// False when the team has no such live key.
  bool revoke_key(const std::string& team, const std::string& key_id);
  std::optional<std::string> put_limit(const std::string& team, const team_limit& limit);

  /// Adds each row to what the store holds for its (team, model, version, minute), and (in the
  /// same transaction) moves the meter's watermark to `through_seq` when it is past it.
  std::optional<std::string> add_usage(const std::vector<usage_row>& rows, std::uint64_t through_seq = 0);
  /// A meter's fold, applied once: its records from_seq..through_seq (1 <= from <= through)
  /// of `ledger` ("": this store's own), added to the usage rows. A fold whose first record
  /// the ledger holds already changes nothing (a retry of one applied, or one overlapping it:
  /// the meter drops what the answer's watermark covers and folds the rest). A request is
  /// counted once across ledgers: a record whose request id another ledger metered in the
  /// last kMeteredIdsMinutes (a front that metered what a lost region had sent, and that
  /// region's own record folded after its restart) is skipped. The ledger's watermark after.
  std::variant<usage_folded, std::string> fold_usage(const std::string& ledger, std::uint64_t from_seq,
                                                     std::uint64_t through_seq, const std::vector<usage_record>& records);
  static constexpr std::int64_t kMeteredIdsMinutes = 180;
  /// The last usage record (by sequence number) whose rows are in the store.
  std::uint64_t folded_seq();
  /// A team's rows, minutes in [from, to], model "" for all.
  std::vector<usage_row> usage(const std::string& team, const std::string& model, std::int64_t from_minute,
                               std::int64_t to_minute);

  // The registry (config/registry_store.cpp).
  struct registered {
    model_version version;
    bool created = false;   ///< false: the same content was there (idempotent)
    std::string conflict;   ///< non-empty: the version exists with other content (409)
    std::string error;
  };
  registered register_version(const model_version& v);
  std::vector<model_version> versions(const std::string& model);
  std::optional<model_version> version(const std::string& model, const std::string& version);
  std::optional<std::string> set_version_status(const std::string& model, const std::string& version, const std::string& status);
  std::optional<std::string> set_load_test(const std::string& model, const std::string& version, double tokens_per_s,
                                           double tokens_in_flight);
  std::vector<model_route> routes();
  /// Stores a route; with keep_previous_s > 0 its previous version is kept that long from now.
  std::optional<std::string> put_route(model_route r, double keep_previous_s = 0);
  /// Records a decision; returns its sequence number (0 on failure).
  std::int64_t add_rollout(const rollout_row& row);
  std::vector<rollout_row> rollouts(const std::string& model);
  /// Limits across regions (config/region_shares.hpp): what `region`'s teams asked for lately
  /// (stamped now), and every region's rows reported within the last `within_s` seconds.
  std::optional<std::string> put_region_use(const std::string& region, const std::vector<region_use_row>& rows);
  std::vector<region_use_row> region_use(std::int64_t within_s);
  /// The `pools` table (config/pool_store.cpp).
  std::optional<std::string> put_pool_limits(const pool_limits& l);
  std::optional<pool_limits> pool_limits_of(const std::string& model, const std::string& version, const std::string& region);
  std::vector<pool_limits> all_pool_limits();
  /// A remote pool's upstreams as operators last left them (config/pool_store.cpp); nullopt:
  /// never changed (the config's list holds).
  std::optional<std::string> put_pool_upstreams(const std::string& model, const std::string& version,
                                                const std::string& region, const std::vector<std::string>& urls);
  std::optional<std::vector<std::string>> pool_upstreams_of(const std::string& model, const std::string& version,
                                                            const std::string& region);
  /// OpenAI's files and batches (config/batch_store.cpp).
  std::optional<std::string> put_file(const file_row& f);
  std::optional<file_row> file(const std::string& id);
  std::vector<file_row> files(const std::string& team);
  /// False when there was no such file.
  bool delete_file(const std::string& id);
  /// Stores a batch's row (a new one, or its state now).
  std::optional<std::string> put_batch(const batch_row& b);
  std::optional<batch_row> batch(const std::string& id);
  /// A team's batches ("": every team's), newest first: at most `limit`, those after the batch
  /// `after` ("": from the newest).
  std::vector<batch_row> batches(const std::string& team, const std::string& after, int limit);
  /// Every batch not ended yet (to resume after a restart), oldest first.
  std::vector<batch_row> open_batches();

 private:
  store(std::unique_ptr<db> d, std::string path, std::string ledger);
  std::optional<std::string> exec(const char* sql);
  std::optional<std::string> migrate();
  std::unique_ptr<db> db_;
  std::string path_;
  std::string ledger_;
};

/// A store path fit to print: a PostgreSQL URI without its password or options.
std::string redacted_store_path(const std::string& path);

}  // namespace kiln::config
