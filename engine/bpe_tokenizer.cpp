#include "engine/bpe_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <queue>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/unicode_text.hpp"

namespace kiln::engine {

namespace {

using json = nlohmann::json;

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::size_t utf8_char_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;  // a stray byte stands alone
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = std::min(utf8_char_len(static_cast<unsigned char>(s[i])), s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

const std::array<std::string, 256>& byte_table() {
  static const auto table = [] {
    std::array<std::string, 256> t;
    std::uint32_t extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[static_cast<std::size_t>(b)] = utf8(printable ? static_cast<std::uint32_t>(b) : 256 + extra++);
    }
    return t;
  }();
  return table;
}

const std::map<std::string, unsigned char>& unicode_to_byte() {
  static const auto m = [] {
    std::map<std::string, unsigned char> r;
    for (int b = 0; b < 256; ++b) r[byte_table()[static_cast<std::size_t>(b)]] = static_cast<unsigned char>(b);
    return r;
  }();
  return m;
}

pcre2_code* compile(const std::string& pattern, std::string& error) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    error = "pre-tokenizer regex does not compile at " + std::to_string(offset) + ": " + reinterpret_cast<char*>(msg);
  }
  return re;
}

// Splits text into the regex's matches and the gaps between them ("Isolated").
std::vector<std::string> split(pcre2_code* re, std::string_view text) {
  std::vector<std::string> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  std::size_t start = 0, last = 0;
  while (start < text.size()) {
    const int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[0] > last) out.emplace_back(text.substr(last, ov[0] - last));
    if (ov[1] > ov[0]) out.emplace_back(text.substr(ov[0], ov[1] - ov[0]));
    last = ov[1];
    start = ov[1] > ov[0] ? ov[1] : ov[0] + utf8_char_len(static_cast<unsigned char>(text[ov[0]]));
  }
  if (last < text.size()) out.emplace_back(text.substr(last));
  pcre2_match_data_free(md);
  return out;
}

// Replaces invalid UTF-8 with U+FFFD so PCRE2 can run without its own check.
std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = utf8_char_len(c);
    bool ok = (c < 0x80 || n > 1) && i + n <= s.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xef\xbf\xbd";
      ++i;
    }
  }
  return out;
}

// Applies merges by rank, lowest first, leftmost on ties.
std::vector<std::string> bpe(std::vector<std::string> syms, const std::unordered_map<std::string, int>& ranks,
                             const std::unordered_map<std::string, token_id>& vocab) {
  const std::size_t n = syms.size();
  if (n < 2) return syms;
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int>(i + 1) : -1;
  }
  using entry = std::tuple<int, int, int>;  // rank, left, right
  std::priority_queue<entry, std::vector<entry>, std::greater<>> heap;
  auto rank_of = [&](int a, int b) {
    auto it = ranks.find(syms[static_cast<std::size_t>(a)] + " " + syms[static_cast<std::size_t>(b)]);
    return it == ranks.end() ? -1 : it->second;
  };
  auto push = [&](int a, int b) {
    if (a < 0 || b < 0) return;
    if (const int r = rank_of(a, b); r >= 0) heap.emplace(r, a, b);
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i), static_cast<int>(i + 1));
  while (!heap.empty()) {
    const auto [r, a, b] = heap.top();
    heap.pop();
    const auto ua = static_cast<std::size_t>(a), ub = static_cast<std::size_t>(b);
    if (!alive[ua] || !alive[ub] || next[ua] != b || rank_of(a, b) != r) continue;
    std::string merged = syms[ua] + syms[ub];
    if (!vocab.count(merged)) continue;
    syms[ua] = std::move(merged);
    alive[ub] = false;
    next[ua] = next[ub];
    if (next[ub] >= 0) prev[static_cast<std::size_t>(next[ub])] = a;
    push(prev[ua], a);
    push(a, next[ua]);
  }
  std::vector<std::string> out;
  for (int i = 0; i >= 0; i = next[static_cast<std::size_t>(i)]) out.push_back(std::move(syms[static_cast<std::size_t>(i)]));
  return out;
}

// The special tokens a post_processor puts around one sequence, as Hugging Face's encode
// with add_special_tokens: TemplateProcessing's "single" (also inside a Sequence of
// processors), BertProcessing's and RobertaProcessing's cls and sep. The rest (ByteLevel: its
// offsets only) add none. The ids come from the processor itself, as in the reference.
std::optional<std::string> read_post_processor(const json& p, std::vector<token_id>& prefix, std::vector<token_id>& suffix) {
  if (p.is_null()) return std::nullopt;
  if (!p.is_object()) return std::string("post_processor is not an object");
  const std::string type = p.value("type", std::string());
  if (type == "Sequence") {
    if (!p.contains("processors") || !p["processors"].is_array()) return std::string("post_processor Sequence without processors");
    for (const json& q : p["processors"])
      if (auto e = read_post_processor(q, prefix, suffix)) return e;
    return std::nullopt;
  }
  const auto id_of = [](const json& pair, std::vector<token_id>& out) {
    if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer() || pair[1].get<std::int64_t>() < 0 ||
        pair[1].get<std::int64_t>() > (1 << 24))
      return false;
    out.push_back(pair[1].get<token_id>());
    return true;
  };
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    if (!id_of(p.value("cls", json()), prefix) || !id_of(p.value("sep", json()), suffix))
      return type + " needs cls and sep as [token, id]";
    return std::nullopt;
  }
  if (type != "TemplateProcessing") return std::nullopt;
  if (!p.contains("single") || !p["single"].is_array()) return std::string("TemplateProcessing without a single template");
  const json specials = p.value("special_tokens", json::object());
  bool after = false;
  for (const json& piece : p["single"]) {
    if (piece.is_object() && piece.contains("Sequence")) {
      after = true;
      continue;
    }
    const json name = piece.is_object() && piece.contains("SpecialToken") ? piece["SpecialToken"].value("id", json()) : json();
    if (!name.is_string()) return std::string("TemplateProcessing holds a piece that is neither SpecialToken nor Sequence");
    const json entry = specials.is_object() ? specials.value(name.get<std::string>(), json()) : json();
    if (!entry.is_object() || !entry.contains("ids") || !entry["ids"].is_array())
      return "TemplateProcessing names the special token '" + name.get<std::string>() + "' without its ids";
    for (const json& id : entry["ids"]) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > (1 << 24))
        return "TemplateProcessing gives '" + name.get<std::string>() + "' an id that is not valid";
      (after ? suffix : prefix).push_back(id.get<token_id>());
    }
  }
  return std::nullopt;
}

}  // namespace

const std::string& byte_to_unicode(unsigned char b) { return byte_table()[b]; }

bpe_tokenizer::~bpe_tokenizer() {
  if (regex_) pcre2_code_free(static_cast<pcre2_code*>(regex_));
}

std::variant<std::shared_ptr<bpe_tokenizer>, std::string> bpe_tokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return path + ": cannot open";
  std::ostringstream s;
  s << in.rdbuf();
  auto r = from_json(s.str());
  if (auto* e = std::get_if<std::string>(&r)) return path + ": " + *e;
  return r;
}

std::variant<std::shared_ptr<bpe_tokenizer>, std::string> bpe_tokenizer::from_json(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::string("tokenizer.json is not a JSON object");
  std::shared_ptr<bpe_tokenizer> t(new bpe_tokenizer());
  const json& model = j.value("model", json::object());
  if (model.value("type", std::string("BPE")) != "BPE")
    return "model type '" + model.value("type", std::string()) + "' is not supported (BPE is)";
  if (!model.contains("vocab") || !model["vocab"].is_object()) return std::string("model.vocab is missing");
  for (const auto& [tok, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > (1 << 24))
      return "model.vocab['" + tok + "'] is not a valid id";
    t->vocab_[tok] = id.get<token_id>();
  }
  if (model.contains("merges") && model["merges"].is_array()) {
    int rank = 0;
    for (const auto& m : model["merges"]) {
      if (m.is_string()) t->merge_rank_.emplace(m.get<std::string>(), rank++);
      else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        t->merge_rank_.emplace(m[0].get<std::string>() + " " + m[1].get<std::string>(), rank++);
      else return std::string("model.merges holds an entry that is neither \"a b\" nor [a, b]");
    }
  }
  t->byte_fallback_ = model.value("byte_fallback", false);
  t->ignore_merges_ = model.value("ignore_merges", false);
  if (model.contains("unk_token") && model["unk_token"].is_string())
    if (auto it = t->vocab_.find(model["unk_token"].get<std::string>()); it != t->vocab_.end()) t->unk_ = it->second;
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string() ||
          !a["id"].is_number_integer() || a["id"].get<std::int64_t>() < 0 || a["id"].get<std::int64_t>() > (1 << 24))
        return std::string("added_tokens holds a malformed entry");
      const std::string content = a["content"].get<std::string>();
      if (content.empty()) continue;
      t->added_.push_back({content, a["id"].get<token_id>(), a.value("special", false)});
      t->vocab_[content] = a["id"].get<token_id>();
    }
  }
  std::stable_sort(t->added_.begin(), t->added_.end(), [](const added& a, const added& b) { return a.content.size() > b.content.size(); });
  for (std::size_t k = 0; k < t->added_.size(); ++k)
    t->added_by_byte_[static_cast<unsigned char>(t->added_[k].content[0])].push_back(static_cast<std::uint32_t>(k));

  if (auto e = read_post_processor(j.value("post_processor", json()), t->prefix_, t->suffix_)) return *e;

  // Byte-level or Metaspace, read from the pre-tokenizer (and a Llama 2 style normalizer).
  std::string pattern;
  std::vector<json> pre;
  if (j.contains("pre_tokenizer") && j["pre_tokenizer"].is_object()) {
    const json& p = j["pre_tokenizer"];
    if (p.value("type", std::string()) == "Sequence" && p.contains("pretokenizers"))
      for (const auto& x : p["pretokenizers"]) pre.push_back(x);
    else
      pre.push_back(p);
  }
  // The normalizer: a Unicode normal form and/or Llama 2's Prepend("▁") + Replace(" ", "▁").
  bool prepend = false, replace_space = false;
  std::vector<json> norms;
  if (j.contains("normalizer") && j["normalizer"].is_object()) {
    const json& n = j["normalizer"];
    if (n.value("type", std::string()) == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array())
      for (const auto& x : n["normalizers"]) norms.push_back(x);
    else
      norms.push_back(n);
  }
  for (const json& n : norms) {
    const std::string type = n.is_object() ? n.value("type", std::string()) : std::string();
    if (auto f = normal_form_named(type); f != normal_form::none) {
      t->normal_form_ = f;
    } else if (type == "Prepend") {
      prepend = true;
    } else if (type == "Replace" && n.contains("pattern") && n["pattern"].is_object() && n["pattern"].contains("String") &&
               n["pattern"]["String"] == " ") {
      replace_space = true;
      if (n.contains("content") && n["content"].is_string()) t->metaspace_ = n["content"].get<std::string>();
    } else {
      return "normalizer type '" + (type.empty() ? n.dump() : type) + "' is not supported";
    }
  }

  bool saw_byte_level = false, saw_metaspace = false;
  for (const json& p : pre) {
    const std::string type = p.value("type", std::string());
    if (type == "ByteLevel") {
      saw_byte_level = true;
      t->add_prefix_space_ = p.value("add_prefix_space", false);
      if (p.value("use_regex", true) && pattern.empty()) pattern = kGpt2Pattern;
    } else if (type == "Split") {
      if (p.contains("pattern") && p["pattern"].contains("Regex")) pattern = p["pattern"]["Regex"].get<std::string>();
      else if (p.contains("pattern") && p["pattern"].contains("String") && p["pattern"]["String"].is_string()) {
        t->literal_split_ = p["pattern"]["String"].get<std::string>();
        t->split_behavior_ = p.value("behavior", std::string("Isolated"));
        if (t->split_behavior_ != "Isolated" && t->split_behavior_ != "Removed" &&
            t->split_behavior_ != "MergedWithPrevious" && t->split_behavior_ != "MergedWithNext")
          return "Split behavior '" + t->split_behavior_ + "' is not supported";
        if (p.value("invert", false)) return std::string("an inverted Split is not supported");
      }
    } else if (type == "Metaspace") {
      saw_metaspace = true;
      t->metaspace_ = p.value("replacement", t->metaspace_);
      t->prepend_scheme_ = p.value("prepend_scheme", p.value("add_prefix_space", true) ? std::string("always") : std::string("never"));
      t->metaspace_split_ = p.value("split", true);
    } else if (!type.empty() && type != "Digits") {
      return "pre_tokenizer type '" + type + "' is not supported";
    }
  }
  if (!saw_byte_level && !saw_metaspace) {
    // Llama 2 / Gemma style: spaces become "▁" in the normalizer (Llama 2 also prepends one).
    if (!prepend && !replace_space && !t->byte_fallback_)
      return std::string("neither a ByteLevel nor a Metaspace tokenizer");
    saw_metaspace = true;
    // Normalizers run on every piece of text between added tokens, so each gets the prefix.
    t->prepend_scheme_ = prepend ? "always" : "never";
    t->metaspace_split_ = false;
  }
  t->byte_level_ = saw_byte_level;
  if (!pattern.empty()) {
    std::string error;
    t->regex_ = compile(pattern, error);
    if (!t->regex_) return error;
  }
  // Dense id -> token table.
  token_id max_id = -1;
  for (const auto& [tok, id] : t->vocab_) max_id = std::max(max_id, id);
  t->id_to_token_.assign(static_cast<std::size_t>(max_id + 1), std::string());
  t->special_.assign(static_cast<std::size_t>(max_id + 1), false);
  for (const auto& [tok, id] : t->vocab_) t->id_to_token_[static_cast<std::size_t>(id)] = tok;
  for (const auto& a : t->added_) t->special_[static_cast<std::size_t>(a.id)] = a.special;
  // The post-processor's ids reach the model as any token's: each must be the vocabulary's.
  for (const auto* ids : {&t->prefix_, &t->suffix_})
    for (const token_id id : *ids)
      if (static_cast<std::size_t>(id) >= t->id_to_token_.size() || t->id_to_token_[static_cast<std::size_t>(id)].empty())
        return "post_processor adds the id " + std::to_string(id) + ", which the vocabulary does not hold";
  return t;
}

std::optional<token_id> bpe_tokenizer::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

bool bpe_tokenizer::is_special(token_id id) const {
  return id >= 0 && static_cast<std::size_t>(id) < special_.size() && special_[static_cast<std::size_t>(id)];
}

void bpe_tokenizer::encode_piece(const std::string& piece, std::vector<token_id>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_)
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  for (const std::string& sym : bpe(utf8_chars(piece), merge_rank_, vocab_)) {
    if (auto it = vocab_.find(sym); it != vocab_.end()) {
      out.push_back(it->second);
    } else if (byte_fallback_) {
      for (unsigned char b : sym) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        if (auto bt = vocab_.find(name); bt != vocab_.end()) out.push_back(bt->second);
        else if (unk_) out.push_back(*unk_);
      }
    } else if (unk_) {
      out.push_back(*unk_);
    }
  }
}

void bpe_tokenizer::encode_plain(std::string_view raw, bool first, std::vector<token_id>& out) const {
  if (raw.empty()) return;
  const std::string text = normalize(valid_utf8(raw), normal_form_);
  if (text.empty()) return;
  if (byte_level_) {
    const std::string input = add_prefix_space_ && first && text.front() != ' ' ? " " + text : text;
    for (const std::string& part : split_literal(input)) {
      const std::vector<std::string> pieces = regex_ ? split(static_cast<pcre2_code*>(regex_), part) : std::vector<std::string>{part};
      for (const std::string& p : pieces) {
        std::string mapped;
        for (unsigned char b : p) mapped += byte_table()[b];
        encode_piece(mapped, out);
      }
    }
    return;
  }
  std::string norm;
  if (prepend_scheme_ == "always" || (prepend_scheme_ == "first" && first)) norm = metaspace_;
  for (char c : text) norm += c == ' ' ? metaspace_ : std::string(1, c);
  for (const std::string& part : split_literal(norm)) {
    if (!metaspace_split_) {
      encode_piece(part, out);
      continue;
    }
    std::size_t start = 0;
    while (start < part.size()) {
      std::size_t next = part.find(metaspace_, start + metaspace_.size());
      if (next == std::string::npos) next = part.size();
      encode_piece(part.substr(start, next - start), out);
      start = next;
    }
  }
}

// A Split pre-tokenizer by a plain string, with its behavior for the matches.
std::vector<std::string> bpe_tokenizer::split_literal(const std::string& text) const {
  if (literal_split_.empty()) return {text};
  std::vector<std::string> out;
  std::string pending;  // MergedWithNext: the match waiting for what follows
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = text.find(literal_split_, start);
    std::string gap = text.substr(start, at == std::string::npos ? std::string::npos : at - start);
    if (at == std::string::npos) {
      if (!pending.empty() || !gap.empty()) out.push_back(pending + gap);
      break;
    }
    if (split_behavior_ == "Isolated") {
      if (!gap.empty()) out.push_back(gap);
      out.push_back(literal_split_);
    } else if (split_behavior_ == "Removed") {
      if (!gap.empty()) out.push_back(gap);
    } else if (split_behavior_ == "MergedWithPrevious") {
      out.push_back(gap + literal_split_);
    } else {  // MergedWithNext
      if (!pending.empty() || !gap.empty()) out.push_back(pending + gap);
      pending = literal_split_;
    }
    start = at + literal_split_.size();
  }
  return out;
}

std::vector<token_id> bpe_tokenizer::encode(std::string_view text) const {
  std::vector<token_id> out;
  std::size_t plain = 0;
  bool first = true;
  for (std::size_t i = 0; i < text.size();) {
    const added* hit = nullptr;
    for (const std::uint32_t k : added_by_byte_[static_cast<unsigned char>(text[i])])
      if (text.compare(i, added_[k].content.size(), added_[k].content) == 0) {
        hit = &added_[k];
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    encode_plain(text.substr(plain, i - plain), first, out);
    first = false;
    out.push_back(hit->id);
    i += hit->content.size();
    plain = i;
  }
  encode_plain(text.substr(plain), first, out);
  return out;
}

std::vector<token_id> bpe_tokenizer::encode_special(std::string_view text) const {
  std::vector<token_id> out = prefix_;
  const std::vector<token_id> ids = encode(text);
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

std::string bpe_tokenizer::piece(token_id id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size()) return {};
  return id_to_token_[static_cast<std::size_t>(id)];
}

std::string bpe_tokenizer::decode(token_id id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size() || is_special(id)) return {};
  const std::string& tok = id_to_token_[static_cast<std::size_t>(id)];
  for (const added& a : added_)
    if (a.id == id) return tok;  // added, not special: literal text
  std::string out;
  if (byte_level_) {
    const auto& rev = unicode_to_byte();
    for (const std::string& ch : utf8_chars(tok)) {
      auto it = rev.find(ch);
      if (it != rev.end()) out += static_cast<char>(it->second);
      else out += ch;
    }
    return out;
  }
  if (tok.size() == 6 && tok.rfind("<0x", 0) == 0 && tok.back() == '>')
    return std::string(1, static_cast<char>(std::stoi(tok.substr(3, 2), nullptr, 16)));
  for (std::size_t i = 0; i < tok.size();) {
    if (tok.compare(i, metaspace_.size(), metaspace_) == 0) {
      out += ' ';
      i += metaspace_.size();
    } else {
      out += tok[i++];
    }
  }
  return out;
}

std::string bpe_tokenizer::decode_all(const std::vector<token_id>& ids, bool skip_special) const {
  std::string out;
  for (token_id id : ids) {
    if (!skip_special && is_special(id)) out += id_to_token_[static_cast<std::size_t>(id)];
    else out += decode(id);
  }
  // Metaspace tokenizers strip the space they prepended.
  if (!byte_level_ && prepend_scheme_ != "never" && !out.empty() && out.front() == ' ') out.erase(0, 1);
  return out;
}

std::string train_byte_level_bpe(const std::string& corpus, int vocab_size, const std::vector<std::string>& specials) {
  std::string error;
  pcre2_code* re = compile(kGpt2Pattern, error);
  std::map<std::vector<std::string>, long> words;
  for (const std::string& piece : split(re, valid_utf8(corpus))) {
    std::vector<std::string> syms;
    for (unsigned char b : piece) syms.push_back(byte_table()[b]);
    ++words[syms];
  }
  pcre2_code_free(re);
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_table()[static_cast<std::size_t>(b)]] = b;
  json merges = json::array();
  int next_id = 256;
  std::vector<std::pair<std::vector<std::string>, long>> ws(words.begin(), words.end());
  while (next_id < vocab_size) {
    std::map<std::pair<std::string, std::string>, long> pairs;
    for (const auto& [syms, count] : ws)
      for (std::size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += count;
    if (pairs.empty()) break;
    // Most frequent pair; the map's order breaks ties the same way every run.
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;
    if (best->second < 2) break;
    const auto [a, b] = best->first;
    merges.push_back({a, b});
    vocab[a + b] = next_id++;
    for (auto& [syms, count] : ws) {
      std::vector<std::string> merged;
      for (std::size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          merged.push_back(a + b);
          ++i;
        } else {
          merged.push_back(syms[i]);
        }
      }
      syms = std::move(merged);
    }
  }
  json added = json::array();
  for (const std::string& s : specials) {
    added.push_back({{"id", next_id}, {"content", s}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
    vocab[s] = next_id++;
  }
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  const json tok = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
                    {"normalizer", nullptr}, {"pre_tokenizer", byte_level}, {"post_processor", nullptr},
                    {"decoder", byte_level},
                    {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                               {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                               {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                               {"vocab", vocab}, {"merges", merges}}}};
  return tok.dump();
}

void bpe_tokenizer::set_more_stops(const std::vector<token_id>& ids) {
  more_stops_.clear();
  for (token_id id : ids)
    if (id >= 0 && id < vocab_size() && id != eos_ &&
        std::find(more_stops_.begin(), more_stops_.end(), id) == more_stops_.end())
      more_stops_.push_back(id);
}

std::vector<token_id> bpe_tokenizer::stop_ids() const {
  std::vector<token_id> out{eos_};
  for (token_id id : more_stops_)
    if (id != eos_) out.push_back(id);
  return out;
}

}  // namespace kiln::engine
