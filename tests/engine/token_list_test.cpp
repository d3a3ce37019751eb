// The shared prompt list: copies of a request point at one list of ids.
#include <doctest/doctest.h>

#include "engine/engine_core.hpp"
#include "engine/token_list.hpp"

using kiln::engine::engine_request;
using kiln::engine::token_list;

TEST_CASE("token list: copies share one list; assigning makes a new one and leaves copies alone") {
  token_list a(std::vector<std::int32_t>{5, 6, 7});
  const token_list b = a;
  CHECK(b.data() == a.data());  // shared, not copied
  CHECK(b.size() == 3);
  CHECK(b[2] == 7);

  engine_request r;
  r.prompt = a;
  const engine_request copy = r;  // a request copied at a hop keeps pointing at the same ids
  CHECK(copy.prompt.data() == a.data());

  a.assign(std::size_t{2}, 9);
  CHECK(a.vec() == std::vector<std::int32_t>{9, 9});
  CHECK(b.vec() == std::vector<std::int32_t>{5, 6, 7});
  CHECK(copy.prompt.vec() == std::vector<std::int32_t>{5, 6, 7});
  CHECK_FALSE(a == b);

  const std::vector<std::int32_t> ids{1, 2};
  a.assign(ids.begin(), ids.end());
  CHECK(a == token_list{1, 2});  // equal by content, not by identity
  CHECK(a.data() != token_list({1, 2}).data());
}

TEST_CASE("token list: empty lists") {
  const token_list none;
  CHECK(none.empty());
  CHECK(none.size() == 0);
  CHECK(none.begin() == none.end());
  CHECK(none == token_list(std::vector<std::int32_t>{}));
  CHECK_FALSE(none == token_list{0});
  token_list t{3};
  t = std::vector<std::int32_t>{};
  CHECK(t.empty());
}
