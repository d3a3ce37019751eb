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

namespace {

/// Ids 100, 101, ... made on demand, counting how often it is asked.
struct counting_source final : token_list::source {
  explicit counting_source(std::size_t n) : n(n) {}
  std::size_t size() const override { return n; }
  void fill(std::int32_t* out) const override {
    ++fills;
    for (std::size_t i = 0; i < n; ++i) out[i] = 100 + static_cast<std::int32_t>(i);
  }
  std::size_t n;
  mutable int fills = 0;
};

}  // namespace

TEST_CASE("token list: a list made by a source writes its ids where copied and is made once when read") {
  auto src = std::make_shared<counting_source>(5);
  const token_list lazy = token_list::made_by(src);
  CHECK(lazy.size() == 5);
  CHECK_FALSE(lazy.empty());
  CHECK(src->fills == 0);  // nothing made until asked

  std::vector<std::int32_t> out{7};
  lazy.copy_to(out);  // appended where wanted, not kept
  CHECK(out == std::vector<std::int32_t>{7, 100, 101, 102, 103, 104});
  CHECK(src->fills == 1);
  lazy.copy_to(out);
  CHECK(src->fills == 2);
  CHECK(out.size() == 11);

  const token_list copy = lazy;  // copies share the source and what it made
  CHECK(copy[4] == 104);
  CHECK(src->fills == 3);
  CHECK(lazy.vec() == std::vector<std::int32_t>{100, 101, 102, 103, 104});
  CHECK(lazy.data() == copy.data());
  CHECK(src->fills == 3);  // made once for every copy
  CHECK(lazy == token_list{100, 101, 102, 103, 104});
  CHECK_FALSE(lazy == token_list{100, 101});

  // A materialised list copies its ids the same way.
  std::vector<std::int32_t> plain;
  token_list{1, 2}.copy_to(plain);
  CHECK(plain == std::vector<std::int32_t>{1, 2});
  // An empty source is the empty list.
  CHECK(token_list::made_by(std::make_shared<counting_source>(0)).empty());
  CHECK(token_list::made_by(nullptr).empty());
  token_list().copy_to(plain);
  CHECK(plain.size() == 2);
}
