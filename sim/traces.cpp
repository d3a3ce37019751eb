#include "sim/traces.hpp"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string_view>

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

/// A field as an error shows it: quoted, cut at 40 bytes, anything unprintable as '?'.
std::string shown(std::string_view s) {
  std::string out = "'";
  for (const char c : s.substr(0, 40)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out + (s.size() > 40 ? "...'" : "'");
}

/// Tokens in one trace request, at most (a Mooncake line's lengths have the same bound).
constexpr std::int64_t kMaxTraceTokens = 10'000'000;

/// A token count from 0 to kMaxTraceTokens, or why `s` is not one (empty when it is).
std::string parse_count(std::string_view s, const char* field, std::int32_t& out) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  std::int64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ptr != s.data() + s.size() || (r.ec != std::errc() && r.ec != std::errc::result_out_of_range))
    return std::string(field) + " " + shown(s) + " is not a whole number";
  if (r.ec != std::errc() || v < 0 || v > kMaxTraceTokens)
    return std::string(field) + " " + shown(s) + " is out of range (0 to " + std::to_string(kMaxTraceTokens) + ")";
  out = static_cast<std::int32_t>(v);
  return {};
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
    if (c1 == std::string::npos || c2 == std::string::npos) return where(path, n) + "expected TIMESTAMP,ContextTokens,GeneratedTokens";
    arrival a;
    if (!parse_timestamp(std::string_view(line).substr(0, c1), a.t))
      return where(path, n) + "TIMESTAMP " + shown(std::string_view(line).substr(0, c1)) +
             " is not a date and time like 2023-11-16 18:15:46.68";
    if (auto e = parse_count(std::string_view(line).substr(c1 + 1, c2 - c1 - 1), "ContextTokens", a.prompt_tokens); !e.empty())
      return where(path, n) + e;
    if (auto e = parse_count(std::string_view(line).substr(c2 + 1), "GeneratedTokens", a.output_tokens); !e.empty())
      return where(path, n) + e;
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
    if (!std::isfinite(a.t) || in_len < 0 || out_len < 0 || in_len > kMaxTraceTokens || out_len > kMaxTraceTokens)
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

namespace {

enum class trace_kind { unknown, azure, mooncake, capture };

// A file named otherwise (a capture saved as .msgpack, a trace as .txt) by its first bytes: a
// capture opens with a msgpack map, a Mooncake line with '{', an Azure CSV with its header.
trace_kind sniff(std::istream& in) {
  char head[16] = {};
  in.read(head, sizeof head);
  const std::string_view got(head, static_cast<std::size_t>(in.gcount()));
  in.clear();
  in.seekg(0);
  if (got.empty()) return trace_kind::unknown;
  const auto first = static_cast<unsigned char>(got[0]);
  if ((first >= 0x80 && first <= 0x8f) || first == 0xde || first == 0xdf) return trace_kind::capture;
  if (first == '{') return trace_kind::mooncake;
  if (got.starts_with("TIMESTAMP,")) return trace_kind::azure;
  return trace_kind::unknown;
}

}  // namespace

std::variant<std::vector<arrival>, std::string> read_trace(const std::string& path) {
  if (path.ends_with(".kcap")) return from_capture(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot read trace " + path;
  if (path.ends_with(".csv")) return read_azure(in, path);
  if (path.ends_with(".jsonl")) return read_mooncake(in, path);
  switch (sniff(in)) {
    case trace_kind::capture:
      in.close();
      return from_capture(path);
    case trace_kind::mooncake: return read_mooncake(in, path);
    case trace_kind::azure: return read_azure(in, path);
    case trace_kind::unknown: break;
  }
  return path + ": unknown trace format (.csv Azure, .jsonl Mooncake, .kcap kiln capture; a file named otherwise is "
                "read by its first bytes, and these match none)";
}

}  // namespace kiln::sim
