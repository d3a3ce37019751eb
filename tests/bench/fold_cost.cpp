// What a minute of metering costs the store: one fold of N records (default 6,000, about a
// minute at seed 000's peak) into a SQLite store, with each request id checked against those
// metered lately; then the same records folded by a second ledger (every one a duplicate).
// Prints milliseconds per fold and microseconds per record. Usage: fold_cost [N] [folds]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "config/store.hpp"

using namespace kiln::config;

int main(int argc, char** argv) {
  const std::uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 6000;
  const int folds = argc > 2 ? std::atoi(argv[2]) : 5;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln-fold-cost-" + std::to_string(::getpid()) + ".db")).string();
  auto opened = store::open(path);
  if (auto* e = std::get_if<std::string>(&opened)) {
    std::fprintf(stderr, "fold_cost: %s\n", e->c_str());
    return 1;
  }
  auto held = std::move(std::get<std::unique_ptr<store>>(opened));
  auto& s = *held;
  kiln_config cfg;
  for (const char* team : {"search", "batchers"}) {
    team_config t;
    t.name = team;
    t.api_key = std::string("key-") + team;
    cfg.teams.push_back(t);
  }
  if (auto e = s.seed(cfg)) {
    std::fprintf(stderr, "fold_cost: %s\n", e->c_str());
    return 1;
  }
  auto batch = [&](std::uint64_t first_seq, std::uint64_t first_id) {
    std::vector<usage_record> out;
    for (std::uint64_t i = 0; i < n; ++i)
      out.push_back({first_seq + i, 7, first_id + i, i % 2 ? "search" : "batchers", "m", "v", 29000000 + static_cast<std::int64_t>(i * 60 / n),
                     500, 128, 200, 1, 0});
    return out;
  };
  auto time_fold = [&](const std::string& ledger, std::uint64_t first_seq, const std::vector<usage_record>& recs) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = s.fold_usage(ledger, first_seq, first_seq + n - 1, recs);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (auto* e = std::get_if<std::string>(&r)) std::fprintf(stderr, "fold_cost: %s\n", e->c_str());
    return ms;
  };
  for (int f = 0; f < folds; ++f) {
    const std::uint64_t seq = 1 + f * n, id = 1 + f * n;
    const auto recs = batch(seq, id);
    const double fresh = time_fold("router-a", seq, recs);
    const double dup = time_fold("front-b", seq, recs);
    std::printf("fold %d: %llu records: new %.1f ms (%.1f us a record), all seen already %.1f ms (%.1f us a record)\n", f + 1,
                static_cast<unsigned long long>(n), fresh, 1000 * fresh / n, dup, 1000 * dup / n);
  }
  held.reset();
  for (const char* ext : {"", "-wal", "-shm"}) std::filesystem::remove(path + ext);
  return 0;
}
