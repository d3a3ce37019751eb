#pragma once
// Readers of the request traces kiln replays: the Azure LLM inference CSV (TIMESTAMP,
// ContextTokens, GeneratedTokens), Mooncake JSONL (timestamp ms, input_length, output_length,
// hash_ids per 512-token block) and kiln's own capture files (msgpack). A bad line is an
// error naming the file and line, never a crash.
#include <string>
#include <variant>
#include <vector>

#include "sim/arrivals.hpp"

namespace kiln::sim {

/// The trace's requests with their recorded times in seconds (not yet scaled or shifted).
/// The format comes from the extension: .csv, .jsonl, .kcap.
std::variant<std::vector<arrival>, std::string> read_trace(const std::string& path);

}  // namespace kiln::sim
