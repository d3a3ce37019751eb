#include "engine/chat_template.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kiln::engine {

std::variant<chat_template, std::string> chat_template::make(std::string_view text, std::string bos, std::string eos) {
  auto p = jinja::program::parse(text);
  if (auto* e = std::get_if<jinja::template_error>(&p)) return e->message;
  chat_template t;
  t.program_ = std::move(std::get<jinja::program>(p));
  t.bos_ = std::move(bos);
  t.eos_ = std::move(eos);
  return t;
}

std::variant<chat_template, std::string> chat_template::from_tokenizer_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return path + ": cannot open";
  std::ostringstream s;
  s << in.rdbuf();
  const auto j = nlohmann::json::parse(s.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return path + ": not a JSON object";
  auto token = [&](const char* key) -> std::string {
    if (!j.contains(key)) return {};
    const auto& v = j[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return {};
  };
  std::string text;
  if (j.contains("chat_template") && j["chat_template"].is_string()) {
    text = j["chat_template"].get<std::string>();
  } else if (j.contains("chat_template") && j["chat_template"].is_array()) {
    for (const auto& t : j["chat_template"])
      if (t.is_object() && t.value("name", std::string()) == "default" && t.contains("template") && t["template"].is_string())
        text = t["template"].get<std::string>();
  }
  if (text.empty()) return path + ": no chat_template";
  auto t = make(text, token("bos_token"), token("eos_token"));
  if (auto* e = std::get_if<std::string>(&t)) return path + ": " + *e;
  return t;
}

std::variant<std::string, std::string> chat_template::render(const std::vector<chat_message>& messages,
                                                             bool add_generation_prompt) const {
  jinja::list msgs;
  for (const auto& m : messages) msgs.push_back(jinja::value(jinja::dict{{"role", m.role}, {"content", m.content}}));
  const jinja::dict ctx{{"messages", jinja::value(std::move(msgs))},
                        {"bos_token", jinja::value(bos_)},
                        {"eos_token", jinja::value(eos_)},
                        {"add_generation_prompt", jinja::value(add_generation_prompt)}};
  auto out = program_.render(ctx);
  if (auto* e = std::get_if<jinja::template_error>(&out)) return std::variant<std::string, std::string>(std::in_place_index<1>, e->message);
  return std::variant<std::string, std::string>(std::in_place_index<0>, std::get<std::string>(out));
}

}  // namespace kiln::engine
