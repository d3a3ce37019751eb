#include "net/http_server.hpp"

#include <chrono>
#include <mutex>
#include <unordered_set>

#include <utility>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "net/session.hpp"

namespace kiln::net {

struct http_server::impl : std::enable_shared_from_this<impl>, session_host {
  impl(boost::asio::io_context& ioc, server_deps d)
      : ioc_(ioc), deps_(std::move(d)), acceptor_(boost::asio::make_strand(ioc)),
        grace_timer_(ioc) {}

  const server_deps& deps() const override { return deps_; }
  bool draining() const override { return draining_.load(); }
  std::uint64_t next_request_id() override { return ++request_ids_; }

  void add(const std::shared_ptr<session>& s) override {
    std::lock_guard lock(mu_);
    sessions_.insert(s);
  }

  void remove(const std::shared_ptr<session>& s) override {
    std::function<void()> done;
    {
      std::lock_guard lock(mu_);
      sessions_.erase(s);
      if (draining_ && sessions_.empty() && on_drained_) done = std::exchange(on_drained_, nullptr);
    }
    if (done) boost::asio::post(ioc_, done);
  }

  std::variant<std::uint16_t, std::string> start(int port_override) {
    namespace net = boost::asio;
    const auto& sc = deps_.cfg->server;
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
    acceptor_.async_accept(boost::asio::make_strand(ioc_),
                           [self = shared_from_this()](boost::system::error_code ec,
                                                       boost::asio::ip::tcp::socket socket) {
                             if (!self->acceptor_.is_open()) return;
                             if (!ec) make_session(std::move(socket), self)->start();
                             self->accept();
                           });
  }

  void drain(std::function<void()> on_drained) {
    std::vector<std::shared_ptr<session>> open;
    {
      std::lock_guard lock(mu_);
      if (draining_.exchange(true)) return;
      on_drained_ = std::move(on_drained);
      open.assign(sessions_.begin(), sessions_.end());
    }
    boost::asio::post(acceptor_.get_executor(), [self = shared_from_this()] {
      boost::system::error_code ignored;
      self->acceptor_.close(ignored);
    });
    for (auto& s : open) s->drain();
    grace_timer_.expires_after(std::chrono::milliseconds(deps_.cfg->server.shutdown_grace_ms));
    grace_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return;
      std::vector<std::shared_ptr<session>> left;
      {
        std::lock_guard lock(self->mu_);
        left.assign(self->sessions_.begin(), self->sessions_.end());
      }
      for (auto& s : left) s->force_end();
    });
    remove(nullptr);  // fires on_drained at once when nothing is open
  }

  boost::asio::io_context& ioc_;
  server_deps deps_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer grace_timer_;
  std::atomic<bool> draining_{false};
  std::atomic<std::uint64_t> request_ids_{0};
  std::mutex mu_;
  std::unordered_set<std::shared_ptr<session>> sessions_;
  std::function<void()> on_drained_;
};

http_server::http_server(boost::asio::io_context& ioc, server_deps deps)
    : impl_(std::make_shared<impl>(ioc, std::move(deps))) {}

http_server::~http_server() = default;

std::variant<std::uint16_t, std::string> http_server::start(int port_override) {
  return impl_->start(port_override);
}

void http_server::drain(std::function<void()> on_drained) { impl_->drain(std::move(on_drained)); }

}  // namespace kiln::net
