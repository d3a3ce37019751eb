#pragma once
// What a pool serves with, prepared once at startup: its tokenizer and chat template, and
// for the cpu executor the loaded weights. A pool whose model cannot be loaded keeps the
// error and answers every request with it; the rest of the node serves on.
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/messages.hpp"
#include "config/config.hpp"
#include "engine/chat_template.hpp"
#include "engine/cpu_executor.hpp"
#include "engine/llama_model.hpp"
#include "engine/tokenizer.hpp"

namespace kiln::actors {

struct pool_runtime {
  std::shared_ptr<const config::pool_config> cfg;
  std::shared_ptr<const engine::tokenizer> tokenizer;
  std::shared_ptr<const engine::chat_template> tmpl;      ///< null: the stand-in template
  std::shared_ptr<const engine::llama_weights> weights;   ///< cuda executor: F32 as loaded
  std::shared_ptr<const engine::cpu_model> cpu;           ///< cpu executor: in its weights_dtype
  engine::kv_dtype cpu_kv = engine::kv_dtype::f32;
  std::string failure;                                     ///< non-empty: cannot serve
  double load_seconds = 0;                                 ///< reading the model from disk
  /// The model's vocabulary (its embedding rows): a prompt's token ids must be below it. 0
  /// where no model files are read (the sim executor's stand-in tokenizer hashes words
  /// above its word list; its cost model has no rows to index).
  int vocab = 0;

  /// The prompt's text (into `text`), or the chat template's error: as prompt_for renders it.
  std::optional<std::string> render(const request& r, std::string& text) const;
  /// The prompt's token ids, or the chat template's error: the request's chat_json through
  /// the model's template when both exist (strftime_now at created_unix), else its messages.
  std::variant<std::vector<std::int32_t>, std::string> prompt_for(const request& r) const;
};

/// Loads (creating the tiny model first where the config asks) what a pool needs.
std::shared_ptr<const pool_runtime> prepare_pool(const config::pool_config& cfg);

}  // namespace kiln::actors
