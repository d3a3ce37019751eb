#pragma once
// A PostgreSQL server of the tests' own: initdb in a temporary directory, started on a free
// port on 127.0.0.1 with trust authentication, stopped and removed at the end. PostgreSQL
// refuses to run as root, so under root the server runs as the unprivileged user `nobody`.
#include <string>

namespace kiln::test {

class pg_server {
 public:
  /// Why no server can be started here ("" when one can): no PostgreSQL binaries.
  static std::string unavailable();
  pg_server();
  ~pg_server();
  pg_server(const pg_server&) = delete;
  pg_server& operator=(const pg_server&) = delete;

  /// Empty when the server runs; else why it could not start.
  const std::string& error() const { return error_; }
  /// A new, empty database; its URI (postgresql://kiln@127.0.0.1:PORT/NAME).
  std::string create_database(const std::string& name);
  int port() const { return port_; }
  /// Stops the server (fast: open connections are cut) and starts it again; "" or why not.
  std::string restart();

 private:
  std::string run(const std::string& command);  ///< as the server's user; "" or the output on failure
  std::string start_command() const;
  std::string dir_;
  std::string bin_;
  int port_ = 0;
  bool started_ = false;
  std::string error_;
};

}  // namespace kiln::test
