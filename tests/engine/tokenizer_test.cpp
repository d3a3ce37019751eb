// tokenizer.json BPE: byte-level with merges by rank and PCRE2 pre-tokenization, Metaspace
// with byte fallback, added and special tokens, round trips, and streaming that never cuts
// a UTF-8 character.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "engine/bpe_tokenizer.hpp"
#include "engine/engine_core.hpp"
#include "engine/unicode_text.hpp"

using namespace kiln::engine;
using nlohmann::json;

namespace {

std::shared_ptr<bpe_tokenizer> make(const json& j) {
  auto r = bpe_tokenizer::from_json(j.dump());
  if (auto* e = std::get_if<std::string>(&r)) FAIL(*e);
  return std::get<std::shared_ptr<bpe_tokenizer>>(r);
}

json byte_vocab() {
  json v = json::object();
  for (int b = 0; b < 256; ++b) v[byte_to_unicode(static_cast<unsigned char>(b))] = b;
  return v;
}

json byte_level_json(json vocab, json merges, json pre, bool ignore_merges = false) {
  return {{"added_tokens", json::array({{{"id", 1000}, {"content", "<|im_start|>"}, {"special", true}},
                                        {{"id", 1001}, {"content", "<|im_end|>"}, {"special", true}}})},
          {"pre_tokenizer", pre},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", ignore_merges}}}};
}

const json kGpt2Pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};

}  // namespace

TEST_CASE("byte-level BPE applies merges by rank") {
  json v = byte_vocab();
  v["Ġt"] = 300;
  v["he"] = 301;
  v["Ġthe"] = 302;
  auto t = make(byte_level_json(v, json::array({"Ġ t", "h e", "Ġt he"}), kGpt2Pre));
  CHECK(t->encode(" the") == std::vector<token_id>{302});
  CHECK(t->encode("the") == std::vector<token_id>{'t', 301});  // "t he" is no merge
  CHECK(t->encode("the the") == std::vector<token_id>{'t', 301, 302});
  CHECK(t->decode(302) == " the");
  // Special tokens are matched in the text and decode to nothing.
  CHECK(t->encode("<|im_start|>the<|im_end|>") == std::vector<token_id>{1000, 't', 301, 1001});
  CHECK(t->decode(1000).empty());
  CHECK(t->decode_all({1000, 302}, false) == "<|im_start|> the");
}

TEST_CASE("a Llama 3 style Split regex runs through PCRE2") {
  const std::string pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json v = byte_vocab();
  int id = 300;
  for (const char* piece : {"Hello", "Ġworld", "123", "45", "!!", "'S"}) v[piece] = id++;
  const json pre = {{"type", "Sequence"},
                    {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}},
                                                   {{"type", "ByteLevel"}, {"use_regex", false}}})}};
  auto t = make(byte_level_json(v, json::array(), pre, /*ignore_merges=*/true));
  CHECK(t->encode("Hello world 12345!!") == std::vector<token_id>{300, 301, ' ', 302, 303, 304});
  CHECK(t->encode("'S") == std::vector<token_id>{305});       // (?i:'s): case-insensitive contraction
  CHECK(t->encode("!!'S") == std::vector<token_id>{'!', '!', '\'', 'S'});  // "!!'" is one piece, not in the vocab
}

TEST_CASE("Metaspace BPE with byte fallback round-trips text outside its vocabulary") {
  json v = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v[name] = 3 + b;
  }
  int id = 300;
  for (const char* s : {"▁", "h", "e", "l", "o", "▁h", "▁he", "ll", "▁hell", "▁hello"}) v[s] = id++;
  const json j = {{"added_tokens", json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}},
                                                {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
                  {"normalizer", nullptr},
                  {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}}},
                  {"model", {{"type", "BPE"}, {"vocab", v}, {"byte_fallback", true}, {"unk_token", "<unk>"},
                             {"merges", json::array({"▁ h", "▁h e", "l l", "▁he ll", "▁hell o"})}}}};
  // Llama 2's own form: no pre-tokenizer; the normalizer prepends U+2581 and replaces spaces.
  json llama2 = j;
  llama2.erase("pre_tokenizer");
  llama2["normalizer"] = {{"type", "Sequence"},
                          {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "▁"}},
                                                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}})}};
  for (bool normalizer_form : {false, true}) {
    auto t = make(normalizer_form ? llama2 : j);
    const auto ids = t->encode("hello ü");
    // ▁hello, then ▁ and the two bytes of ü.
    CHECK(ids == std::vector<token_id>{309, 300, 3 + 0xC3, 3 + 0xBC});
    CHECK(t->decode_all(ids) == "hello ü");
    CHECK(t->decode(309) == " hello");
    // Metaspace "first" prefixes only text at offset 0; the normalizer form prefixes every piece.
    CHECK(t->encode("<s>hello") ==
          (normalizer_form ? std::vector<token_id>{1, 309} : std::vector<token_id>{1, 301, 302, 307, 304}));
  }
}

TEST_CASE("a trained byte-level BPE round-trips any text, unicode included") {
  std::string corpus;
  for (int i = 0; i < 200; ++i) corpus += "the kiln fires the clay; the glaze runs. ";
  const auto text = train_byte_level_bpe(corpus, 320, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  auto t = make(json::parse(text));
  // Training stops early once every word of this small corpus is a single token.
  CHECK(t->vocab_size() > 256 + 3 + 10);
  CHECK(t->vocab_size() <= 323);
  const auto kiln = t->encode(" kiln");
  CHECK(kiln.size() == 1);  // frequent word: merged whole
  for (const std::string s : {"the kiln fires", "Grüße, 世界! 🙂 tabs\tand\nlines", "  spaces  ", "x"}) {
    CAPTURE(s);
    CHECK(t->decode_all(t->encode(s)) == s);
  }
  CHECK(t->encode("<|im_end|>").size() == 1);
  CHECK(t->is_special(t->encode("<|im_end|>")[0]));
}

TEST_CASE("normalizers: NFC composes before the model sees the text; NFKC folds compatibility forms") {
  // Vocabulary: the bytes, plus "é" (precomposed, two bytes) as one token.
  json v = byte_vocab();
  const std::string e_acute = byte_to_unicode(0xC3) + byte_to_unicode(0xA9);
  v[e_acute] = 256;
  json j = byte_level_json(v, json::array({byte_to_unicode(0xC3) + " " + byte_to_unicode(0xA9)}), kGpt2Pre);
  const std::string decomposed = "e\xcc\x81";  // e + U+0301
  CHECK(make(j)->encode(decomposed) == std::vector<token_id>{'e', 0xCC, 0x81});  // no normalizer: as written
  j["normalizer"] = {{"type", "NFC"}};
  CHECK(make(j)->encode(decomposed) == std::vector<token_id>{256});
  CHECK(make(j)->encode("\xc3\xa9") == std::vector<token_id>{256});
  // Added tokens are matched on the raw text; what lies between them is normalized.
  CHECK(make(j)->encode(decomposed + "<|im_end|>" + decomposed) == std::vector<token_id>{256, 1001, 256});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFKC"}}})}};
  CHECK(make(j)->encode("\xef\xac\x81") == std::vector<token_id>{'f', 'i'});  // the ligature U+FB01
  CHECK(normalize("\xef\xac\x81", normal_form::nfd) == "\xef\xac\x81");
  CHECK(normalize("\xc3\xa9", normal_form::nfd) == decomposed);
  j["normalizer"] = {{"type", "Lowercase"}};
  CHECK(std::get<std::string>(bpe_tokenizer::from_json(j.dump())) == "normalizer type 'Lowercase' is not supported");
}

TEST_CASE("a Split by a plain string honours each behavior (Gemma: MergedWithPrevious)") {
  json v = byte_vocab();
  v["a-"] = 256;
  v["-b"] = 257;
  const json merges = json::array({"a -", "- b"});
  auto with = [&](const std::string& behavior) {
    const json pre = {{"type", "Sequence"},
                      {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}},
                                                     {{"type", "ByteLevel"}, {"use_regex", false}}})}};
    return make(byte_level_json(v, merges, pre))->encode("a-b-");
  };
  CHECK(with("MergedWithPrevious") == std::vector<token_id>{256, 'b', '-'});
  CHECK(with("MergedWithNext") == std::vector<token_id>{'a', 257, '-'});
  CHECK(with("Isolated") == std::vector<token_id>{'a', '-', 'b', '-'});
  CHECK(with("Removed") == std::vector<token_id>{'a', 'b'});
  const json bad = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Contiguous"}};
  CHECK(std::get<std::string>(bpe_tokenizer::from_json(byte_level_json(v, merges, bad).dump())) ==
        "Split behavior 'Contiguous' is not supported");
}

TEST_CASE("tokenizer.json errors are one line") {
  auto err = [](const std::string& s) {
    auto r = bpe_tokenizer::from_json(s);
    return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : std::string();
  };
  CHECK(err("[") == "tokenizer.json is not a JSON object");
  CHECK(err(R"({"model":{"type":"WordPiece","vocab":{}}})") == "model type 'WordPiece' is not supported (BPE is)");
  CHECK(err(R"({"model":{"type":"BPE"}})") == "model.vocab is missing");
  CHECK(err(R"({"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"("}},)"
            R"({"type":"ByteLevel","use_regex":false}]},"model":{"vocab":{"a":0}}})")
            .find("does not compile") != std::string::npos);
  CHECK(err(R"({"pre_tokenizer":{"type":"Whitespace"},"model":{"vocab":{"a":0}}})") ==
        "pre_tokenizer type 'Whitespace' is not supported");
  // A post_processor that cannot say which ids it adds.
  const std::string model = R"(,"pre_tokenizer":{"type":"ByteLevel"},"model":{"vocab":{"a":0}}})";
  CHECK(err(R"({"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}},)"
            R"({"Sequence":{"id":"A"}}],"special_tokens":{}})" + model) ==
        "TemplateProcessing names the special token '<s>' without its ids");
  CHECK(err(R"({"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}}],)"
            R"("special_tokens":{"<s>":{"ids":[-1]}}})" + model) == "TemplateProcessing gives '<s>' an id that is not valid");
  CHECK(err(R"({"post_processor":{"type":"TemplateProcessing","single":[{"Pair":{}}]})" + model) ==
        "TemplateProcessing holds a piece that is neither SpecialToken nor Sequence");
  CHECK(err(R"({"post_processor":{"type":"Sequence"})" + model) == "post_processor Sequence without processors");
  CHECK(err(R"({"post_processor":{"type":"BertProcessing","cls":["[CLS]",1]})" + model) ==
        "BertProcessing needs cls and sep as [token, id]");
  CHECK(err(R"({"post_processor":7)" + model) == "post_processor is not an object");
  CHECK(err(R"({"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}}],)"
            R"("special_tokens":{"<s>":{"ids":[5]}}})" + model) == "post_processor adds the id 5, which the vocabulary does not hold");
}

TEST_CASE("the post_processor's special tokens come with encode_special only; piece is the vocabulary's string") {
  json v = byte_vocab();
  v["Ġthe"] = 302;
  json j = byte_level_json(v, json::array({"Ġ t", "h e"}), kGpt2Pre);
  // None (null, or ByteLevel alone): encode_special is encode.
  auto bare = make(j);
  CHECK(bare->encode_special("a the") == bare->encode("a the"));
  j["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", false}};
  CHECK(make(j)->encode_special("a") == std::vector<token_id>{'a'});
  // Llama 3: a BOS, inside a Sequence after ByteLevel; the ids are the processor's own.
  const json bos = {{"type", "TemplateProcessing"},
                    {"single", json::array({{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                                            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                    {"special_tokens", {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {1000}}, {"tokens", {"<|im_start|>"}}}}}}};
  j["post_processor"] = {{"type", "Sequence"}, {"processors", json::array({{{"type", "ByteLevel"}}, bos})}};
  auto llama = make(j);
  CHECK(llama->encode("a") == std::vector<token_id>{'a'});
  CHECK(llama->encode_special("a") == std::vector<token_id>{1000, 'a'});
  CHECK(llama->encode_special("") == std::vector<token_id>{1000});
  // Tokens after the sequence go after the text; a special token may stand for several ids.
  json both = bos;
  both["single"].push_back({{"SpecialToken", {{"id", "<|im_end|>"}}}});
  both["special_tokens"]["<|im_end|>"] = {{"id", "<|im_end|>"}, {"ids", {1001, 1000}}};
  j["post_processor"] = both;
  CHECK(make(j)->encode_special("a") == std::vector<token_id>{1000, 'a', 1001, 1000});
  // BERT and RoBERTa: cls before, sep after.
  j["post_processor"] = {{"type", "RobertaProcessing"}, {"cls", {"<|im_start|>", 1000}}, {"sep", {"<|im_end|>", 1001}}};
  CHECK(make(j)->encode_special("a") == std::vector<token_id>{1000, 'a', 1001});
  // piece: the vocabulary's string, where decode gives the text (or nothing, for a special).
  CHECK(llama->piece(302) == "Ġthe");
  CHECK(llama->decode(302) == " the");
  CHECK(llama->piece(1000) == "<|im_start|>");
  CHECK(llama->decode(1000).empty());
  CHECK(llama->piece(-1).empty());
  CHECK(llama->piece(5000).empty());
}

namespace {

// Emits a fixed token sequence, one per step.
class script_executor final : public executor {
 public:
  explicit script_executor(std::vector<token_id> script) : script_(std::move(script)) {}
  step_execution run(const step_plan&, const scheduler&, std::span<const sample_slot> slots) override {
    step_execution out;
    for (const auto& s : slots)
      out.tokens.push_back(static_cast<std::size_t>(s.position) < script_.size() ? script_[static_cast<std::size_t>(s.position)] : 0);
    return out;
  }

 private:
  std::vector<token_id> script_;
};

}  // namespace

TEST_CASE("streaming detokenization never emits half a UTF-8 character") {
  json v = byte_vocab();
  auto tok = make(byte_level_json(v, json::array(), kGpt2Pre));
  tok->set_eos(1001);
  // "é€🙂" byte by byte: every byte is its own token.
  const std::string want = "é€🙂!";
  std::vector<token_id> script;
  for (unsigned char b : want) script.push_back(b);
  script.push_back(1001);
  engine_core core({64, 4}, {64, 4}, std::make_unique<script_executor>(script), tok);
  sampling_params sp;
  sp.max_tokens = 50;
  REQUIRE(core.add({1, {'a'}, sp, priority::standard}));
  std::string got;
  while (!core.idle())
    for (const auto& out : core.step().outputs) {
      // Each emitted piece is whole UTF-8.
      for (std::size_t i = 0; i < out.text.size();) {
        const auto c = static_cast<unsigned char>(out.text[i]);
        const std::size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        REQUIRE(i + n <= out.text.size());
        i += n;
      }
      got += out.text;
    }
  CHECK(got == want);
}
