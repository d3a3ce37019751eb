#include "actors/ask.hpp"

#include <caf/all.hpp>

namespace kiln::actors {

std::string error_text(caf::actor_system& sys, const caf::error& e) {
  const auto& ctx = e.context();
  for (std::size_t i = 0; i < ctx.size(); ++i)
    if (ctx.match_element<std::string>(i)) return ctx.get_as<std::string>(i);
  return sys.render(e);
}

}  // namespace kiln::actors
