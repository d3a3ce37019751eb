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

TEST_CASE("sse: chunk size lines at the edges of each hex digit") {
  const std::pair<std::size_t, const char*> cases[] = {
      {0, "0\r\n"},     {1, "1\r\n"},       {15, "f\r\n"},          {16, "10\r\n"},
      {255, "ff\r\n"},  {256, "100\r\n"},   {4096, "1000\r\n"},    {0xabcdef, "abcdef\r\n"},
      {~std::size_t{0}, "ffffffffffffffff\r\n"}};
  for (const auto& [size, want] : cases) {
    char buf[20];
    CAPTURE(size);
    CHECK(http_chunk_head(size, buf) == want);
  }
}
