#include <doctest/doctest.h>

#include <string>

#include "net/sse.hpp"

using namespace kiln::net;

TEST_CASE("sse: one data line per payload line, blank line after the event") {
  std::string out;
  append_sse_event(out, R"({"a":1})");
  CHECK(out == "data: {\"a\":1}\n\n");
  out.clear();
  append_sse_event(out, "x\ny");
  CHECK(out == "data: x\ndata: y\n\n");
  out.clear();
  append_sse_event(out, kSseDone);
  CHECK(out == "data: [DONE]\n\n");
}

TEST_CASE("sse: HTTP/1.1 chunk framing in hex") {
  std::string out;
  append_http_chunk(out, std::string(26, 'z'));
  CHECK(out == "1a\r\n" + std::string(26, 'z') + "\r\n");
  out.clear();
  append_http_chunk(out, "");
  CHECK(out.empty());
  CHECK(kLastChunk == "0\r\n\r\n");
}
