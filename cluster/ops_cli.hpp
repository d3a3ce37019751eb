#pragma once
// `kiln ops`: the operators' commands over the admin API (pools, teams, limits, versions,
// register, rollout, alias, drain, chaos), as tables by default or JSON with --json.
#include <ostream>
#include <string>
#include <vector>

namespace kiln::cluster {

/// 0 on success, 1 when the call failed, 2 on a usage error.
int run_ops(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kiln::cluster
