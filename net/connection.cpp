#include "net/connection.hpp"

#include <cstdio>
#include <initializer_list>
#include <cctype>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>

#include <utility>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "net/errors.hpp"
#include "net/prefetch.hpp"
#include "net/scratch.hpp"
#include "net/sse.hpp"

namespace kiln::net {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using clock = std::chrono::steady_clock;

constexpr std::size_t kMaxPipelined = 64 << 10;  // bytes a client may send ahead mid-response
constexpr auto kLinger = std::chrono::milliseconds(500);
constexpr auto kShutdownWrite = std::chrono::milliseconds(1000);  // after force_end, then close

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// RFC 9112: a request whose last transfer coding is not chunked has no knowable length.
bool bad_transfer_encoding(const http::request_parser<http::string_body>& p) {
  const auto& req = p.get();
  auto it = req.find(http::field::transfer_encoding);
  if (it == req.end()) return false;
  std::string v = lower(std::string_view(it->value().data(), it->value().size()));
  const auto comma = v.rfind(',');
  std::string last = comma == std::string::npos ? v : v.substr(comma + 1);
  const auto b = last.find_first_not_of(" \t");
  const auto e = last.find_last_not_of(" \t");
  last = b == std::string::npos ? std::string() : last.substr(b, e - b + 1);
  return last != "chunked";
}

// RFC 9112 3.2.2: a server takes a request target in absolute form ("http://host/v1/models",
// as a proxy forwards it) as the origin form of its path.
std::string origin_form(std::string_view target) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() < scheme.size() || lower(target.substr(0, scheme.size())) != scheme) continue;
    const auto rest = target.substr(scheme.size());
    const auto at = rest.find_first_of("/?");
    if (at == std::string_view::npos) return "/";
    return (rest[at] == '?' ? "/" : "") + std::string(rest.substr(at));  // "http://host?q": the root's query
  }
  return std::string(target);
}

class connection_impl;

// The exchange a handler holds: every call checks that its request is still the one in
// progress on the connection.
class exchange_impl final : public exchange {
 public:
  exchange_impl(std::weak_ptr<connection_impl> c, asio::any_io_executor strand, std::uint64_t serial, http_request req,
                caller who)
      : conn_(std::move(c)), raw_conn_(conn_.lock().get()), strand_(std::move(strand)), serial_(serial), req_(std::move(req)),
        who_(std::move(who)) {}
  const http_request& request() const override { return req_; }
  const caller& who() const override { return who_; }
  void respond(int status, std::string body, std::string_view content_type, const header_list& extra) override;
  void begin_stream(const header_list& extra) override;
  void stream(std::string_view sse) override;
  void end_stream(int status, std::string_view last) override;
  bool streaming() const override;
  void post(std::function<void()> fn) override;
  void on_interrupt(std::function<void(interruption)> fn) override { interrupt_ = std::move(fn); }
  void after(int ms, std::function<void()> fn) override;
  log_fields& log() override { return log_; }
  void warm(int depth) const override;

  std::uint64_t serial() const { return serial_; }
  void set_body(std::string body) { req_.body = std::move(body); }
  caller& who_mut() { return who_; }
  void interrupt(interruption why) {
    if (auto fn = std::exchange(interrupt_, nullptr)) fn(why);
  }

 private:
  std::weak_ptr<connection_impl> conn_;
  const void* raw_conn_;  ///< conn_'s object, only ever prefetched (warm), never read through
  asio::any_io_executor strand_;  ///< the connection's, made once: posting is per token
  std::uint64_t serial_;
  http_request req_;
  caller who_;
  log_fields log_;
  std::function<void(interruption)> interrupt_;
};

class connection_impl final : public connection, public std::enable_shared_from_this<connection_impl> {
 public:
  connection_impl(tcp::socket socket, std::shared_ptr<connection_host> host)
      : stream_(std::move(socket)), host_(std::move(host)), front_(host_->shared()),
        limits_(front_.deps.cfg->server), write_timer_(stream_.get_executor()), close_timer_(stream_.get_executor()),
        deadline_timer_(stream_.get_executor()) {}

  void start() override {
    beast::error_code ignored;
    stream_.socket().non_blocking(true, ignored);  // flush() sends directly and must never block
    ++front_.deps.metrics->open_connections;
    host_->add(shared_from_this());
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

  void drain() override {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      self->closing_ = true;
      self->keep_alive_ = false;
      if (self->phase_ == phase::reading) self->close();
    });
  }

  void force_end() override {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      self->closing_ = true;
      self->keep_alive_ = false;
      // Between a request's end and the next read (a keep-alive connection) there is no
      // exchange to interrupt: close it like an idle one.
      if (self->phase_ != phase::handling || !self->current_) return self->close();
      // The handler answers (an error event); whatever the client does not take within a
      // second is dropped with the connection.
      self->close_timer_.expires_after(kShutdownWrite);
      self->close_timer_.async_wait([self](beast::error_code ec) {
        if (!ec) self->abort_request();
      });
      self->current_->interrupt(interruption::shutdown);
    });
  }

  // --- what exchanges call, on this connection's strand ---
  bool active(std::uint64_t serial) const {
    return current_ && current_->serial() == serial && phase_ == phase::handling && !response_done_;
  }

  void respond(std::uint64_t serial, int status, std::string body, std::string_view content_type, const header_list& extra) {
    if (!active(serial) || head_sent_) return;
    std::string head = "HTTP/1.1 " + std::to_string(status) + " " +
                       std::string(http::obsolete_reason(static_cast<http::status>(status))) +
                       "\r\nServer: kiln\r\nContent-Type: " + std::string(content_type) +
                       "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    for (const auto& [k, v] : extra) head += k + ": " + v + "\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    head_sent_ = true;
    append(head);
    append(body);
    finish(status);
  }

  void begin_stream(std::uint64_t serial, const header_list& extra) {
    if (!active(serial) || head_sent_) return;
    head_sent_ = true;
    streaming_ = true;
    ++front_.deps.metrics->open_streams;
    // HTTP/1.0 has no chunked encoding: the stream ends when the connection closes.
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;
    std::string head = "HTTP/1.1 200 OK\r\nServer: kiln\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n";
    if (chunked_) head += "Transfer-Encoding: chunked\r\n";
    for (const auto& [k, v] : extra) head += k + ": " + v + "\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    append(head);
    flush();
  }

  void stream(std::uint64_t serial, std::string_view sse) {
    if (!active(serial) || !streaming_ || sse.empty()) return;
    if (outbox_.empty() && !writing_ && !too_slow_ && phase_ != phase::closed) return send_now(sse);
    frame(sse);
    flush();
  }

  void end_stream(std::uint64_t serial, int status, std::string_view last) {
    if (!active(serial) || !streaming_) return;
    frame(last);
    if (chunked_) append(kLastChunk);
    finish(status);
  }

  bool is_streaming(std::uint64_t serial) const { return active(serial) && streaming_; }

  /// Starts loading what stream() reads and writes (see exchange::warm).
  void warm() {
    const auto* from = reinterpret_cast<const char*>(&phase_);
    prefetch_bytes(from, static_cast<std::size_t>(reinterpret_cast<const char*>(&started_) - from));
    prefetch_bytes(&stream_.socket(), 64);
  }

  void after(std::uint64_t serial, int ms, std::function<void()> fn) {
    if (!active(serial)) return;
    deadline_timer_.expires_after(std::chrono::milliseconds(ms));
    deadline_timer_.async_wait([self = shared_from_this(), serial, fn = std::move(fn)](beast::error_code ec) {
      if (!ec && self->active(serial)) fn();
    });
  }

 private:
  enum class phase { reading, handling, closed };

  // --- reading a request ---
  void do_read() {
    if (phase_ == phase::closed) return;
    phase_ = phase::reading;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // checked after authentication (on_header)
    stream_.expires_after(std::chrono::milliseconds(limits_.request_timeout_ms));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return read_failed(ec);
    begin_exchange();
    if (bad_transfer_encoding(*parser_)) {
      keep_alive_ = false;
      return reply_error({400, "invalid_request_error", "Transfer-Encoding must end with chunked.", "", "bad_request"});
    }
    // Authenticate on the head: an unauthenticated body is never read, let alone parsed.
    const auto& req = parser_->get();
    const auto m = front_.routes.find(current_->request().method, current_->request().path);
    if (m.path_known) {
      auto auth = req.find(http::field::authorization);
      const std::string_view authz = auth == req.end() ? std::string_view() : std::string_view(auth->value().data(), auth->value().size());
      if (auto err = authenticate(m.need, authz, *front_.deps.tenants->get(), front_.deps.admin_key, current_->who_mut())) {
        if (!parser_->is_done()) keep_alive_ = false;  // its body stays unread
        return reply_error(*err);
      }
    }
    const std::size_t max_body = m.max_body > 0 ? m.max_body : limits_.max_body_bytes;
    body_limit_ = max_body;
    const auto length = parser_->content_length();
    if (length && *length > max_body) {
      keep_alive_ = false;
      return reply_error({413, "invalid_request_error", "Request body is larger than " + std::to_string(max_body) + " bytes.",
                          "", "body_too_large"});
    }
    parser_->body_limit(max_body);  // a chunked body counts as it arrives
    if (parser_->is_done()) return on_read({});
    auto expect = req.find(http::field::expect);
    if (expect != req.end() && beast::iequals(expect->value(), "100-continue")) {
      static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(stream_.socket(), asio::buffer(cont.data(), cont.size()),
                        [self = shared_from_this()](beast::error_code ec, std::size_t) {
                          if (ec) return self->close();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void read_failed(beast::error_code ec) {
    if (phase_ == phase::closed || ec == asio::error::operation_aborted) return;
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      begin_exchange();
      return reply_error({431, "invalid_request_error", "Request header fields are too large.", "", "headers_too_large"});
    }
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      begin_exchange();
      return reply_error({413, "invalid_request_error",
                          "Request body is larger than " + std::to_string(body_limit_) + " bytes.", "",
                          "body_too_large"});
    }
    const bool partial = parser_ && parser_->got_some();
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == beast::error::timeout || !partial || ec == http::error::partial_message)
      return close();
    keep_alive_ = false;
    begin_exchange();
    reply_error({400, "invalid_request_error", "Malformed HTTP request: " + ec.message(), "", "bad_request"});
  }

  // The request's head is known (or none could be read): it becomes the exchange in progress.
  void begin_exchange() {
    if (current_ && phase_ == phase::handling) return;
    started_ = clock::now();
    keep_alive_ = !closing_ && !front_.draining;
    http_request r;
    if (parser_ && parser_->is_header_done()) {
      const auto& req = parser_->get();
      r.method = std::string(req.method_string());
      const std::string target = origin_form(std::string_view(req.target().data(), req.target().size()));
      const auto q = target.find('?');
      r.path = target.substr(0, q);
      if (q != std::string::npos) r.query = target.substr(q + 1);
      r.version = req.version();
      for (const auto& f : req)
        r.headers.emplace_back(lower(std::string_view(f.name_string().data(), f.name_string().size())), std::string(f.value()));
      keep_alive_ = keep_alive_ && req.keep_alive();
    } else {
      keep_alive_ = false;
    }
    version_ = r.version;
    current_ = std::make_shared<exchange_impl>(weak_from_this(), stream_.get_executor(), ++serial_, std::move(r), caller{});
    phase_ = phase::handling;
    head_sent_ = streaming_ = response_done_ = false;
    status_ = 0;
  }

  void on_read(beast::error_code ec) {
    if (ec) return read_failed(ec);
    stream_.expires_never();
    auto req = parser_->release();
    parser_.reset();
    current_->set_body(std::move(req.body()));
    const std::shared_ptr<exchange_impl> ex = current_;
    if (front_.draining && ex->request().path != "/healthz" && ex->request().path != "/metrics") {
      keep_alive_ = false;
      return reply_error(to_api_error(actors::errc::shutting_down, "kiln is shutting down; retry on another node"));
    }
    const auto m = front_.routes.find(ex->request().method, ex->request().path);
    if (!m.path_known)
      return reply_error({404, "invalid_request_error",
                          "Unknown request URL: " + ex->request().method + " " + ex->request().path + ".", "", "unknown_url"});
    if (!m.run) {
      return ex->respond(405, error_json({405, "invalid_request_error",
                                          "Method " + ex->request().method + " is not allowed on " + ex->request().path +
                                              "; use " + m.allowed + ".", "", "method_not_allowed"}),
                         "application/json", {{"Allow", m.allowed}});
    }
    watch();
    (*m.run)(ex, m.params);
  }

  void reply_error(const api_error& e) { current_->respond(e.status, error_json(e), "application/json", error_headers(e)); }

  // --- writing ---
  // A stream's cap holds at every append: past it nothing more is buffered, and the request
  // ends (once the current call has returned) as for a client that went away. Whole
  // answers are as large as they are.
  void append(std::initializer_list<std::string_view> parts) {
    if (too_slow_) return;
    std::size_t size = 0;
    for (auto p : parts) size += p.size();
    if (streaming_ && outbox_.size() + inflight_.size() + size > limits_.max_buffered_bytes) {
      too_slow_ = true;
      asio::post(stream_.get_executor(), [self = shared_from_this()] { self->abort_request(); });
      return;
    }
    for (auto p : parts) outbox_.append(p.data(), p.size());
  }
  void append(std::string_view bytes) { append({bytes}); }

  // One HTTP chunk straight into the outbox (whose capacity is kept between writes).
  void frame(std::string_view sse) {
    if (sse.empty()) return;
    if (!chunked_) return append(sse);
    char head[20];
    append({http_chunk_head(sse.size(), head), sse, std::string_view("\r\n")});
  }

  // Nothing waits before these bytes: they are framed in this thread's scratch memory and
  // sent from there; only what the socket does not take goes into the outbox.
  void send_now(std::string_view sse) {
    scratch buf;
    std::string& bytes = buf.str();
    if (chunked_) append_http_chunk(bytes, sse);
    else bytes += sse;
    beast::error_code ec;
    const std::size_t sent = stream_.socket().send(asio::buffer(bytes), 0, ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) return abort_request();
    if (!ec && sent == bytes.size()) return;
    append(std::string_view(bytes).substr(ec ? 0 : sent));
    flush();
  }

  void finish(int status) {
    status_ = status;
    response_done_ = true;
    if (streaming_) --front_.deps.metrics->open_streams;
    flush();
  }

  void flush() {
    if (writing_ || phase_ == phase::closed) return;
    if (too_slow_) return abort_request();  // the client fell further behind than the cap
    if (outbox_.empty()) {
      if (response_done_) complete_request();
      return;
    }
    // Almost every write fits in the socket's send buffer: send it now, without an
    // asynchronous operation, a completion handler or the slow-reader timer. Only what the
    // kernel does not take waits for the socket (with the timer running).
    beast::error_code ec;
    const std::size_t sent = stream_.socket().send(asio::buffer(outbox_), 0, ec);
    if (ec && ec != asio::error::would_block && ec != asio::error::try_again) return abort_request();
    if (!ec && sent == outbox_.size()) {
      outbox_.clear();
      if (response_done_) complete_request();
      return;
    }
    writing_ = true;
    inflight_.swap(outbox_);
    outbox_.clear();
    if (!ec) inflight_.erase(0, sent);
    write_timer_.expires_after(std::chrono::milliseconds(limits_.write_timeout_ms));
    write_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && self->writing_) self->abort_request();  // the client takes nothing: a slow reader
    });
    asio::async_write(stream_.socket(), asio::buffer(inflight_),
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->writing_ = false;
                        self->write_timer_.cancel();
                        if (ec) return self->abort_request();
                        self->inflight_.clear();
                        self->flush();
                      });
  }

  void complete_request() {
    log_request();
    current_.reset();
    close_timer_.cancel();
    deadline_timer_.cancel();
    if (!keep_alive_ || front_.draining) return linger_close();
    if (watching_) {
      read_after_watch_ = true;
      beast::error_code ignored;
      stream_.socket().cancel(ignored);
    } else {
      do_read();
    }
  }

  // --- noticing a client that went away while its request runs ---
  void watch() {
    watching_ = true;
    stream_.socket().async_read_some(asio::buffer(watch_buf_),
                                     [self = shared_from_this()](beast::error_code ec, std::size_t n) { self->on_watch(ec, n); });
  }

  void on_watch(beast::error_code ec, std::size_t n) {
    watching_ = false;
    if (phase_ == phase::closed) return;
    if (n > 0) {
      auto dst = buffer_.prepare(n);
      std::memcpy(dst.data(), watch_buf_.data(), n);
      buffer_.commit(n);
    }
    const bool in_request = phase_ == phase::handling && current_;
    if (in_request && !ec) {
      if (buffer_.size() > kMaxPipelined) return abort_request();
      return watch();
    }
    if (in_request) return abort_request();  // the client closed or reset mid-request
    if (read_after_watch_) {
      read_after_watch_ = false;
      do_read();
    }
  }

  // Nothing more can be written: the handler learns the client is gone, then we close.
  void abort_request() {
    if (phase_ == phase::closed) return;
    if (current_) {
      if (!response_done_) {
        if (streaming_) --front_.deps.metrics->open_streams;
        response_done_ = true;
        current_->interrupt(interruption::client_gone);
      }
      status_ = 499;  // the client did not take the whole answer
      log_request();
    }
    close();
  }

  // --- closing ---
  void linger_close() {
    // Half-close, then drain what the client still sends so it reads our answer before a reset.
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLinger);
    stream_.async_read_some(asio::buffer(watch_buf_), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->linger_close();
    });
  }

  void close() {
    if (phase_ == phase::closed) return;
    phase_ = phase::closed;
    if (current_) current_->interrupt(interruption::client_gone);
    current_.reset();
    write_timer_.cancel();
    close_timer_.cancel();
    deadline_timer_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    --front_.deps.metrics->open_connections;
    host_->remove(shared_from_this());
  }

  void log_request() {
    if (status_ == 0 || !current_) return;
    front_.deps.metrics->count_request(status_, current_->log().team, current_->log().model);
    if (!front_.deps.access_log) return;
    const auto& r = current_->request();
    const log_fields& f = current_->log();
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - started_).count();
    char line[768];
    std::snprintf(line, sizeof line,
                  "access method=%s path=%s team=%s model=%s version=%s replica=%s status=%d prompt_tokens=%d "
                  "completion_tokens=%d ttft_ms=%.2f engine_ttft_ms=%.2f duration_ms=%.1f",
                  r.method.empty() ? "-" : r.method.c_str(), r.path.empty() ? "-" : r.path.c_str(),
                  f.team.empty() ? "-" : f.team.c_str(), f.model.empty() ? "-" : f.model.c_str(),
                  f.version.empty() ? "-" : f.version.c_str(), f.replica.empty() ? "-" : f.replica.c_str(), status_,
                  f.prompt_tokens, f.completion_tokens, f.ttft_ms, f.engine_ttft_ms, ms);
    front_.deps.access_log(line);
    status_ = 0;
  }

  beast::tcp_stream stream_;
  std::shared_ptr<connection_host> host_;
  front& front_;
  const config::server_config& limits_;
  asio::steady_timer write_timer_;
  asio::steady_timer close_timer_;
  asio::steady_timer deadline_timer_;  ///< a handler's last-resort deadline (after())
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::array<char, 1024> watch_buf_{};
  phase phase_ = phase::reading;
  std::size_t body_limit_ = 0;  ///< the request being read: its route's body limit
  bool keep_alive_ = true;
  bool writing_ = false;
  bool watching_ = false;
  bool read_after_watch_ = false;
  bool too_slow_ = false;
  std::string outbox_, inflight_;
  bool closing_ = false;  ///< drain or shutdown: no request after this one
  // the request in progress
  std::shared_ptr<exchange_impl> current_;
  std::uint64_t serial_ = 0;
  unsigned version_ = 11;
  bool head_sent_ = false;
  bool streaming_ = false;
  bool chunked_ = true;
  bool response_done_ = false;
  int status_ = 0;
  clock::time_point started_;
};

void exchange_impl::respond(int status, std::string body, std::string_view content_type, const header_list& extra) {
  if (auto c = conn_.lock()) c->respond(serial_, status, std::move(body), content_type, extra);
}
void exchange_impl::begin_stream(const header_list& extra) {
  if (auto c = conn_.lock()) c->begin_stream(serial_, extra);
}
void exchange_impl::stream(std::string_view sse) {
  if (auto c = conn_.lock()) c->stream(serial_, sse);
}
void exchange_impl::end_stream(int status, std::string_view last) {
  if (auto c = conn_.lock()) c->end_stream(serial_, status, last);
}
void exchange_impl::warm(int depth) const {
  if (depth <= 1) {
    prefetch_bytes(&log_, sizeof(log_));
    prefetch_bytes(&conn_, sizeof(conn_));
    if (!raw_conn_) return;
    prefetch_bytes(raw_conn_, 64);
    prefetch_bytes(static_cast<const char*>(raw_conn_) - 32, 32);  // its reference counts, made with it
    return;
  }
  if (auto c = conn_.lock()) c->warm();
}
bool exchange_impl::streaming() const {
  auto c = conn_.lock();
  return c && c->is_streaming(serial_);
}
void exchange_impl::after(int ms, std::function<void()> fn) {
  if (auto c = conn_.lock()) c->after(serial_, ms, std::move(fn));
}
void exchange_impl::post(std::function<void()> fn) {
  asio::post(strand_, [w = conn_, serial = serial_, fn = std::move(fn)] {
    if (auto c = w.lock(); c && c->active(serial)) fn();
  });
}

}  // namespace

std::shared_ptr<connection> make_connection(tcp::socket socket, std::shared_ptr<connection_host> host) {
  return std::make_shared<connection_impl>(std::move(socket), std::move(host));
}

}  // namespace kiln::net
