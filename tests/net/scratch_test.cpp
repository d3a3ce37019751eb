#include <doctest/doctest.h>

#include <string>
#include <thread>

#include "net/scratch.hpp"

using namespace kiln::net;

TEST_CASE("scratch: a buffer comes back empty with its capacity, nested holders differ") {
  const char* first = nullptr;
  {
    scratch a;
    a.str().assign(1000, 'x');
    first = a.str().data();
  }
  {
    scratch again;
    CHECK(again.str().empty());
    CHECK(again.str().capacity() >= 1000);
    CHECK(again.str().data() == first);  // the same memory, reused
    scratch inner;
    inner.str() = "inner";
    CHECK(inner.str().data() != again.str().data());
    again.str() = "outer";
    CHECK(inner.str() == "inner");
  }
  // Another thread has its own spares.
  const char* other = nullptr;
  std::thread([&] {
    scratch t;
    t.str().assign(1000, 'y');
    other = t.str().data();
  }).join();
  scratch mine;
  mine.str().reserve(1000);
  CHECK(mine.str().data() == first);
  CHECK(other != nullptr);
}

TEST_CASE("scratch: a very large buffer is let go rather than kept") {
  {
    scratch big;
    big.str().assign(1 << 20, 'z');
  }
  scratch next;
  CHECK(next.str().capacity() < (1u << 20));
}
