#include "config/snapshot.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <msgpack.hpp>
#include <xxhash.h>

namespace kiln::config {

namespace {

constexpr std::string_view kMagic = "KILNSNP1";
constexpr std::size_t kHeader = 8 + 8 + 8;

struct wire_limit {
  std::string model;
  double tokens_per_minute = 0, burst = 0;
  int max_concurrency = 0;
  double guaranteed_share = 0;
  MSGPACK_DEFINE_MAP(model, tokens_per_minute, burst, max_concurrency, guaranteed_share);
};

struct wire_team {
  std::string name;
  std::string max_priority;
  std::vector<wire_limit> limits;
  MSGPACK_DEFINE_MAP(name, max_priority, limits);
};

struct wire_key {
  std::string key_id, team, hash;
  MSGPACK_DEFINE_MAP(key_id, team, hash);
};

struct wire_route {
  std::string model, live, canary;
  double canary_percent = 0;
  std::string shadow;
  double shadow_percent = 0;
  std::string previous;
  std::int64_t previous_until = 0;
  MSGPACK_DEFINE_MAP(model, live, canary, canary_percent, shadow, shadow_percent, previous, previous_until);
};

struct wire_file {
  std::string file, sha256;
  MSGPACK_DEFINE_MAP(file, sha256);
};

struct wire_version {
  std::string model, version, weights_uri, weights_hash, tokenizer_hash, chat_template, chat_template_hash, precision;
  int gpus_per_replica = 1;
  std::string engine_config;
  double load_test_tokens_per_s = 0, load_test_tokens_in_flight = 0;
  std::string status;
  std::int64_t registered_at = 0;
  std::vector<wire_file> files;
  MSGPACK_DEFINE_MAP(model, version, weights_uri, weights_hash, tokenizer_hash, chat_template, chat_template_hash,
                     precision, gpus_per_replica, engine_config, load_test_tokens_per_s, load_test_tokens_in_flight,
                     status, registered_at, files);
};

struct wire_snapshot {
  std::uint64_t version = 0;
  std::string origin;
  std::int64_t made_unix = 0;
  std::vector<wire_team> teams;
  std::vector<wire_key> keys;
  std::vector<wire_route> routes;
  std::vector<wire_version> versions;  // absent in a file from before it: none
  MSGPACK_DEFINE_MAP(version, origin, made_unix, teams, keys, routes, versions);
};

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::uint64_t get_u64(std::string_view in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

wire_snapshot to_wire(const config_snapshot& s) {
  wire_snapshot w;
  w.version = s.version;
  w.origin = s.origin;
  w.made_unix = s.made_unix;
  for (const auto& t : s.tenants.teams) {
    wire_team wt{t.name, std::string(engine::to_string(t.max_priority)), {}};
    for (const auto& l : t.limits)
      wt.limits.push_back({l.model, l.tokens_per_minute, l.burst, l.max_concurrency, l.guaranteed_share});
    w.teams.push_back(std::move(wt));
  }
  for (const auto& k : s.tenants.keys) w.keys.push_back({k.key_id, k.team, k.hash});
  for (const auto& r : s.routes)
    w.routes.push_back({r.model, r.live, r.canary, r.canary_percent, r.shadow, r.shadow_percent, r.previous, r.previous_until});
  for (const auto& v : s.versions) {
    wire_version wv{v.model, v.version, v.weights_uri, v.weights_hash, v.tokenizer_hash, v.chat_template,
                    v.chat_template_hash, v.precision, v.gpus_per_replica, v.engine_config, v.load_test_tokens_per_s,
                    v.load_test_tokens_in_flight, v.status, v.registered_at, {}};
    for (const auto& f : v.files) wv.files.push_back({f.file, f.sha256});
    w.versions.push_back(std::move(wv));
  }
  return w;
}

std::variant<config_snapshot, std::string> from_wire(const wire_snapshot& w) {
  config_snapshot s;
  s.version = w.version;
  s.origin = w.origin;
  s.made_unix = w.made_unix;
  for (const auto& wt : w.teams) {
    team_config t;
    t.name = wt.name;
    auto p = engine::parse_priority(wt.max_priority);
    if (!p) return "team " + wt.name + " has an unknown tier \"" + wt.max_priority + "\"";
    t.max_priority = *p;
    for (const auto& l : wt.limits)
      t.limits.push_back({l.model, l.tokens_per_minute, l.burst, l.max_concurrency, l.guaranteed_share});
    s.tenants.teams.push_back(std::move(t));
  }
  for (const auto& k : w.keys) s.tenants.keys.push_back({k.key_id, k.team, k.hash});
  s.tenants.index();
  for (const auto& r : w.routes)
    s.routes.push_back({r.model, r.live, r.canary, r.canary_percent, r.shadow, r.shadow_percent, r.previous, r.previous_until});
  for (const auto& wv : w.versions) {
    model_version v;
    v.model = wv.model;
    v.version = wv.version;
    v.weights_uri = wv.weights_uri;
    v.weights_hash = wv.weights_hash;
    v.tokenizer_hash = wv.tokenizer_hash;
    v.chat_template = wv.chat_template;
    v.chat_template_hash = wv.chat_template_hash;
    v.precision = wv.precision;
    v.gpus_per_replica = wv.gpus_per_replica;
    v.engine_config = wv.engine_config;
    v.load_test_tokens_per_s = wv.load_test_tokens_per_s;
    v.load_test_tokens_in_flight = wv.load_test_tokens_in_flight;
    v.status = wv.status;
    v.registered_at = wv.registered_at;
    for (const auto& f : wv.files) v.files.push_back({f.file, f.sha256});
    s.versions.push_back(std::move(v));
  }
  return s;
}

}  // namespace

std::uint64_t content_version(const config_snapshot& s) {
  auto w = to_wire(s);
  w.version = 0;
  w.origin.clear();
  w.made_unix = 0;
  msgpack::sbuffer buf;
  msgpack::pack(buf, w);
  return XXH64(buf.data(), buf.size(), 0);
}

std::string version_text(std::uint64_t v) {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(v));
  return out;
}

std::string encode_snapshot(const config_snapshot& s) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, to_wire(s));
  std::string out(kMagic);
  put_u64(out, XXH64(buf.data(), buf.size(), 0));
  put_u64(out, buf.size());
  out.append(buf.data(), buf.size());
  return out;
}

std::variant<config_snapshot, std::string> decode_snapshot(std::string_view bytes) {
  if (bytes.size() < kHeader) return "too short for a snapshot (" + std::to_string(bytes.size()) + " bytes)";
  if (bytes.substr(0, kMagic.size()) != kMagic) return "not a kiln snapshot (bad magic)";
  const std::uint64_t sum = get_u64(bytes.substr(8, 8));
  const std::uint64_t size = get_u64(bytes.substr(16, 8));
  const std::string_view payload = bytes.substr(kHeader);
  if (payload.size() != size)
    return "truncated or padded: the header says " + std::to_string(size) + " payload bytes, there are " +
           std::to_string(payload.size());
  if (XXH64(payload.data(), payload.size(), 0) != sum) return "checksum mismatch (the snapshot was altered or torn)";
  try {
    const msgpack::object_handle h = msgpack::unpack(payload.data(), payload.size());
    return from_wire(h.get().as<wire_snapshot>());
  } catch (const std::exception& e) {
    return std::string("unreadable payload: ") + e.what();
  }
}

std::optional<std::string> save_snapshot(const std::string& path, const config_snapshot& s) {
  const std::string bytes = encode_snapshot(s);
  const std::filesystem::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ec);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot write " + tmp + ": " + std::strerror(errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return "cannot write " + tmp + ": " + why;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return "cannot sync " + tmp + ": " + std::strerror(errno);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return "cannot replace " + path + ": " + why;
  }
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return std::nullopt;
}

std::variant<config_snapshot, std::string> load_snapshot(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return path + ": no snapshot";
  std::ostringstream text;
  text << in.rdbuf();
  auto r = decode_snapshot(text.str());
  if (auto* e = std::get_if<std::string>(&r)) return path + ": " + *e;
  return r;
}

}  // namespace kiln::config
