#include "sim/arrivals.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>
#include <span>

#include <xxhash.h>

#include "engine/wide_loop.hpp"
#include "engine/tagged_index.hpp"
#include "sim/traces.hpp"

namespace kiln::sim {

namespace {

/// Two words to one, well mixed (the splitmix64 finalizer over a combination): a few
/// multiplies, as it runs for every prompt token the simulator makes.
std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t hash_of(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

/// A portable uniform draw in (0, 1): the same sequence on every standard library.
class draws {
 public:
  explicit draws(std::uint64_t seed) : state_(seed) {}
  double uniform() {
    state_ = mix(state_, 0x9E3779B97F4A7C15ull);
    return (static_cast<double>(state_ >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  }
  double exponential(double mean) { return -mean * std::log(uniform()); }
  std::uint64_t next() { return state_ = step(state_); }
  /// Where next() goes from: a name drawn later is step() from here, again and again.
  std::uint64_t state() const { return state_; }
  static std::uint64_t step(std::uint64_t state) { return mix(state, 0x9E3779B97F4A7C15ull); }

 private:
  std::uint64_t state_;
};

double rate_at(const arrival_spec& s, double t) {
  switch (s.process) {
    case arrival_process::ramp: return s.rate * std::pow(1 + s.ramp_per_minute, t / 60.0);
    case arrival_process::step: return t < s.step_at_s ? s.rate : s.rate * s.step_factor;
    case arrival_process::daily: {
      const double phase = (1 - std::cos(2 * M_PI * t / s.daily_period_s)) / 2;  // 0 at the trough
      return s.rate * (s.daily_trough + (1 - s.daily_trough) * phase);
    }
    default: return s.rate;
  }
}

double peak_rate(const arrival_spec& s) {
  switch (s.process) {
    case arrival_process::ramp: return std::max(s.rate, rate_at(s, s.duration_s));
    case arrival_process::step: return s.rate * std::max(1.0, s.step_factor);
    default: return s.rate;
  }
}

/// A length around `mean`: exponential, kept within [mean/8, 4 mean] and at least 1.
std::int32_t length_near(draws& d, int mean) {
  const double x = std::clamp(d.exponential(mean), mean / 8.0, 4.0 * mean);
  return std::max<std::int32_t>(1, static_cast<std::int32_t>(std::lround(x)));
}

std::vector<team_rule> teams_of(const arrival_spec& s) {
  if (!s.teams.empty()) return s.teams;
  team_rule one;
  one.name = "sim";
  return {one};
}

}  // namespace

/// Prompt k's block names: names 0..system are its team's system prompt (systems[team]),
/// names system..kept those of an earlier prompt of its conversation (none when kept <=
/// system), then `fresh` names drawn one after the other from the draws' state `from`.
struct drawn_prompts {
  struct prompt {
    std::uint64_t from = 0;
    std::int32_t earlier = -1;
    std::uint32_t team = 0;
    std::uint32_t system = 0;
    std::uint32_t kept = 0;
    std::uint32_t fresh = 0;
    std::uint32_t size() const { return std::max(system, kept) + fresh; }
  };
  std::vector<prompt> prompts;
  std::vector<std::vector<std::uint64_t>> systems;  ///< each team's system prompt, named once
  std::uint64_t serial = next_serial();              ///< this book among the process's books

  static std::uint64_t next_serial() {
    static std::atomic<std::uint64_t> n{0};
    return ++n;
  }

  /// Names [from, to) of prompt k, appended to `out` in order. A later turn's earlier turn is
  /// followed down the conversation (not recursively: a conversation may run to thousands of
  /// turns), each turn's own drawn names set aside to follow its earlier ones.
  void append(std::int32_t k, std::uint32_t from, std::uint32_t to, std::vector<std::uint64_t>& out) const {
    struct part {
      const prompt* p;
      std::uint32_t from, to;  // of its drawn names
    };
    thread_local std::vector<part> drawn;  // kept between calls: no allocation per prompt
    drawn.clear();
    while (true) {
      const prompt& p = prompts[static_cast<std::size_t>(k)];
      const std::uint32_t base = std::max(p.system, p.kept);
      to = std::min(to, p.size());
      if (from < std::min(to, p.system)) {
        const auto& system = systems[p.team];
        out.insert(out.end(), system.begin() + from, system.begin() + std::min(to, p.system));
      }
      if (to > base) drawn.push_back({&p, std::max(from, base) - base, to - base});
      const std::uint32_t lo = std::max(from, p.system), hi = std::min(to, p.kept);
      if (p.earlier < 0 || lo >= hi) break;
      k = p.earlier;
      from = lo;
      to = hi;
    }
    for (auto it = drawn.rbegin(); it != drawn.rend(); ++it) {
      std::uint64_t state = it->p->from;
      for (std::uint32_t i = 0; i < it->from; ++i) state = draws::step(state);
      for (std::uint32_t i = it->from; i < it->to; ++i) out.push_back(state = draws::step(state));
    }
  }
};

std::size_t block_count(const arrival& a) {
  return a.drawn ? a.drawn->prompts[a.drawn_at].size() : a.blocks.size();
}

void blocks_of(const arrival& a, std::vector<std::uint64_t>& out) {
  if (!a.drawn) {
    out = a.blocks;
    return;
  }
  out.clear();
  a.drawn->append(static_cast<std::int32_t>(a.drawn_at), 0, a.drawn->prompts[a.drawn_at].size(), out);
}

namespace {

/// Gives prompts their blocks: the team's system prompt first, then a conversation's earlier
/// prompt (a later turn extends it), then fresh blocks. Each prompt is a few words in the
/// run's drawn prompts; its names are made when asked.
class prompt_maker {
 public:
  prompt_maker(const arrival_spec& s, std::uint64_t seed)
      : spec_(s), d_(seed ^ 0xC0FFEEull), book_(std::make_shared<drawn_prompts>()) {}

  void reserve(std::size_t n) { book_->prompts.reserve(n); }

  void fill(arrival& a, const team_rule& team) {
    a.block_tokens = kFineBlockTokens;
    const int per = kFineBlockTokens;
    const int total_blocks = std::max(0, (a.prompt_tokens + per - 1) / per);
    team_state& mine = teams_[team.name];
    if (!mine.named) {  // the team's system prompt, named once
      const std::uint64_t hash = hash_of(team.name);
      std::vector<std::uint64_t> system;
      for (int i = 0; i < team.system_prompt_tokens / per; ++i) system.push_back(mix(hash, static_cast<std::uint64_t>(i)));
      mine.at = static_cast<std::uint32_t>(book_->systems.size());
      book_->systems.push_back(std::move(system));
      mine.named = true;
    }
    drawn_prompts::prompt p;
    p.team = mine.at;
    p.system = static_cast<std::uint32_t>(std::min(team.system_prompt_tokens / per, total_blocks));
    p.kept = p.system;
    auto& open = mine.open;
    const int turns = std::max(1, spec_.conversation_turns);
    conversation* in = nullptr;  // the conversation this prompt continues or opens
    if (turns > 1 && !open.empty() && d_.uniform() >= 1.0 / turns) {
      const std::size_t pick = static_cast<std::size_t>(d_.next() % open.size());
      in = &open[pick];
      a.conversation = in->id;
      // Its earlier prompt, as far as this one reaches (at least one fresh block stays).
      const auto reach = static_cast<std::uint32_t>(std::max(0, std::min(static_cast<int>(in->size), total_blocks - 1)));
      if (reach > p.system) {
        p.earlier = in->latest;
        p.kept = reach;
      }
    } else if (turns > 1) {
      a.conversation = team.name + "-c" + std::to_string(++conversations_);
      open.push_back({a.conversation, -1, 0});
      if (open.size() > 64) open.pop_front();
      in = &open.back();
    }
    p.fresh = static_cast<std::uint32_t>(total_blocks) - std::max(p.system, p.kept);
    p.from = d_.state();
    for (std::uint32_t i = 0; i < p.fresh; ++i) d_.next();
    a.drawn = book_;
    a.drawn_at = static_cast<std::uint32_t>(book_->prompts.size());
    book_->prompts.push_back(p);
    if (in) {
      in->latest = static_cast<std::int32_t>(a.drawn_at);
      in->size = p.size();
    }
  }

 private:
  struct conversation {
    std::string id;
    std::int32_t latest = -1;  ///< its latest prompt in the drawn prompts
    std::uint32_t size = 0;    ///< that prompt's block names
  };
  struct team_state {
    bool named = false;
    std::uint32_t at = 0;            ///< its system prompt in the drawn prompts
    std::deque<conversation> open;   ///< its latest conversations, oldest first
  };
  const arrival_spec& spec_;
  draws d_;
  std::shared_ptr<drawn_prompts> book_;
  std::map<std::string, team_state> teams_;
  std::uint64_t conversations_ = 0;
};

const team_rule& pick_team(const std::vector<team_rule>& teams, draws& d) {
  double total = 0;
  for (const auto& t : teams) total += t.weight;
  double x = d.uniform() * total;
  for (const auto& t : teams) {
    if (x < t.weight) return t;
    x -= t.weight;
  }
  return teams.back();
}

std::vector<arrival> synthetic(const arrival_spec& s, std::uint64_t seed) {
  const auto teams = teams_of(s);
  double weights = 0, multiplier = 0;
  for (const auto& t : teams) weights += t.weight;
  for (const auto& t : teams) multiplier += t.weight / weights * std::max(0.0, t.rate_multiplier);
  // Each team's times and lengths first, a few words each; then the arrivals, once, in time
  // order (ties: as made).
  struct draft {
    double t;
    std::uint32_t team;
    std::int32_t prompt, output;
  };
  std::vector<draft> drafts;
  drafts.reserve(static_cast<std::size_t>(std::min(kMaxArrivals, peak_rate(s) * multiplier * s.duration_s * 1.05) + 64));
  for (std::size_t k = 0; k < teams.size(); ++k) {
    const team_rule& team = teams[k];
    // Each team is its own process at its share of the rate (times its multiplier).
    const double share = team.weight / weights * team.rate_multiplier;
    draws d(mix(seed, hash_of(team.name)));
    const double peak = peak_rate(s) * share;
    if (peak <= 0) continue;
    for (double t = d.exponential(1 / peak); t < s.duration_s; t += d.exponential(1 / peak)) {
      if (d.uniform() * peak > rate_at(s, t) * share) continue;  // thinning
      const std::int32_t prompt = length_near(d, s.prompt_tokens);
      drafts.push_back({t, static_cast<std::uint32_t>(k), prompt, length_near(d, s.output_tokens)});
    }
  }
  std::stable_sort(drafts.begin(), drafts.end(), [](const draft& a, const draft& b) { return a.t < b.t; });
  std::vector<arrival> out;
  out.resize(drafts.size());
  for (std::size_t i = 0; i < drafts.size(); ++i) {
    const draft& x = drafts[i];
    const team_rule& team = teams[x.team];
    arrival& a = out[i];
    a.t = x.t;
    a.team = team.name;
    a.model = team.model;
    a.tier = team.tier;
    a.prompt_tokens = x.prompt;
    a.output_tokens = x.output;
  }
  return out;
}

}  // namespace

namespace {

/// Tokens `from`.. `from + n` of the run of tokens named by `base`, written at `out`: one
/// multiply-xorshift round over a Weyl sequence, then a multiply (not a division) into
/// [2, 2 + v). The simulator makes every prompt token this way, about 70 million for a
/// 10-minute fleet run, so the loop stays free of bounds checks and growth (and wide).
KILN_WIDE_LOOP void fill_tokens(std::int32_t* out, std::uint64_t base, std::size_t from, std::size_t n, std::uint64_t v) {
  constexpr std::uint64_t kWeyl = 0x9E3779B97F4A7C15ull;
  std::uint64_t w = base + from * kWeyl;
  for (std::size_t j = 0; j < n; ++j, w += kWeyl) {
    std::uint64_t z = (w ^ (w >> 32)) * 0xD6E8FEB86659FD93ull;
    z ^= z >> 32;
    out[j] = 2 + static_cast<std::int32_t>(((z & 0xFFFFFFFFull) * v) >> 32);
  }
}

/// Block `name`'s first n ids (a prompt's block is a function of its name alone).
void block_ids(std::int32_t* out, std::uint64_t name, std::size_t n, std::uint64_t v) {
  fill_tokens(out, mix(name, 0x51EDull), 0, n, v);
}

/// The ids of a team's system prompt (whole blocks of `per`), made once per thread and book:
/// most synthetic prompts open with one, so each prompt copies them instead of making them.
/// Null once a thread keeps kMaxKept ids (many teams with long system prompts): the prompt
/// then makes its own, as it would without the copies.
const std::vector<std::int32_t>* system_tokens(const drawn_prompts& d, std::uint32_t team, std::size_t per,
                                               std::uint64_t v) {
  constexpr std::size_t kMaxKept = std::size_t{4} << 20;  // 16 MB of ids a thread
  thread_local struct {
    std::uint64_t serial = 0, v = 0;
    std::size_t per = 0, kept = 0;
    std::vector<std::vector<std::int32_t>> by_team;
  } made;
  if (made.serial != d.serial || made.per != per || made.v != v) {
    made.serial = d.serial;
    made.per = per;
    made.v = v;
    made.kept = 0;
    made.by_team.clear();
  }
  if (made.by_team.size() <= team) made.by_team.resize(d.systems.size());
  std::vector<std::int32_t>& ids = made.by_team[team];
  const auto& names = d.systems[team];
  if (ids.size() != names.size() * per) {
    if (made.kept + names.size() * per > kMaxKept) return nullptr;
    made.kept += names.size() * per;
    ids.resize(names.size() * per);
    for (std::size_t b = 0; b < names.size(); ++b) block_ids(ids.data() + b * per, names[b], per, v);
  }
  return &ids;
}

/// The prompt's prompt_tokens ids, written at `out`.
void write_prompt(const arrival& a, int vocab, std::int32_t* out) {
  const auto want = static_cast<std::size_t>(std::max(0, a.prompt_tokens));
  const auto v = static_cast<std::uint64_t>(std::max(3, vocab) - 2);
  const auto per = static_cast<std::size_t>(std::max(0, a.block_tokens));
  thread_local std::vector<std::uint64_t> made;
  if (a.drawn) blocks_of(a, made);
  const std::vector<std::uint64_t>& blocks = a.drawn ? made : a.blocks;
  std::size_t at = 0, first = 0;
  if (const auto* p = a.drawn ? &a.drawn->prompts[a.drawn_at] : nullptr; p && p->system > 0 && per > 0) {
    if (const std::vector<std::int32_t>* system = system_tokens(*a.drawn, p->team, per, v)) {
      at = std::min(want, static_cast<std::size_t>(p->system) * per);
      std::copy_n(system->data(), at, out);
      first = p->system;
    }
  }
  for (std::size_t b = first; b < blocks.size() && at < want; ++b) {
    const std::size_t n = std::min(per, want - at);
    block_ids(out + at, blocks[b], n, v);
    at += n;
  }
  // A trace with fewer hashes than tokens: the rest is the request's own.
  const std::uint64_t tail = blocks.empty() ? 0 : blocks.back();
  if (at < want) fill_tokens(out + at, mix(tail, 0xABCDull), at, want - at, v);
}

/// A prompt's ids made when the engine takes it: a request carries a few words, not its
/// thousands of ids, for as long as it lives.
class prompt_source final : public engine::token_list::source {
 public:
  prompt_source(const arrival& a, int vocab) : vocab_(vocab) {
    a_.prompt_tokens = std::max(0, a.prompt_tokens);
    a_.blocks = a.blocks;
    a_.drawn = a.drawn;
    a_.drawn_at = a.drawn_at;
    a_.block_tokens = a.block_tokens;
  }
  std::size_t size() const override { return static_cast<std::size_t>(a_.prompt_tokens); }
  void fill(std::int32_t* out) const override { write_prompt(a_, vocab_, out); }

 private:
  arrival a_;  // the prompt's names only
  int vocab_;
};

}  // namespace

std::vector<std::int32_t> prompt_of(const arrival& a, int vocab) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(std::max(0, a.prompt_tokens)));
  write_prompt(a, vocab, out.data());
  return out;
}

engine::token_list prompt_list_of(const arrival& a, int vocab) {
  return engine::token_list::made_by(std::make_shared<const prompt_source>(a, vocab));
}

namespace {

/// A count for a refusal: "about N", whole below 10^15, else like "about 6.0e+302" (no
/// integer holds it), or "more than 1.8e+308" past what a double holds.
std::string about(double n) {
  if (n < 1e15) return "about " + std::to_string(static_cast<long long>(n));
  if (!std::isfinite(n)) return "more than 1.8e+308";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", n);
  return std::string("about ") + buf;
}

/// Empty when the arrivals' prompts fit a run (kMaxPromptTokens); else why not.
std::string prompts_fit(const std::vector<arrival>& out) {
  double total = 0;
  for (const auto& a : out) total += std::max(0, a.prompt_tokens);
  if (total <= kMaxPromptTokens) return {};
  return "the arrivals' prompts total " + std::to_string(static_cast<long long>(total)) + " tokens; at most " +
         std::to_string(static_cast<long long>(kMaxPromptTokens)) + " per run";
}

}  // namespace

std::variant<std::vector<arrival>, std::string> make_arrivals(const arrival_spec& s, std::uint64_t seed,
                                                              const std::function<void(std::size_t)>& on_count) {
  if (s.duration_s <= 0) return std::string("duration must be positive");
  std::vector<arrival> out;
  if (s.process == arrival_process::trace) {
    auto read = read_trace(s.trace);
    if (auto* e = std::get_if<std::string>(&read)) return *e;
    out = std::move(std::get<std::vector<arrival>>(read));
    if (out.empty()) return s.trace + ": no requests";
    const double span = out.back().t - out.front().t;
    const double t0 = out.front().t;
    const double recorded = span > 0 ? static_cast<double>(out.size() - 1) / span : 0;
    const double scale = (s.trace_rate > 0 && recorded > 0) ? recorded / s.trace_rate : 1.0;
    for (auto& a : out) a.t = (a.t - t0) * scale;
    out.erase(std::find_if(out.begin(), out.end(), [&](const arrival& a) { return a.t >= s.duration_s; }), out.end());
    if (static_cast<double>(out.size()) > kMaxArrivals)
      return s.trace + ": " + std::to_string(out.size()) + " requests within the run's duration; at most " +
             std::to_string(static_cast<long long>(kMaxArrivals)) + " per run";
    if (auto e = prompts_fit(out); !e.empty()) return s.trace + ": " + e;
    // Teams, tiers and (where the trace has none) conversations by the rules.
    const auto teams = teams_of(s);
    draws d(mix(seed, 0x7EA5ull));
    prompt_maker prompts(s, seed);
    std::vector<bool> silent(out.size(), false);
    for (std::size_t i = 0; i < out.size(); ++i) {
      arrival& a = out[i];
      const team_rule& team = pick_team(teams, d);
      if (!a.team.empty()) continue;  // a capture keeps who sent it
      a.team = team.name;
      a.model = team.model;
      a.tier = team.tier;
      silent[i] = team.rate_multiplier <= 0;  // a baseline without this team: same draws for the rest
      if (a.blocks.empty()) prompts.fill(a, team);
    }
    std::size_t k = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      if (silent[i]) continue;
      if (k != i) out[k] = std::move(out[i]);
      ++k;
    }
    out.resize(k);
    if (on_count) on_count(out.size());
  } else {
    if (s.rate <= 0) return std::string("rate must be positive");
    // A scenario asking for more requests than a run can hold is refused before it starts.
    double multiplier = 1;
    for (const auto& t : s.teams) multiplier = std::max(multiplier, t.rate_multiplier);
    const double expected = peak_rate(s) * multiplier * s.duration_s;
    if (!(expected <= kMaxArrivals))
      return "the arrivals would number " + about(expected) +
             " (rate x duration); at most " + std::to_string(static_cast<long long>(kMaxArrivals)) + " per run";
    if (!(expected * s.prompt_tokens <= kMaxPromptTokens))
      return "the arrivals' prompts would total " + about(expected * s.prompt_tokens) +
             " tokens (rate x duration x prompt_tokens); at most " +
             std::to_string(static_cast<long long>(kMaxPromptTokens)) + " per run";
    out = synthetic(s, seed);
    if (auto e = prompts_fit(out); !e.empty()) return e;
    if (on_count) on_count(out.size());
    prompt_maker prompts(s, seed);
    prompts.reserve(out.size());
    const auto teams = teams_of(s);
    for (auto& a : out) {
      const auto it = std::find_if(teams.begin(), teams.end(), [&](const team_rule& t) { return t.name == a.team; });
      prompts.fill(a, *it);
    }
  }
  if (s.max_prompt_tokens > 0) {
    for (auto& a : out) a.prompt_tokens = std::min(a.prompt_tokens, s.max_prompt_tokens);
  }
  return out;
}

namespace {

/// Every prompt seen so far as a tree of runs of block names: a prompt that leaves the tree
/// adds one run (its new blocks, stored in a row) hung from where it left; only the places
/// where a run hangs are in a hash index (keyed by the run above, the place and the first
/// block). A lookup walks runs in order, so the oracle touches
/// memory once per branch instead of once per block.
///
/// A name may stand for several cache blocks (a trace's 512 tokens are 32 blocks of 16), the
/// last of a prompt's names only partly covered by its full cache blocks. Each place of such
/// names keeps the most cache blocks any prompt through it covered: two prompts that share d
/// names share min(d x blocks per name, what each covers) cache blocks, so the tree walks
/// names, not the 32 times as many cache blocks. (A name of one cache block, as a synthetic
/// prompt's, is always covered whole: its places keep no count.)
class prompt_tree {
  struct run {
    std::size_t start = 0;  ///< its first name in names_
    std::size_t len = 0;
    std::uint64_t key = 0;  ///< where it hangs: its key in branches_
  };
  /// A run's key by its id, as the index confirms a match.
  struct run_keys {
    const std::vector<run>* runs;
    std::uint64_t operator()(std::int32_t id) const { return (*runs)[static_cast<std::size_t>(id)].key; }
  };
  run_keys key_of() const { return {&runs_}; }

 public:
  explicit prompt_tree(std::size_t expected_names) : branches_(1u << 12) {
    names_.reserve(expected_names);
    cover_.reserve(expected_names);
  }

  /// The run of a team's prompts (an empty run: every prompt of the team hangs from it).
  std::int32_t root(std::uint64_t team) {
    const std::uint64_t key = mix(team, 0x7EA77EA7ull);
    if (auto r = branches_.find(key, key_of())) return *r;
    return add_run(key, 0);
  }

  /// A prompt of `names`, each standing for `per` cache blocks, whose full cache blocks are
  /// the first `covered`: how many of those an earlier prompt began with. Adds the prompt.
  std::size_t match_and_add(std::int32_t at, std::span<const std::uint64_t> names, std::size_t per, std::size_t covered) {
    std::size_t pos = runs_[static_cast<std::size_t>(at)].len;  // at the root: its end
    std::size_t i = 0, known = 0;
    // The i-th name matched, at names_[place]: the prompts through it share i of its names.
    // A name of one cache block is covered by every prompt that holds it (a prompt's names
    // are its full blocks), so then the names matched are the blocks known, and no place
    // keeps a count.
    auto pass = [&](std::size_t place) {
      ++i;
      if (per == 1) return;
      known = std::max(known, std::min({i * per, static_cast<std::size_t>(cover_[place]), covered}));
      cover_[place] = std::max(cover_[place], static_cast<std::uint32_t>(covered));
    };
    while (i < names.size()) {
      const run& r = runs_[static_cast<std::size_t>(at)];
      if (pos < r.len && names_[r.start + pos] == names[i]) {
        pass(r.start + pos);
        ++pos;
        continue;
      }
      // The run ends or turns elsewhere here: a run hung here beginning with this name?
      const auto child = branches_.find(branch_key(at, pos, names[i]), key_of());
      if (!child) break;
      at = *child;
      pass(runs_[static_cast<std::size_t>(at)].start);
      pos = 1;
    }
    if (per == 1) known = std::min(i, covered);
    if (i < names.size()) {
      // Leaves the tree here: the rest becomes a run hung at (at, pos) under its first name.
      add_run(branch_key(at, pos, names[i]), names.size() - i);
      names_.insert(names_.end(), names.begin() + static_cast<long>(i), names.end());
      // (Places of one-block names, under roots of their own, are never read here.)
      if (per != 1) cover_.resize(names_.size(), static_cast<std::uint32_t>(covered));
    }
    return known;
  }

 private:
  static std::uint64_t branch_key(std::int32_t run_id, std::size_t pos, std::uint64_t name) {
    return mix(mix(static_cast<std::uint64_t>(run_id), pos), name);
  }
  std::int32_t add_run(std::uint64_t key, std::size_t len) {
    const auto id = static_cast<std::int32_t>(runs_.size());
    runs_.push_back({names_.size(), len, key});
    branches_.insert(key, id, key_of());
    return id;
  }

  std::vector<std::uint64_t> names_;
  /// Per place in names_ (up to the last one of names of several cache blocks): the most cache
  /// blocks a prompt through it covered.
  std::vector<std::uint32_t> cover_;
  std::vector<run> runs_;
  engine::tagged_index branches_;
};

/// The oracle over some synthetic prompts of one team, in the order they were drawn, without
/// a tree: such a prompt shares names with an earlier one only in its team's system prompt
/// and, down its conversation, as far as each turn kept the turn before (every other name is
/// drawn once). Empty where that does not hold of `which`: some arrival is not a drawn
/// prompt of one book, its names are not single cache blocks, or the order is not the draws'.
std::optional<oracle_result> drawn_oracle(const std::vector<arrival>& arrivals, std::span<const std::uint32_t> which,
                                          int block_size) {
  if (which.empty()) return std::nullopt;
  const drawn_prompts* book = arrivals[which.front()].drawn.get();
  if (!book) return std::nullopt;
  std::int64_t last = -1;
  for (const auto i : which) {
    const arrival& a = arrivals[i];
    if (a.drawn.get() != book || a.block_tokens != block_size || static_cast<std::int64_t>(a.drawn_at) <= last ||
        static_cast<std::size_t>(std::max(0, a.prompt_tokens)) > block_count(a) * static_cast<std::size_t>(block_size))
      return std::nullopt;
    last = a.drawn_at;
  }
  oracle_result r;
  const auto bs = static_cast<std::uint32_t>(block_size);
  // Per drawn prompt met so far: how many of its names (its full blocks) the tree would hold.
  std::vector<std::int32_t> held(book->prompts.size(), -1);
  std::uint32_t system_held = 0;  // the most system-prompt names one earlier prompt holds
  for (const auto i : which) {
    const arrival& a = arrivals[i];
    const drawn_prompts::prompt& p = book->prompts[a.drawn_at];
    const auto n = static_cast<std::uint32_t>(std::max(0, a.prompt_tokens));
    r.prompt_tokens += n;
    const std::uint32_t mine = std::min(p.size(), n / bs);
    std::uint32_t known = std::min(p.system, system_held);
    // Down the conversation: the turn before shares what this one kept of it, the one before
    // that what both kept, and so on; a turn that was not met adds nothing but its bound.
    std::uint32_t shared = p.kept;
    for (std::int32_t k = p.earlier; k >= 0 && shared > known;) {
      const drawn_prompts::prompt& e = book->prompts[static_cast<std::size_t>(k)];
      if (held[static_cast<std::size_t>(k)] >= 0)
        known = std::max(known, std::min(shared, static_cast<std::uint32_t>(held[static_cast<std::size_t>(k)])));
      shared = std::min(shared, e.kept);
      k = e.earlier;
    }
    known = std::min(known, mine);
    // Never the whole prompt: its last token is always computed.
    const std::uint32_t usable = n == 0 ? 0 : (n - 1) / bs;
    r.reusable_tokens += static_cast<std::int64_t>(std::min(known, usable)) * bs;
    held[a.drawn_at] = static_cast<std::int32_t>(mine);
    system_held = std::max(system_held, std::min(p.system, mine));
  }
  return r;
}

/// The oracle over some arrivals of one team, in order (teams share no blocks, so each
/// team's prefixes are a tree of their own).
oracle_result oracle_of(const std::vector<arrival>& arrivals, std::span<const std::uint32_t> which, int block_size, int vocab,
                        bool by_tree) {
  if (!by_tree)
    if (auto drawn = drawn_oracle(arrivals, which, block_size)) return *drawn;
  oracle_result r;
  const std::size_t bs = static_cast<std::size_t>(std::max(1, block_size));
  std::size_t expected = 0;
  for (const auto i : which) {
    const arrival& a = arrivals[i];
    expected += std::max(1, a.block_tokens) % static_cast<int>(bs) == 0 ? block_count(a)
                                                                          : static_cast<std::size_t>(std::max(0, a.prompt_tokens)) / bs;
  }
  prompt_tree tree(expected);
  std::vector<std::uint64_t> names, made;
  for (const auto i : which) {
    const arrival& a = arrivals[i];
    const auto n = static_cast<std::size_t>(std::max(0, a.prompt_tokens));
    r.prompt_tokens += static_cast<std::int64_t>(n);
    // A block's tokens are a function of its hash, so a trace block names the cache blocks
    // inside it; only a prompt longer than its blocks needs its tokens.
    const auto per = static_cast<std::size_t>(std::max(1, a.block_tokens));
    const bool by_hash = per % bs == 0 && n <= block_count(a) * per;
    const std::vector<std::int32_t> tokens = by_hash ? std::vector<std::int32_t>{} : prompt_of(a, vocab);
    if (by_hash && a.drawn) blocks_of(a, made);
    const std::vector<std::uint64_t>& blocks = a.drawn ? made : a.blocks;
    // Full blocks only; the engines keep each team's prefix cache apart (no cross-tenant
    // hits): so does the oracle.
    const std::size_t full = n / bs;
    std::span<const std::uint64_t> named;
    std::size_t per_name = 1;  // cache blocks a name stands for
    if (by_hash) {
      per_name = per / bs;
      named = std::span<const std::uint64_t>(blocks).first(std::min(blocks.size(), (full + per_name - 1) / per_name));
    } else {
      names.clear();
      for (std::size_t off = 0; off + bs <= n; off += bs)
        names.push_back(XXH3_64bits(tokens.data() + off, bs * sizeof(std::int32_t)));
      named = names;
    }
    // Names of another size are another tree (they never name the same tokens).
    const std::size_t known = tree.match_and_add(tree.root(mix(hash_of(a.team), per_name)), named, per_name, full);
    // Never the whole prompt: its last token is always computed.
    const std::size_t usable = n == 0 ? 0 : (n - 1) / bs;
    r.reusable_tokens += static_cast<std::int64_t>(std::min(known, usable) * bs);
  }
  return r;
}

}  // namespace

void oracle_work::split() {
  std::unordered_map<std::string_view, std::size_t> part_of;
  std::vector<std::pair<std::int64_t, std::vector<std::uint32_t>>> parts;  // prompt tokens, arrivals
  for (std::size_t i = 0; i < arrivals_.size(); ++i) {
    const auto [it, added] = part_of.try_emplace(arrivals_[i].team, parts.size());
    if (added) parts.emplace_back();
    parts[it->second].first += std::max(0, arrivals_[i].prompt_tokens);
    parts[it->second].second.push_back(static_cast<std::uint32_t>(i));
  }
  // The largest first, so the last part taken is a small one.
  std::stable_sort(parts.begin(), parts.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (auto& [tokens, which] : parts) parts_.push_back(std::move(which));
  results_.resize(parts_.size());
}

void oracle_work::help() {
  std::call_once(split_, [this] { split(); });
  for (std::size_t k = next_++; k < parts_.size(); k = next_++) results_[k] = oracle_of(arrivals_, parts_[k], block_size_, vocab_, by_tree_);
}

oracle_result oracle_work::result() const {
  oracle_result sum;
  for (const auto& r : results_) {
    sum.prompt_tokens += r.prompt_tokens;
    sum.reusable_tokens += r.reusable_tokens;
  }
  return sum;
}

std::optional<oracle_result> drawn_oracle_hit_rate(const std::vector<arrival>& arrivals, int block_size) {
  std::map<std::string_view, std::vector<std::uint32_t>> teams;  // teams share no blocks
  for (std::size_t i = 0; i < arrivals.size(); ++i) teams[arrivals[i].team].push_back(static_cast<std::uint32_t>(i));
  oracle_result sum;
  for (const auto& [team, which] : teams) {
    const auto r = drawn_oracle(arrivals, which, block_size);
    if (!r) return std::nullopt;
    sum.prompt_tokens += r->prompt_tokens;
    sum.reusable_tokens += r->reusable_tokens;
  }
  return sum;
}

oracle_result oracle_hit_rate(const std::vector<arrival>& arrivals, int block_size, int vocab, bool by_tree) {
  oracle_work work(arrivals, block_size, vocab, by_tree);
  work.help();
  return work.result();
}

}  // namespace kiln::sim
