// Line charts as standalone SVG (a browser opens them; no scripts, no fonts to fetch).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "sim/report.hpp"

namespace kiln::sim {

namespace {

constexpr double kW = 800, kH = 360, kLeft = 70, kRight = 180, kTop = 40, kBottom = 50;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

/// A round step for about five ticks over [0, hi].
double tick_step(double hi) {
  if (hi <= 0) return 1;
  const double raw = hi / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string label(double v) {
  char buf[32];
  if (std::fabs(v) >= 1e6) std::snprintf(buf, sizeof buf, "%.3gM", v / 1e6);
  else if (std::fabs(v) >= 1e4) std::snprintf(buf, sizeof buf, "%.3gk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%g", std::round(v * 1000) / 1000);
  return buf;
}

}  // namespace

std::string svg_chart(const std::string& title, const std::string& y_label, const std::vector<chart_series>& series) {
  double x_hi = 0, y_hi = 0;
  for (const auto& s : series) {
    for (double x : s.x) x_hi = std::max(x_hi, x);
    for (double y : s.y)
      if (std::isfinite(y)) y_hi = std::max(y_hi, y);
  }
  const double xs = tick_step(x_hi), ys = tick_step(y_hi);
  x_hi = std::max(xs, std::ceil(x_hi / xs) * xs);
  y_hi = std::max(ys, std::ceil(y_hi / ys) * ys);
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto px = [&](double x) { return kLeft + x / x_hi * pw; };
  auto py = [&](double y) { return kTop + ph - std::clamp(y, 0.0, y_hi) / y_hi * ph; };
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kW << "\" height=\"" << kH << "\" viewBox=\"0 0 " << kW
    << ' ' << kH << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << kLeft << "\" y=\"22\" font-size=\"15\">" << escape(title) << "</text>\n";
  for (double y = 0; y <= y_hi + ys / 2; y += ys) {
    o << "<line x1=\"" << kLeft << "\" y1=\"" << py(y) << "\" x2=\"" << kLeft + pw << "\" y2=\"" << py(y)
      << "\" stroke=\"#e5e5e5\"/>\n";
    o << "<text x=\"" << kLeft - 6 << "\" y=\"" << py(y) + 4 << "\" text-anchor=\"end\">" << label(y) << "</text>\n";
  }
  for (double x = 0; x <= x_hi + xs / 2; x += xs)
    o << "<text x=\"" << px(x) << "\" y=\"" << kTop + ph + 18 << "\" text-anchor=\"middle\">" << label(x) << "</text>\n";
  o << "<line x1=\"" << kLeft << "\" y1=\"" << kTop + ph << "\" x2=\"" << kLeft + pw << "\" y2=\"" << kTop + ph
    << "\" stroke=\"black\"/>\n";
  o << "<line x1=\"" << kLeft << "\" y1=\"" << kTop << "\" x2=\"" << kLeft << "\" y2=\"" << kTop + ph
    << "\" stroke=\"black\"/>\n";
  o << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kH - 10 << "\" text-anchor=\"middle\">virtual time (s)</text>\n";
  o << "<text transform=\"translate(16," << kTop + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">" << escape(y_label)
    << "</text>\n";
  for (std::size_t i = 0; i < series.size(); ++i) {
    const auto& s = series[i];
    const char* color = kColors[i % (sizeof kColors / sizeof *kColors)];
    o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
    for (std::size_t k = 0; k < s.x.size() && k < s.y.size(); ++k)
      o << (k ? " " : "") << px(s.x[k]) << ',' << py(std::isfinite(s.y[k]) ? s.y[k] : 0);
    o << "\"/>\n";
    const double ly = kTop + 14 + 18 * static_cast<double>(i);
    o << "<line x1=\"" << kLeft + pw + 12 << "\" y1=\"" << ly - 4 << "\" x2=\"" << kLeft + pw + 30 << "\" y2=\"" << ly - 4
      << "\" stroke=\"" << color << "\" stroke-width=\"2\"/>\n";
    o << "<text x=\"" << kLeft + pw + 34 << "\" y=\"" << ly << "\">" << escape(s.name) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace kiln::sim
