#include "actors/pool_runtime.hpp"
#include "actors/pool_text.hpp"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/cuda_probe.hpp"
#include "config/artifact_pull.hpp"
#include "engine/model_dir.hpp"

namespace kiln::actors {

std::optional<std::string> pool_runtime::render(const request& r, std::string& text) const {
  if (tmpl && !r.chat_json.empty()) {
    const auto conversation = nlohmann::ordered_json::parse(r.chat_json, nullptr, false);
    if (conversation.is_discarded() || !conversation.is_object()) return "the conversation is not a JSON object";
    auto out = tmpl->render_json(conversation, static_cast<std::time_t>(r.created_unix));
    if (out.index() == 1) return std::get<1>(out);
    text = std::move(std::get<0>(out));
    return std::nullopt;
  }
  std::vector<engine::chat_message> msgs;
  for (const auto& m : r.messages) msgs.push_back({m.role, m.content});
  if (!tmpl) {
    text = engine::render_chat_prompt(msgs);
    return std::nullopt;
  }
  auto out = tmpl->render(msgs, true);
  if (out.index() == 1) return std::get<1>(out);
  text = std::move(std::get<0>(out));
  return std::nullopt;
}

std::variant<std::vector<std::int32_t>, std::string> pool_runtime::prompt_for(const request& r) const {
  std::string text;
  if (auto e = render(r, text)) return *e;
  const auto ids = tokenizer->encode(text);
  return std::vector<std::int32_t>(ids.begin(), ids.end());
}

namespace {
std::shared_ptr<const pool_runtime> prepare(const config::pool_config& cfg, bool text_only);
}  // namespace

std::shared_ptr<const pool_runtime> prepare_pool(const config::pool_config& cfg) { return prepare(cfg, false); }

std::shared_ptr<const pool_runtime> prepare_pool_text(const config::pool_config& cfg) { return prepare(cfg, true); }

namespace {

std::shared_ptr<const pool_runtime> prepare(const config::pool_config& cfg, bool text_only) {
  auto rt = std::make_shared<pool_runtime>();
  rt->cfg = std::make_shared<const config::pool_config>(cfg);
  switch (cfg.executor) {
    case config::executor_kind::sim:
      rt->tokenizer = std::make_shared<engine::word_tokenizer>();
      return rt;
    case config::executor_kind::cpu: break;
    case config::executor_kind::remote:
      // Its upstreams run the model: kiln needs only the tokenizer (and template) to charge
      // and route, the model directory's when it names one, else the stand-in.
      if (cfg.model_dir.empty()) {
        rt->tokenizer = std::make_shared<engine::word_tokenizer>();
        return rt;
      }
      text_only = true;
      break;
    case config::executor_kind::cuda:
      if (text_only) break;  // no engine runs here: no device needed
      if (auto why = engine::cuda_unavailable_reason(); !why.empty()) {
        rt->failure = why;
        return rt;
      }
      break;
  }
  const std::string dir = cfg.resolved_model_dir();
  if (!cfg.weights_url.empty()) {
    // Pulled ahead at registration; pulled again here only if the copy is gone or altered.
    if (auto why = config::pull_weights(cfg.weights_url, dir, cfg.weights_key, cfg.registered_files); !why.empty()) {
      rt->failure = "version " + cfg.version + " refused: " + why;
      return rt;
    }
  } else if (!cfg.registered_files.empty()) {
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
  // A cpu pool's matrices go to its dtype as they are read (no whole F32 copy at any time).
  std::optional<engine::cpu_model_loader> cpu;
  if (cfg.executor == config::executor_kind::cpu && !text_only) {
    std::optional<kernels::cpu::wtype> type;
    if (kernels::cpu::wtype t; kernels::cpu::parse_wtype(cfg.weights_dtype, t)) type = t;
    cpu.emplace(type);
  }
  auto loaded = engine::load_model_dir(dir, cpu ? cpu->sink() : engine::weight_sink{}, text_only);
  if (auto* e = std::get_if<std::string>(&loaded)) {
    rt->failure = *e;
    return rt;
  }
  auto& m = std::get<engine::loaded_model>(loaded);
  rt->tokenizer = m.tokenizer;
  if (m.weights) rt->vocab = m.weights->cfg.vocab;
  rt->tmpl = m.tmpl;
  if (!cfg.chat_template.empty()) {
    auto t = engine::chat_template::make(cfg.chat_template, m.tmpl->bos(), m.tmpl->eos());
    if (auto* e = std::get_if<std::string>(&t)) {
      rt->failure = "version " + cfg.version + ": its chat template does not parse: " + *e;
      return rt;
    }
    rt->tmpl = std::make_shared<const engine::chat_template>(std::move(std::get<engine::chat_template>(t)));
  }
  if (cpu) {
    // The replicas share the converted model; the F32 vectors left hold norms and biases only.
    rt->cpu = cpu->finish(*m.weights);
    rt->cpu_kv = cfg.kv_dtype == "f32" || (cfg.kv_dtype.empty() && rt->cpu->type == kernels::cpu::wtype::f32)
                     ? engine::kv_dtype::f32
                     : engine::kv_dtype::bf16;
  } else if (!text_only) {
    rt->weights = m.weights;
  }
  rt->load_seconds = m.load_seconds;
  return rt;
}

}  // namespace

}  // namespace kiln::actors
