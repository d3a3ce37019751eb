#include "engine/cpu_model.hpp"

#include <chrono>
#include <utility>

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

namespace {

// A layer's norms and biases, F32 as loaded.
void copy_vectors(const layer_weights& l, cpu_layer& o) {
  o.attn_norm = l.attn_norm;
  o.bq = l.bq;
  o.bk = l.bk;
  o.bv = l.bv;
  o.q_norm = l.q_norm;
  o.k_norm = l.k_norm;
  o.mlp_norm = l.mlp_norm;
}

}  // namespace

cpu_model_loader::cpu_model_loader(std::optional<kc::wtype> type, std::optional<kc::isa_path> path)
    : type_(type), path_(path) {}

weight_sink cpu_model_loader::sink() {
  return [this](const llama_weights& w, std::vector<float>& m, std::size_t N, std::size_t K) {
    convert(w, m, N, K);
    std::vector<float>().swap(m);
  };
}

void cpu_model_loader::convert(const llama_weights& w, const std::vector<float>& v, std::size_t N, std::size_t K) {
  const auto started = std::chrono::steady_clock::now();
  if (!type_) {  // the embeddings come first, and tell the files' dtype
    kc::wtype t = kc::wtype::f32;
    kc::parse_wtype(w.stored_dtype, t);
    type_ = t;
  }
  if (m_->layers.size() != w.layers.size()) m_->layers.resize(w.layers.size());
  kc::qmatrix* into = nullptr;
  if (&v == &w.embed) into = w.cfg.tie_embeddings ? &m_->head : &m_->embed;
  else if (&v == &w.lm_head) into = &m_->head;
  for (std::size_t i = 0; i < w.layers.size() && !into; ++i) {
    const layer_weights& l = w.layers[i];
    cpu_layer& o = m_->layers[i];
    const std::pair<const std::vector<float>*, kc::qmatrix*> slots[] = {
        {&l.wq, &o.wq}, {&l.wk, &o.wk}, {&l.wv, &o.wv}, {&l.wo, &o.wo}, {&l.w_gate, &o.w_gate}, {&l.w_up, &o.w_up}, {&l.w_down, &o.w_down}};
    for (const auto& [from, to] : slots)
      if (from == &v) into = to;
  }
  if (!into) return;  // not a matrix the executor multiplies by: left as it is
  *into = kc::qmatrix::from_f32(v.data(), N, K, *type_);
  spent_ += std::chrono::steady_clock::now() - started;
}

std::shared_ptr<const cpu_model> cpu_model_loader::finish(const llama_weights& w) {
  m_->cfg = w.cfg;
  m_->type = type_.value_or(kc::wtype::f32);
  m_->path = path_.value_or(kc::paths_for(m_->type).front());
  m_->final_norm = w.final_norm;
  m_->layers.resize(w.layers.size());
  for (std::size_t i = 0; i < w.layers.size(); ++i) copy_vectors(w.layers[i], m_->layers[i]);
  m_->convert_seconds = std::chrono::duration<double>(spent_).count();
  return std::exchange(m_, std::make_shared<cpu_model>());
}

std::shared_ptr<const cpu_model> make_cpu_model(const llama_weights& w, kc::wtype type) {
  return make_cpu_model(w, type, kc::paths_for(type).front());
}

std::shared_ptr<const cpu_model> make_cpu_model(const llama_weights& w, kc::wtype type, kc::isa_path path) {
  // The loader's conversion, fed the F32 weights already in memory.
  cpu_model_loader loader(type, path);
  const auto D = static_cast<std::size_t>(w.cfg.hidden), F = static_cast<std::size_t>(w.cfg.intermediate);
  const auto qdim = static_cast<std::size_t>(w.cfg.heads * w.cfg.head_dim);
  auto feed = [&](const std::vector<float>& m, std::size_t K) {
    if (!m.empty()) loader.convert(w, m, m.size() / K, K);
  };
  feed(w.embed, D);
  feed(w.lm_head, D);
  for (const layer_weights& l : w.layers) {
    for (const auto* m : {&l.wq, &l.wk, &l.wv, &l.w_gate, &l.w_up}) feed(*m, D);
    feed(l.wo, qdim);
    feed(l.w_down, F);
  }
  return loader.finish(w);
}

}  // namespace kiln::engine
