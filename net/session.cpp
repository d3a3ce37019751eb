#include "net/session.hpp"

#include <chrono>
#include <cstring>
#include <optional>

#include <utility>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "actors/stream_sink.hpp"
#include "engine/types.hpp"
#include "net/openai.hpp"
#include "net/sse.hpp"

namespace kiln::net {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using clock = std::chrono::steady_clock;

constexpr std::size_t kMaxOutbox = 8 << 20;      // a client this far behind is dropped
constexpr std::size_t kMaxPipelined = 64 << 10;  // bytes a client may send ahead mid-response
constexpr auto kLinger = std::chrono::milliseconds(500);

std::string bearer_key(const http::request<http::string_body>& req) {
  auto it = req.find(http::field::authorization);
  if (it == req.end()) return {};
  beast::string_view v = it->value();
  constexpr beast::string_view prefix = "Bearer ";
  if (v.size() < prefix.size() || !beast::iequals(v.substr(0, prefix.size()), prefix)) return {};
  v.remove_prefix(prefix.size());
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  return std::string(v);
}

std::string header(const http::request<http::string_body>& req, std::string_view name) {
  auto it = req.find(beast::string_view(name.data(), name.size()));
  return it == req.end() ? std::string() : std::string(it->value());
}

class session_impl final : public session, public std::enable_shared_from_this<session_impl> {
 public:
  session_impl(tcp::socket socket, std::shared_ptr<session_host> host)
      : stream_(std::move(socket)), host_(std::move(host)), deps_(host_->deps()) {}

  void start() override {
    ++deps_.metrics->open_connections;
    host_->add(shared_from_this());
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

  void drain() override {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      self->keep_alive_ = false;
      if (self->phase_ == phase::reading) self->close();
    });
  }

  void force_end() override {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      self->keep_alive_ = false;
      if (self->phase_ == phase::waiting || self->phase_ == phase::streaming)
        self->fail_request({503, "server_error", "kiln is shutting down; retry on another node", "", "shutting_down"});
      else if (self->phase_ != phase::closed)
        self->close();
    });
  }

  // --- events from the sink actor, already on this connection's strand ---
  void on_tokens(actors::stream_tokens ev) {
    if (!active(ev.id)) return;
    note_tokens(ev.tokens);
    if (streaming_) {
      send_head();
      append_sse_event(sse_, chunk_content_json(meta_, ev.text));
      flush_sse();
    } else {
      text_ += ev.text;
    }
  }

  void on_end(actors::stream_end ev) {
    if (!active(ev.id)) return;
    note_tokens(ev.tokens);
    team_ = ev.team;
    usage_ = {ev.prompt_tokens, ev.completion_tokens, ev.cached_tokens, ev.model_version,
              ev.region, ev.replica_id, ev.engine_ttft_ms};
    if (streaming_) {
      send_head();
      if (!ev.text.empty()) append_sse_event(sse_, chunk_content_json(meta_, ev.text));
      append_sse_event(sse_, chunk_finish_json(meta_, ev.finish_reason));
      append_sse_event(sse_, chunk_usage_json(meta_, usage_));
      append_sse_event(sse_, kSseDone);
      end_stream(200);
    } else {
      text_ += ev.text;
      respond(200, completion_json(meta_, text_, ev.finish_reason, usage_));
    }
  }

  void on_error(actors::stream_error ev) {
    if (!active(ev.id)) return;
    team_ = ev.team;
    fail_request({ev.status, ev.type, ev.message, ev.param, ev.code});
  }

 private:
  enum class phase { reading, waiting, streaming, responding, closed };

  // --- reading a request ---
  void do_read() {
    if (phase_ == phase::closed) return;
    if (host_->draining()) return close();
    phase_ = phase::reading;
    reset_request();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(deps_.cfg->server.max_header_bytes));
    parser_->body_limit(deps_.cfg->server.max_body_bytes);
    stream_.expires_after(std::chrono::milliseconds(deps_.cfg->server.request_timeout_ms));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return read_failed(ec);
    if (parser_->is_done()) return on_read({});
    const auto& req = parser_->get();
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
      return respond(431, error_json({431, "invalid_request_error", "Request header fields are too large.", "", "headers_too_large"}));
    }
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      return respond(413, error_json({413, "invalid_request_error",
                                      "Request body is larger than " + std::to_string(deps_.cfg->server.max_body_bytes) + " bytes.",
                                      "", "body_too_large"}));
    }
    const bool partial = parser_ && parser_->got_some();
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == beast::error::timeout || !partial || ec == http::error::partial_message)
      return close();
    keep_alive_ = false;
    respond(400, error_json({400, "invalid_request_error", "Malformed HTTP request: " + ec.message(), "", "bad_request"}));
  }

  void on_read(beast::error_code ec) {
    if (ec) return read_failed(ec);
    stream_.expires_never();
    started_ = clock::now();
    auto req = parser_->release();
    parser_.reset();
    keep_alive_ = req.keep_alive() && !host_->draining();
    method_ = std::string(req.method_string());
    std::string_view target(req.target().data(), req.target().size());
    path_ = std::string(target.substr(0, target.find('?')));
    route(req);
  }

  void route(const http::request<http::string_body>& req) {
    const auto m = req.method();
    auto only = [&](http::verb allowed, const char* name) {
      if (m == allowed) return true;
      allow_ = name;
      respond(405, error_json({405, "invalid_request_error",
                               "Method " + method_ + " is not allowed on " + path_ + "; use " + name + ".", "", "method_not_allowed"}));
      return false;
    };
    if (path_ == "/v1/chat/completions") {
      if (only(http::verb::post, "POST")) handle_chat(req);
    } else if (path_ == "/v1/models") {
      if (!only(http::verb::get, "GET")) return;
      if (!deps_.cfg->team_by_key(bearer_key(req)))
        return respond(401, error_json({401, "invalid_request_error", "Incorrect or missing API key.", "", "invalid_api_key"}));
      respond(200, models_json(*deps_.cfg, unix_now()));
    } else if (path_ == "/healthz") {
      if (!only(http::verb::get, "GET")) return;
      if (host_->draining()) respond(503, R"({"status":"draining"})");
      else respond(200, R"({"status":"ok","region":)" + json_quote(deps_.cfg->region) + "}");
    } else if (path_ == "/metrics") {
      if (only(http::verb::get, "GET"))
        respond(200, render_metrics(*deps_.metrics, *deps_.gauges), "text/plain; version=0.0.4");
    } else {
      respond(404, error_json({404, "invalid_request_error", "Unknown request URL: " + method_ + " " + path_ + ".", "", "unknown_url"}));
    }
  }

  void handle_chat(const http::request<http::string_body>& req) {
    auto parsed = parse_chat_request(req.body());
    if (auto* err = std::get_if<api_error>(&parsed)) return respond(err->status, error_json(*err));
    auto& p = std::get<chat_params>(parsed);
    actors::chat_job job;
    const std::string prio = header(req, "x-priority");
    if (!prio.empty()) {
      auto tier = engine::parse_priority(prio);
      if (!tier)
        return respond(400, error_json({400, "invalid_request_error",
                                        "x-priority must be interactive, standard or batch.", "x-priority", ""}));
      job.priority = static_cast<std::uint8_t>(*tier);
    }
    job.id = host_->next_request_id();
    job.api_key = bearer_key(req);
    job.model = p.model;
    job.conversation_id = header(req, "x-conversation-id");
    for (auto& m : p.messages) job.messages.push_back({std::move(m.role), std::move(m.content)});
    job.max_tokens = p.max_tokens;
    job.temperature = p.temperature;
    job.top_p = p.top_p;
    job.top_k = p.top_k;
    job.has_seed = p.seed.has_value();
    job.seed = p.seed.value_or(0);
    job.stop = std::move(p.stop);
    if (!sink_) sink_ = actors::spawn_stream_sink(*deps_.sys, make_target());
    job.sink = sink_;
    req_id_ = job.id;
    streaming_ = p.stream;
    model_ = p.model;
    meta_ = {"chatcmpl-" + std::to_string(job.id), unix_now(), p.model};
    phase_ = phase::waiting;
    actors::submit(deps_.admission, std::move(job));
    watch();
  }

  // --- writing ---
  void respond(int status, std::string body, const char* content_type = "application/json") {
    std::string head = "HTTP/1.1 " + std::to_string(status) + " " +
                       std::string(http::obsolete_reason(static_cast<http::status>(status))) +
                       "\r\nServer: kiln\r\nContent-Type: " + content_type +
                       "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    if (!allow_.empty()) head += "Allow: " + allow_ + "\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    outbox_ += head;
    outbox_ += body;
    status_ = status;
    phase_ = phase::responding;
    response_done_ = true;
    flush();
  }

  void send_head() {
    if (head_sent_) return;
    head_sent_ = true;
    phase_ = phase::streaming;
    ++deps_.metrics->open_streams;
    outbox_ += "HTTP/1.1 200 OK\r\nServer: kiln\r\nContent-Type: text/event-stream\r\n"
               "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n";
    outbox_ += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    append_sse_event(sse_, chunk_role_json(meta_));
  }

  void flush_sse() {
    append_http_chunk(outbox_, sse_);
    sse_.clear();
    flush();
  }

  void end_stream(int status) {
    phase_ = phase::responding;
    flush_sse();
    outbox_ += kLastChunk;
    status_ = status;
    response_done_ = true;
    --deps_.metrics->open_streams;
    flush();
  }

  void fail_request(const api_error& e) {
    if (!head_sent_) return respond(e.status, error_json(e));
    append_sse_event(sse_, error_json(e));
    append_sse_event(sse_, kSseDone);
    end_stream(e.status);
  }

  void flush() {
    if (writing_ || phase_ == phase::closed) return;
    if (outbox_.empty()) {
      if (response_done_) complete_request();
      return;
    }
    if (outbox_.size() > kMaxOutbox) return abort_request();
    writing_ = true;
    inflight_.swap(outbox_);
    outbox_.clear();
    asio::async_write(stream_.socket(), asio::buffer(inflight_),
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->writing_ = false;
                        if (ec) return self->abort_request();
                        self->flush();
                      });
  }

  void complete_request() {
    log_request();
    response_done_ = false;
    allow_.clear();
    if (!keep_alive_ || host_->draining()) return linger_close();
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
    const bool in_request = phase_ == phase::waiting || phase_ == phase::streaming;
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

  void abort_request() {
    if (phase_ == phase::waiting || phase_ == phase::streaming) {
      if (head_sent_) --deps_.metrics->open_streams;
      status_ = 499;  // client closed the request
      log_request();
    }
    close();
  }

  // --- closing ---
  void linger_close() {
    // Half-close, then drain what the client still sends so it reads our answer before a reset.
    phase_ = phase::responding;
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
    actors::stop_sink(sink_);  // engines holding our requests cancel them
    sink_ = nullptr;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    --deps_.metrics->open_connections;
    host_->remove(shared_from_this());
  }

  // --- per-request bookkeeping ---
  bool active(std::uint64_t id) const {
    return id == req_id_ && (phase_ == phase::waiting || phase_ == phase::streaming);
  }

  void note_tokens(int n) {
    if (n <= 0) return;
    if (completion_tokens_ == 0) first_token_ = clock::now();
    completion_tokens_ += n;
    deps_.metrics->tokens_streamed += static_cast<std::uint64_t>(n);
  }

  void reset_request() {
    req_id_ = 0;
    streaming_ = false;
    head_sent_ = false;
    text_.clear();
    team_.clear();
    model_.clear();
    usage_ = {};
    completion_tokens_ = 0;
    status_ = 0;
  }

  void log_request() {
    if (status_ == 0) return;
    deps_.metrics->count_request(status_);
    if (!deps_.access_log) return;
    auto ms = [](clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
    const auto now = clock::now();
    char line[512];
    std::snprintf(line, sizeof line,
                  "access method=%s path=%s team=%s model=%s version=%s replica=%s status=%d prompt_tokens=%d "
                  "completion_tokens=%d ttft_ms=%.1f duration_ms=%.1f",
                  method_.c_str(), path_.c_str(), team_.empty() ? "-" : team_.c_str(),
                  model_.empty() ? "-" : model_.c_str(),
                  usage_.model_version.empty() ? "-" : usage_.model_version.c_str(),
                  usage_.replica_id.empty() ? "-" : usage_.replica_id.c_str(), status_, usage_.prompt_tokens,
                  completion_tokens_, completion_tokens_ > 0 ? ms(first_token_ - started_) : -1.0,
                  ms(now - started_));
    deps_.access_log(line);
    status_ = 0;
  }

  static std::int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  }

  std::shared_ptr<actors::stream_target> make_target();

  beast::tcp_stream stream_;
  std::shared_ptr<session_host> host_;
  const server_deps& deps_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::array<char, 1024> watch_buf_{};
  caf::actor sink_;
  phase phase_ = phase::reading;
  bool keep_alive_ = true;
  bool writing_ = false;
  bool watching_ = false;
  bool read_after_watch_ = false;
  bool response_done_ = false;
  std::string outbox_, inflight_, sse_, allow_;
  // the request in progress
  std::uint64_t req_id_ = 0;
  bool streaming_ = false;  ///< SSE (stream: true) rather than one JSON answer
  bool head_sent_ = false;
  std::string method_, path_, model_, team_, text_;
  completion_meta meta_;
  completion_usage usage_;
  int completion_tokens_ = 0;
  int status_ = 0;
  clock::time_point started_, first_token_;
};

// Hands each event to the session on its strand; a session already gone drops it.
class strand_target final : public actors::stream_target {
 public:
  strand_target(std::weak_ptr<session_impl> s, asio::any_io_executor ex) : s_(std::move(s)), ex_(std::move(ex)) {}
  void on_tokens(actors::stream_tokens ev) override { post(&session_impl::on_tokens, std::move(ev)); }
  void on_end(actors::stream_end ev) override { post(&session_impl::on_end, std::move(ev)); }
  void on_error(actors::stream_error ev) override { post(&session_impl::on_error, std::move(ev)); }

 private:
  template <class Ev>
  void post(void (session_impl::*fn)(Ev), Ev ev) {
    asio::post(ex_, [w = s_, fn, ev = std::move(ev)]() mutable {
      if (auto s = w.lock()) ((*s).*fn)(std::move(ev));
    });
  }
  std::weak_ptr<session_impl> s_;
  asio::any_io_executor ex_;
};

std::shared_ptr<actors::stream_target> session_impl::make_target() {
  return std::make_shared<strand_target>(weak_from_this(), stream_.get_executor());
}

}  // namespace

std::shared_ptr<session> make_session(tcp::socket socket, std::shared_ptr<session_host> host) {
  return std::make_shared<session_impl>(std::move(socket), std::move(host));
}

}  // namespace kiln::net
