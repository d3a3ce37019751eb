#pragma once
// The simulator's command: `kiln sim SCENARIO.toml [--seed N] [--out DIR] [--trace FILE]
// [--rate R] [--policy P]`.
#include <ostream>
#include <string>
#include <vector>

namespace kiln::sim {

/// Runs a scenario and writes its reports; 0 done, 1 failed, 2 bad arguments.
int run_sim(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kiln::sim
