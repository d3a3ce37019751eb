#include <doctest/doctest.h>

#include <string>

#include "engine/http_response.hpp"

using kiln::engine::upstream::response_reader;

namespace {

// Feeds `raw` in pieces of `step` bytes; the body read, or "!error" when it failed.
std::string read_in_steps(response_reader& r, const std::string& raw, std::size_t step) {
  std::string body;
  for (std::size_t i = 0; i < raw.size(); i += step)
    if (!r.feed(std::string_view(raw).substr(i, step), body)) return "!" + r.error();
  return body;
}

}  // namespace

TEST_CASE("a response with a Content-Length is read whole however its bytes arrive") {
  const std::string raw = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\nhello world";
  for (std::size_t step : {1u, 2u, 7u, 1000u}) {
    response_reader r;
    CHECK(read_in_steps(r, raw, step) == "hello world");
    CHECK(r.done());
    CHECK(r.status() == 200);
    CHECK(r.reusable());
  }
}

TEST_CASE("a chunked response is decoded with extensions and trailers, then ends") {
  const std::string raw =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n";
  for (std::size_t step : {1u, 3u, 5000u}) {
    response_reader r;
    CHECK(read_in_steps(r, raw, step) == "hello 0123456789");
    CHECK(r.done());
    CHECK(r.reusable());
  }
}

TEST_CASE("a body is handed out before the response ends (a stream)") {
  response_reader r;
  std::string body;
  REQUIRE(r.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata: ", body));
  CHECK(r.head_done());
  CHECK(body == "data: ");
  CHECK_FALSE(r.done());
  REQUIRE(r.feed("\r\n", body));
  CHECK_FALSE(r.done());
  REQUIRE(r.feed("0\r\n\r\n", body));
  CHECK(r.done());
}

TEST_CASE("whether the connection can carry another request follows version, Connection and framing") {
  std::string body;
  response_reader close;
  REQUIRE(close.feed("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", body));
  CHECK(close.done());
  CHECK_FALSE(close.reusable());
  response_reader old;
  REQUIRE(old.feed("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", body));
  CHECK_FALSE(old.reusable());
  response_reader old_kept;
  REQUIRE(old_kept.feed("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n", body));
  CHECK(old_kept.reusable());
  response_reader until_close;
  REQUIRE(until_close.feed("HTTP/1.1 200 OK\r\n\r\npartial", body));
  CHECK_FALSE(until_close.done());
  CHECK(until_close.closed());
  CHECK(until_close.done());
  CHECK_FALSE(until_close.reusable());
  CHECK(body == "partial");
}

TEST_CASE("a response cut short by the close is a failure, not an answer") {
  std::string body;
  response_reader length;
  REQUIRE(length.feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345", body));
  CHECK_FALSE(length.closed());
  CHECK(length.error().find("middle") != std::string::npos);
  response_reader chunked;
  REQUIRE(chunked.feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", body));
  CHECK_FALSE(chunked.closed());
  response_reader nothing;
  CHECK_FALSE(nothing.closed());
  CHECK(nothing.error().find("before a response") != std::string::npos);
}

TEST_CASE("malformed responses are refused with a reason") {
  const char* bad[] = {
      "SMTP 220 hello\r\n\r\n",
      "HTTP/1.1 2x0 OK\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
      "HTTP/1.1 200 OK\r\nNoColonHere\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabc",
  };
  for (const char* raw : bad) {
    CAPTURE(raw);
    response_reader r;
    std::string body;
    CHECK_FALSE(r.feed(raw, body));
    CHECK_FALSE(r.error().empty());
    CHECK_FALSE(r.feed("more", body));  // not read further
  }
}

TEST_CASE("an interim 100 Continue is skipped; 204 has no body") {
  response_reader r;
  std::string body;
  REQUIRE(r.feed("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", body));
  CHECK(r.status() == 201);
  CHECK(body == "ok");
  CHECK(r.done());
  response_reader none;
  REQUIRE(none.feed("HTTP/1.1 204 No Content\r\n\r\n", body));
  CHECK(none.done());
  CHECK(none.reusable());
}

TEST_CASE("a head over 64 KiB is refused") {
  response_reader r;
  std::string body;
  const std::string huge = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(70000, 'a');
  CHECK_FALSE(r.feed(huge, body));
}
