#pragma once
// `kiln chaos`: a drill against a running kiln. Every period it asks the admin API to kill
// (or freeze, or slow) a random replica, engine or router, and prints what it hit and the
// pool state just after.
#include <ostream>
#include <string>
#include <vector>

namespace kiln::cluster {

/// `args`: the flags after "chaos". Returns the exit code (2: bad usage, 1: kiln unreachable
/// or the key refused).
int run_chaos(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kiln::cluster
