#include "net/http_server.hpp"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <unordered_set>

#include <utility>
#include <boost/asio.hpp>

#include <caf/all.hpp>

#include "net/batch_runner.hpp"
#include "net/connection.hpp"
#include "net/stream_hub.hpp"

namespace kiln::net {

namespace {
constexpr auto kAcceptBackoff = std::chrono::milliseconds(50);  // out of descriptors: wait, then try again
}

struct http_server::impl : std::enable_shared_from_this<impl>, connection_host {
  impl(boost::asio::io_context& ioc, server_deps d)
      : ioc_(ioc), acceptor_(boost::asio::make_strand(ioc)), backoff_(acceptor_.get_executor()), grace_timer_(ioc) {
    front_.deps = std::move(d);
    if (front_.deps.sys)
      front_.hub = spawn_stream_hub(
          *front_.deps.sys, [&ioc](std::function<void()> fn) { boost::asio::post(ioc, std::move(fn)); },
          front_.deps.cfg->server.io_threads == 1, front_.deps.on_io_thread);
    add_openai_routes(front_);
    add_admin_routes(front_);
    add_cluster_admin_routes(front_);
    add_team_routes(front_);
    add_model_routes(front_);
    add_ops_routes(front_);
    add_pool_limit_routes(front_);
    add_tokenize_routes(front_);
    add_artifact_routes(front_);
    add_file_routes(front_);
    add_batch_routes(front_);
    add_console_routes(front_);
    front_.new_strand = [&ioc]() -> std::function<void(std::function<void()>)> {
      auto strand = std::make_shared<boost::asio::strand<boost::asio::io_context::executor_type>>(boost::asio::make_strand(ioc));
      return [strand](std::function<void()> fn) { boost::asio::post(*strand, std::move(fn)); };
    };
    if (front_.deps.sys) front_.batches = spawn_batches(front_, unix_now());
  }

  ~impl() { stop_hub(); }
  void stop_hub() {
    if (front_.batches) caf::anon_send_exit(front_.batches, caf::exit_reason::user_shutdown);
    front_.batches = nullptr;
    if (front_.hub) caf::anon_send_exit(front_.hub, caf::exit_reason::user_shutdown);
    front_.hub = nullptr;
  }

  front& shared() override { return front_; }

  void add(const std::shared_ptr<connection>& c) override {
    std::lock_guard lock(mu_);
    connections_.insert(c);
  }

  void remove(const std::shared_ptr<connection>& c) override {
    std::function<void()> done;
    {
      std::lock_guard lock(mu_);
      connections_.erase(c);
      if (front_.draining && connections_.empty() && on_drained_) done = std::exchange(on_drained_, nullptr);
    }
    if (done) boost::asio::post(ioc_, done);
  }

  std::variant<std::uint16_t, std::string> start(int port_override) {
    namespace net = boost::asio;
    const auto& sc = front_.deps.cfg->server;
    const int port = port_override >= 0 ? port_override : sc.port;
    boost::system::error_code ec;
    const auto addr = net::ip::make_address(sc.host, ec);
    if (ec) return "server.host \"" + sc.host + "\" is not an IP address: " + ec.message();
    const net::ip::tcp::endpoint ep(addr, static_cast<unsigned short>(port));
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return "cannot listen on " + sc.host + ":" + std::to_string(port) + ": " + ec.message();
    const auto bound = acceptor_.local_endpoint(ec).port();
    accept();
    return bound;
  }

  void accept() {
    acceptor_.async_accept(connection_executor(), [self = shared_from_this()](boost::system::error_code ec,
                                                                                        boost::asio::ip::tcp::socket socket) {
      if (!self->acceptor_.is_open() || ec == boost::asio::error::operation_aborted) return;
      if (!ec) {
        self->accept_failing_ = false;
        // Streams write a token at a time: without this, Nagle holds a token back until the
        // client's delayed ACK (40 ms on Linux) whenever an earlier one is still unacknowledged.
        boost::system::error_code ignored;
        socket.set_option(boost::asio::ip::tcp::no_delay(true), ignored);
        make_connection(std::move(socket), self)->start();
        return self->accept();
      }
      // Out of descriptors (or another transient failure): the pending connection stays in
      // the backlog; try again shortly instead of spinning a core.
      if (!self->accept_failing_) std::fprintf(stderr, "kiln: accept failed: %s; backing off\n", ec.message().c_str());
      self->accept_failing_ = true;
      self->backoff_.expires_after(kAcceptBackoff);
      self->backoff_.async_wait([self](boost::system::error_code ec) {
        if (!ec) self->accept();
      });
    });
  }

  // One I/O thread runs every handler in turn, so a connection needs no strand of its own
  // (a strand costs a lock and a queue hop per operation); several threads need one each.
  boost::asio::any_io_executor connection_executor() {
    if (front_.deps.cfg->server.io_threads == 1) return ioc_.get_executor();
    return boost::asio::make_strand(ioc_);
  }

  void drain(std::function<void()> on_drained) {
    std::vector<std::shared_ptr<connection>> open;
    {
      std::lock_guard lock(mu_);
      if (front_.draining.exchange(true)) return;
      on_drained_ = std::move(on_drained);
      open.assign(connections_.begin(), connections_.end());
    }
    for (auto& c : open) c->drain();
    grace_timer_.expires_after(std::chrono::milliseconds(front_.deps.cfg->server.shutdown_grace_ms));
    grace_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return;
      // The grace is over: no new connections either (clients that keep reconnecting would
      // otherwise hold the drain open for as long as they go on).
      self->stop_accepting();
      std::vector<std::shared_ptr<connection>> left;
      {
        std::lock_guard lock(self->mu_);
        left.assign(self->connections_.begin(), self->connections_.end());
      }
      for (auto& c : left) c->force_end();
    });
    remove(nullptr);  // fires on_drained at once when nothing is open
  }

  void stop_accepting() {
    boost::asio::post(acceptor_.get_executor(), [self = shared_from_this()] {
      boost::system::error_code ignored;
      self->acceptor_.close(ignored);
      self->backoff_.cancel();
    });
  }

  boost::asio::io_context& ioc_;
  front front_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer backoff_;
  boost::asio::steady_timer grace_timer_;
  bool accept_failing_ = false;
  std::mutex mu_;
  std::unordered_set<std::shared_ptr<connection>> connections_;
  std::function<void()> on_drained_;
};

http_server::http_server(boost::asio::io_context& ioc, server_deps deps)
    : impl_(std::make_shared<impl>(ioc, std::move(deps))) {}

http_server::~http_server() = default;

std::variant<std::uint16_t, std::string> http_server::start(int port_override) {
  return impl_->start(port_override);
}

void http_server::set_ready() { impl_->front_.ready = true; }

void http_server::stop() { impl_->stop_hub(); }

void http_server::drain(std::function<void()> on_drained) {
  // Keep accepting while draining, so that /healthz can say so; stop when drained, or when
  // the grace period ends.
  impl_->drain([impl = impl_, on_drained = std::move(on_drained)] {
    impl->stop_accepting();
    if (on_drained) on_drained();
  });
}

}  // namespace kiln::net
