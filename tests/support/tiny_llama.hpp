#pragma once
// The tiny Llama shape the engine tests run on the CPU, and a tokenizer whose tokens are
// their ids ("<id>"), with eos outside the model's 61-token vocabulary.
#include <string>
#include <string_view>
#include <vector>

#include "engine/llama_model.hpp"
#include "engine/tokenizer.hpp"

namespace kiln::test {

inline engine::llama_config tiny_config() {
  engine::llama_config c;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.hidden = 32;
  c.intermediate = 48;
  c.layers = 2;
  c.vocab = 61;
  return c;
}

class id_tokenizer final : public engine::tokenizer {
 public:
  std::vector<engine::token_id> encode(std::string_view) const override { return {}; }
  std::string decode(engine::token_id id) const override { return "<" + std::to_string(id) + ">"; }
  engine::token_id eos() const override { return 1000; }
  int vocab_size() const override { return 61; }
};

}  // namespace kiln::test
