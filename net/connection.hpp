#pragma once
// One client connection of the front (internal to net/): HTTP/1.x I/O only. It reads each
// request within limits, authenticates it on its head, hands it to its route's handler as an
// exchange, and writes what the handler answers: whole responses, or SSE streams under a
// write deadline and a buffer cap. A client that goes away interrupts the handler.
#include <memory>

#include <boost/asio/ip/tcp.hpp>

#include "net/front.hpp"

namespace kiln::net {

class connection;

/// What a connection needs of the server that accepted it.
class connection_host {
 public:
  virtual ~connection_host() = default;
  virtual front& shared() = 0;
  virtual void add(const std::shared_ptr<connection>& c) = 0;
  virtual void remove(const std::shared_ptr<connection>& c) = 0;
};

class connection {
 public:
  virtual ~connection() = default;
  virtual void start() = 0;
  /// Finish the request in progress, then close; close now if idle.
  virtual void drain() = 0;
  /// Interrupt the request in progress (its handler answers with an error) and close.
  virtual void force_end() = 0;
};

std::shared_ptr<connection> make_connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<connection_host> host);

}  // namespace kiln::net
