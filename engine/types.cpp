#include "engine/types.hpp"

namespace kiln::engine {

std::optional<priority> parse_priority(std::string_view s) {
  if (s == "interactive") return priority::interactive;
  if (s == "standard") return priority::standard;
  if (s == "batch") return priority::batch;
  return std::nullopt;
}

std::string_view to_string(priority p) {
  switch (p) {
    case priority::interactive: return "interactive";
    case priority::standard: return "standard";
    case priority::batch: return "batch";
  }
  return "?";
}

std::string_view to_string(finish_reason r) {
  switch (r) {
    case finish_reason::none: return "none";
    case finish_reason::stop: return "stop";
    case finish_reason::length: return "length";
    case finish_reason::cancelled: return "cancelled";
  }
  return "?";
}

}  // namespace kiln::engine
