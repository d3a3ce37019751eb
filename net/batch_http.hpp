#pragma once
// What the files and batches handlers share (internal to net/): their objects in OpenAI's
// JSON, and random ids.
#include <string>

#include <nlohmann/json.hpp>

#include "config/batch_rows.hpp"

namespace kiln::net {

/// `n` hex digits from the OS's random source.
std::string random_hex(std::size_t n);
nlohmann::json file_json(const config::file_row& r);
nlohmann::json batch_json(const config::batch_row& b);

}  // namespace kiln::net
