#include "sim/traces.hpp"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <xxhash.h>

namespace kiln::sim {

namespace {

std::string where(const std::string& path, std::size_t line) { return path + ":" + std::to_string(line) + ": "; }

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
long days_from_civil(long y, unsigned m, unsigned d) {
  y -= m <= 2;
  const long era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<long>(doe) - 719468;
}

/// "2023-11-16 18:15:46.6805900" -> seconds since the epoch.
bool parse_timestamp(std::string_view s, double& out) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0;
  double sec = 0;
  char tail = 0;
  const std::string copy(s);
  const int n = std::sscanf(copy.c_str(), "%d-%d-%d %d:%d:%lf%c", &y, &mo, &d, &h, &mi, &sec, &tail);
  if (n != 6 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec >= 61)
    return false;
  out = static_cast<double>(days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d))) * 86400.0 +
        h * 3600.0 + mi * 60.0 + sec;
  return true;
}

bool parse_count(std::string_view s, std::int32_t& out) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && out >= 0;
}

std::variant<std::vector<arrival>, std::string> read_azure(std::istream& in, const std::string& path) {
  std::vector<arrival> out;
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (n == 1) {
      if (line.rfind("TIMESTAMP,ContextTokens,GeneratedTokens", 0) != 0)
        return where(path, n) + "expected the header TIMESTAMP,ContextTokens,GeneratedTokens";
      continue;
    }
    if (line.empty() || line == "\r") continue;
    const auto c1 = line.find(','), c2 = line.find(',', c1 == std::string::npos ? 0 : c1 + 1);
    arrival a;
    if (c1 == std::string::npos || c2 == std::string::npos || !parse_timestamp(std::string_view(line).substr(0, c1), a.t) ||
        !parse_count(std::string_view(line).substr(c1 + 1, c2 - c1 - 1), a.prompt_tokens) ||
        !parse_count(std::string_view(line).substr(c2 + 1), a.output_tokens))
      return where(path, n) + "expected TIMESTAMP,ContextTokens,GeneratedTokens";
    if (!out.empty() && a.t < out.back().t) return where(path, n) + "timestamps go backwards";
    out.push_back(std::move(a));
  }
  return out;
}

std::variant<std::vector<arrival>, std::string> read_mooncake(std::istream& in, const std::string& path) {
  std::vector<arrival> out;
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line == "\r") continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    const auto number = [&](const char* k) { return j.is_object() && j.contains(k) && j[k].is_number(); };
    if (!number("timestamp") || !number("input_length") || !number("output_length") || !j.contains("hash_ids") ||
        !j["hash_ids"].is_array())
      return where(path, n) + "expected {timestamp, input_length, output_length, hash_ids}";
    arrival a;
    a.t = j["timestamp"].get<double>() / 1000.0;
    const double in_len = j["input_length"].get<double>(), out_len = j["output_length"].get<double>();
    if (!std::isfinite(a.t) || in_len < 0 || out_len < 0 || in_len > 1e7 || out_len > 1e7)
      return where(path, n) + "lengths and timestamp out of range";
    a.prompt_tokens = static_cast<std::int32_t>(in_len);
    a.output_tokens = static_cast<std::int32_t>(out_len);
    a.block_tokens = kTraceBlockTokens;
    for (const auto& h : j["hash_ids"]) {
      if (!h.is_number_integer()) return where(path, n) + "hash_ids must be integers";
      // Salted, so trace ids do not collide with the synthetic prompts' blocks.
      const std::uint64_t id = h.get<std::uint64_t>();
      const std::uint64_t both[2] = {0x4D4F4F4Eull, id};
      a.blocks.push_back(XXH3_64bits(both, sizeof both));
    }
    // Requests that share their first block are one conversation for routing.
    if (!j["hash_ids"].empty()) a.conversation = "m" + std::to_string(j["hash_ids"][0].get<std::uint64_t>());
    if (!out.empty() && a.t < out.back().t) return where(path, n) + "timestamps go backwards";
    out.push_back(std::move(a));
  }
  return out;
}

std::variant<std::vector<arrival>, std::string> from_capture(const std::string& path) {
  auto read = config::read_capture(path);
  if (auto* e = std::get_if<std::string>(&read)) return *e;
  std::vector<arrival> out;
  for (auto& r : std::get<std::vector<config::capture_record>>(read)) {
    arrival a;
    a.t = r.t;
    a.team = r.team;
    a.tier = static_cast<engine::priority>(std::min<std::uint8_t>(r.tier, 2));
    a.conversation = r.conversation;
    a.prompt_tokens = r.prompt_tokens;
    a.output_tokens = r.output_tokens;
    a.blocks = std::move(r.block_hashes);
    a.block_tokens = kFineBlockTokens;
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

std::variant<std::vector<arrival>, std::string> read_trace(const std::string& path) {
  if (path.ends_with(".kcap")) return from_capture(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot read trace " + path;
  if (path.ends_with(".csv")) return read_azure(in, path);
  if (path.ends_with(".jsonl")) return read_mooncake(in, path);
  return path + ": unknown trace format (.csv Azure, .jsonl Mooncake, .kcap kiln capture)";
}

}  // namespace kiln::sim
