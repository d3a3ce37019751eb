#include "tests/support/kiln_process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <thread>

#ifndef KILN_BINARY
#error "KILN_BINARY must name the kiln executable"
#endif

namespace kiln::test {

const char* kiln_binary() { return KILN_BINARY; }

void remove_store(const std::string& path) {
  for (const char* ext : {"", "-wal", "-shm", ".snapshot", ".usage-folded"}) std::remove((path + ext).c_str());
  const std::filesystem::path p(path);
  const std::string usage = p.filename().string() + ".usage.";
  std::error_code ec;
  std::filesystem::remove_all(path + ".files", ec);  // uploaded files and batch answers
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path(), ec))
    if (e.path().filename().string().rfind(usage, 0) == 0) std::filesystem::remove(e.path(), ec);
}

namespace {

// The first port the kernel hands out to outgoing connections (their local ports). A port
// picked for a listener from that range can be taken by any connection made meanwhile, by
// this process or by a test running beside it, and the server then fails to bind it.
int ephemeral_start() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 0;
  return f >> lo && lo > 1024 ? lo : 32768;
}

bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// Claims a port for this test process until it exits: a lock on a file named for it, which
// the kernel lets go with the process, so test binaries run side by side never hand out the
// same port, and one killed mid-run leaves no claim behind.
bool claim(int port) {
  static const std::string dir = [] {
    const std::string d = "/tmp/kiln-test-ports";
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    return d;
  }();
  const int fd = ::open((dir + "/" + std::to_string(port)).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666);
  if (fd < 0) return true;  // no lock files here: the bind check alone
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return false;
  }
  return true;  // kept open: the claim lasts as long as this process
}

}  // namespace

int free_port() {
  // Below the ephemeral range, each test process walking its own stretch from a start its pid
  // picks; a port another test process has claimed, or that something holds, is skipped.
  static const int hi = std::min(ephemeral_start(), 32768);
  static const int lo = std::max(hi - 12000, 10000);
  static std::atomic<int> next{static_cast<int>(::getpid() * 211L % (hi - lo))};
  for (int tries = 0; tries < hi - lo; ++tries) {
    const int port = lo + next.fetch_add(1) % (hi - lo);
    if (claim(port) && bindable(port)) return port;
  }
  throw std::runtime_error("no free port below the ephemeral range");
}

double process_cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto close = s.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(s.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i == 14 || i == 15) ticks += std::stod(field);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::string with_server(std::string config, const std::string& lines) {
  const auto at = config.find("[server]\n");
  if (at != std::string::npos) config.insert(at + 9, lines);
  return config;
}

kiln_process::kiln_process(const std::string& config_toml, process_options opts) {
  char tmpl[] = "/tmp/kiln-test-XXXXXX";
  const int cfd = ::mkstemp(tmpl);
  if (cfd < 0) throw std::runtime_error("mkstemp failed");
  ::close(cfd);
  config_path_ = tmpl;
  std::ofstream(config_path_) << config_toml;
  own_store_ = opts.store.empty();
  store_path_ = own_store_ ? config_path_ + ".db" : opts.store;  // each server its own, never ~/.kiln's

  own_stderr_ = opts.stderr_path.empty();
  stderr_path_ = own_stderr_ ? config_path_ + ".stderr" : opts.stderr_path;  // read back if it fails to start

  int out[2];
  if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    const int err = ::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!std::getenv("KILN_TEST_LOG") || !opts.stderr_path.empty()) ::dup2(err, STDERR_FILENO);
    if (opts.max_files > 0) {
      rlimit lim{static_cast<rlim_t>(opts.max_files), static_cast<rlim_t>(opts.max_files)};
      ::setrlimit(RLIMIT_NOFILE, &lim);
    }
    ::close(out[0]);
    const std::string port = std::to_string(opts.port);
    if (!opts.capture.empty())
      ::execl(KILN_BINARY, KILN_BINARY, "serve", "--config", config_path_.c_str(), "--port", port.c_str(), "--store",
              store_path_.c_str(), "--capture", opts.capture.c_str(), nullptr);
    else
      ::execl(KILN_BINARY, KILN_BINARY, "serve", "--config", config_path_.c_str(), "--port", port.c_str(), "--store",
              store_path_.c_str(), nullptr);
    std::_Exit(127);
  }
  ::close(out[1]);
  if (opts.port > 0) {  // the caller watches the server come up itself
    port_ = opts.port;
    std::thread([fd = out[0]] {
      char buf[4096];
      while (::read(fd, buf, sizeof buf) > 0) {
      }
      ::close(fd);
    }).detach();
    return;
  }
  // Banner: "kiln serving on http://HOST:PORT (region ...)".
  std::string banner;
  char c;
  while (banner.find('\n') == std::string::npos && ::read(out[0], &c, 1) == 1) banner += c;
  // Keep draining stdout so the child never blocks on a full pipe.
  std::thread([fd = out[0]] {
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
    ::close(fd);
  }).detach();
  const auto at = banner.rfind(':', banner.find(" (region"));
  if (banner.rfind("kiln serving on", 0) != 0 || at == std::string::npos) {
    wait_exit(3000);  // no banner: it has ended (or closed its stdout); let its stderr be complete
    std::ifstream f(stderr_path_);
    std::string err((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (err.size() > 2000) err = "..." + err.substr(err.size() - 2000);
    stop_and_clean();
    throw std::runtime_error("kiln did not start: '" + banner + "'; it wrote: " + err);
  }
  port_ = std::atoi(banner.c_str() + at + 1);
}

kiln_process::~kiln_process() { stop_and_clean(); }

void kiln_process::stop_and_clean() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::remove(config_path_.c_str());
  if (own_stderr_) std::remove(stderr_path_.c_str());
  if (own_store_) remove_store(store_path_);
}

void kiln_process::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

int kiln_process::wait_exit(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFSIGNALED(status)) std::fprintf(stderr, "kiln_process: kiln died of signal %d\n", WTERMSIG(status));
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

std::string test_config(int replicas, int request_timeout_ms, int grace_ms) {
  return R"(region = "local"
admin_key = "key-admin"
[server]
host = "127.0.0.1"
port = 0
max_body_bytes = 4096
max_header_bytes = 1024
request_timeout_ms = )" + std::to_string(request_timeout_ms) + R"(
shutdown_grace_ms = )" + std::to_string(grace_ms) + R"(
[[teams]]
name = "search"
api_key = "key-search"
[[teams]]
name = "assistant"
api_key = "key-assistant"
[[pools]]
model = "chat-7b"
version = "v1"
replicas = )" + std::to_string(replicas) + R"(
max_tokens_per_step = 2048
max_running = 128
[pools.sim_text]
min_output_tokens = 200
max_output_tokens = 400
)";
}

}  // namespace kiln::test

namespace kiln::test {

std::string cpu_pool(const std::string& model, const std::string& dir, bool make_if_absent) {
  return "[[pools]]\nmodel = \"" + model + "\"\nversion = \"v1\"\nexecutor = \"cpu\"\nmodel_dir = \"" + dir + "\"\n" +
         (make_if_absent ? "make_if_absent = \"tiny\"\n" : "") +
         "threads = 2\nmax_tokens_per_step = 128\nmax_running = 8\nkv_blocks = 256\ndefault_max_tokens = 16\nmax_context = 2048\n";
}

ops_result run_ops(int port, const std::string& args) {
  return run_command(std::string(kiln_binary()) + " ops --url http://127.0.0.1:" + std::to_string(port) +
                     " --admin-key key-admin " + args);
}

ops_result run_command(const std::string& cmd) {
  ops_result r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace kiln::test
