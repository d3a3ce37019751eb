#include "net/logprobs_json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "net/openai.hpp"

namespace kiln::net {

void append_logprob(std::string& out, float lp) {
  if (std::isnan(lp)) {
    out += "null";
    return;
  }
  if (!std::isfinite(lp)) lp = -9999.f;
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, lp);
  std::string_view s(buf, static_cast<std::size_t>(r.ptr - buf));
  out += s;
  if (s.find_first_of(".e") == std::string_view::npos) out += ".0";  // a float, as Python writes it
}

namespace {

void append_bytes(std::string& out, const std::string& token) {
  out += '[';
  for (std::size_t i = 0; i < token.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(static_cast<unsigned char>(token[i]));
  }
  out += ']';
}

void append_chat_entry(std::string& out, const std::string& token, float lp) {
  out += "{\"token\":";
  append_json_quoted(out, token);
  out += ",\"logprob\":";
  append_logprob(out, lp);
  out += ",\"bytes\":";
  append_bytes(out, token);
}

// Characters of `s` as its JSON text has them: each invalid byte is one U+FFFD.
std::size_t characters(const std::string& s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); ++n) i += std::max<std::size_t>(1, utf8_len(s, i));
  return n;
}

}  // namespace

std::string logprobs_writer::object(const std::vector<engine::token_logprob>& tokens) {
  std::string out;
  if (!text_completion_) {
    out += "{\"content\":[";
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ',';
      append_chat_entry(out, tokens[i].token, tokens[i].logprob);
      out += ",\"top_logprobs\":[";
      for (std::size_t k = 0; k < tokens[i].top.size(); ++k) {
        if (k) out += ',';
        append_chat_entry(out, tokens[i].top[k].token, tokens[i].top[k].logprob);
        out += '}';
      }
      out += "]}";
    }
    return out + "]}";
  }
  std::string toks = "{\"tokens\":[", lps = "],\"token_logprobs\":[", tops = "],\"top_logprobs\":[",
              offsets = "],\"text_offset\":[";
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto& t = tokens[i];
    const char* sep = i ? "," : "";
    toks += sep;
    append_json_quoted(toks, t.token);
    lps += sep;
    append_logprob(lps, t.logprob);
    tops += sep;
    if (std::isnan(t.logprob)) {
      tops += "null";  // the prompt's first token: nothing predicted it
    } else {
      // A dict of text to logprob: two ids with the same text keep the likelier.
      std::set<std::string> seen;
      tops += '{';
      for (const auto& alt : t.top) {
        if (!seen.insert(alt.token).second) continue;
        if (seen.size() > 1) tops += ',';
        append_json_quoted(tops, alt.token);
        tops += ':';
        append_logprob(tops, alt.logprob);
      }
      tops += '}';
    }
    offsets += sep + std::to_string(offset_);
    offset_ += characters(t.token);
  }
  return toks + lps + tops + offsets + "]}";
}

std::string logprobs_writer::chunk_suffix(const std::vector<engine::token_logprob>& tokens) {
  return (text_completion_ ? ",\"logprobs\":" : "},\"logprobs\":") + object(tokens) + ",\"finish_reason\":null}]}";
}

}  // namespace kiln::net
