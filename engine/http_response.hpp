#pragma once
// An HTTP/1.1 response read incrementally, however its bytes arrive: the status line, the
// headers kiln needs (Content-Length, Transfer-Encoding: chunked, Connection), and the body
// handed out as it is decoded, with its end known (length reached, last chunk, or the
// connection's close). Whether the connection can carry another request afterwards follows
// from the version, Connection and the framing. Pure parsing: no I/O, no CAF.
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::engine::upstream {

class response_reader {
 public:
  /// Reads `bytes`, appending decoded body bytes to `body`. False when the response is
  /// malformed (error() says why); it is then not read further.
  bool feed(std::string_view bytes, std::string& body);
  /// The connection closed: a response framed by the close ends here. False when the response
  /// was cut short.
  bool closed();

  bool head_done() const { return state_ > state::head; }
  bool done() const { return state_ == state::done; }
  int status() const { return status_; }
  /// After done(): whether the connection may carry another request.
  bool reusable() const { return done() && keep_alive_ && !until_close_; }
  const std::string& error() const { return error_; }
  std::int64_t content_length() const { return length_; }

 private:
  enum class state { head, body_length, chunk_size, chunk_data, chunk_crlf, trailers, body_close, done, failed };
  bool parse_head(std::string_view head);
  bool fail(std::string why);

  state state_ = state::head;
  std::string buf_;  ///< bytes not yet consumed (head, chunk size lines)
  int status_ = 0;
  bool keep_alive_ = true;
  bool until_close_ = false;
  std::int64_t length_ = -1;  ///< Content-Length; -1: none
  std::int64_t left_ = 0;     ///< of the body or the current chunk
  std::string error_;
};

}  // namespace kiln::engine::upstream
