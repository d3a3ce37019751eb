#include "config/artifact_pull.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "config/http_get.hpp"
#include "config/sha256_stream.hpp"

namespace kiln::config {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<std::string> auth_headers(const std::string& key) {
  if (key.empty()) return {};
  return {"Authorization: Bearer " + key};
}

struct endpoint {
  std::string host;
  int port = 0;
  std::string path;  ///< /artifacts/{set}, no trailing slash
};

std::variant<endpoint, std::string> endpoint_of(const std::string& uri) {
  endpoint e;
  if (!split_http_url(uri, e.host, e.port, e.path)) return "'" + uri + "' is not an http://host:port/... URI";
  while (e.path.size() > 1 && e.path.back() == '/') e.path.pop_back();
  if (e.path.empty() || e.path == "/") return "'" + uri + "' names no artifact set (http://host:port/artifacts/SET)";
  return e;
}

// Fetches one file by byte ranges into `part`, hashing as it goes; "" or why.
std::string fetch_file(const endpoint& e, const std::string& key, const artifact_file& f, const std::string& part) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(part.c_str(), "wb"), std::fclose);
  if (!out) return part + ": cannot be written";
  sha256_stream hash;
  std::uint64_t done = 0;
  bool write_failed = false;
  while (done < f.bytes || (f.bytes == 0 && done == 0)) {
    const std::uint64_t last = std::min(f.bytes, done + kPullPieceBytes) - (f.bytes ? 1 : 0);
    auto headers = auth_headers(key);
    if (f.bytes) headers.push_back("Range: bytes=" + std::to_string(done) + "-" + std::to_string(last));
    http_head head;
    std::uint64_t got = 0;
    bool too_much = false;
    const std::string error = http_exchange(e.host, e.port, "GET", e.path + "/" + f.name, headers, "", head,
                                            [&](const char* p, std::size_t n) {
                                              if (head.status != 200 && head.status != 206) return true;
                                              // Never more than the listed size on disk, whatever is sent.
                                              if (done + got + n > f.bytes) return !(too_much = true);
                                              if (std::fwrite(p, 1, n, out.get()) != n) write_failed = true;
                                              hash.update(p, n);
                                              got += n;
                                              return !write_failed;
                                            });
    if (too_much) return f.name + ": the endpoint sent more than the " + std::to_string(f.bytes) + " bytes it lists";
    if (!error.empty()) return f.name + ": " + error;
    if (write_failed) return part + ": write failed (disk full?)";
    if (head.status != 200 && head.status != 206)
      return f.name + ": the artifact endpoint answered " + std::to_string(head.status);
    if (f.bytes == 0) break;
    if (got == 0 || (head.status == 206 && got != last - done + 1))
      return f.name + ": the endpoint sent " + std::to_string(got) + " bytes for a range of " + std::to_string(last - done + 1);
    done += got;
    if (head.status == 200) break;  // the whole file at once
  }
  if (std::fflush(out.get()) != 0) return part + ": write failed (disk full?)";
  const std::string sum = hash.hex_digest();
  if (done != f.bytes && f.bytes != 0) return f.name + ": " + std::to_string(done) + " bytes arrived of " + std::to_string(f.bytes);
  if (sum != f.sha256)
    return f.name + ": the bytes that arrived have SHA-256 " + sum + ", the endpoint lists " + f.sha256;
  return {};
}

// A local copy of the file with the listed size and hash (hashing only when sizes agree).
bool have_already(const std::string& path, const artifact_file& f) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) != f.bytes || ec) return false;
  auto sum = sha256_file(path);
  return sum.index() == 0 && std::get<0>(sum) == f.sha256;
}

}  // namespace

bool is_http_uri(std::string_view uri) { return uri.starts_with("http://"); }

bool valid_artifact_name(std::string_view name) {
  if (name.empty() || name.size() > 200 || name.front() == '.') return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

std::string pulled_dir(const artifact_access& a, const std::string& model, const std::string& version) {
  return expand_home(a.cache_dir) + "/" + model + "/" + version;
}

std::variant<std::vector<artifact_file>, std::string> list_artifacts(const std::string& uri, const std::string& key) {
  auto ep = endpoint_of(uri);
  if (auto* e = std::get_if<std::string>(&ep)) return *e;
  const auto& e = std::get<endpoint>(ep);
  http_head head;
  std::string body;
  const std::string error = http_exchange(e.host, e.port, "GET", e.path, auth_headers(key), "", head,
                                          [&](const char* p, std::size_t n) {
                                            body.append(p, n);
                                            return body.size() < (16u << 20);
                                          });
  if (!error.empty()) return uri + ": " + error;
  if (head.status != 200) {
    const json j = json::parse(body, nullptr, false);
    const std::string why = j.is_object() && j.contains("error") && j["error"].is_object()
                                ? j["error"].value("message", std::string())
                                : std::string();
    return uri + ": the artifact endpoint answered " + std::to_string(head.status) + (why.empty() ? "" : " (" + why + ")");
  }
  const json j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("files") || !j["files"].is_array()) return uri + ": the listing is not {\"files\": [...]}";
  std::vector<artifact_file> out;
  for (const auto& f : j["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned() || !f.contains("sha256") || !f["sha256"].is_string())
      return uri + ": a listed file lacks name, bytes or sha256";
    artifact_file a{f["name"].get<std::string>(), f["bytes"].get<std::uint64_t>(), f["sha256"].get<std::string>()};
    if (!valid_artifact_name(a.name)) return uri + ": the listing names a file '" + a.name + "' that cannot be stored";
    out.push_back(std::move(a));
  }
  return out;
}

std::string pull_weights(const std::string& uri, const std::string& dir, const std::string& key,
                         const std::vector<file_hash>& expect) {
  std::error_code ec;
  if (!expect.empty() && fs::is_directory(dir, ec) && verify_model_dir(dir, expect).empty()) return {};
  auto ep = endpoint_of(uri);
  if (auto* e = std::get_if<std::string>(&ep)) return *e;
  auto listed = list_artifacts(uri, key);
  if (auto* e = std::get_if<std::string>(&listed)) return *e;
  const auto& files = std::get<std::vector<artifact_file>>(listed);
  // What the endpoint lists must be what was registered: nothing else is fetched.
  for (const auto& want : expect) {
    const auto it = std::find_if(files.begin(), files.end(), [&](const artifact_file& f) { return f.name == want.file; });
    if (it == files.end()) return uri + " does not serve " + want.file + ", a file of the registered version";
    if (it->sha256 != want.sha256)
      return uri + " serves " + want.file + " with SHA-256 " + it->sha256 + "; the version was registered with " + want.sha256;
  }
  fs::create_directories(dir, ec);
  if (ec) return dir + ": " + ec.message();
  for (const auto& f : files) {
    const std::string path = dir + "/" + f.name;
    if (have_already(path, f)) continue;
    const std::string part = dir + "/." + f.name + ".partial";
    if (auto why = fetch_file(std::get<endpoint>(ep), key, f, part); !why.empty()) {
      fs::remove(part, ec);
      return "pulling " + uri + ": " + why;
    }
    fs::rename(part, path, ec);
    if (ec) return path + ": " + ec.message();
  }
  if (!expect.empty())
    if (auto bad = verify_model_dir(dir, expect); !bad.empty()) return "the files at " + uri + " are not the registered ones: " + bad;
  return {};
}

}  // namespace kiln::config
