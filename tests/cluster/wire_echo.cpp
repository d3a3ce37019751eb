// A second process for the wire tests and the cross-node benchmark: an actor system with
// kiln's wire types that publishes one actor answering every message with itself. Prints its
// port on stdout, then runs until its stdin closes (the test or benchmark ended).
#include <cstdio>
#include <iostream>
#include <string>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "cluster/wire.hpp"

int main() {
  caf::actor_system_config cfg;
  kiln::cluster::set_heartbeats(cfg, 500, 1500);
  kiln::cluster::add_wire_types(cfg);
  cfg.set("logger.console", caf::atom("none"));
  caf::actor_system sys{cfg};
  auto echo = sys.spawn([](caf::event_based_actor* self) -> caf::behavior {
    self->set_default_handler(caf::reflect);
    return {[](caf::exit_msg&) {}};
  });
  auto port = sys.middleman().publish(echo, 0, "127.0.0.1");
  if (!port) {
    std::fprintf(stderr, "wire_echo: %s\n", sys.render(port.error()).c_str());
    return 1;
  }
  std::printf("%u\n", static_cast<unsigned>(*port));
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
  return 0;
}
