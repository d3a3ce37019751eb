#pragma once
// One client connection of the front (internal to net/): reads requests within limits,
// routes them, and streams chat completions back as the sink delivers them.
#include <cstdint>
#include <memory>

#include <boost/asio/ip/tcp.hpp>

#include "net/http_server.hpp"

namespace kiln::net {

class session;

/// What a session needs of the server that accepted it.
class session_host {
 public:
  virtual ~session_host() = default;
  virtual const server_deps& deps() const = 0;
  virtual bool draining() const = 0;
  virtual std::uint64_t next_request_id() = 0;
  virtual void add(const std::shared_ptr<session>& s) = 0;
  virtual void remove(const std::shared_ptr<session>& s) = 0;
};

class session {
 public:
  virtual ~session() = default;
  virtual void start() = 0;
  /// Finish the request in progress, then close; close now if idle.
  virtual void drain() = 0;
  /// End the request in progress with an error (event) and close.
  virtual void force_end() = 0;
};

std::shared_ptr<session> make_session(boost::asio::ip::tcp::socket socket,
                                      std::shared_ptr<session_host> host);

}  // namespace kiln::net
