#include "config/config.hpp"

namespace kiln::config {

std::string_view embedded_default_config() {
  static constexpr std::string_view text = R"toml(# kiln embedded default: one node, one region, every role.
region = "local"
admin_key = "kiln-admin-local"  # for /admin routes (pool state, drain, chaos)
store_path = "~/.kiln/kiln.db"  # teams, keys (hashed), limits, usage; seeded from this file once
                                # (postgresql://user@host/db: one store for several nodes)
# usage_log = ""                # the usage log's prefix; "": beside the store file

# [artifacts]                    # model files for other nodes, and where this node pulls them to
# dir = "/srv/kiln/artifacts"    # served as GET /artifacts/{set}[/{file}] (admin key); none by default
# cache_dir = "~/.kiln/weights"  # versions whose weights_uri is http://HOST:PORT/artifacts/{set}
# key = ""                       # the bearer key for pulls; "": this node's admin_key

# [batch]                        # OpenAI's /v1/files and /v1/batches
# files_dir = ""                 # "": beside the store file (<store_path>.files)
# max_file_bytes = 209715200     # an upload larger than this gets 413
# max_lines = 50000              # requests in one batch
# max_in_flight = 128            # a model's batch lines at once (a quarter of it beside online requests)
# idle_below = 0.5               # lines run while online requests wait nowhere and hold less than
#                                # this share of the pools' capacity; lines fill the rest of it

[server]
host = "127.0.0.1"
port = 8080
max_body_bytes = 1048576      # 413 above this
max_header_bytes = 8192       # 431 above this
request_timeout_ms = 10000    # a request must arrive whole within this time
shutdown_grace_ms = 5000      # after SIGTERM, open streams get this long to finish
io_threads = 1
actor_threads = 0             # 0: half the cores (one on 2 cores: a second doubles the context switches)
actor_sleep_polls = 0         # an idle actor thread blocks at once rather than sleeping 50 us at a time
# actors_on_io_thread = true   # the one I/O thread also runs the actors; unset: so where
#                              # io_threads = 1 and one actor thread runs (2 cores or fewer)
write_timeout_ms = 30000      # a client that takes no bytes this long loses its stream
max_buffered_bytes = 4194304  # per connection: a client this far behind is dropped

[[teams]]
name = "search"
api_key = "kiln-search-local"

[[teams]]
name = "assistant"
api_key = "kiln-assistant-local"

[[pools]]
model = "chat-7b"
version = "v1"
replicas = 4
executor = "sim"
max_tokens_per_step = 2048    # prefill + decode tokens per engine step
max_running = 128             # sequences in the batch at once
block_size = 16               # tokens per KV block
kv_blocks = 0                 # 0: as many as fit beside the weights (see [pools.gpu])
kv_reserve_blocks = 16        # free blocks that must remain when a request is admitted
batch_step_tokens = -1        # beside online work, batch prompts fill a step to this many
                              # tokens at most; -1: the GPU's roofline knee, 0: no bound
default_max_tokens = 1024
max_context = 32768
heartbeat_ms = 1000           # replicas beat this often; 3 missed and they leave the ranking
first_token_timeout_ms = 60000
request_timeout_ms = 600000
restart_intensity = 5         # engine/replica restarts allowed per restart_period_ms; past it
restart_period_ms = 60000     # the pool is degraded (503, Retry-After) for one period
capacity_tokens = 0           # tokens in flight a replica carries at full load; 0: its KV cache
queue_limit = 256             # requests waiting in admission when the pool is full
gpu_hour_usd = 2.50           # one GPU-hour (seed 000): /metrics reports USD per million tokens
tool_call_format = "none"     # how the model writes tool calls: hermes (Qwen), llama3_json (Llama 3.1/3.2)

# Shape of a 7B GQA decoder (32 layers, 8 KV heads) in FP16: 131,072 KV bytes per token.
[pools.shape]
layers = 32
d_model = 4096
heads = 32
kv_heads = 8
head_dim = 128
ffn_dim = 14336
vocab = 32000
dtype_bytes = 2
kv_dtype_bytes = 2

# H200-class GPU and the efficiency assumptions of the sizing seed (A4-A7).
[pools.gpu]
hbm_bytes_per_s = 4.8e12
flops_per_s = 989e12
bandwidth_efficiency = 0.70
flops_efficiency = 0.40
end_to_end_efficiency = 0.60
allreduce_bytes_per_s = 300e9
allreduce_latency_s = 8e-6
fixed_step_s = 1.5e-3
tensor_parallel = 1
hbm_capacity_bytes = 141e9
kv_memory_fraction = 0.90     # weights + KV; the rest is runtime reserve

# The sim executor's answers end after a seeded length in this range (or at max_tokens).
[pools.sim_text]
min_output_tokens = 16
max_output_tokens = 400

# A small Llama-architecture model with random weights, run for real on the CPU. Created
# on first start (kiln make-tiny-model) when the directory is absent.
[[pools]]
model = "tiny-chat"
version = "v1"
replicas = 1
executor = "cpu"
model_dir = "~/.kiln/models/tiny-chat"
make_if_absent = "tiny"
threads = 2
# The weights in BF16 (the files hold F32), the products on the best kernels this CPU has
# (printed at load; kiln_cpu_kernels_info in /metrics); f32 and int8 also serve.
weights_dtype = "bf16"
kv_dtype = "bf16"
max_tokens_per_step = 256
max_running = 16
block_size = 16
kv_blocks = 1024
kv_reserve_blocks = 4
default_max_tokens = 128
max_context = 4096
)toml";
  return text;
}

}  // namespace kiln::config
