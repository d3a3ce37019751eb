#pragma once
// Arrivals for the simulator: synthetic processes (Poisson at a rate, a ramp, a step, a daily
// curve) and trace replay (the Azure conversation CSV, Mooncake JSONL with its prompt block
// hashes, kiln's own capture files), scaled to a target rate, with rules that give each
// request a team, a tier and a conversation. Prompts are blocks of tokens named by a hash:
// equal hashes are equal tokens, so prefix sharing in a trace is prefix sharing in the engines.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/capture.hpp"
#include "engine/token_list.hpp"
#include "engine/types.hpp"

namespace kiln::sim {

/// Tokens in one prompt block of a Mooncake trace (its hash ids are per 512 tokens).
inline constexpr int kTraceBlockTokens = 512;
/// Tokens per block of synthetic prompts and captures: the engines' KV block, so a shared
/// system prompt of any length is shared to the token.
inline constexpr int kFineBlockTokens = 16;

/// A run's synthetic prompts, each a few words from which its block names are made when
/// asked (blocks_of), instead of a list per prompt: seed_fleet's 60,000 prompts named about
/// 4.5 million blocks, 36 MB written before the run could start.
struct drawn_prompts;

struct arrival {
  double t = 0;  ///< seconds from the start of the run
  std::string team;
  std::string model;                   ///< empty: the fleet's first model
  engine::priority tier = engine::priority::standard;
  std::string conversation;            ///< the routing key; empty: none
  std::int32_t prompt_tokens = 0;
  std::vector<std::uint64_t> blocks;   ///< one hash per block_tokens (the last may be partial)
  /// A synthetic prompt's names instead of `blocks` (which stays empty): prompt `drawn_at` of
  /// the run's drawn prompts.
  std::shared_ptr<const drawn_prompts> drawn;
  std::uint32_t drawn_at = 0;
  std::int32_t block_tokens = kFineBlockTokens;
  std::int32_t output_tokens = 0;
};

/// How many block names the prompt has, and the names themselves (written over `out`):
/// `blocks`, or a synthetic prompt's made now.
std::size_t block_count(const arrival& a);
void blocks_of(const arrival& a, std::vector<std::uint64_t>& out);

/// The prompt's token ids: block i's tokens are a function of its hash alone.
std::vector<std::int32_t> prompt_of(const arrival& a, int vocab);
/// The same ids as a token list that makes them when first read (or copied into an engine).
engine::token_list prompt_list_of(const arrival& a, int vocab);

/// Who sends a share of the traffic.
struct team_rule {
  std::string name;
  std::string model;             ///< what it asks for; empty: the fleet's first model
  double weight = 1;
  engine::priority tier = engine::priority::standard;
  int system_prompt_tokens = 0;  ///< a prefix every request of the team shares
  double rate_multiplier = 1;    ///< this team's traffic is this many times its share
};

enum class arrival_process : std::uint8_t { poisson, ramp, step, daily, trace };

struct arrival_spec {
  arrival_process process = arrival_process::poisson;
  double rate = 10;                 ///< requests per second (at the start, for ramp and step)
  double ramp_per_minute = 0.05;    ///< ramp: growth per minute (1.05x)
  double step_at_s = 60;            ///< step: when the rate changes ...
  double step_factor = 2;           ///< ... and by how much
  double daily_period_s = 86400;    ///< daily: one cycle (shorten it to compress a day)
  double daily_trough = 0.3;        ///< daily: lowest rate as a fraction of `rate`
  std::string trace;                ///< trace: a file (.csv Azure, .jsonl Mooncake, .kcap capture)
  double trace_rate = 0;            ///< trace: scale timestamps to this mean rate; 0: as recorded
  double duration_s = 60;           ///< arrivals stop here (a trace also stops at its end)
  int prompt_tokens = 1200;         ///< synthetic: mean prompt length
  int output_tokens = 300;          ///< synthetic: mean output length
  int conversation_turns = 1;       ///< synthetic and Azure: mean turns; later turns extend earlier prompts
  int max_prompt_tokens = 0;        ///< > 0: longer prompts are cut to this
  std::vector<team_rule> teams;     ///< empty: one team "sim"
};

/// The most arrivals one run makes (about 20 minutes at seed 000's peak of 100/s, 12 times).
inline constexpr double kMaxArrivals = 2e6;
/// The most prompt tokens one run's arrivals may ask for in all (each is kept as block
/// hashes, about half a byte a token, and made when its request is sent): some 28 times
/// seed_fleet's 72 million.
inline constexpr double kMaxPromptTokens = 2e9;

/// Every arrival of a run in time order, or what is wrong with the spec or the trace.
/// `on_count`, when given, hears how many arrivals there will be as soon as that is known,
/// before their prompts are made (a caller may size its own tables meanwhile).
std::variant<std::vector<arrival>, std::string> make_arrivals(const arrival_spec& spec, std::uint64_t seed,
                                                              const std::function<void(std::size_t)>& on_count = {});

/// Prompt tokens an unlimited cache could serve: for each request in order, its longest
/// prefix (in `block_size`-token blocks) that an earlier request of its team also began with
/// (kiln never shares cached blocks across teams).
struct oracle_result {
  std::int64_t prompt_tokens = 0;
  std::int64_t reusable_tokens = 0;
  double hit_rate() const { return prompt_tokens > 0 ? static_cast<double>(reusable_tokens) / prompt_tokens : 0; }
};
/// Synthetic prompts are counted from how they were drawn, others through a tree of every
/// prefix seen; `by_tree` takes the tree for all (the tests hold the two to the same count).
oracle_result oracle_hit_rate(const std::vector<arrival>& arrivals, int block_size, int vocab, bool by_tree = false);

/// oracle_hit_rate() counted from how synthetic prompts were drawn, the way it takes for them;
/// empty unless every arrival is a drawn prompt of `block_size`-token names, in the order drawn.
std::optional<oracle_result> drawn_oracle_hit_rate(const std::vector<arrival>& arrivals, int block_size);

/// oracle_hit_rate() in parts that several threads can share: one part per team (the oracle
/// keeps teams apart, as the engines do), the largest first. Any thread may help(), and the
/// result is the same whichever thread ran which part. It reads `arrivals` in place: they
/// must outlive it.
class oracle_work {
 public:
  oracle_work(const std::vector<arrival>& arrivals, int block_size, int vocab, bool by_tree = false)
      : arrivals_(arrivals), block_size_(block_size), vocab_(vocab), by_tree_(by_tree) {}
  /// Runs parts no thread has taken until none is left (the first call splits the work).
  void help();
  /// The sum over the parts; complete once every thread that helped has returned.
  oracle_result result() const;

 private:
  void split();
  const std::vector<arrival>& arrivals_;
  int block_size_, vocab_;
  bool by_tree_;
  std::once_flag split_;
  std::vector<std::vector<std::uint32_t>> parts_;  ///< arrival indices, one team each, in order
  std::vector<oracle_result> results_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace kiln::sim
