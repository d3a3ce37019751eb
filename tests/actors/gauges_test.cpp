// The fleet gauges' engine rows: an engine's hint finds its row once and writes it in place,
// and an erase anywhere sends every hint back to the lookup, so a row is never written after
// it is gone and an engine that publishes again gets its row back.
#include <doctest/doctest.h>

#include <algorithm>

#include "actors/gauges.hpp"

using kiln::actors::engine_gauge;
using kiln::actors::engine_row_hint;
using kiln::actors::fleet_gauges;

namespace {

int running_of(const fleet_gauges& g, const std::string& id) {
  const auto rows = g.engines();
  const auto it = std::find_if(rows.begin(), rows.end(), [&](const engine_gauge& e) { return e.replica_id == id; });
  return it == rows.end() ? -1 : it->running;
}

void publish(fleet_gauges& g, const std::string& id, int running, engine_row_hint& hint) {
  g.update_engine(id, [&](engine_gauge& row) {
    row.replica_id = id;
    row.running = running;
  }, &hint);
}

}  // namespace

TEST_CASE("gauges: an engine's hint writes its own row, and survives erases of any row") {
  fleet_gauges g;
  engine_row_hint a, b;
  publish(g, "r0", 1, a);
  publish(g, "r1", 10, b);
  CHECK(a.row != nullptr);
  CHECK(a.row != b.row);
  publish(g, "r0", 2, a);  // through the hint
  CHECK(running_of(g, "r0") == 2);
  CHECK(running_of(g, "r1") == 10);

  g.erase("r1");  // another engine's row goes: r0's hint is stale and looked up again
  publish(g, "r0", 3, a);
  CHECK(running_of(g, "r0") == 3);
  CHECK(running_of(g, "r1") == -1);
  CHECK(g.engines().size() == 1);

  g.erase_replica("r0");  // its own row goes; a later publish puts it back, as without a hint
  CHECK(g.engines().empty());
  publish(g, "r0", 4, a);
  CHECK(running_of(g, "r0") == 4);
  publish(g, "r1", 11, b);  // b's row was erased long ago: a new one, not the freed one
  CHECK(running_of(g, "r1") == 11);
  CHECK(g.engines().size() == 2);
}
