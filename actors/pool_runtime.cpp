#include "actors/pool_runtime.hpp"

#include <filesystem>

#include "engine/cuda_probe.hpp"
#include "engine/model_dir.hpp"

namespace kiln::actors {

std::variant<std::vector<std::int32_t>, std::string> pool_runtime::prompt_for(const std::vector<chat_turn>& messages) const {
  std::vector<engine::chat_message> msgs;
  for (const auto& m : messages) msgs.push_back({m.role, m.content});
  std::string text;
  if (tmpl) {
    auto r = tmpl->render(msgs, true);
    if (r.index() == 1) return std::get<1>(r);
    text = std::get<0>(r);
  } else {
    text = engine::render_chat_prompt(msgs);
  }
  const auto ids = tokenizer->encode(text);
  return std::vector<std::int32_t>(ids.begin(), ids.end());
}

std::shared_ptr<const pool_runtime> prepare_pool(const config::pool_config& cfg) {
  auto rt = std::make_shared<pool_runtime>();
  rt->cfg = std::make_shared<const config::pool_config>(cfg);
  switch (cfg.executor) {
    case config::executor_kind::sim:
      rt->tokenizer = std::make_shared<engine::word_tokenizer>();
      return rt;
    case config::executor_kind::cpu: break;
    case config::executor_kind::cuda:
      if (auto why = engine::cuda_unavailable_reason(); !why.empty()) {
        rt->failure = why;
        return rt;
      }
      break;
  }
  const std::string dir = cfg.resolved_model_dir();
  if (!cfg.registered_files.empty()) {
    if (auto bad = config::verify_model_dir(dir, cfg.registered_files); !bad.empty()) {
      rt->failure = "the files do not match version " + cfg.version + ": " + bad;
      return rt;
    }
  }
  if (!cfg.make_if_absent.empty() && !std::filesystem::exists(dir)) {
    if (auto e = engine::make_tiny_model(dir, cfg.make_if_absent); !e.empty()) {
      rt->failure = "cannot create " + dir + ": " + e;
      return rt;
    }
  }
  auto loaded = engine::load_model_dir(dir);
  if (auto* e = std::get_if<std::string>(&loaded)) {
    rt->failure = *e;
    return rt;
  }
  auto& m = std::get<engine::loaded_model>(loaded);
  rt->tokenizer = m.tokenizer;
  rt->tmpl = m.tmpl;
  if (!cfg.chat_template.empty()) {
    auto t = engine::chat_template::make(cfg.chat_template, m.tmpl->bos(), m.tmpl->eos());
    if (auto* e = std::get_if<std::string>(&t)) {
      rt->failure = "version " + cfg.version + ": its chat template does not parse: " + *e;
      return rt;
    }
    rt->tmpl = std::make_shared<const engine::chat_template>(std::move(std::get<engine::chat_template>(t)));
  }
  rt->weights = m.weights;
  rt->load_seconds = m.load_seconds;
  return rt;
}

}  // namespace kiln::actors
