#include "tests/support/pg_server.hpp"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "config/db.hpp"
#include "tests/support/kiln_process.hpp"

namespace kiln::test {

namespace {

namespace fs = std::filesystem;
constexpr unsigned kNobody = 65534;

// The newest installed server's bin directory ("" when there is none).
std::string server_bin() {
  std::string best;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    const std::string bin = e.path().string() + "/bin";
    if (fs::exists(bin + "/initdb") && fs::exists(bin + "/pg_ctl") && bin > best) best = bin;
  }
  return best;
}

}  // namespace

std::string pg_server::unavailable() {
  if (server_bin().empty()) return "no PostgreSQL server binaries under /usr/lib/postgresql (Debian's postgresql package)";
  if (::geteuid() == 0 && std::system("command -v setpriv >/dev/null 2>&1") != 0)
    return "running as root without setpriv to start PostgreSQL as an unprivileged user";
  return {};
}

std::string pg_server::run(const std::string& command) {
  const std::string as = ::geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 --clear-groups -- " : "";
  const std::string full = as + command + " 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) return "cannot run " + command;
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int st = ::pclose(p);
  return st == 0 ? std::string() : (out.empty() ? "failed: " + command : out);
}

pg_server::pg_server() {
  if (auto why = unavailable(); !why.empty()) {
    error_ = why;
    return;
  }
  bin_ = server_bin();
  char tmpl[] = "/tmp/kiln-pg-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    error_ = "cannot make a temporary directory";
    return;
  }
  dir_ = tmpl;
  if (::geteuid() == 0 && ::chown(dir_.c_str(), kNobody, kNobody) != 0) {
    error_ = "cannot hand " + dir_ + " to nobody";
    return;
  }
  if (auto e = run(bin_ + "/initdb -D " + dir_ + "/data -U kiln --auth=trust --locale=C --encoding=UTF8 -N"); !e.empty()) {
    error_ = "initdb failed: " + e;
    return;
  }
  port_ = free_port();
  if (auto e = run(start_command()); !e.empty()) {
    error_ = "the server did not start: " + e;
    return;
  }
  started_ = true;
}

std::string pg_server::start_command() const {
  const std::string opts = "-p " + std::to_string(port_) + " -k " + dir_ + " -c listen_addresses=127.0.0.1 -c fsync=off";
  return bin_ + "/pg_ctl -D " + dir_ + "/data -l " + dir_ + "/server.log -o '" + opts + "' -w -t 30 start";
}

std::string pg_server::restart() {
  if (auto e = run(bin_ + "/pg_ctl -D " + dir_ + "/data -m fast -w stop"); !e.empty()) return e;
  return run(start_command());
}

pg_server::~pg_server() {
  if (started_) run(bin_ + "/pg_ctl -D " + dir_ + "/data -m immediate -w stop");
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::string pg_server::create_database(const std::string& name) {
  const std::string base = "postgresql://kiln@127.0.0.1:" + std::to_string(port_) + "/";
  auto admin = config::open_postgres(base + "postgres");
  if (auto* e = std::get_if<std::string>(&admin)) return "error: " + *e;
  if (auto e = std::get<std::unique_ptr<config::db>>(admin)->exec("CREATE DATABASE " + name)) return "error: " + *e;
  return base + name;
}

}  // namespace kiln::test
