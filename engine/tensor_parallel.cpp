#include "engine/tensor_parallel.hpp"

namespace kiln::engine {

namespace {

// Rows [rank * rows / size, (rank + 1) * rows / size) of a [rows, cols] matrix (or vector).
std::vector<float> row_slice(const std::vector<float>& m, std::size_t rows, std::size_t cols, int rank, int size) {
  if (m.empty()) return {};
  const std::size_t per = rows / static_cast<std::size_t>(size), first = per * static_cast<std::size_t>(rank);
  return {m.begin() + static_cast<std::ptrdiff_t>(first * cols), m.begin() + static_cast<std::ptrdiff_t>((first + per) * cols)};
}

// Columns of the same slice, every row kept.
std::vector<float> col_slice(const std::vector<float>& m, std::size_t rows, std::size_t cols, int rank, int size) {
  const std::size_t per = cols / static_cast<std::size_t>(size), first = per * static_cast<std::size_t>(rank);
  std::vector<float> out;
  out.reserve(rows * per);
  for (std::size_t r = 0; r < rows; ++r)
    out.insert(out.end(), m.begin() + static_cast<std::ptrdiff_t>(r * cols + first),
               m.begin() + static_cast<std::ptrdiff_t>(r * cols + first + per));
  return out;
}

}  // namespace

std::variant<llama_weights, std::string> shard_for_rank(const llama_weights& w, int rank, int size) {
  const llama_config& c = w.cfg;
  if (size < 1 || rank < 0 || rank >= size) return std::string("rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (c.heads % size || c.kv_heads % size || c.intermediate % size)
    return "tensor parallel size " + std::to_string(size) + " must divide attention heads (" + std::to_string(c.heads) +
           "), KV heads (" + std::to_string(c.kv_heads) + ") and the intermediate size (" + std::to_string(c.intermediate) + ")";
  llama_weights s;
  s.cfg = c;
  s.cfg.heads = c.heads / size;
  s.cfg.kv_heads = c.kv_heads / size;
  s.cfg.intermediate = c.intermediate / size;
  s.embed = w.embed;
  s.final_norm = w.final_norm;
  s.lm_head = w.lm_head;
  const auto D = static_cast<std::size_t>(c.hidden), F = static_cast<std::size_t>(c.intermediate);
  const auto q = static_cast<std::size_t>(c.heads * c.head_dim), kv = static_cast<std::size_t>(c.kv_heads * c.head_dim);
  for (const layer_weights& L : w.layers) {
    layer_weights R;
    R.attn_norm = L.attn_norm;
    R.mlp_norm = L.mlp_norm;
    R.q_norm = L.q_norm;  // per head, the same for every head: whole on each rank
    R.k_norm = L.k_norm;
    R.wq = row_slice(L.wq, q, D, rank, size);
    R.wk = row_slice(L.wk, kv, D, rank, size);
    R.wv = row_slice(L.wv, kv, D, rank, size);
    R.bq = row_slice(L.bq, q, 1, rank, size);
    R.bk = row_slice(L.bk, kv, 1, rank, size);
    R.bv = row_slice(L.bv, kv, 1, rank, size);
    R.wo = col_slice(L.wo, D, q, rank, size);
    R.w_gate = row_slice(L.w_gate, F, D, rank, size);
    R.w_up = row_slice(L.w_up, F, D, rank, size);
    R.w_down = col_slice(L.w_down, D, F, rank, size);
    s.layers.push_back(std::move(R));
  }
  return s;
}

}  // namespace kiln::engine
