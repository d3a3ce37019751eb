#include "cluster/tokenize_cli.hpp"

#include <ctime>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/bpe_tokenizer.hpp"
#include "engine/chat_template.hpp"

namespace kiln::cluster {

namespace {

using json = nlohmann::ordered_json;  // keys keep their order, as the template sees them

struct options {
  std::string model_dir, template_file, chat_file, corpus_file, text;
  bool has_text = false;
  bool as_json = false;
  bool add_special = false;  ///< --text: the post-processor's special tokens too (a BOS, say)
  std::time_t now = std::time(nullptr);
};

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A chat file is an array of messages or an object with messages (and tools, ...).
json conversation_of(const json& j) {
  if (j.is_array()) return json{{"messages", j}};
  return j;
}

json ids_json(const std::vector<engine::token_id>& ids) {
  json a = json::array();
  for (auto id : ids) a.push_back(id);
  return a;
}

struct loaded {
  std::shared_ptr<engine::bpe_tokenizer> tok;
  std::optional<engine::chat_template> tmpl;
  std::string tmpl_error;  ///< why there is no template (asked for only when a chat needs it)
};

std::variant<loaded, std::string> load(const options& o) {
  loaded l;
  auto t = engine::bpe_tokenizer::load(o.model_dir + "/tokenizer.json");
  if (auto* e = std::get_if<std::string>(&t)) return *e;
  l.tok = std::get<0>(t);
  std::string text;
  if (!o.template_file.empty()) {
    auto t = read_file(o.template_file);
    if (!t) return o.template_file + ": cannot open";
    if (t->empty()) return o.template_file + ": empty";
    text = std::move(*t);
  }
  // The model's bos/eos tokens either way; its template unless a file stands in for it.
  auto cfg = engine::chat_template::from_tokenizer_config(o.model_dir + "/tokenizer_config.json", text);
  if (auto* c = std::get_if<engine::chat_template>(&cfg)) {
    l.tmpl = std::move(*c);
  } else {
    l.tmpl_error = std::get<std::string>(cfg);
  }
  return l;
}

// {"prompt", "ids", "count"} or {"error"}.
json render_chat(const loaded& l, const json& conversation, std::time_t now) {
  if (!l.tmpl) return json{{"error", l.tmpl_error}};
  auto r = l.tmpl->render_json(conversation_of(conversation), now);
  if (r.index() == 1) return json{{"error", std::get<1>(r)}};
  const std::string& prompt = std::get<0>(r);
  const auto ids = l.tok->encode(prompt);
  return json{{"prompt", prompt}, {"ids", ids_json(ids)}, {"count", ids.size()}};
}

int fail(std::ostream& err, const std::string& msg) {
  err << "kiln tokenize: " << msg << "\n";
  return 1;
}

}  // namespace

int run_tokenize(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& f = args[i];
    const bool valued = f == "--model-dir" || f == "--template" || f == "--chat" || f == "--corpus" || f == "--text" ||
                        f == "--now";
    if (valued && i + 1 >= args.size()) return err << "kiln tokenize: " << f << " needs a value\n", 2;
    if (f == "--model-dir") o.model_dir = args[++i];
    else if (f == "--template") o.template_file = args[++i];
    else if (f == "--chat") o.chat_file = args[++i];
    else if (f == "--corpus") o.corpus_file = args[++i];
    else if (f == "--text") o.text = args[++i], o.has_text = true;
    else if (f == "--now") o.now = static_cast<std::time_t>(std::atoll(args[++i].c_str()));
    else if (f == "--json") o.as_json = true;
    else if (f == "--add-special-tokens") o.add_special = true;
    else return err << "kiln tokenize: unknown option '" << f << "'\n", 2;
  }
  if (o.model_dir.empty()) return err << "kiln tokenize: --model-dir is required\n", 2;
  if (static_cast<int>(!o.chat_file.empty()) + static_cast<int>(!o.corpus_file.empty()) + static_cast<int>(o.has_text) != 1)
    return err << "kiln tokenize: give one of --chat FILE, --text TEXT or --corpus FILE\n", 2;
  auto ld = load(o);
  if (auto* e = std::get_if<std::string>(&ld)) return fail(err, *e);
  const loaded& l = std::get<loaded>(ld);

  if (o.has_text) {
    const auto ids = o.add_special ? l.tok->encode_special(o.text) : l.tok->encode(o.text);
    if (o.as_json) out << json{{"ids", ids_json(ids)}, {"count", ids.size()}}.dump() << "\n";
    else out << "ids: " << ids_json(ids).dump() << "\ncount: " << ids.size() << "\n";
    return 0;
  }
  const std::string path = o.chat_file.empty() ? o.corpus_file : o.chat_file;
  auto text = read_file(path);
  if (!text) return fail(err, path + ": cannot open");
  const json doc = json::parse(*text, nullptr, false);
  if (doc.is_discarded()) return fail(err, path + ": not JSON");

  if (!o.chat_file.empty()) {
    const json r = render_chat(l, doc, o.now);
    if (r.contains("error")) return fail(err, "the chat template raised: " + r["error"].get<std::string>());
    if (o.as_json) out << r.dump() << "\n";
    else out << "prompt:\n" << r["prompt"].get<std::string>() << "\nids: " << r["ids"].dump() << "\ncount: " << r["count"] << "\n";
    return 0;
  }
  // A corpus: {"texts": [{"name", "text"}], "chats": [{"name", "messages", ...}]} -> the same
  // names with ids (and the rendered prompt, or the template's error).
  json result{{"texts", json::array()}, {"chats", json::array()}};
  for (const auto& t : doc.value("texts", json::array())) {
    if (!t.is_object() || !t.contains("text") || !t["text"].is_string()) return fail(err, path + ": a text needs a \"text\" string");
    const std::string& text = t["text"].get_ref<const std::string&>();
    result["texts"].push_back(json{{"name", t.value("name", "")}, {"ids", ids_json(l.tok->encode(text))},
                                   {"special_ids", ids_json(l.tok->encode_special(text))}});
  }
  for (const auto& c : doc.value("chats", json::array())) {
    if (!c.is_object()) return fail(err, path + ": a chat must be an object");
    json conv = c;
    conv.erase("name");
    json r = render_chat(l, conv, o.now);
    r["name"] = c.value("name", "");
    result["chats"].push_back(std::move(r));
  }
  out << result.dump() << "\n";
  return 0;
}

}  // namespace kiln::cluster
