// Weights over HTTP between two real kiln processes: node A serves a model's files on its
// artifact endpoint; node B registers a version whose weights_uri points there (pulled ahead,
// checked file by file), serves it, pulls it again when its copy is altered, and refuses a
// version whose files at the endpoint changed after registration, saying why.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "config/model_hash.hpp"
#include "tests/support/http_client.hpp"
#include "tests/support/kiln_process.hpp"

using namespace kiln::test;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kAdmin = {"Authorization: Bearer key-admin", "Content-Type: application/json"};

std::string sha256_of(const std::string& path) { return std::get<0>(kiln::config::sha256_file(path)); }

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

http_response pinned_chat(int port, const std::string& version) {
  return request(port, "POST", "/v1/chat/completions",
                 R"({"model":"tiny-chat@)" + version + R"(","max_tokens":3,"messages":[{"role":"user","content":"hi"}]})",
                 {"Authorization: Bearer key-search", "Content-Type: application/json"});
}

std::string pool_status(int port, const std::string& version) {
  const json j = json::parse(run_ops(port, "--json pool tiny-chat").out, nullptr, false);
  if (!j.is_object() || !j.contains("versions")) return "";
  for (const auto& v : j["versions"])
    if (v["version"] == version) return v["status"];
  return "absent";
}

}  // namespace

TEST_CASE("artifacts: the endpoint lists a set with SHA-256 and serves byte ranges; bad asks get clear errors") {
  char tmpl[] = "/tmp/kiln-e2e-artifacts-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  kiln_process a(test_config(1) + cpu_pool("tiny-chat", root + "/v1") + "[artifacts]\ndir = \"" + root + "/served\"\n");
  fs::create_directories(root + "/served");
  fs::copy(root + "/v1", root + "/served/tiny-v2");
  const std::string weights = root + "/served/tiny-v2/model.safetensors";
  const std::string whole = file_bytes(weights);
  REQUIRE(whole.size() > 100);

  auto listing = request(a.port(), "GET", "/artifacts/tiny-v2", "", kAdmin);
  REQUIRE(listing.status == 200);
  const json j = json::parse(listing.body);
  CHECK(j["set"] == "tiny-v2");
  std::size_t listed = 0;
  for (const auto& e : fs::directory_iterator(root + "/served/tiny-v2")) {
    const std::string name = e.path().filename().string();
    for (const auto& f : j["files"])
      if (f["name"] == name) {
        ++listed;
        CHECK(f["bytes"] == fs::file_size(e.path()));
        CHECK(f["sha256"] == sha256_of(e.path().string()));
      }
  }
  CHECK(listed == j["files"].size());
  CHECK(listed >= 3);  // config.json, model.safetensors, tokenizer.json at least

  // Ranges: first bytes, a middle slice, the last bytes; the whole file without a range.
  auto first = request(a.port(), "GET", "/artifacts/tiny-v2/model.safetensors", "", {kAdmin[0], "Range: bytes=0-9"});
  CHECK(first.status == 206);
  CHECK(first.body == whole.substr(0, 10));
  CHECK(first.headers["content-range"] == "bytes 0-9/" + std::to_string(whole.size()));
  auto middle = request(a.port(), "GET", "/artifacts/tiny-v2/model.safetensors", "", {kAdmin[0], "Range: bytes=50-"});
  CHECK(middle.status == 206);
  CHECK(middle.body == whole.substr(50));
  auto tail = request(a.port(), "GET", "/artifacts/tiny-v2/model.safetensors", "", {kAdmin[0], "Range: bytes=-7"});
  CHECK(tail.body == whole.substr(whole.size() - 7));
  // The last byte exactly, and one past the end.
  const std::string last = std::to_string(whole.size() - 1), end = std::to_string(whole.size());
  auto at_end = request(a.port(), "GET", "/artifacts/tiny-v2/model.safetensors", "", {kAdmin[0], "Range: bytes=" + last + "-" + last});
  CHECK(at_end.status == 206);
  CHECK(at_end.body == whole.substr(whole.size() - 1));
  auto past = request(a.port(), "GET", "/artifacts/tiny-v2/model.safetensors", "", {kAdmin[0], "Range: bytes=" + end + "-"});
  CHECK(past.status == 416);
  CHECK(past.headers["content-range"] == "bytes */" + end);
  CHECK(request(a.port(), "GET", "/artifacts/tiny-v2/model.safetensors", "", {kAdmin[0], "Range: bytes=0-1,4-5"}).status == 416);
  CHECK(request(a.port(), "GET", "/artifacts/tiny-v2/model.safetensors", "", {kAdmin[0], "Range: lines=1-2"}).status == 416);
  auto all = request(a.port(), "GET", "/artifacts/tiny-v2/model.safetensors", "", kAdmin);
  CHECK(all.status == 200);
  CHECK(all.body == whole);

  // Who may ask, and what cannot be named.
  CHECK(request(a.port(), "GET", "/artifacts/tiny-v2").status == 401);
  CHECK(request(a.port(), "GET", "/artifacts/tiny-v2", "", {"Authorization: Bearer key-search"}).status == 403);
  CHECK(request(a.port(), "GET", "/artifacts/no-such-set", "", kAdmin).status == 404);
  CHECK(request(a.port(), "GET", "/artifacts/tiny-v2/no-such-file", "", kAdmin).status == 404);
  CHECK(request(a.port(), "GET", "/artifacts/../v1", "", kAdmin).status == 404);
  CHECK(request(a.port(), "GET", "/artifacts/tiny-v2/..", "", kAdmin).status == 404);
  CHECK(request(a.port(), "GET", "/artifacts/tiny-v2/.hidden", "", kAdmin).status == 404);
  // A node without [artifacts] serves none.
  kiln_process plain(test_config(1));
  CHECK(request(plain.port(), "GET", "/artifacts/tiny-v2", "", kAdmin).status == 404);
  fs::remove_all(root);
}

TEST_CASE("artifacts: a node pulls an http:// version ahead of use, verifies it, serves it, and refuses altered files") {
  char tmpl[] = "/tmp/kiln-e2e-pull-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  kiln_process a(test_config(1) + cpu_pool("tiny-chat", root + "/a-v1") + "[artifacts]\ndir = \"" + root + "/served\"\n");
  kiln_process b(test_config(1) + cpu_pool("tiny-chat", root + "/b-v1") + "[artifacts]\ncache_dir = \"" + root + "/cache\"\n");
  fs::create_directories(root + "/served");
  fs::copy(root + "/a-v1", root + "/served/tiny-v2");
  fs::copy(root + "/a-v1", root + "/served/tiny-v3");
  const std::string base = "http://127.0.0.1:" + std::to_string(a.port()) + "/artifacts/";

  // Registered on B from A's listing: B pulls the files now, before any pool needs them.
  auto r = run_ops(b.port(), "register tiny-chat v2 " + base + "tiny-v2");
  CHECK(r.status == 0);
  CHECK(r.out.find("registered tiny-chat@v2") != std::string::npos);
  const std::string pulled = root + "/cache/tiny-chat/v2";
  for (const auto& e : fs::directory_iterator(root + "/served/tiny-v2"))
    CHECK(sha256_of(pulled + "/" + e.path().filename().string()) == sha256_of(e.path().string()));
  CHECK_FALSE(fs::exists(pulled + "/.model.safetensors.partial"));
  // The registry holds the same hashes as a local registration of the same files.
  const auto local = std::get<kiln::config::model_hashes>(kiln::config::hash_model_dir(root + "/served/tiny-v2"));
  const json versions = json::parse(run_ops(b.port(), "--json versions tiny-chat").out);
  bool found = false;
  for (const auto& v : versions["versions"])
    if (v["version"] == "v2") {
      found = true;
      CHECK(v["weights_hash"] == local.weights_hash);
      CHECK(v["weights_uri"] == base + "tiny-v2");
    }
  CHECK(found);

  // B's copy is altered: its pool pulls the file again before loading, then serves.
  {
    std::fstream f(pulled + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x11');
  }
  CHECK(run_ops(b.port(), "rollout tiny-chat v2 canary 10").status == 0);
  REQUIRE(eventually([&] { return pool_status(b.port(), "v2") == "serving"; }, std::chrono::seconds(10)));
  CHECK(sha256_of(pulled + "/model.safetensors") == sha256_of(root + "/served/tiny-v2/model.safetensors"));
  auto served = pinned_chat(b.port(), "v2");
  CHECK(served.status == 200);
  CHECK(json::parse(served.body)["model_version"] == "v2");

  // Hashes that do not match what the endpoint serves: refused at registration, named.
  const json bad = {{"version", "v9"}, {"weights_uri", base + "tiny-v2"}, {"weights_hash", std::string(64, 'a')},
                    {"tokenizer_hash", local.tokenizer_hash}};
  auto refused = request(b.port(), "POST", "/admin/models/tiny-chat/versions", bad.dump(), kAdmin);
  CHECK(refused.status == 400);
  CHECK(refused.body.find("weights_hash") != std::string::npos);
  // An endpoint that is not there, and a set it does not have.
  const json gone = {{"version", "v8"}, {"weights_uri", "http://127.0.0.1:1/artifacts/tiny-v2"},
                     {"weights_hash", local.weights_hash}, {"tokenizer_hash", local.tokenizer_hash}};
  auto unreachable = request(b.port(), "POST", "/admin/models/tiny-chat/versions", gone.dump(), kAdmin);
  CHECK(unreachable.status == 400);
  CHECK(unreachable.body.find("cannot connect") != std::string::npos);
  CHECK(run_ops(b.port(), "register tiny-chat v7 " + base + "no-such-set").status == 1);
  // Names that would leave the cache directory: refused before anything is fetched.
  json dots = gone;
  dots["version"] = "..";
  dots["weights_uri"] = base + "tiny-v2";
  auto escaped = request(b.port(), "POST", "/admin/models/tiny-chat/versions", dots.dump(), kAdmin);
  CHECK(escaped.status == 400);
  dots["version"] = "v6";
  CHECK(request(b.port(), "POST", "/admin/models/../versions", dots.dump(), kAdmin).status == 400);
  CHECK_FALSE(fs::exists(root + "/cache/v6"));

  // v3 registered, then its files change at the endpoint and B's copy is lost: B cannot
  // verify what it would pull, so it refuses the version and says which file differs.
  REQUIRE(run_ops(b.port(), "register tiny-chat v3 " + base + "tiny-v3").status == 0);
  {
    std::fstream f(root + "/served/tiny-v3/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x22');
  }
  fs::remove_all(root + "/cache/tiny-chat/v3");
  CHECK(run_ops(b.port(), "rollout tiny-chat v3 canary 10").status == 0);
  REQUIRE(eventually([&] { return pool_status(b.port(), "v3") == "failed"; }, std::chrono::seconds(10)));
  auto pinned = pinned_chat(b.port(), "v3");
  CHECK(pinned.status == 503);
  CHECK(pinned.body.find("refused") != std::string::npos);
  CHECK(pinned.body.find("model.safetensors") != std::string::npos);
  CHECK(pinned_chat(b.port(), "v2").status == 200);  // the other versions serve on
  fs::remove_all(root);
}
