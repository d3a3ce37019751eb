#include "engine/model_dir.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/tiny_model.hpp"

namespace kiln::engine {

namespace {

namespace fs = std::filesystem;

constexpr const char* kChatMl =
    "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}";

// Text to train the tokenizer on: sentences of a fixed word list, with punctuation, digits
// and the chat roles, so common words become single tokens.
std::string training_corpus() {
  static const char* words[] = {
      "the", "a", "kiln", "fire", "clay", "glaze", "bowl", "cup", "heat", "model", "token", "stream", "team", "share",
      "batch", "step", "cache", "block", "prefix", "route", "replica", "region", "answer", "question", "light", "warm",
      "slow", "fast", "quiet", "bright", "small", "large", "new", "old", "good", "simple", "careful", "steady", "open",
      "close", "here", "there", "then", "now", "again", "always", "never", "often", "under", "over", "between", "after",
      "before", "because", "while", "when", "where", "which", "what", "how", "why", "and", "or", "but", "not", "is",
      "are", "was", "we", "you", "they", "it", "this", "that", "of", "to", "in", "on", "with", "for", "from", "by",
      "hello", "thanks", "please", "yes", "no", "user", "assistant", "system", "helpful", "I", "can", "will", "make",
      "turn", "send", "read", "write", "serve", "learn", "build", "test", "run", "wait", "start", "finish", "rest"};
  std::mt19937 rng(2026);
  std::string out;
  for (int s = 0; s < 3000; ++s) {
    const int n = 4 + static_cast<int>(rng() % 10);
    for (int w = 0; w < n; ++w) {
      std::string word = words[rng() % std::size(words)];
      if (w == 0) word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
      out += (w ? " " : "") + word;
      if (rng() % 9 == 0) out += ",";
    }
    out += rng() % 5 == 0 ? "?" : ".";
    if (rng() % 7 == 0) out += " " + std::to_string(rng() % 1000);
    out += rng() % 4 == 0 ? "\n" : " ";
  }
  return out;
}

}  // namespace

bool tiny_model_size_known(const std::string& size) { return size == "tiny" || size == "small" || size == "100m"; }

bool tiny_model_architecture_known(const std::string& a) { return a == "llama" || a == "qwen2" || a == "qwen3"; }

std::string make_tiny_model(const std::string& dir_name, const std::string& size) {
  return make_tiny_model(dir_name, size, "llama", "");
}

std::string make_tiny_model(const std::string& dir_name, const std::string& size, const std::string& architecture,
                            const std::string& tokenizer_dir) {
  if (!tiny_model_size_known(size)) return "unknown size '" + size + "' (tiny, small, 100m)";
  if (!tiny_model_architecture_known(architecture)) return "unknown architecture '" + architecture + "' (llama, qwen2, qwen3)";
  const fs::path dir(dir_name);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return dir_name + ": " + ec.message();
  std::string eos = "<|im_end|>", bos = "<|endoftext|>";
  if (tokenizer_dir.empty()) {
    const std::string tok_json = train_byte_level_bpe(training_corpus(), 1024, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
    std::ofstream(dir / "tokenizer.json") << tok_json;
    const nlohmann::json tok_cfg = {{"chat_template", kChatMl}, {"bos_token", nullptr}, {"eos_token", "<|im_end|>"},
                                    {"pad_token", "<|endoftext|>"}, {"add_bos_token", false},
                                    {"model_max_length", 4096}, {"tokenizer_class", "PreTrainedTokenizerFast"}};
    std::ofstream(dir / "tokenizer_config.json") << tok_cfg.dump(2) << "\n";
  } else {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      fs::copy_file(fs::path(tokenizer_dir) / f, dir / f, fs::copy_options::overwrite_existing, ec);
      if (ec) return (fs::path(tokenizer_dir) / f).string() + ": " + ec.message();
    }
    std::ifstream in(dir / "tokenizer_config.json");
    const auto cfg = nlohmann::json::parse(in, nullptr, false);
    auto token = [&](const char* key) {
      if (cfg.is_discarded() || !cfg.contains(key)) return std::string();
      const auto& v = cfg[key];
      if (v.is_string()) return v.get<std::string>();
      if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
      return std::string();
    };
    eos = token("eos_token");
    bos = token("bos_token");
  }
  auto parsed = bpe_tokenizer::load((dir / "tokenizer.json").string());
  if (auto* e = std::get_if<std::string>(&parsed)) return *e;
  const auto& tok = *std::get<std::shared_ptr<bpe_tokenizer>>(parsed);

  llama_config c;
  c.architecture = architecture == "qwen3" ? "Qwen3ForCausalLM" : architecture == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  c.qkv_bias = architecture == "qwen2";
  c.qk_norm = architecture == "qwen3";
  c.vocab = tok.vocab_size();
  c.rope_theta = 10000;
  c.max_position = 4096;
  if (auto id = tok.token_to_id(eos)) c.eos_ids = {*id};
  if (auto id = tok.token_to_id(bos)) c.bos_id = *id;
  if (tokenizer_dir.empty()) {
    // As Qwen's: the answer ends at <|im_end|> or at <|endoftext|>.
    const auto end = tok.token_to_id("<|im_end|>"), text_end = tok.token_to_id("<|endoftext|>");
    if (end && text_end) std::ofstream(dir / "generation_config.json") << nlohmann::json{{"eos_token_id", {*end, *text_end}}}.dump(2) << "\n";
  }
  if (size == "tiny") {
    c.hidden = 64, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.head_dim = 16, c.intermediate = 176;
    c.tie_embeddings = false;  // a random tied head would only echo the last input token
  } else if (size == "small") {
    c.hidden = 256, c.layers = 4, c.heads = 8, c.kv_heads = 4, c.head_dim = 32, c.intermediate = 704;
  } else {
    c.hidden = 768, c.layers = 12, c.heads = 12, c.kv_heads = 4, c.head_dim = 64, c.intermediate = 3072;
  }
  const llama_weights w = random_llama(c, 42);
  return save_llama(dir_name, w, size == "100m" ? dtype::bf16 : dtype::f32);
}

std::variant<loaded_model, std::string> load_model_dir(const std::string& dir, const weight_sink& sink, bool text_only) {
  const auto started = std::chrono::steady_clock::now();
  loaded_model m;
  if (text_only) {
    std::ifstream in(fs::path(dir) / "config.json", std::ios::binary);
    if (!in) return dir + ": config.json is missing";
    std::ostringstream text;
    text << in.rdbuf();
    auto cfg = parse_llama_config(text.str());
    if (auto* e = std::get_if<std::string>(&cfg)) return dir + ": " + *e;
    auto w = std::make_shared<llama_weights>();
    w->cfg = std::get<llama_config>(cfg);
    m.weights = std::move(w);
  } else {
    auto w = load_llama(dir, sink);
    if (auto* e = std::get_if<std::string>(&w)) return *e;
    m.weights = std::get<std::shared_ptr<const llama_weights>>(w);
  }
  auto t = bpe_tokenizer::load((fs::path(dir) / "tokenizer.json").string());
  if (auto* e = std::get_if<std::string>(&t)) return *e;
  auto tok = std::get<std::shared_ptr<bpe_tokenizer>>(t);
  if (tok->vocab_size() > m.weights->cfg.vocab)
    return dir + ": tokenizer.json has " + std::to_string(tok->vocab_size()) + " tokens but the model only " +
           std::to_string(m.weights->cfg.vocab);
  auto tmpl = chat_template::from_tokenizer_config((fs::path(dir) / "tokenizer_config.json").string());
  if (auto* e = std::get_if<std::string>(&tmpl)) return *e;
  auto ct = std::make_shared<const chat_template>(std::move(std::get<chat_template>(tmpl)));
  // The turn ends at the template's eos token, else at the model's first eos id.
  if (auto id = tok->token_to_id(ct->eos()); id && !ct->eos().empty()) tok->set_eos(*id);
  else if (!m.weights->cfg.eos_ids.empty()) tok->set_eos(m.weights->cfg.eos_ids[0]);
  // The answer also ends at the model's other end tokens, as Hugging Face's generate and vLLM
  // stop: config.json's eos_token_id and generation_config.json's (Llama 3.1 Instruct's
  // <|eom_id|> and <|end_of_text|> besides <|eot_id|>; Qwen's <|endoftext|> besides <|im_end|>).
  std::vector<token_id> more(m.weights->cfg.eos_ids.begin(), m.weights->cfg.eos_ids.end());
  if (std::ifstream gen(fs::path(dir) / "generation_config.json", std::ios::binary); gen) {
    std::ostringstream text;
    text << gen.rdbuf();
    const auto ids = parse_eos_ids(text.str());
    if (!ids) return dir + ": generation_config.json is not valid JSON";
    more.insert(more.end(), ids->begin(), ids->end());
  }
  tok->set_more_stops(more);
  m.tokenizer = tok;
  m.tmpl = ct;
  m.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return m;
}

}  // namespace kiln::engine
