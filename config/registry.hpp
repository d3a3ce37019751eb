#pragma once
// The model registry's records: immutable versions (what was registered, with its hashes),
// each model's route (the alias, a canary or shadow beside it, the previous version kept
// loaded), and one row per rollout decision with the metrics it was taken on.
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/model_hash.hpp"

namespace kiln::config {

/// registered -> gated -> live | retired
struct model_version {
  std::string model;
  std::string version;
  std::string weights_uri;
  std::string weights_hash;
  std::string tokenizer_hash;
  std::string chat_template;       ///< "" : the model directory's own
  std::string chat_template_hash;  ///< of chat_template
  std::string precision = "fp16";  ///< fp16, int8, 4bit
  int gpus_per_replica = 1;
  std::string engine_config = "{}";  ///< a JSON object
  double load_test_tokens_per_s = 0;
  double load_test_tokens_in_flight = 0;
  std::string status = "registered";
  std::int64_t registered_at = 0;
  std::vector<file_hash> files;  ///< every hashed file, for the check at load

  /// Whether two registrations say the same thing (status, gate figures and time aside).
  bool same_content(const model_version& o) const;
};

/// Which versions a model's requests go to. Percentages are of requests, 0-100.
struct model_route {
  std::string model;
  std::string live;
  std::string canary;
  double canary_percent = 0;
  std::string shadow;
  double shadow_percent = 0;
  std::string previous;              ///< kept loaded after an alias change ...
  std::int64_t previous_until = 0;   ///< ... until this unix time, then drained
};

/// One decision of a rollout: start, advance, promote, rollback, alias, retire.
struct rollout_row {
  std::int64_t seq = 0;
  std::string model;
  std::string version;
  std::string stage;  ///< shadow, canary, live, retired
  double percent = 0;
  std::int64_t at = 0;  ///< unix seconds
  std::string decision;
  std::string reason;
  std::string guard_metrics = "{}";  ///< JSON: the windows compared
};

bool valid_precision(const std::string& p);

/// A registered version's pool: `base` (the model's live pool) with the version's name,
/// directory, files, chat template and replicas (engine_config's "replicas", else base's).
/// An http:// version's directory is its pulled copy under `pulls` (pulled again before the
/// pool loads if it is gone or altered).
pool_config version_pool(const pool_config& base, const model_version& v, const artifacts_config& pulls = {});

/// A pool's bounds in one region (the `pools` table): what its autoscaler keeps it between,
/// and how many loaded replicas it holds back from routing for a fast scale-up.
struct pool_limits {
  std::string model;
  std::string version;
  std::string region;
  int min_replicas = 1;
  int max_replicas = 1;
  int warm_replicas = 0;
};

/// Why a pool's bounds cannot be stored ("" when they can).
std::string check_pool_limits(const pool_limits& l);

/// What a gate measured.
struct load_test {
  double tokens_per_s = 0;      ///< output tokens/s one replica carries within the targets
  double tokens_in_flight = 0;  ///< its tokens in flight there
  std::string detail;           ///< how it was measured
};

}  // namespace kiln::config
