#pragma once
// Two teams with keys, one limit and a batch-only team: what the store tests seed from.
#include <doctest/doctest.h>

#include <variant>

#include "config/config.hpp"

namespace kiln::test {

inline config::kiln_config teams_config() {
  auto r = config::parse_config(R"(
[[teams]]
name = "search"
api_key = "secret-search-key"
[[teams.limits]]
model = "m"
tokens_per_minute = 6000
max_concurrency = 4
guaranteed_share = 0.5
[[teams]]
name = "batchers"
api_key = "secret-batch-key"
max_priority = "batch"
[[pools]]
model = "m"
version = "v"
)",
                                "t.toml");
  REQUIRE(std::holds_alternative<config::kiln_config>(r));
  return std::get<config::kiln_config>(r);
}

}  // namespace kiln::test
