// The registry's records: hashing a model directory, a tampered file named at the check,
// versions immutable (same content idempotent, other content a conflict), routes and
// rollout rows kept across a reopen.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "config/artifact_pull.hpp"
#include "config/http_get.hpp"
#include "config/model_hash.hpp"
#include "config/store.hpp"

using namespace kiln::config;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("kiln-registry-" + std::to_string(::getpid()) + "-" +
                                               std::to_string(reinterpret_cast<std::uintptr_t>(this)));
  temp_dir() { fs::create_directories(path / "model"); }
  ~temp_dir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / "model" / name) << text; }
  std::string model() const { return (path / "model").string(); }
  std::unique_ptr<store> open() const {
    auto r = store::open((path / "kiln.db").string());
    REQUIRE(std::holds_alternative<std::unique_ptr<store>>(r));
    return std::move(std::get<std::unique_ptr<store>>(r));
  }
};

model_version version_of(const temp_dir& d, const std::string& ver) {
  auto h = hash_model_dir(d.model());
  REQUIRE(h.index() == 0);
  model_version v;
  v.model = "tiny-chat";
  v.version = ver;
  v.weights_uri = "file://" + d.model();
  v.weights_hash = std::get<0>(h).weights_hash;
  v.tokenizer_hash = std::get<0>(h).tokenizer_hash;
  v.files = std::get<0>(h).files;
  return v;
}

}  // namespace

TEST_CASE("registry: hashes from a listing equal hashes of the files; artifact names and URLs are checked") {
  temp_dir d;
  d.write("model.safetensors", "weights");
  d.write("config.json", "{}");
  d.write("tokenizer.json", "tok");
  const auto local = std::get<0>(hash_model_dir(d.model()));
  // Given as an endpoint lists them (any order, unhashed files among them).
  auto listed = hashes_of({{"tokenizer.json", sha256_hex("tok")}, {"README.md", sha256_hex("x")},
                           {"model.safetensors", sha256_hex("weights")}, {"config.json", sha256_hex("{}")}},
                          "http://h:1/artifacts/s");
  REQUIRE(listed.index() == 0);
  CHECK(std::get<0>(listed).weights_hash == local.weights_hash);
  CHECK(std::get<0>(listed).tokenizer_hash == local.tokenizer_hash);
  CHECK(std::get<0>(listed).files.size() == 3);
  CHECK(std::get<1>(hashes_of({{"config.json", "x"}}, "where")) == "where: no *.safetensors weights");

  for (const char* ok : {"model.safetensors", "tiny-v2", "a_b.c-d", "x"}) CHECK(valid_artifact_name(ok));
  for (const char* bad : {"", ".", "..", ".hidden", "a/b", "a b", "a%2fb", "caf\xc3\xa9"}) CHECK_FALSE(valid_artifact_name(bad));
  CHECK(valid_artifact_name(std::string(200, 'a')));
  CHECK_FALSE(valid_artifact_name(std::string(201, 'a')));

  std::string host, path;
  int port = 0;
  REQUIRE(split_http_url("http://10.0.0.5:8180/artifacts/tiny-v2", host, port, path));
  CHECK(host == "10.0.0.5");
  CHECK(port == 8180);
  CHECK(path == "/artifacts/tiny-v2");
  REQUIRE(split_http_url("http://store", host, port, path));
  CHECK(port == 80);
  CHECK(path.empty());
  CHECK(split_http_url("http://h:65535/", host, port, path));
  for (const char* bad : {"https://h:1/a", "http://:80/a", "http://h:0/a", "http://h:65536/a", "http://h:x/a", "http://h:/a", "h:1"})
    CHECK_FALSE(split_http_url(bad, host, port, path));
  CHECK(is_http_uri("http://h/a"));
  CHECK_FALSE(is_http_uri("file:///a"));
  CHECK(pulled_dir({"/var/cache/kiln", ""}, "chat-7b", "v2") == "/var/cache/kiln/chat-7b/v2");
  // Not an artifact endpoint: a clear reason, nothing fetched.
  CHECK(pull_weights("http://127.0.0.1:1/", d.model() + "/pulled", "", {}).find("names no artifact set") != std::string::npos);
  CHECK(pull_weights("ftp://x/y", d.model() + "/pulled", "", {}).find("not an http://") != std::string::npos);
  CHECK(pull_weights("http://127.0.0.1:1/artifacts/s", d.model() + "/pulled", "", {}).find("cannot connect") != std::string::npos);
  // A registered copy that is already there and intact is used without asking anyone.
  CHECK(pull_weights("http://127.0.0.1:1/artifacts/s", d.model(), "", local.files).empty());
}

TEST_CASE("registry: an endpoint that sends more than it lists is cut off; nothing of it is kept") {
  // A hostile artifact endpoint: lists 4 bytes, then sends 100 for the file.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &n);
  const int port = ntohs(a.sin_port);
  std::thread server([listener] {
    const std::string listing = R"({"files":[{"name":"model.safetensors","bytes":4,"sha256":")" + sha256_hex("abcd") + R"("}]})";
    const std::string answers[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(listing.size()) + "\r\n\r\n" + listing,
        "HTTP/1.1 206 Partial Content\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'x')};
    for (const auto& answer : answers) {
      const int c = ::accept(listener, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      (void)::recv(c, buf, sizeof buf, 0);
      (void)::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  });
  temp_dir d;
  const std::string dir = d.model() + "/pulled";
  const std::string why = pull_weights("http://127.0.0.1:" + std::to_string(port) + "/artifacts/s", dir, "", {});
  server.join();
  ::close(listener);
  CHECK(why.find("sent more than the 4 bytes it lists") != std::string::npos);
  CHECK_FALSE(fs::exists(dir + "/model.safetensors"));
  CHECK_FALSE(fs::exists(dir + "/.model.safetensors.partial"));
}

TEST_CASE("registry: SHA-256 of known bytes, and of a model directory's files") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  temp_dir d;
  CHECK(std::get<1>(hash_model_dir(d.model())).find("no *.safetensors") != std::string::npos);
  d.write("model.safetensors", "weights");
  d.write("config.json", "{}");
  d.write("tokenizer.json", "tok");
  d.write("notes.txt", "not hashed");
  auto h = std::get<0>(hash_model_dir(d.model()));
  REQUIRE(h.files.size() == 3);
  CHECK(h.files[0].file == "config.json");
  CHECK(h.tokenizer_hash == sha256_hex("tok"));
  // The weights hash is over "name sha256" lines of config.json and the weights, in order.
  CHECK(h.weights_hash == sha256_hex("config.json " + sha256_hex("{}") + "\nmodel.safetensors " + sha256_hex("weights") + "\n"));
  CHECK(verify_model_dir(d.model(), h.files).empty());
  d.write("model.safetensors", "weightz");  // tampered: same size, one byte
  const std::string why = verify_model_dir(d.model(), h.files);
  CHECK(why.find("model.safetensors") != std::string::npos);
  CHECK(why.find(h.files[1].sha256) != std::string::npos);
  fs::remove(d.path / "model" / "tokenizer.json");
  CHECK(verify_model_dir(d.model(), {h.files[2]}).find("tokenizer.json: cannot be read") != std::string::npos);
}

TEST_CASE("registry: weights URIs are local directories") {
  CHECK(std::get<0>(local_dir_of("file:///models/x")) == "/models/x");
  CHECK(std::get<0>(local_dir_of("/models/x")) == "/models/x");
  CHECK(local_dir_of("s3://bucket/x").index() == 1);
  CHECK(local_dir_of("file://relative").index() == 1);
  CHECK(local_dir_of("").index() == 1);
}

TEST_CASE("registry: a version never changes; the same content again is idempotent") {
  temp_dir d;
  d.write("model.safetensors", "weights");
  d.write("tokenizer.json", "tok");
  auto s = d.open();
  CHECK(s->schema_version() == store::kSchemaVersion);
  const model_version v = version_of(d, "v2");
  auto first = s->register_version(v);
  CHECK(first.created);
  CHECK(first.conflict.empty());
  CHECK(first.version.status == "registered");
  auto again = s->register_version(v);
  CHECK_FALSE(again.created);
  CHECK(again.conflict.empty());
  model_version other = v;
  other.weights_hash = sha256_hex("something else");
  auto clash = s->register_version(other);
  CHECK_FALSE(clash.created);
  CHECK(clash.conflict.find("already registered") != std::string::npos);
  // What was stored is the first registration, files included.
  auto back = s->version("tiny-chat", "v2");
  REQUIRE(back);
  CHECK(back->weights_hash == v.weights_hash);
  CHECK(back->files.size() == v.files.size());
  CHECK_FALSE(s->set_load_test("tiny-chat", "v2", 1632, 20000));
  CHECK(s->version("tiny-chat", "v2")->status == "gated");
  CHECK(s->version("tiny-chat", "v2")->load_test_tokens_per_s == 1632);
  CHECK_FALSE(s->set_version_status("tiny-chat", "v2", "live"));
  CHECK(s->versions("tiny-chat").size() == 1);
  CHECK(s->versions("other").empty());
}

TEST_CASE("registry: routes and rollout decisions survive a reopen") {
  temp_dir d;
  {
    auto s = d.open();
    model_route r{"tiny-chat", "v1", "v2", 10, "", 0, "v0", 1234};
    CHECK_FALSE(s->put_route(r));
    r.canary_percent = 50;
    CHECK_FALSE(s->put_route(r));  // an update, not a second row
    rollout_row row;
    row.model = "tiny-chat";
    row.version = "v2";
    row.stage = "canary";
    row.percent = 50;
    row.decision = "rollback";
    row.reason = "p95 TTFT";
    row.guard_metrics = R"({"live":{}})";
    CHECK(s->add_rollout(row) == 1);
    row.stage = "nonsense";  // the table's check refuses it
    CHECK(s->add_rollout(row) == 0);
  }
  auto s = d.open();
  auto routes = s->routes();
  REQUIRE(routes.size() == 1);
  CHECK(routes[0].live == "v1");
  CHECK(routes[0].canary == "v2");
  CHECK(routes[0].canary_percent == 50);
  CHECK(routes[0].previous == "v0");
  CHECK(routes[0].previous_until == 1234);
  auto rows = s->rollouts("tiny-chat");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].decision == "rollback");
  CHECK(rows[0].guard_metrics == R"({"live":{}})");
}

TEST_CASE("pools table: a pool's bounds per region, replaced on the next write, checked at each edge") {
  temp_dir d;
  auto s = d.open();
  pool_limits l{"chat-7b", "v2", "eu", 2, 8, 1};
  CHECK_FALSE(s->put_pool_limits(l).has_value());
  auto got = s->pool_limits_of("chat-7b", "v2", "eu");
  REQUIRE(got.has_value());
  CHECK(got->min_replicas == 2);
  CHECK(got->max_replicas == 8);
  CHECK(got->warm_replicas == 1);
  CHECK_FALSE(s->pool_limits_of("chat-7b", "v2", "us").has_value());  // another region: no row
  l.min_replicas = 8;  // min = max is allowed
  l.warm_replicas = 0;
  CHECK_FALSE(s->put_pool_limits(l).has_value());
  CHECK(s->pool_limits_of("chat-7b", "v2", "eu")->min_replicas == 8);
  CHECK(s->all_pool_limits().size() == 1);
  l.min_replicas = 9;  // one past max
  REQUIRE(s->put_pool_limits(l).has_value());
  CHECK(s->put_pool_limits(l)->find("min_replicas") != std::string::npos);
  CHECK(s->pool_limits_of("chat-7b", "v2", "eu")->min_replicas == 8);  // the refused write changed nothing
  const pool_limits bad[] = {{"m", "v", "r", -1, 1, 0}, {"m", "v", "r", 0, 0, 0}, {"m", "v", "r", 0, 10001, 0},
                             {"m", "v", "r", 0, 1, -1}};
  for (const auto& b : bad) CHECK_FALSE(check_pool_limits(b).empty());
  CHECK(check_pool_limits({"m", "v", "r", 0, 1, 0}).empty());
  CHECK(check_pool_limits({"m", "v", "r", 0, 10000, 10000}).empty());
}
