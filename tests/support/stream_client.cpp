#include "tests/support/stream_client.hpp"

#include <array>
#include <utility>
#include <chrono>
#include <memory>

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

namespace kiln::test {

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

std::string dechunk(const std::string& body) {
  std::string out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    const auto eol = body.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const std::size_t n = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    out += body.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

void parse_event(const std::string& payload, stream_result& r) {
  if (r.done) {
    ++r.after_done;
    return;
  }
  if (payload == "[DONE]") {
    r.done = true;
    return;
  }
  const json e = json::parse(payload, nullptr, false);
  if (e.is_discarded()) return;
  if (e.contains("error")) {
    ++r.terminals;
    r.error_mid_stream = true;
    r.error_code = e["error"].value("code", "");
    return;
  }
  if (e.contains("usage") && e["usage"].is_object()) {
    r.prompt_tokens = e["usage"].value("prompt_tokens", -1);
    r.completion_tokens = e["usage"].value("completion_tokens", -1);
    r.replica_id = e.value("replica_id", "");
    r.region = e.value("region", "");
    if (e.contains("kiln")) r.attempts = e["kiln"].value("attempts", 0);
  }
  if (!e.contains("choices") || e["choices"].empty()) return;
  const json& c = e["choices"][0];
  if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
    r.content += c["delta"]["content"].get<std::string>();
  if (c.contains("finish_reason") && !c["finish_reason"].is_null()) {
    ++r.terminals;
    r.finished = true;
  }
}

void parse(const std::string& raw, stream_result& r) {
  if (const auto ra = raw.find("\r\nRetry-After: "); ra != std::string::npos && ra < raw.find("\r\n\r\n"))
    r.retry_after = std::atoi(raw.c_str() + ra + 15);
  const auto head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) return;
  r.status = std::atoi(raw.c_str() + 9);
  std::string head = raw.substr(0, head_end);
  for (auto& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::string body = raw.substr(head_end + 4);
  if (head.find("transfer-encoding: chunked") != std::string::npos) body = dechunk(body);
  if (r.status != 200) {
    ++r.terminals;
    const json e = json::parse(body, nullptr, false);
    if (!e.is_discarded() && e.contains("error")) r.error_code = e["error"].value("code", "");
    return;
  }
  std::size_t pos = 0;
  while (pos < body.size()) {
    const auto end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.rfind("data: ", 0) == 0) parse_event(event.substr(6), r);
  }
}

class call : public std::enable_shared_from_this<call> {
 public:
  call(asio::io_context& ioc, int port, std::string request, stream_result& out)
      : sock_(ioc), timer_(ioc), port_(port), request_(std::move(request)), out_(out) {}
  void start_after(int ms) {
    timer_.expires_after(std::chrono::milliseconds(ms));
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->start();
    });
  }
  void start() {
    sent_ = std::chrono::steady_clock::now();
    sock_.async_connect(tcp::endpoint(asio::ip::address_v4::loopback(), static_cast<unsigned short>(port_)),
                        [self = shared_from_this()](boost::system::error_code ec) {
                          if (ec) return;
                          asio::async_write(self->sock_, asio::buffer(self->request_),
                                            [self](boost::system::error_code ec, std::size_t) {
                                              if (!ec) self->read();
                                            });
                        });
  }

 private:
  void read() {
    sock_.async_read_some(asio::buffer(buf_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
      self->raw_.append(self->buf_.data(), n);
      // A content delta (the role chunk's delta starts with "role"); searched until found.
      if (self->out_.ttft_ms < 0 && self->raw_.find("\"delta\":{\"content\":\"") != std::string::npos)
        self->out_.ttft_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - self->sent_).count();
      if (ec) return parse(self->raw_, self->out_);
      self->read();
    });
  }
  tcp::socket sock_;
  asio::steady_timer timer_;
  std::chrono::steady_clock::time_point sent_;
  int port_;
  std::string request_;
  stream_result& out_;
  std::array<char, 16384> buf_{};
  std::string raw_;
};

}  // namespace

std::vector<stream_result> run_streams(int port, const std::vector<stream_spec>& specs, int timeout_s) {
  std::vector<stream_result> results(specs.size());
  asio::io_context ioc;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
    for (const auto& h : specs[i].headers) req += h + "\r\n";
    req += "Content-Length: " + std::to_string(specs[i].body.size()) + "\r\nConnection: close\r\n\r\n" + specs[i].body;
    std::make_shared<call>(ioc, port, std::move(req), results[i])->start_after(specs[i].start_ms);
  }
  ioc.run_for(std::chrono::seconds(timeout_s));
  return results;
}

}  // namespace kiln::test
