#include "engine/upstream_client.hpp"

#include <pthread.h>

#include <array>
#include <atomic>
#include <deque>
#include <future>
#include <thread>
#include <unordered_map>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange unincluded

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include "engine/http_response.hpp"

namespace kiln::engine::upstream {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr std::size_t kMaxErrorBody = 64 * 1024;
constexpr std::size_t kMaxEvent = 1 << 20;  ///< one SSE event's bytes at most

// The message of an error answer: OpenAI's {"error": {"message": ...}}, FastAPI's
// {"detail": ...} or {"message": ...}, else the body's start.
std::string error_message(int status, const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object()) {
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("message") && j["error"]["message"].is_string())
      return j["error"]["message"].get<std::string>();
    for (const char* k : {"message", "detail", "error"})
      if (j.contains(k) && j[k].is_string()) return j[k].get<std::string>();
  }
  std::string s = body.substr(0, 200);
  return "HTTP " + std::to_string(status) + (s.empty() ? "" : ": " + s);
}

struct pending {
  std::uint64_t id = 0;
  std::string path;
  std::string body;
};

struct conn {
  explicit conn(asio::io_context& io) : sock(io), timer(io) {}
  tcp::socket sock;
  asio::steady_timer timer;
  std::uint64_t gen = 0;  ///< one per use: a handler of an earlier use finds it changed
  bool closed = false;
  bool reused = false;    ///< this use is not the connection's first
  bool got_bytes = false;
  bool saw_done = false;
  pending req;
  std::string out;
  response_reader reader;
  sse_reader sse;
  std::string err_body;
  std::array<char, 16384> buf{};
};

}  // namespace

struct client::impl {
  impl(client_options o, events_fn fn) : opts(std::move(o)), on_events(std::move(fn)), guard(io.get_executor()) {}

  client_options opts;
  events_fn on_events;
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard;
  std::thread thread;
  std::vector<std::shared_ptr<conn>> idle;
  std::unordered_map<std::uint64_t, std::shared_ptr<conn>> active;
  std::deque<pending> queue;
  std::size_t open = 0;  ///< idle + active + connecting
  std::uint64_t connects = 0;
  std::atomic<std::size_t> pub_open{0}, pub_busy{0}, pub_queued{0};
  std::atomic<std::uint64_t> pub_connects{0};

  counts now() const { return {open, active.size(), queue.size(), connects}; }
  void publish() {
    pub_open = open;
    pub_busy = active.size();
    pub_queued = queue.size();
    pub_connects = connects;
  }

  void emit(std::vector<stream_event>&& ev) {
    if (!ev.empty() && on_events) on_events(std::move(ev));
  }

  void fail_one(std::uint64_t id, failure why, std::string message, int status = 0) {
    stream_event e;
    e.id = id;
    e.failed = true;
    e.why = why;
    e.http_status = status;
    e.message = std::move(message);
    std::vector<stream_event> v;
    v.push_back(std::move(e));
    emit(std::move(v));
  }

  void close(const std::shared_ptr<conn>& c) {
    if (c->closed) return;
    c->closed = true;
    ++c->gen;
    error_code ignored;
    c->timer.cancel();
    c->sock.shutdown(tcp::socket::shutdown_both, ignored);
    c->sock.close(ignored);
    --open;
  }

  // Streams waiting go to idle connections, then to new ones up to the bound.
  void pump() {
    while (!queue.empty()) {
      if (!idle.empty()) {
        auto c = idle.back();
        idle.pop_back();
        pending p = std::move(queue.front());
        queue.pop_front();
        send(c, std::move(p), true);
      } else if (open < static_cast<std::size_t>(opts.max_connections)) {
        pending p = std::move(queue.front());
        queue.pop_front();
        connect(std::move(p));
      } else {
        break;
      }
    }
    publish();
  }

  void connect(pending p) {
    auto c = std::make_shared<conn>(io);
    ++open;
    ++connects;
    c->req = std::move(p);
    active[c->req.id] = c;
    const std::uint64_t gen = c->gen;
    c->timer.expires_after(std::chrono::milliseconds(opts.connect_timeout_ms));
    c->timer.async_wait([self = this, c, gen](error_code ec) {
      if (ec || c->gen != gen || c->closed) return;
      self->drop(c, failure::refused, "no connection to the upstream within " + std::to_string(self->opts.connect_timeout_ms) + " ms");
    });
    auto resolver = std::make_shared<tcp::resolver>(io);
    resolver->async_resolve(
        opts.where.host, std::to_string(opts.where.port),
        [self = this, c, gen, resolver](error_code ec, tcp::resolver::results_type found) {
          if (c->gen != gen || c->closed) return;
          if (ec) return self->drop(c, failure::refused, "cannot resolve " + self->opts.where.host + ": " + ec.message());
          asio::async_connect(c->sock, found, [self, c, gen](error_code ec2, const tcp::endpoint&) {
            if (c->gen != gen || c->closed) return;
            if (ec2)
              return self->drop(c, failure::refused,
                                "cannot connect to " + self->opts.where.host + ":" + std::to_string(self->opts.where.port) +
                                    ": " + ec2.message());
            error_code ignored;
            c->sock.set_option(tcp::no_delay(true), ignored);
            c->timer.cancel();
            self->send(c, std::move(c->req), false);
          });
        });
  }

  // A stream's connection fails: the stream hears why (unless cancelled), the connection closes.
  void drop(const std::shared_ptr<conn>& c, failure why, std::string message, int status = 0) {
    const std::uint64_t id = c->req.id;
    const bool ours = active.count(id) && active[id] == c;
    if (ours) active.erase(id);
    const bool quiet = c->saw_done;
    close(c);
    if (ours && !quiet) fail_one(id, why, std::move(message), status);
    pump();
  }

  void send(const std::shared_ptr<conn>& c, pending p, bool reused) {
    ++c->gen;
    c->req = std::move(p);
    c->reused = reused;
    c->got_bytes = false;
    c->saw_done = false;
    c->reader = response_reader();
    c->sse = sse_reader();
    c->err_body.clear();
    active[c->req.id] = c;
    const auto& w = opts.where;
    c->out = "POST " + w.base + c->req.path + " HTTP/1.1\r\nHost: " + w.host + ":" + std::to_string(w.port) +
             "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nUser-Agent: kiln\r\n";
    if (!opts.api_key.empty()) c->out += "Authorization: Bearer " + opts.api_key + "\r\n";
    c->out += "Content-Length: " + std::to_string(c->req.body.size()) + "\r\n\r\n";
    c->out += c->req.body;
    arm_stall(c);
    const std::uint64_t gen = c->gen;
    asio::async_write(c->sock, asio::buffer(c->out), [self = this, c, gen](error_code ec, std::size_t) {
      if (c->gen != gen || c->closed) return;
      if (ec) return self->broken(c, "sending to the upstream failed: " + ec.message());
      self->read(c);
    });
    publish();
  }

  void arm_stall(const std::shared_ptr<conn>& c) {
    const std::uint64_t gen = c->gen;
    c->timer.expires_after(std::chrono::milliseconds(opts.stall_timeout_ms));
    c->timer.async_wait([self = this, c, gen](error_code ec) {
      if (ec || c->gen != gen || c->closed) return;
      self->drop(c, failure::stalled, "the upstream sent nothing for " + std::to_string(self->opts.stall_timeout_ms) + " ms");
    });
  }

  // The connection broke. A kept-alive connection that broke before any byte of its answer was
  // closed by the upstream while idle: the stream goes again on a fresh one (nothing ran).
  void broken(const std::shared_ptr<conn>& c, std::string why) {
    if (c->reused && !c->got_bytes) {
      pending p = std::move(c->req);
      active.erase(p.id);
      close(c);
      connect(std::move(p));
      publish();
      return;
    }
    drop(c, failure::broken, std::move(why));
  }

  void read(const std::shared_ptr<conn>& c) {
    const std::uint64_t gen = c->gen;
    c->sock.async_read_some(asio::buffer(c->buf), [self = this, c, gen](error_code ec, std::size_t n) {
      if (c->gen != gen || c->closed) return;
      if (ec) {
        if (ec == asio::error::eof && c->reader.closed()) return self->answered(c);
        return self->broken(c, ec == asio::error::eof ? "the upstream closed the connection mid-answer"
                                                      : "reading from the upstream failed: " + ec.message());
      }
      c->got_bytes = true;
      self->arm_stall(c);
      std::string body;
      if (!c->reader.feed(std::string_view(c->buf.data(), n), body))
        return self->drop(c, failure::broken, "a malformed answer from the upstream: " + c->reader.error());
      if (c->reader.head_done() && c->reader.status() == 200) {
        std::vector<std::string> datas;
        c->sse.feed(body, datas);
        if (c->sse.pending() > kMaxEvent)
          return self->drop(c, failure::broken, "an event from the upstream over 1 MiB without its end");
        std::vector<stream_event> events;
        for (auto& d : datas) {
          auto parsed = parse_chunk(d);
          if (!parsed || c->saw_done) continue;  // not a chunk (nor an error): nothing to pass on
          stream_event e;
          e.id = c->req.id;
          e.data = std::move(*parsed);
          if (e.data.done) c->saw_done = true;
          events.push_back(std::move(e));
        }
        self->emit(std::move(events));
      } else if (c->err_body.size() < kMaxErrorBody) {
        c->err_body += body;
      }
      if (c->reader.done()) return self->answered(c);
      self->read(c);
    });
  }

  // The whole answer is in: an error status or a stream cut short fails; the connection goes
  // back to the idle ones when it can carry another request.
  void answered(const std::shared_ptr<conn>& c) {
    const int status = c->reader.status();
    if (status != 200) return drop(c, failure::status, error_message(status, c->err_body), status);
    if (!c->saw_done) return drop(c, failure::broken, "the upstream ended its stream without [DONE]");
    active.erase(c->req.id);
    ++c->gen;
    c->timer.cancel();
    if (c->reader.reusable()) idle.push_back(c);
    else close(c);
    pump();
  }

  void cancel(std::uint64_t id) {
    for (auto it = queue.begin(); it != queue.end(); ++it)
      if (it->id == id) {
        queue.erase(it);
        publish();
        return;
      }
    auto it = active.find(id);
    if (it == active.end()) return;
    auto c = it->second;
    active.erase(it);
    close(c);  // an answer cut off mid-way cannot be read to its end cheaply: the socket goes
    pump();
  }

  void shutdown() {
    for (auto& c : idle) close(c);
    for (auto& [id, c] : active) close(c);
    idle.clear();
    active.clear();
    queue.clear();
    guard.reset();
    io.stop();
  }
};

namespace {

// One GET on a connection of its own (Connection: close), the whole answer read.
struct fetch_state {
  fetch_state(asio::io_context& io) : sock(io), timer(io), resolver(io) {}
  tcp::socket sock;
  asio::steady_timer timer;
  tcp::resolver resolver;
  std::string out;
  std::string body;
  response_reader reader;
  std::array<char, 8192> buf{};
  bool finished = false;
  std::function<void(int, std::string, std::string)> done;  // status, body, error

  void finish(int status, std::string error) {
    if (finished) return;
    finished = true;
    error_code ignored;
    timer.cancel();
    sock.close(ignored);
    resolver.cancel();
    done(status, std::move(body), std::move(error));
  }
};

void read_fetch(const std::shared_ptr<fetch_state>& f) {
  f->sock.async_read_some(asio::buffer(f->buf), [f](error_code ec, std::size_t n) {
    if (f->finished) return;
    if (ec) {
      if (ec == asio::error::eof && f->reader.closed()) return f->finish(f->reader.status(), "");
      return f->finish(0, f->reader.error().empty() ? ec.message() : f->reader.error());
    }
    if (!f->reader.feed(std::string_view(f->buf.data(), n), f->body)) return f->finish(0, f->reader.error());
    if (f->body.size() > (8u << 20)) return f->finish(0, "an answer over 8 MiB");
    if (f->reader.done()) return f->finish(f->reader.status(), "");
    read_fetch(f);
  });
}

void fetch(asio::io_context& io, const client_options& o, const std::string& path, int timeout_ms,
           std::function<void(int, std::string, std::string)> done) {
  auto f = std::make_shared<fetch_state>(io);
  f->done = std::move(done);
  f->out = "GET " + path + " HTTP/1.1\r\nHost: " + o.where.host + ":" + std::to_string(o.where.port) +
           "\r\nUser-Agent: kiln\r\nConnection: close\r\n";
  if (!o.api_key.empty()) f->out += "Authorization: Bearer " + o.api_key + "\r\n";
  f->out += "\r\n";
  f->timer.expires_after(std::chrono::milliseconds(timeout_ms));
  f->timer.async_wait([f, timeout_ms](error_code ec) {
    if (!ec) f->finish(0, "no answer within " + std::to_string(timeout_ms) + " ms");
  });
  f->resolver.async_resolve(o.where.host, std::to_string(o.where.port), [f](error_code ec, tcp::resolver::results_type found) {
    if (f->finished) return;
    if (ec) return f->finish(0, ec.message());
    asio::async_connect(f->sock, found, [f](error_code ec2, const tcp::endpoint&) {
      if (f->finished) return;
      if (ec2) return f->finish(0, ec2.message());
      asio::async_write(f->sock, asio::buffer(f->out), [f](error_code ec3, std::size_t) {
        if (f->finished) return;
        if (ec3) return f->finish(0, ec3.message());
        read_fetch(f);
      });
    });
  });
}

}  // namespace

client::client(client_options opts, events_fn on_events)
    : impl_(std::make_unique<impl>(std::move(opts), std::move(on_events))) {
  impl_->thread = std::thread([i = impl_.get()] {
    ::pthread_setname_np(::pthread_self(), "kiln.upstream");  // as its CPU shows per thread
    i->io.run();
  });
}

client::~client() {
  asio::post(impl_->io, [i = impl_.get()] { i->shutdown(); });
  impl_->thread.join();
  impl_->on_events = nullptr;
}

void client::start(std::uint64_t id, std::string path, std::string json_body) {
  asio::post(impl_->io, [i = impl_.get(), p = pending{id, std::move(path), std::move(json_body)}]() mutable {
    i->queue.push_back(std::move(p));
    i->pump();
  });
}

void client::cancel(std::uint64_t id) {
  asio::post(impl_->io, [i = impl_.get(), id] { i->cancel(id); });
}

void client::poll(std::function<void(health)> done) {
  asio::post(impl_->io, [i = impl_.get(), done = std::move(done)]() mutable {
    // vLLM and SGLang answer /health, kiln /healthz: the second is asked where the first is not found.
    auto metrics = [i](health h, std::function<void(health)> done) {
      fetch(i->io, i->opts, "/metrics", i->opts.poll_timeout_ms, [h, done = std::move(done)](int st, std::string body, std::string) mutable {
        if (st == 200) h.load = parse_load(body);
        done(std::move(h));
      });
    };
    auto judge = [](const std::string& path, int status, const std::string& error) {
      health h;
      h.ok = status >= 200 && status <= 299;
      if (!h.ok) h.error = error.empty() ? path + " answered " + std::to_string(status) : path + ": " + error;
      return h;
    };
    fetch(i->io, i->opts, "/health", i->opts.poll_timeout_ms,
          [i, done = std::move(done), metrics, judge](int status, std::string, std::string error) mutable {
            if (status == 404) {
              return fetch(i->io, i->opts, "/healthz", i->opts.poll_timeout_ms,
                           [done = std::move(done), metrics, judge](int st, std::string, std::string err) mutable {
                             health h = judge("/healthz", st, err);
                             if (!h.ok) return done(std::move(h));
                             metrics(std::move(h), std::move(done));
                           });
            }
            health h = judge("/health", status, error);
            if (!h.ok) return done(std::move(h));
            metrics(std::move(h), std::move(done));
          });
  });
}

client::counts client::snapshot() const {
  std::promise<counts> p;
  auto f = p.get_future();
  asio::post(impl_->io, [i = impl_.get(), &p] { p.set_value(i->now()); });
  return f.get();
}

client::counts client::last_counts() const {
  return {impl_->pub_open.load(), impl_->pub_busy.load(), impl_->pub_queued.load(), impl_->pub_connects.load()};
}

}  // namespace kiln::engine::upstream
