#include "config/usage_wal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include <msgpack.hpp>

namespace kiln::config {

namespace {

// The record as it is written: a msgpack map, so fields can be added later.
struct wire_record {
  std::uint64_t seq = 0;
  std::uint64_t id_origin = 0;
  std::uint64_t id_seq = 0;
  std::string team, model, version;
  std::int64_t minute = 0, prompt_tokens = 0, cached_tokens = 0, output_tokens = 0, requests = 0, shed = 0;
  MSGPACK_DEFINE_MAP(seq, id_origin, id_seq, team, model, version, minute, prompt_tokens, cached_tokens, output_tokens,
                     requests, shed);
};

wire_record to_wire(const usage_record& r) {
  return {r.seq, r.id_origin, r.id_seq, r.team, r.model, r.version, r.minute, r.prompt_tokens, r.cached_tokens,
          r.output_tokens, r.requests, r.shed};
}

usage_record from_wire(const wire_record& w) {
  return {w.seq, w.id_origin, w.id_seq, w.team, w.model, w.version, w.minute, w.prompt_tokens, w.cached_tokens,
          w.output_tokens, w.requests, w.shed};
}

// The index of a segment file name "<base>.<n>", or nothing.
std::optional<std::uint64_t> segment_index(const std::string& file, const std::string& base) {
  if (file.size() <= base.size() + 1 || file.compare(0, base.size() + 1, base + ".") != 0) return std::nullopt;
  const std::string n = file.substr(base.size() + 1);
  if (n.empty() || !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return std::stoull(n);
}

}  // namespace

std::vector<usage_row> fold(const std::vector<usage_record>& records) {
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
  std::map<std::tuple<std::string, std::string, std::string, std::int64_t>, usage_row> rows;
  for (const auto& r : records) {
    if (!seen.insert({r.id_origin, r.id_seq}).second) continue;  // each request once
    auto& row = rows[{r.team, r.model, r.version, r.minute}];
    row.team = r.team;
    row.model = r.model;
    row.version = r.version;
    row.minute = r.minute;
    row.prompt_tokens += r.prompt_tokens;
    row.cached_tokens += r.cached_tokens;
    row.output_tokens += r.output_tokens;
    row.requests += r.requests;
    row.shed += r.shed;
  }
  std::vector<usage_row> out;
  for (auto& [k, v] : rows) out.push_back(std::move(v));
  return out;
}

usage_wal::usage_wal(std::string prefix) : prefix_(std::move(prefix)) {
  std::uint64_t last = 0;
  const std::string base = std::filesystem::path(prefix_).filename().string();
  for (const auto& s : segments())
    if (auto i = segment_index(std::filesystem::path(s).filename().string(), base)) last = std::max(last, *i);
  open_index_ = last + 1;  // what is on disk is closed: it is replayed, never appended to
}

usage_wal::~usage_wal() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::string> usage_wal::segments() const {
  const std::filesystem::path p(prefix_);
  const std::string base = p.filename().string();
  const auto dir = p.parent_path().empty() ? std::filesystem::path(".") : p.parent_path();
  std::vector<std::pair<std::uint64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (auto i = segment_index(e.path().filename().string(), base)) found.push_back({*i, e.path().string()});
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [i, path] : found) out.push_back(std::move(path));
  return out;
}

std::vector<usage_record> usage_wal::read_all() {
  std::vector<usage_record> out;
  for (const auto& path : segments()) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::size_t off = 0;
    while (off < bytes.size()) {
      try {
        const msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size(), off);
        out.push_back(from_wire(h.get().as<wire_record>()));
      } catch (const std::exception&) {
        break;  // a torn record at the end: it never counted
      }
    }
  }
  return out;
}

std::optional<std::string> usage_wal::append(const std::vector<usage_record>& records) {
  if (records.empty()) return std::nullopt;
  const std::string path = prefix_ + "." + std::to_string(open_index_);
  if (fd_ < 0) fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return "cannot open " + path + ": " + std::strerror(errno);
  msgpack::sbuffer buf;
  for (const auto& r : records) msgpack::pack(buf, to_wire(r));
  for (std::size_t off = 0; off < buf.size();) {
    const ssize_t n = ::write(fd_, buf.data() + off, buf.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "cannot write " + path + ": " + std::strerror(errno);
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(fd_) != 0) return "cannot fsync " + path + ": " + std::strerror(errno);
  return std::nullopt;
}

std::vector<std::string> usage_wal::rotate() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ++open_index_;
  std::vector<std::string> closed;
  const std::string base = std::filesystem::path(prefix_).filename().string();
  for (const auto& s : segments())
    if (auto i = segment_index(std::filesystem::path(s).filename().string(), base); i && *i < open_index_) closed.push_back(s);
  return closed;
}

void usage_wal::remove(const std::vector<std::string>& segments) {
  for (const auto& s : segments) std::filesystem::remove(s);
}

bool write_watermark(const std::string& path, std::uint64_t seq) {
  // Durable before the folded segments go: a lost note with the segments gone would number
  // new records at or below what the store holds.
  const std::string tmp = path + ".tmp", text = std::to_string(seq) + "\n";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) return false;
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return true;
}

std::uint64_t read_watermark(const std::string& path) {
  std::ifstream f(path);
  std::uint64_t seq = 0;
  if (!(f >> seq)) return 0;
  return seq;
}

}  // namespace kiln::config
