#include "tests/support/naive_llama.hpp"

#include <cmath>

namespace kiln::test {

namespace {

using vec = std::vector<float>;

vec norm(const vec& x, const vec& w, double eps) {
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  vec out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i] * s * w[i]);
  return out;
}

// y = W x (+ b), W: [rows, x.size()]
vec mul(const vec& W, const vec& x, std::size_t rows, const vec& b = {}) {
  vec y(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    double acc = b.empty() ? 0.0 : b[r];
    for (std::size_t i = 0; i < x.size(); ++i) acc += static_cast<double>(W[r * x.size() + i]) * x[i];
    y[r] = static_cast<float>(acc);
  }
  return y;
}

double inv_freq(const engine::llama_config& c, std::size_t i) {
  const double pi = 3.14159265358979323846;
  double f = std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / c.head_dim);
  if (!c.scaling.llama3) return f;
  const auto& s = c.scaling;
  const double wavelen = 2 * pi / f;
  const double low = s.original_max_position / s.low_freq_factor, high = s.original_max_position / s.high_freq_factor;
  if (wavelen < high) return f;
  if (wavelen > low) return f / s.factor;
  const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * f / s.factor + smooth * f;
}

void rotate(vec& x, int heads, int hd, std::size_t pos, const engine::llama_config& c) {
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < hd / 2; ++i) {
      const double a = static_cast<double>(pos) * static_cast<float>(inv_freq(c, static_cast<std::size_t>(i)));
      float& x0 = x[static_cast<std::size_t>(h * hd + i)];
      float& x1 = x[static_cast<std::size_t>(h * hd + i + hd / 2)];
      const double r0 = x0 * std::cos(a) - x1 * std::sin(a), r1 = x1 * std::cos(a) + x0 * std::sin(a);
      x0 = static_cast<float>(r0);
      x1 = static_cast<float>(r1);
    }
}

}  // namespace

std::vector<float> naive_next_logits_tp(const std::vector<const engine::llama_weights*>& ranks,
                                        const std::vector<engine::token_id>& tokens) {
  const engine::llama_weights& w = *ranks.front();
  const auto& c = w.cfg;  // a rank's config: its own heads and intermediate slice
  const auto D = static_cast<std::size_t>(c.hidden);
  const int hd = c.head_dim, H = c.heads, KVH = c.kv_heads;
  const std::size_t n = tokens.size();
  // Hidden state of every position, layer by layer; K/V kept contiguous per layer and rank.
  std::vector<vec> x(n);
  for (std::size_t p = 0; p < n; ++p)
    x[p] = vec(w.embed.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(tokens[p]) * D),
               w.embed.begin() + static_cast<std::ptrdiff_t>((static_cast<std::size_t>(tokens[p]) + 1) * D));
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const std::size_t R = ranks.size();
    std::vector<std::vector<vec>> q(R, std::vector<vec>(n)), k = q, v = q;
    for (std::size_t r = 0; r < R; ++r) {
      const auto& L = ranks[r]->layers[l];
      for (std::size_t p = 0; p < n; ++p) {
        const vec h = norm(x[p], L.attn_norm, c.rms_eps);
        q[r][p] = mul(L.wq, h, static_cast<std::size_t>(H * hd), L.bq);
        k[r][p] = mul(L.wk, h, static_cast<std::size_t>(KVH * hd), L.bk);
        v[r][p] = mul(L.wv, h, static_cast<std::size_t>(KVH * hd), L.bv);
        if (c.qk_norm)  // Qwen3: per-head RMSNorm of q and k before RoPE
          for (int h = 0; h < std::max(H, KVH); ++h) {
            auto head = [&](vec& x, const vec& w, int i) {
              const vec part(x.begin() + i * hd, x.begin() + (i + 1) * hd);
              const vec normed = norm(part, w, c.rms_eps);
              std::copy(normed.begin(), normed.end(), x.begin() + i * hd);
            };
            if (h < H) head(q[r][p], L.q_norm, h);
            if (h < KVH) head(k[r][p], L.k_norm, h);
          }
        rotate(q[r][p], H, hd, p, c);
        rotate(k[r][p], KVH, hd, p, c);
      }
    }
    for (std::size_t p = 0; p < n; ++p) {
      vec o_sum(D, 0.f);  // the all-reduce after o_proj
      for (std::size_t r = 0; r < R; ++r) {
        vec att(static_cast<std::size_t>(H * hd), 0.f);
        for (int h = 0; h < H; ++h) {
          const int kvh = h / (H / KVH);
          std::vector<double> s(p + 1);
          double mx = -1e300;
          for (std::size_t j = 0; j <= p; ++j) {
            double d = 0;
            for (int i = 0; i < hd; ++i)
              d += static_cast<double>(q[r][p][static_cast<std::size_t>(h * hd + i)]) * k[r][j][static_cast<std::size_t>(kvh * hd + i)];
            s[j] = d / std::sqrt(static_cast<double>(hd));
            mx = std::max(mx, s[j]);
          }
          double sum = 0;
          for (auto& e : s) sum += (e = std::exp(e - mx));
          for (int i = 0; i < hd; ++i) {
            double acc = 0;
            for (std::size_t j = 0; j <= p; ++j) acc += s[j] / sum * v[r][j][static_cast<std::size_t>(kvh * hd + i)];
            att[static_cast<std::size_t>(h * hd + i)] = static_cast<float>(acc);
          }
        }
        const vec o = mul(ranks[r]->layers[l].wo, att, D);
        for (std::size_t i = 0; i < D; ++i) o_sum[i] += o[i];
      }
      for (std::size_t i = 0; i < D; ++i) x[p][i] += o_sum[i];
      vec d_sum(D, 0.f);  // the all-reduce after down_proj
      for (std::size_t r = 0; r < R; ++r) {
        const auto& L = ranks[r]->layers[l];
        const vec h2 = norm(x[p], L.mlp_norm, c.rms_eps);
        const vec g = mul(L.w_gate, h2, static_cast<std::size_t>(c.intermediate));
        const vec u = mul(L.w_up, h2, static_cast<std::size_t>(c.intermediate));
        vec a(g.size());
        for (std::size_t i = 0; i < g.size(); ++i) a[i] = static_cast<float>(g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i]);
        const vec d = mul(L.w_down, a, D);
        for (std::size_t i = 0; i < D; ++i) d_sum[i] += d[i];
      }
      for (std::size_t i = 0; i < D; ++i) x[p][i] += d_sum[i];
    }
  }
  const vec last = norm(x[n - 1], w.final_norm, c.rms_eps);
  const std::vector<float>& head = w.lm_head.empty() ? w.embed : w.lm_head;
  return mul(head, last, static_cast<std::size_t>(c.vocab));
}

std::vector<float> naive_next_logits(const engine::llama_weights& w, const std::vector<engine::token_id>& tokens) {
  return naive_next_logits_tp({&w}, tokens);
}

}  // namespace kiln::test
