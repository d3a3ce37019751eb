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

std::variant<chat_template, std::string> chat_template::from_tokenizer_config(const std::string& path,
                                                                             std::string_view template_text) {
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
  std::string text(template_text);
  static const nlohmann::json absent;
  const nlohmann::json& given = j.contains("chat_template") ? j["chat_template"] : absent;
  if (text.empty() && given.is_string()) text = given.get<std::string>();
  if (text.empty() && given.is_array())
    for (const auto& t : given)
      if (t.is_object() && t.value("name", std::string()) == "default" && t.contains("template") && t["template"].is_string())
        text = t["template"].get<std::string>();
  if (text.empty()) return path + ": no chat_template";
  auto t = make(text, token("bos_token"), token("eos_token"));
  if (auto* e = std::get_if<std::string>(&t)) return (template_text.empty() ? path : std::string("the given template")) + ": " + *e;
  return t;
}

namespace {

jinja::value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return jinja::value::none();
    case nlohmann::ordered_json::value_t::boolean: return jinja::value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return jinja::value(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return jinja::value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return jinja::value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::list l;
      for (const auto& x : j) l.push_back(from_json(x));
      return jinja::value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d[it.key()] = from_json(it.value());
      return jinja::value(std::move(d));
    }
    default: return {};
  }
}

std::variant<std::string, std::string> rendered(std::variant<std::string, jinja::template_error> out) {
  if (auto* e = std::get_if<jinja::template_error>(&out))
    return std::variant<std::string, std::string>(std::in_place_index<1>, e->message);
  return std::variant<std::string, std::string>(std::in_place_index<0>, std::move(std::get<std::string>(out)));
}

}  // namespace

std::variant<std::string, std::string> chat_template::render_json(const nlohmann::ordered_json& conversation,
                                                                  std::time_t now) const {
  jinja::dict ctx{{"bos_token", jinja::value(bos_)}, {"eos_token", jinja::value(eos_)},
                  {"add_generation_prompt", jinja::value(true)}};
  if (conversation.is_object())
    for (auto it = conversation.begin(); it != conversation.end(); ++it) ctx[it.key()] = from_json(it.value());
  return rendered(program_.render(ctx, now));
}

std::variant<std::string, std::string> chat_template::render(const std::vector<chat_message>& messages,
                                                             bool add_generation_prompt) const {
  jinja::list msgs;
  for (const auto& m : messages) msgs.push_back(jinja::value(jinja::dict{{"role", m.role}, {"content", m.content}}));
  const jinja::dict ctx{{"messages", jinja::value(std::move(msgs))},
                        {"bos_token", jinja::value(bos_)},
                        {"eos_token", jinja::value(eos_)},
                        {"add_generation_prompt", jinja::value(add_generation_prompt)}};
  return rendered(program_.render(ctx));
}

}  // namespace kiln::engine
