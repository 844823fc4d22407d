// SVG renderer (plain text output, no dependency).
#include "core/sim/timeline_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/number_text.hpp"

namespace actorpipe {
namespace {

// Base colour per op; later chunks are mixed towards white so chunks stay distinguishable.
void colour_of(op_kind op, int chunk, int chunks, int rgb[3]) {
  static const int base[4][3] = {{52, 101, 164}, {78, 154, 6}, {0, 150, 136}, {204, 120, 0}};
  int k = op == op_kind::forward ? 0 : op == op_kind::backward ? 1 : op == op_kind::input_grad ? 2 : 3;
  double mix = chunks > 1 ? 0.55 * chunk / (chunks - 1) : 0.0;
  for (int c = 0; c < 3; ++c) rgb[c] = static_cast<int>(std::lround(base[k][c] + (255 - base[k][c]) * mix));
}

// Text for XML: <, >, & and " escaped, control characters XML 1.0 forbids dropped, and a byte
// that does not begin a well-formed UTF-8 sequence (a file name in Latin-1) is U+FFFD.
std::string escape(const std::string& s) {
  std::string o;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + static_cast<std::size_t>(n) <= s.size();
    for (int k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok && n > 1) {  // no overlong forms, surrogates or code points past U+10FFFF
      const auto b1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(n == 2 && b < 0xC2) && !(b == 0xE0 && b1 < 0xA0) && !(b == 0xED && b1 >= 0xA0) &&
           !(b == 0xF0 && b1 < 0x90) && !(b == 0xF4 && b1 >= 0x90) && b <= 0xF4;
    }
    if (!ok) {
      o += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    const char c = s[i];
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else if (n > 1 || b >= 0x20 || c == '\t' || c == '\n' || c == '\r') o.append(s, i, static_cast<std::size_t>(n));
    i += static_cast<std::size_t>(n);
  }
  return o;
}

}  // namespace

std::string render_svg_timeline(const sim_result& r) {
  const double left = 64, top = 40, lane = 26, gap = 4;
  // About 1100 px for the whole step, but the shortest action 2 to 40 px wide: a long plan
  // grows wider, a short one stays legible, in whatever unit the costs are (a fixed 2-40 px per
  // time unit drew costs of 0.02 as 1 px boxes in a 105 px picture).
  double shortest = 0;
  for (const auto& e : r.events)
    if (e.end > e.start && (shortest == 0 || e.end - e.start < shortest)) shortest = e.end - e.start;
  // At most 16000 px: one action far shorter than the rest (a cost of 0.0001 beside 1s) made
  // pictures hundreds of thousands of pixels wide; past the cap such actions are 1 px. Where px
  // per time unit overflow (costs of 1e-308), times are drawn as fractions of the makespan.
  const double unit = shortest > 0 ? shortest : 1;
  const double scale = r.makespan > 0 ? std::min(std::clamp(1100.0 / r.makespan, 2.0 / unit, 40.0 / unit), 16000.0 / r.makespan)
                                      : 1.0;  // px per time unit
  const bool finite = std::isfinite(scale) && std::isfinite(r.makespan * scale);
  const double in_step = r.makespan / unit;  // the shortest actions a step would hold
  const double plot_w = finite ? r.makespan * scale
                               : std::min(std::clamp(1100.0, 2.0 * in_step, 40.0 * in_step), 16000.0);
  const auto px = [&](double t) { return finite ? t * scale : t / r.makespan * plot_w; };  // from the left edge
  const double width = std::max(left + plot_w + 20, 560.0);  // room for the title and the legend
  const double lanes_h = r.stages * (lane + gap);
  const double height = top + lanes_h + 70;
  std::string s;
  s += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + printf_text("%.0f", width) + "\" height=\"" +
       printf_text("%.0f", height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  char title[256];
  std::snprintf(title, sizeof title, "%s: stages=%d, chunks=%d, microbatches=%d; makespan %s, bubble %.1f%%",
                r.schedule.c_str(), r.stages, r.chunks, r.microbatches, number_text(r.makespan).c_str(),
                100.0 * r.bubble_ratio);
  s += "<text x=\"" + printf_text("%.0f", left) + "\" y=\"22\" font-size=\"14\">" + escape(title) + "</text>\n";
  for (int rank = 0; rank < r.stages; ++rank) {
    double y = top + rank * (lane + gap);
    s += "<text x=\"6\" y=\"" + printf_text("%.1f", y + lane * 0.65) + "\">rank " + std::to_string(rank) + "</text>\n";
    s += "<rect x=\"" + printf_text("%.1f", left) + "\" y=\"" + printf_text("%.1f", y) + "\" width=\"" + printf_text("%.1f", plot_w) +
         "\" height=\"" + printf_text("%.1f", lane) + "\" fill=\"#f2f2f2\"/>\n";
  }
  for (const auto& e : r.events) {
    double x = left + px(e.start), w = std::max(1.0, px(e.end) - px(e.start));
    double y = top + e.rank * (lane + gap);
    int rgb[3];
    colour_of(e.act.op, e.chunk, r.chunks, rgb);
    char fill[16];
    std::snprintf(fill, sizeof fill, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
    s += "<rect x=\"" + printf_text("%.2f", x) + "\" y=\"" + printf_text("%.1f", y) + "\" width=\"" + printf_text("%.2f", w) +
         "\" height=\"" + printf_text("%.1f", lane) + "\" fill=\"" + fill + "\" stroke=\"white\" stroke-width=\"0.6\">";
    s += "<title>" + to_string(e.act) + " on rank " + std::to_string(e.rank) + ": " + printf_text("%.4g", e.start) + " to " +
         printf_text("%.4g", e.end) + "</title></rect>\n";
    if (w >= 11) {
      double luminance = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2];
      s += "<text x=\"" + printf_text("%.2f", x + w / 2) + "\" y=\"" + printf_text("%.1f", y + lane * 0.65) +
           "\" text-anchor=\"middle\" fill=\"" + (luminance > 150 ? "black" : "white") + "\">" +
           std::to_string(e.act.microbatch) + "</text>\n";
    }
  }
  // Time axis with about ten ticks at round numbers.
  double axis_y = top + lanes_h + 4;
  s += "<line x1=\"" + printf_text("%.1f", left) + "\" y1=\"" + printf_text("%.1f", axis_y) + "\" x2=\"" + printf_text("%.1f", left + plot_w) +
       "\" y2=\"" + printf_text("%.1f", axis_y) + "\" stroke=\"black\"/>\n";
  double raw = r.makespan / 10, step = 1;
  if (raw > 0) {
    double mag = std::pow(10.0, std::floor(std::log10(raw)));
    step = raw / mag < 2 ? mag : raw / mag < 5 ? 2 * mag : 5 * mag;
  }
  // Counted, not summed: a step under 1e-9 walked 1e11 ticks (the bound was absolute).
  for (int i = 0; i <= 100 && step > 0 && i * step <= r.makespan * (1 + 1e-9); ++i) {
    const double t = i * step;
    double x = left + px(t);
    s += "<line x1=\"" + printf_text("%.1f", x) + "\" y1=\"" + printf_text("%.1f", axis_y) + "\" x2=\"" + printf_text("%.1f", x) + "\" y2=\"" +
         printf_text("%.1f", axis_y + 4) + "\" stroke=\"black\"/>";
    s += "<text x=\"" + printf_text("%.1f", x) + "\" y=\"" + printf_text("%.1f", axis_y + 16) + "\" text-anchor=\"middle\">" +
         printf_text("%g", t) + "</text>\n";
  }
  // Legend.
  double ly = axis_y + 34, lx = left;
  const std::pair<op_kind, const char*> legend[] = {{op_kind::forward, "F forward"},
                                                     {op_kind::backward, "B backward"},
                                                     {op_kind::input_grad, "I input-grad"},
                                                     {op_kind::weight_grad, "W weight-grad"}};
  for (auto& [op, text] : legend) {
    bool used = std::any_of(r.events.begin(), r.events.end(), [op = op](const timeline_event& e) { return e.act.op == op; });
    if (!used) continue;
    int rgb[3];
    colour_of(op, 0, 1, rgb);
    char fill[16];
    std::snprintf(fill, sizeof fill, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
    s += "<rect x=\"" + printf_text("%.1f", lx) + "\" y=\"" + printf_text("%.1f", ly - 10) + "\" width=\"12\" height=\"12\" fill=\"" +
         fill + "\"/><text x=\"" + printf_text("%.1f", lx + 16) + "\" y=\"" + printf_text("%.1f", ly) + "\">" + text + "</text>\n";
    lx += 120;
  }
  if (r.chunks > 1)
    s += "<text x=\"" + printf_text("%.1f", lx) + "\" y=\"" + printf_text("%.1f", ly) +
         "\">lighter = later chunk; number = microbatch</text>\n";
  else
    s += "<text x=\"" + printf_text("%.1f", lx) + "\" y=\"" + printf_text("%.1f", ly) + "\">number = microbatch</text>\n";
  s += "</svg>\n";
  return s;
}

}  // namespace actorpipe
