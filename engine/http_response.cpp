#include "engine/http_response.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace kiln::engine::upstream {

namespace {

constexpr std::size_t kMaxHead = 64 * 1024;
constexpr std::size_t kMaxLine = 4096;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Whether a comma-separated header value lists `token` (compared without case).
bool lists(std::string_view value, std::string_view token) {
  const std::string v = lower(value);
  std::size_t pos = 0;
  while (pos <= v.size()) {
    const auto comma = v.find(',', pos);
    const std::string_view item = trim(std::string_view(v).substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (item == token) return true;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return false;
}

}  // namespace

bool response_reader::fail(std::string why) {
  error_ = std::move(why);
  state_ = state::failed;
  return false;
}

bool response_reader::parse_head(std::string_view head) {
  const auto eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ')
    return fail("not an HTTP/1.x status line: " + std::string(line.substr(0, 80)));
  const std::string_view code = line.substr(9, 3);
  if (!std::all_of(code.begin(), code.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return fail("a malformed status code: " + std::string(line.substr(0, 80)));
  status_ = std::atoi(std::string(code).c_str());
  keep_alive_ = line[7] == '1';  // HTTP/1.1 keeps the connection unless it says close
  bool chunked = false;
  bool has_length = false;
  std::size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    auto end = head.find("\r\n", pos);
    if (end == std::string_view::npos) end = head.size();
    const std::string_view h = head.substr(pos, end - pos);
    pos = end + 2;
    const auto colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) return fail("a malformed header line");
    const std::string name = lower(h.substr(0, colon));
    const std::string_view value = trim(h.substr(colon + 1));
    if (name == "content-length") {
      const std::string digits(value);
      if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
        return fail("a malformed Content-Length: " + digits);
      const std::int64_t n = std::strtoll(digits.c_str(), nullptr, 10);
      if (has_length && n != length_) return fail("two different Content-Length headers");
      length_ = n;
      has_length = true;
    } else if (name == "transfer-encoding") {
      chunked = lists(value, "chunked");
      if (!chunked) return fail("a transfer coding kiln does not read: " + std::string(value));
    } else if (name == "connection") {
      if (lists(value, "close")) keep_alive_ = false;
      else if (lists(value, "keep-alive")) keep_alive_ = true;
    }
  }
  if (status_ < 200 && status_ != 101) {  // an interim answer (100 Continue): the real one follows
    status_ = 0;
    length_ = -1;
    keep_alive_ = true;
    return true;
  }
  if (status_ == 204 || status_ == 304) state_ = state::done;
  else if (chunked) state_ = state::chunk_size;
  else if (has_length) {
    left_ = length_;
    state_ = left_ == 0 ? state::done : state::body_length;
  } else {
    until_close_ = true;
    state_ = state::body_close;
  }
  return true;
}

bool response_reader::feed(std::string_view bytes, std::string& body) {
  if (state_ == state::failed) return false;
  while (!bytes.empty() || (!buf_.empty() && state_ != state::head)) {
    switch (state_) {
      case state::head: {
        buf_.append(bytes);
        bytes = {};
        const auto end = buf_.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (buf_.size() > kMaxHead) return fail("a response head over 64 KiB");
          return true;
        }
        const std::string head = buf_.substr(0, end);
        std::string rest = buf_.substr(end + 4);
        buf_.clear();
        if (!parse_head(head)) return false;
        if (state_ == state::done && !rest.empty()) return fail("bytes after a response without a body");
        bytes = {};
        buf_ = std::move(rest);  // consumed below in the new state
        if (state_ == state::head && buf_.empty()) return true;
        if (state_ == state::head) {  // an interim answer: read the next head from what is left
          std::string again = std::move(buf_);
          buf_.clear();
          return feed(again, body);
        }
        break;
      }
      case state::body_length:
      case state::chunk_data: {
        std::string_view from = buf_.empty() ? bytes : std::string_view(buf_);
        const auto n = static_cast<std::size_t>(std::min<std::int64_t>(left_, static_cast<std::int64_t>(from.size())));
        body.append(from.substr(0, n));
        left_ -= static_cast<std::int64_t>(n);
        if (buf_.empty()) bytes.remove_prefix(n);
        else buf_.erase(0, n);
        if (left_ == 0) state_ = state_ == state::body_length ? state::done : state::chunk_crlf;
        break;
      }
      case state::body_close:
        body.append(buf_);
        body.append(bytes);
        buf_.clear();
        bytes = {};
        break;
      case state::chunk_size:
      case state::chunk_crlf:
      case state::trailers: {
        buf_.append(bytes);
        bytes = {};
        const auto eol = buf_.find("\r\n");
        if (eol == std::string::npos) {
          if (buf_.size() > kMaxLine) return fail("a chunk line over 4 KiB");
          return true;
        }
        const std::string line = buf_.substr(0, eol);
        buf_.erase(0, eol + 2);
        if (state_ == state::chunk_crlf) {
          if (!line.empty()) return fail("chunk data longer than its size");
          state_ = state::chunk_size;
        } else if (state_ == state::trailers) {
          if (line.empty()) state_ = state::done;  // trailer fields themselves are not used
        } else {
          const std::string size = std::string(trim(line.substr(0, line.find(';'))));
          if (size.empty() || size.size() > 15 || size.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            return fail("a malformed chunk size: " + size.substr(0, 20));
          left_ = std::strtoll(size.c_str(), nullptr, 16);
          state_ = left_ == 0 ? state::trailers : state::chunk_data;
        }
        break;
      }
      case state::done:
        if (!bytes.empty() || !buf_.empty()) return fail("bytes after the end of the response");
        return true;
      case state::failed: return false;
    }
  }
  return true;
}

bool response_reader::closed() {
  if (state_ == state::body_close) {
    state_ = state::done;
    return true;
  }
  if (state_ == state::done) return true;
  if (state_ != state::failed) fail(state_ == state::head ? "the connection closed before a response"
                                                          : "the connection closed in the middle of the response");
  return false;
}

}  // namespace kiln::engine::upstream
