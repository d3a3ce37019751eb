#include "engine/cpu_model.hpp"

#include <chrono>

namespace kiln::engine {

namespace kc = kiln::kernels::cpu;

std::size_t cpu_model::bytes() const {
  std::size_t b = head.bytes();
  for (const auto& l : layers)
    for (const auto* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) b += m->bytes();
  return b;
}

std::string cpu_model::describe() const {
  return std::string(kc::to_string(type)) + " weights on " + std::string(kc::to_string(path)) +
         " (cpu: " + kc::features().summary() + ")";
}

std::shared_ptr<const cpu_model> make_cpu_model(const llama_weights& w, kc::wtype type) {
  return make_cpu_model(w, type, kc::paths_for(type).front());
}

std::shared_ptr<const cpu_model> make_cpu_model(const llama_weights& w, kc::wtype type, kc::isa_path path) {
  const auto started = std::chrono::steady_clock::now();
  auto m = std::make_shared<cpu_model>();
  const llama_config& c = w.cfg;
  m->cfg = c;
  m->type = type;
  m->path = path;
  const auto D = static_cast<std::size_t>(c.hidden), F = static_cast<std::size_t>(c.intermediate);
  const auto V = static_cast<std::size_t>(c.vocab), hd = static_cast<std::size_t>(c.head_dim);
  const std::size_t qdim = static_cast<std::size_t>(c.heads) * hd, kvdim = static_cast<std::size_t>(c.kv_heads) * hd;
  auto conv = [&](const std::vector<float>& src, std::size_t N, std::size_t K) { return kc::qmatrix::from_f32(src.data(), N, K, type); };
  m->head = conv(w.lm_head.empty() ? w.embed : w.lm_head, V, D);
  if (!w.lm_head.empty()) m->embed = conv(w.embed, V, D);
  m->final_norm = w.final_norm;
  for (const layer_weights& l : w.layers) {
    cpu_layer o;
    o.attn_norm = l.attn_norm;
    o.bq = l.bq;
    o.bk = l.bk;
    o.bv = l.bv;
    o.q_norm = l.q_norm;
    o.k_norm = l.k_norm;
    o.mlp_norm = l.mlp_norm;
    o.wq = conv(l.wq, qdim, D);
    o.wk = conv(l.wk, kvdim, D);
    o.wv = conv(l.wv, kvdim, D);
    o.wo = conv(l.wo, D, qdim);
    o.w_gate = conv(l.w_gate, F, D);
    o.w_up = conv(l.w_up, F, D);
    o.w_down = conv(l.w_down, D, F);
    m->layers.push_back(std::move(o));
  }
  m->convert_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return m;
}

}  // namespace kiln::engine
