#pragma once
// kiln's typed configuration, parsed once from TOML and passed down by const reference.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "config/model_hash.hpp"
#include "config/cron.hpp"
#include "engine/cost_model.hpp"
#include "engine/scheduler.hpp"
#include "engine/sim_executor.hpp"

namespace kiln::config {

struct server_config {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::size_t max_body_bytes = 1 << 20;
  std::size_t max_header_bytes = 8 << 10;
  int request_timeout_ms = 10000;   ///< a request must arrive whole within this time
  int shutdown_grace_ms = 5000;     ///< streams still open this long after SIGTERM get an error
  int io_threads = 1;
  /// CAF scheduler threads; 0: half the cores, at least one. Measured with 1,000 streams on 2
  /// cores (BENCHMARKS.md, issue 11): a second actor thread doubled the context switches per
  /// token and cost 23% more CPU per token, with a worse p99 TTFT overhead.
  int actor_threads = 0;
  /// Polls of 50 us sleeps an idle actor thread makes before it blocks until work comes
  /// (CAF's default is 500). Each is a context switch: with 1,000 streams on 2 cores, 0 took
  /// voluntary context switches from about 290 to 80 per thousand tokens and CPU per token
  /// down by a quarter (BENCHMARKS.md). A blocked thread is woken by new work, or after 1 ms.
  int actor_sleep_polls = 0;
  /// The actors run on the one I/O thread (between its handlers, and it waits for either): a
  /// request reaches the actors, and a step's tokens the sockets, without waking a thread.
  /// Measured with 1,000 streams on 2 cores (BENCHMARKS.md, issue 11): CPU per token 1.10-1.16x
  /// the bare epoll server's instead of 1.24-1.26x with two threads, 9 voluntary context
  /// switches per thousand tokens instead of 65. Unset: on wherever one I/O thread and one
  /// actor thread would run anyway (io_threads = 1, and actor_threads 1, or 0 on 2 cores or
  /// fewer); a larger machine keeps its threads apart.
  std::optional<bool> actors_on_io_thread;
  /// actors_on_io_thread as run: as configured, or the automatic choice above.
  bool runs_actors_on_io_thread() const;
  /// actor_threads as run: the configured count, or half the cores (at least one); 1 with
  /// the actors on the I/O thread.
  int scheduler_threads() const;
  int write_timeout_ms = 30000;     ///< a write the client does not take within this ends its stream
  std::size_t max_buffered_bytes = 4 << 20;  ///< per connection: a client further behind is dropped
};

/// What a team may use of one model. 0 means no limit (no share).
struct team_limit {
  std::string model;
  double tokens_per_minute = 0;  ///< prompt + max_tokens charged per request, refunded unused
  double burst = 0;              ///< bucket size; 0: one minute's worth
  int max_concurrency = 0;       ///< requests in flight at once
  double guaranteed_share = 0;   ///< of the pool's capacity, kept for the team under overload
};

struct team_config {
  std::string name;
  std::string api_key;  ///< from the config file; the store keeps only its hash
  engine::priority max_priority = engine::priority::interactive;  ///< higher asks are clamped to it
  std::vector<team_limit> limits;

  const team_limit* limit_for(std::string_view model) const;
};

enum class executor_kind { sim, cpu, cuda, remote };

/// One model version served by `replicas` engines in this region.
/// A scale-up before a known peak ([[pools.autoscale.schedule]]): from `lead_s` before each
/// time `when` names until `hold_s` after it, the pool keeps at least `min_replicas`.
struct scale_schedule {
  cron_spec when;
  int min_replicas = 1;
  double lead_s = -1;  ///< -1: the pool's cold start and two looks
  double hold_s = 3600;
};

/// When a pool grows and shrinks ([pools.autoscale]).
struct autoscale_config {
  bool enabled = false;
  int min_replicas = 1;
  int max_replicas = 0;           ///< 0: the pool's configured replicas
  double scale_up_at = 0.70;      ///< tokens in flight over the serving replicas' capacity
  std::int64_t queue_trigger = 16;  ///< requests waiting in engines: the fast trigger
  double scale_down_at = 0.40;    ///< remove one when the rest would stay below this
  double down_every_s = 600;      ///< a removal only this long after the last add or removal
  double interval_s = 10;         ///< how often the autoscaler looks
  std::int64_t capacity_tokens = 0;  ///< per replica; 0: the version's gate figure, else the pool's own
  int warm_replicas = 0;          ///< loaded and kept out of routing, promoted first on a scale-up
  std::vector<scale_schedule> schedule;
};

/// A new replica's cold start, phase by phase ([pools.cold_start]); the simulator waits this
/// long before a replica added by scaling loads (real executors measure their own).
struct cold_start_config {
  double node_start_s = 0;   ///< a GPU node allocated and booted
  double weight_copy_s = 0;  ///< weights copied to the node
  double load_s = 0;         ///< weights loaded into GPU memory
  double warmup_s = 0;       ///< graphs captured, first steps run
  double total_s() const { return node_start_s + weight_copy_s + load_s + warmup_s; }
};

struct pool_config {
  std::string model;
  std::string version;
  int replicas = 1;
  executor_kind executor = executor_kind::sim;
  std::string model_dir;          ///< cpu, cuda: a Hugging Face model directory ("~/" is $HOME)
  std::string make_if_absent;     ///< cpu, cuda: a make-tiny-model size to create model_dir with
  int threads = 2;                ///< cpu: threads of the forward pass
  /// bf16 | f32 | int8 (weight-only, one scale per row), and f16 on cpu; empty: cuda bf16,
  /// cpu the model files' own (bf16, f16 or f32)
  std::string weights_dtype;
  std::string kv_dtype;  ///< cpu: f32 | bf16; empty: f32 with f32 weights, bf16 otherwise
  double gpu_memory_fraction = 0.90;   ///< cuda: of device memory for weights + KV
  /// remote: one replica per OpenAI-compatible upstream, each a base URL "http://host:port/v1"
  /// (vLLM, SGLang, another kiln); replicas follows their number.
  std::vector<std::string> upstreams;
  std::string upstream_model;    ///< remote: the model name the upstreams serve ("": the pool's model)
  std::string upstream_api_key;  ///< remote: sent to the upstreams as a bearer key ("": none)
  int upstream_connections = 64; ///< remote: keep-alive connections per replica at most (more requests queue)
  engine::scheduler_limits limits;
  int block_size = 16;            ///< tokens per KV block
  int kv_blocks = 0;              ///< KV blocks per engine; 0: what fits beside the weights
  int default_max_tokens = 1024;  ///< when a request names no max_tokens
  std::string tool_call_format = "none";  ///< how its model writes tool calls: none, hermes, llama3_json
  int max_context = 32768;        ///< prompt + max_tokens must fit
  int heartbeat_ms = 1000;              ///< replicas report this often; 3 missed: off the ranking
  int first_token_timeout_ms = 60000;   ///< a request with no first token by then ends (504)
  int request_timeout_ms = 600000;      ///< a request not finished by then ends
  int restart_intensity = 5;            ///< restarts allowed within restart_period_ms ...
  int restart_period_ms = 60000;        ///< ... past which a replica gives up (its pool degrades)
  std::int64_t capacity_tokens = 0;     ///< tokens in flight one replica carries at full load; 0: its KV cache
  int queue_limit = 256;                ///< requests waiting in admission for this pool, all tiers
  double gpu_hour_usd = 2.50;           ///< what one GPU costs an hour (seed 000), for USD per million tokens
  std::string routing = "prefix_affinity_bounded";  ///< or round_robin, least_tokens (A/B runs)
  /// sim executor: run steady decode between events as one timer, tokens sent in bulk without
  /// text (the simulator turns it on; a served stream would arrive in bursts).
  bool coast_steps = false;
  /// sim executor, for drills: this fraction of requests ends in an engine error after its
  /// last token (a version that errs more than its predecessor).
  double fault_fraction = 0;
  /// A registered version's files with their SHA-256, checked before it loads (none: no check).
  std::vector<file_hash> registered_files;
  /// A registered version whose weights_uri is http://: its files are pulled from there into
  /// model_dir (and verified against registered_files) before the pool loads.
  std::string weights_url;
  std::string weights_key;  ///< the bearer key for that pull
  std::string chat_template;  ///< a registered version's template ("": the model directory's)
  engine::model_shape shape;
  engine::gpu_assumptions gpu;
  engine::sim_text text;
  autoscale_config autoscale;
  cold_start_config cold_start;

  /// KV blocks per engine, null block included: kv_blocks, or derived from the cost model
  /// (sim) or 1024 (cpu).
  int engine_kv_blocks() const;
  /// model_dir with a leading "~/" expanded.
  std::string resolved_model_dir() const;
  /// Tokens in flight the whole pool carries at full load (0: unknown, no overload control).
  std::int64_t pool_capacity_tokens() const;
};

/// Why `url` cannot be a remote pool's upstream ("" when it can): http://host[:port][/base].
std::string upstream_url_problem(std::string_view url);

/// Rollout guards and the keeping of a replaced version ([rollout]).
struct rollout_config {
  double guard_window_s = 300;         ///< outcomes compared over this sliding window
  int guard_min_requests = 50;         ///< per version in the window before a guard may act
  double check_interval_s = 10;        ///< how often the guards are checked
  double error_rate_points = 0.5;      ///< a canary erring this many percentage points more ...
  double ttft_p95_increase = 0.20;     ///< ... or 20% slower to its p95 first token ...
  double output_length_change = 0.15;  ///< ... or answering 15% longer or shorter: rollback
  double guard_z = 2.33;               ///< ... when the evidence for it is this strong (one-sided z)
  double keep_previous_hours = 24;     ///< a replaced live version stays loaded this long
};

/// What a node does in a cluster: the HTTP front (the global balancer), admission and
/// routing, replicas and engines, the store and the control plane.
enum class node_role : std::uint8_t { front, router, worker, control };
inline constexpr unsigned role_bit(node_role r) { return 1u << static_cast<unsigned>(r); }
inline constexpr unsigned all_roles = 0xF;
std::string_view to_string(node_role r);
std::optional<node_role> node_role_from(std::string_view name);

struct cluster_endpoint {
  std::string host;
  std::uint16_t port = 0;  ///< 0: none
  std::string str() const { return host + ":" + std::to_string(port); }
};

/// "host:port" with a port in 1-65535 into `out`; false when the text is not one.
bool parse_endpoint(const std::string& text, cluster_endpoint& out);

/// [cluster]: absent, the node is alone with every role. With `listen`, it accepts other
/// nodes over CAF's middleman (BASP over TCP) and connects to its seeds.
struct cluster_config {
  std::string node;            ///< this node's name; default: the region's
  unsigned roles = all_roles;  ///< role_bit()s
  cluster_endpoint listen;     ///< port 0: not clustered
  std::vector<cluster_endpoint> seeds;
  /// The front's region preference, nearest first; the node's own region is first unless listed.
  std::vector<std::string> regions;
  int heartbeat_ms = 500;             ///< middleman heartbeats
  int connection_timeout_ms = 1500;   ///< a peer silent this long is down (a frozen process)
  bool has(node_role r) const { return (roles & role_bit(r)) != 0; }
  bool clustered() const { return listen.port != 0; }
};

/// Model files served to other nodes and pulled from them (`[artifacts]`).
struct artifacts_config {
  std::string dir;                            ///< served as /artifacts/{set}/{file} (admin key); "": none
  std::string cache_dir = "~/.kiln/weights";  ///< where http:// weights are pulled to ("~/" is $HOME)
  std::string key;                            ///< the bearer key for pulls; "": this node's admin_key
};

/// OpenAI's Files and Batches (`[batch]`): where uploaded files live and how batch lines run.
struct batch_config {
  std::string files_dir;                      ///< "": beside the store file (<store>.files), ~/.kiln/files for PostgreSQL
  std::size_t max_file_bytes = 200u << 20;    ///< an upload larger than this gets 413
  int max_lines = 50000;                      ///< requests in one batch
  /// A model's batch lines running at once while no online request runs; beside online
  /// requests a quarter of it (each line makes every engine step a little longer).
  int max_in_flight = 128;
  /// Batch lines run only while a model's online requests (interactive and standard) wait
  /// nowhere and their charged tokens in flight stay below this share of the pools' capacity;
  /// the lines' own charged tokens then fill what is left of that share.
  double idle_below = 0.5;
};

/// A model's alias: `"model":"chat-7b"` means its live version.
struct model_config {
  std::string name;
  std::string live_version;
};

struct kiln_config {
  std::string region = "local";
  std::string admin_key;  ///< for /admin routes; empty: a random one is drawn at start
  std::string store_path = "~/.kiln/kiln.db";  ///< the control-plane store ("~/" is $HOME), or postgresql://...
  /// The usage log's path prefix (local disk; "": beside a store file, ~/.kiln/<node>.usage
  /// for a PostgreSQL store).
  std::string usage_log;
  server_config server;
  rollout_config rollout;
  cluster_config cluster;
  artifacts_config artifacts;
  batch_config batch;
  std::vector<team_config> teams;
  std::vector<model_config> models;  ///< every model served, with its live version
  std::vector<pool_config> pools;    ///< one per model@version
  std::string source;  ///< the TOML text this was parsed from

  const team_config* team_by_key(std::string_view key) const;
  const pool_config* pool_for(std::string_view model, std::string_view version) const;
  /// The version "model" resolves to; empty for an unknown model.
  std::string live_version(std::string_view model) const;
  /// The longest a request may take in any pool (the front's last-resort deadline).
  int longest_request_ms() const;
  /// store_path with a leading "~/" expanded.
  std::string resolved_store_path() const;
  /// Where uploaded files live: batch.files_dir, or beside the store.
  std::string resolved_files_dir() const;
};

/// One clear line saying what is wrong and where.
struct config_error {
  std::string message;
};

/// A path with a leading "~/" as under $HOME (other paths as they are).
std::string expand_home(const std::string& path);

/// A request's model: "model@version" as {model, version}; a plain name as {name, ""} (the
/// version is then its route's or its configured live one).
std::pair<std::string, std::string> split_model_ref(std::string_view ref);

std::variant<kiln_config, config_error> parse_config(std::string_view toml_text, std::string_view origin);
std::variant<kiln_config, config_error> load_config_file(const std::string& path);
/// The embedded default: region `local`, pool chat-7b@v1 on the sim executor, two teams.
std::string_view embedded_default_config();

}  // namespace kiln::config
