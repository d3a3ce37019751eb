// The cost of a message between two kiln processes on loopback over CAF's middleman (BASP):
// round-trip latency one message at a time, then throughput with a window of messages in
// flight, for a small token event and for a front's per-step batch of 64 requests.
//   wire_cost [round_trips] [window]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/messages.hpp"
#include "cluster/wire.hpp"
#include "tests/cluster/echo_process.hpp"

using namespace kiln;
using clock_type = std::chrono::steady_clock;

namespace {

actors::stream_tokens token_event(std::uint64_t i) {
  actors::stream_tokens t;
  t.id = {0x1234, i};
  t.text = " token";
  t.tokens = 1;
  return t;
}

template <class Msg>
void latency(caf::actor_system& sys, const caf::actor& echo, const char* what, Msg msg, int n) {
  caf::scoped_actor self{sys};
  std::vector<double> us;
  us.reserve(n);
  for (int i = 0; i < n; ++i) {
    const auto t0 = clock_type::now();
    self->request(echo, std::chrono::seconds(5), msg).receive([](Msg&) {}, [](caf::error&) { std::abort(); });
    us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("%-28s round trip: p50 %.0f us, p99 %.0f us (%d one at a time)\n", what, us[us.size() / 2],
              us[us.size() * 99 / 100], n);
}

template <class Msg>
void throughput(caf::actor_system& sys, const caf::actor& echo, const char* what, Msg msg, int n, int window,
                std::size_t requests_per_msg) {
  caf::scoped_actor self{sys};
  const auto t0 = clock_type::now();
  int sent = 0, got = 0;
  for (; sent < std::min(window, n); ++sent) self->send(echo, msg);
  while (got < n) {
    self->receive([&](Msg&) {
      ++got;
      if (sent < n) {
        self->send(echo, msg);
        ++sent;
      }
    });
  }
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::printf("%-28s throughput: %.0f messages/s each way (%.0f request events/s), window %d\n", what, n / s,
              n * static_cast<double>(requests_per_msg) / s, window);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 5000;
  const int window = argc > 2 ? std::atoi(argv[2]) : 64;
  caf::actor_system_config cfg;
  cluster::set_heartbeats(cfg, 500, 1500);
  cluster::add_wire_types(cfg);
  cfg.set("logger.console", caf::atom("none"));
  caf::actor_system sys{cfg};
  test::echo_process peer(KILN_WIRE_ECHO);
  auto echo = sys.middleman().remote_actor("127.0.0.1", static_cast<std::uint16_t>(peer.port()));
  if (!echo) {
    std::fprintf(stderr, "wire_cost: cannot reach the echo process\n");
    return 1;
  }
  actors::stream_batch batch;
  for (std::uint64_t i = 0; i < 64; ++i) batch.items.push_back(token_event(i));
  latency(sys, *echo, "stream_tokens (1 token)", token_event(1), n);
  latency(sys, *echo, "stream_batch (64 requests)", batch, n);
  throughput(sys, *echo, "stream_tokens (1 token)", token_event(1), n * 10, window, 1);
  throughput(sys, *echo, "stream_batch (64 requests)", batch, n * 2, window, 64);
  return 0;
}
