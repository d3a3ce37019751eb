// The artifact endpoint (admin key): model files this node serves to the others, which pull
// a version's weights from here (config/artifact_pull.hpp).
//   GET /artifacts/{set}         {"set", "files": [{"name", "bytes", "sha256"}]}
//   GET /artifacts/{set}/{file}  the file, or one byte range (Range: bytes=A-B | A- | -N),
//                                at most 64 MiB an answer
// Files are read and hashed off the I/O threads; a file's hash is remembered by its size and
// modification time.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>

#include <nlohmann/json.hpp>

#include "config/artifact_pull.hpp"
#include "net/admin_reply.hpp"

namespace kiln::net {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr std::uint64_t kMaxAnswerBytes = 64ull << 20;

struct hash_memo {
  struct entry {
    std::uintmax_t size = 0;
    fs::file_time_type modified;
    std::string sha256;
  };
  std::mutex mu;
  std::map<std::string, entry> by_path;

  std::variant<std::string, std::string> sha256_of(const std::string& path, std::uintmax_t size, fs::file_time_type modified) {
    {
      std::lock_guard lock(mu);
      auto it = by_path.find(path);
      if (it != by_path.end() && it->second.size == size && it->second.modified == modified)
        return std::variant<std::string, std::string>(std::in_place_index<0>, it->second.sha256);
    }
    auto sum = config::sha256_file(path);
    if (sum.index() == 0) {
      std::lock_guard lock(mu);
      by_path[path] = {size, modified, std::get<0>(sum)};
    }
    return sum;
  }
};

api_error not_found(const std::string& what) { return {404, "invalid_request_error", what, "", "not_found"}; }

// The set's directory, or the error to answer.
std::variant<std::string, api_error> set_dir(const front& f, const std::string& set) {
  const auto& root = f.deps.cfg->artifacts.dir;
  if (root.empty()) return not_found("This node serves no artifacts (no [artifacts] dir).");
  if (!config::valid_artifact_name(set)) return not_found("No artifact set named '" + set + "'.");
  const std::string dir = root + "/" + set;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("No artifact set named '" + set + "'.");
  return dir;
}

void list_set(front& f, const std::shared_ptr<exchange>& ex, const std::string& set, const std::shared_ptr<hash_memo>& memo) {
  auto dir = set_dir(f, set);
  if (auto* e = std::get_if<api_error>(&dir)) return answer_error(ex, *e);
  if (!f.deps.background) return answer_error(ex, {503, "server_error", "This node cannot read artifacts now.", "", "unavailable"});
  f.deps.background([ex, set, memo, dir = std::get<std::string>(dir)] {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && config::valid_artifact_name(name)) names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    json files = json::array();
    for (const auto& name : names) {
      const std::string path = dir + "/" + name;
      const auto size = fs::file_size(path, ec);
      const auto modified = fs::last_write_time(path, ec);
      auto sum = memo->sha256_of(path, size, modified);
      if (ec || sum.index() == 1)
        return answer_error(ex, {500, "server_error", "Cannot read " + name + " of set " + set + ".", "", "internal_error"});
      files.push_back({{"name", name}, {"bytes", size}, {"sha256", std::get<0>(sum)}});
    }
    answer_json(ex, 200, {{"set", set}, {"files", files}});
  });
}

// A single range "bytes=A-B" (or A-, or -N) of a file of `size` bytes; false if unsatisfiable.
bool parse_range(const std::string& header, std::uint64_t size, std::uint64_t& first, std::uint64_t& last) {
  if (!header.starts_with("bytes=") || header.find(',') != std::string::npos) return false;
  const std::string spec = header.substr(6);
  const auto dash = spec.find('-');
  if (dash == std::string::npos) return false;
  const std::string a = spec.substr(0, dash), b = spec.substr(dash + 1);
  auto number = [](const std::string& s, std::uint64_t& out) {
    if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    out = std::stoull(s);
    return true;
  };
  if (a.empty()) {  // the last N bytes
    std::uint64_t n = 0;
    if (!number(b, n) || n == 0 || size == 0) return false;
    first = n >= size ? 0 : size - n;
    last = size - 1;
    return true;
  }
  if (!number(a, first) || first >= size) return false;
  last = size - 1;
  if (!b.empty()) {
    std::uint64_t end = 0;
    if (!number(b, end) || end < first) return false;
    last = std::min(end, size - 1);
  }
  return true;
}

void serve_file(front& f, const std::shared_ptr<exchange>& ex, const std::string& set, const std::string& file) {
  auto dir = set_dir(f, set);
  if (auto* e = std::get_if<api_error>(&dir)) return answer_error(ex, *e);
  const std::string path = std::get<std::string>(dir) + "/" + file;
  std::error_code ec;
  if (!config::valid_artifact_name(file) || !fs::is_regular_file(path, ec))
    return answer_error(ex, not_found("Set '" + set + "' has no file named '" + file + "'."));
  const std::uint64_t size = fs::file_size(path, ec);
  std::uint64_t first = 0, last = size ? size - 1 : 0;
  const std::string range = ex->request().header("range");
  const bool partial = !range.empty();
  if (partial && !parse_range(range, size, first, last))
    return ex->respond(416, error_json({416, "invalid_request_error", "The range '" + range + "' cannot be served from " +
                                                                         std::to_string(size) + " bytes.", "range", ""}),
                       "application/json", {{"Content-Range", "bytes */" + std::to_string(size)}});
  if (!partial && size > kMaxAnswerBytes)
    return answer_bad_request(ex, "The file has " + std::to_string(size) + " bytes; ask for byte ranges of at most " +
                                      std::to_string(kMaxAnswerBytes) + " (Range: bytes=A-B).", "range");
  if (partial) last = std::min(last, first + kMaxAnswerBytes - 1);
  if (!f.deps.background) return answer_error(ex, {503, "server_error", "This node cannot read artifacts now.", "", "unavailable"});
  f.deps.background([ex, path, file, size, first, last, partial] {
    std::string bytes(size ? last - first + 1 : 0, '\0');
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(first));
    if (!bytes.empty()) in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!in || static_cast<std::uint64_t>(in.gcount()) != bytes.size())
      return answer_error(ex, {500, "server_error", "Cannot read " + file + ".", "", "internal_error"});
    header_list extra = {{"Accept-Ranges", "bytes"}};
    if (partial)
      extra.push_back({"Content-Range", "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" + std::to_string(size)});
    ex->post([ex, bytes = std::move(bytes), extra = std::move(extra), partial]() mutable {
      ex->respond(partial ? 206 : 200, std::move(bytes), "application/octet-stream", extra);
    });
  });
}

}  // namespace

void add_artifact_routes(front& f) {
  using X = const std::shared_ptr<exchange>&;
  using P = const route_params&;
  auto memo = std::make_shared<hash_memo>();
  f.routes.add("GET", "/artifacts/{set}", access::admin, [&f, memo](X ex, P p) { list_set(f, ex, p.get("set"), memo); });
  f.routes.add("GET", "/artifacts/{set}/{file}", access::admin,
               [&f](X ex, P p) { serve_file(f, ex, p.get("set"), p.get("file")); });
}

}  // namespace kiln::net
