#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>
#include <msgpack.hpp>
#include <xxhash.h>

#include "config/snapshot.hpp"

using namespace kiln::config;

namespace {

config_snapshot sample() {
  config_snapshot s;
  s.version = 0xFFFFFFFFFFFFFFFEull;
  s.origin = "control-1";
  s.made_unix = 1796168926;
  team_config a;
  a.name = "search";
  a.max_priority = kiln::engine::priority::batch;
  a.limits.push_back({"chat-7b", 120000, 0, 0, 0.0});
  a.limits.push_back({"chat-70b", 1e12, 5e5, 10000000, 1.0});
  team_config b;
  b.name = "t\xC3\xA9" "am \"q\"";
  s.tenants.teams = {a, b};
  s.tenants.keys = {{"k1", "search", key_hash("kiln-search")}, {"k2", b.name, key_hash("other")}};
  s.tenants.index();
  s.routes.push_back({"chat-7b", "v2", "v3", 12.5, "", 0, "v1", 1796170000});
  s.routes.push_back({"chat-70b", "v1", "", 0, "v2", 100, "", 0});
  model_version v;
  v.model = "chat-7b";
  v.version = "v3";
  v.weights_uri = "http://control:8180/artifacts/chat-7b-v3";
  v.weights_hash = std::string(64, 'b');
  v.chat_template = "{{ messages }}";
  v.precision = "int8";
  v.gpus_per_replica = 2;
  v.engine_config = R"({"replicas":3})";
  v.load_test_tokens_per_s = 950.5;
  v.status = "gated";
  v.registered_at = 1796160000;
  v.files = {{"model.safetensors", std::string(64, 'c')}, {"tokenizer.json", std::string(64, 'd')}};
  s.versions.push_back(v);
  return s;
}

std::string temp_dir() {
  auto d = std::filesystem::temp_directory_path() / ("kiln-snapshot-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

std::string error_of(std::string_view bytes) {
  auto r = decode_snapshot(bytes);
  auto* e = std::get_if<std::string>(&r);
  return e ? *e : std::string();
}

}  // namespace

TEST_CASE("snapshot: every field survives encoding; keys resolve to teams after decoding") {
  const auto s = sample();
  auto r = decode_snapshot(encode_snapshot(s));
  REQUIRE(std::holds_alternative<config_snapshot>(r));
  const auto& d = std::get<config_snapshot>(r);
  CHECK(d.version == s.version);
  CHECK(d.origin == "control-1");
  CHECK(d.made_unix == s.made_unix);
  REQUIRE(d.tenants.teams.size() == 2);
  CHECK(d.tenants.teams[0].max_priority == kiln::engine::priority::batch);
  CHECK(d.tenants.teams[1].max_priority == kiln::engine::priority::interactive);
  CHECK(d.tenants.teams[1].name == s.tenants.teams[1].name);
  REQUIRE(d.tenants.teams[0].limits.size() == 2);
  const auto& l = d.tenants.teams[0].limits[1];
  CHECK(l.model == "chat-70b");
  CHECK(l.tokens_per_minute == 1e12);
  CHECK(l.burst == 5e5);
  CHECK(l.max_concurrency == 10000000);
  CHECK(l.guaranteed_share == 1.0);
  REQUIRE(d.tenants.team_by_key("kiln-search"));
  CHECK(d.tenants.team_by_key("kiln-search")->name == "search");
  CHECK(d.tenants.team_by_key("other")->name == s.tenants.teams[1].name);
  CHECK_FALSE(d.tenants.team_by_key("kiln-search "));
  REQUIRE(d.routes.size() == 2);
  CHECK(d.routes[0].live == "v2");
  CHECK(d.routes[0].canary == "v3");
  CHECK(d.routes[0].canary_percent == 12.5);
  CHECK(d.routes[0].previous == "v1");
  CHECK(d.routes[0].previous_until == 1796170000);
  CHECK(d.routes[1].shadow == "v2");
  CHECK(d.routes[1].shadow_percent == 100);
  REQUIRE(d.versions.size() == 1);
  const auto& v = d.versions[0];
  CHECK(v.version == "v3");
  CHECK(v.weights_uri == s.versions[0].weights_uri);
  CHECK(v.chat_template == "{{ messages }}");
  CHECK(v.precision == "int8");
  CHECK(v.gpus_per_replica == 2);
  CHECK(v.engine_config == R"({"replicas":3})");
  CHECK(v.load_test_tokens_per_s == 950.5);
  CHECK(v.status == "gated");
  CHECK(v.registered_at == 1796160000);
  REQUIRE(v.files.size() == 2);
  CHECK(v.files[1].file == "tokenizer.json");
  CHECK(v.files[1].sha256 == std::string(64, 'd'));
  // The version digests the registrations too: a status change is a new configuration.
  auto changed = s;
  changed.versions[0].status = "live";
  CHECK(content_version(changed) != content_version(s));
  // An empty snapshot is a snapshot too.
  CHECK(std::holds_alternative<config_snapshot>(decode_snapshot(encode_snapshot(config_snapshot{}))));
}

TEST_CASE("snapshot: torn, padded, altered or foreign bytes are refused with the reason") {
  const std::string good = encode_snapshot(sample());
  CHECK(error_of("") == "too short for a snapshot (0 bytes)");
  CHECK(error_of(good.substr(0, 23)) == "too short for a snapshot (23 bytes)");
  CHECK(error_of("KILNSNP2" + good.substr(8)) == "not a kiln snapshot (bad magic)");
  CHECK(error_of(good.substr(0, good.size() - 1)).find("truncated or padded") == 0);
  CHECK(error_of(good + "x").find("truncated or padded") == 0);
  // Every single-bit flip anywhere is refused.
  int refused = 0;
  for (std::size_t i = 0; i < good.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      refused += !error_of(bad).empty();
    }
  CHECK(refused == static_cast<int>(good.size() * 8));
  // A payload with a right checksum that is not a snapshot: refused, not crashed.
  auto framed = [](const std::string& payload) {
    std::string out = "KILNSNP1";
    auto u64 = [&](std::uint64_t v) {
      for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    };
    u64(XXH64(payload.data(), payload.size(), 0));
    u64(payload.size());
    return out + payload;
  };
  CHECK(error_of(framed("\xC1")).find("unreadable payload") == 0);      // not msgpack
  CHECK(error_of(framed("\x2A")).find("unreadable payload") == 0);      // msgpack, not a map
  CHECK(error_of(framed("")).find("unreadable payload") == 0);
  // A team with a tier kiln does not know.
  std::string tier = encode_snapshot(sample());
  const auto at = tier.find("batch");
  REQUIRE(at != std::string::npos);
  std::string payload = tier.substr(24);
  payload.replace(payload.find("batch"), 5, "bulky");
  CHECK(error_of(framed(payload)) == "team search has an unknown tier \"bulky\"");
}

TEST_CASE("snapshot: saved whole and replaced whole; a corrupt or missing file says so") {
  const std::string dir = temp_dir();
  const std::string path = dir + "/sub/last-known-good.snapshot";
  auto s = sample();
  REQUIRE_FALSE(save_snapshot(path, s));
  s.version = 7;
  s.tenants.teams.pop_back();
  REQUIRE_FALSE(save_snapshot(path, s));  // over the first
  auto r = load_snapshot(path);
  REQUIRE(std::holds_alternative<config_snapshot>(r));
  CHECK(std::get<config_snapshot>(r).version == 7);
  CHECK(std::get<config_snapshot>(r).tenants.teams.size() == 1);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));

  {  // a byte changed on disk
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);
    f.put('\x7F');
  }
  auto bad = load_snapshot(path);
  REQUIRE(std::holds_alternative<std::string>(bad));
  CHECK(std::get<std::string>(bad).find(path + ": ") == 0);
  auto missing = load_snapshot(dir + "/none");
  REQUIRE(std::holds_alternative<std::string>(missing));
  CHECK(std::get<std::string>(missing) == dir + "/none: no snapshot");
  // A directory that cannot be written: an error, no crash.
  CHECK(save_snapshot("/proc/kiln-no/x.snapshot", s).has_value());
  std::filesystem::remove_all(dir);
}

TEST_CASE("snapshot: a last-known-good written before snapshots carried versions still reads (no versions)") {
  // The payload as an older kiln wrote it: the same map without "versions".
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(6);
  pk.pack(std::string("version")), pk.pack(std::uint64_t{7});
  pk.pack(std::string("origin")), pk.pack(std::string("control-1"));
  pk.pack(std::string("made_unix")), pk.pack(std::int64_t{1796168926});
  pk.pack(std::string("teams")), pk.pack_array(0);
  pk.pack(std::string("keys")), pk.pack_array(0);
  pk.pack(std::string("routes")), pk.pack_array(0);
  std::string bytes = "KILNSNP1";
  auto put = [&](std::uint64_t x) {
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((x >> (8 * i)) & 0xFF));
  };
  put(XXH64(buf.data(), buf.size(), 0));
  put(buf.size());
  bytes.append(buf.data(), buf.size());
  auto r = decode_snapshot(bytes);
  REQUIRE(std::holds_alternative<config_snapshot>(r));
  CHECK(std::get<config_snapshot>(r).origin == "control-1");
  CHECK(std::get<config_snapshot>(r).versions.empty());
}
