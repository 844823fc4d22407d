// ASCII renderer: scales time so the shortest action can hold its label.
#include "core/sim/timeline_ascii.hpp"
#include "core/number_text.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace actorpipe {
namespace {

// Two chunks (the common interleaved / V-shape case) stay short: chunk 1 is lower case.
std::string label_of(const timeline_event& e, int chunks) {
  char op = static_cast<char>(e.act.op);
  if (chunks == 2 && e.chunk == 1) op = static_cast<char>(op - 'A' + 'a');
  std::string s(1, op);
  if (chunks > 2) s += std::to_string(e.act.virtual_stage) + ".";
  return s + std::to_string(e.act.microbatch);
}

}  // namespace

namespace {
// `text` in lines of at most `width` columns, broken at spaces (a word longer than the width
// stands alone), each ended by a newline. The timeline's rows keep to --width; its notes did not.
std::string wrapped(const std::string& text, int width) {
  std::string out, line;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && static_cast<int>(line.size() + 1 + word.size()) > width) {
      out += line + '\n';
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  if (!line.empty()) out += line + '\n';
  return out;
}
}  // namespace

std::string render_ascii_timeline(const sim_result& r, int max_width) {
  if (r.events.empty() || r.makespan <= 0) return "(empty timeline)\n";
  double shortest = r.makespan;
  size_t widest = 1;
  for (const auto& e : r.events) {
    if (e.end > e.start) shortest = std::min(shortest, e.end - e.start);
    widest = std::max(widest, label_of(e, r.chunks).size());
  }
  // Columns for the whole step: each action wide enough for its label, at most what the width
  // holds. Where columns per time unit overflow (costs of 1e-308), times are taken as fractions
  // of the makespan (the row's length overflowed with it).
  // "rank N" padded to the widest rank's name (7 up to rank 99), then the two bars.
  const std::size_t name_width = std::max<std::size_t>(7, 5 + std::to_string(r.stages - 1).size());
  const int usable = std::max(20, max_width - static_cast<int>(name_width) - 2);
  double scale = static_cast<double>(widest + 1) / shortest;  // columns per time unit
  if (r.makespan * scale > usable) scale = usable / r.makespan;
  const bool finite = std::isfinite(scale) && std::isfinite(r.makespan * scale);
  const double wanted = static_cast<double>(widest + 1) * (r.makespan / shortest);
  const double step_cols = finite ? r.makespan * scale : std::isfinite(wanted) ? std::min<double>(wanted, usable) : usable;
  const int cols = std::max(1, static_cast<int>(std::ceil(step_cols - 1e-9)));
  const auto column = [&](double t) {
    return static_cast<int>(std::lround(finite ? t * scale : t / r.makespan * step_cols));
  };

  std::vector<std::string> rows(r.stages, std::string(cols, '.'));
  std::vector<std::vector<int>> drawn(r.stages, std::vector<int>(cols, -1));  // which event each cell shows
  for (size_t i = 0; i < r.events.size(); ++i) {
    const timeline_event& e = r.events[i];
    int b = std::min(column(e.start), cols - 1);  // one at the very end too
    int en = std::max(b + 1, column(e.end));
    en = std::min(en, cols);
    std::string label = label_of(e, r.chunks);
    // Keep one blank column between neighbours when there is room for the label and a gap.
    if (static_cast<int>(label.size()) + 1 > en - b) label.resize(1);
    for (int c = b; c < en; ++c) {
      size_t k = static_cast<size_t>(c - b);
      rows[e.rank][c] = k < label.size() ? label[k] : ' ';
      drawn[e.rank][c] = static_cast<int>(i);
    }
  }
  // Scaled down this far, actions shorter than a column share cells: say how many the rows
  // cannot show (the numbers below them still count every one).
  std::set<int> shown;
  for (const auto& row : drawn) shown.insert(row.begin(), row.end());
  shown.erase(-1);
  const size_t hidden = r.events.size() - shown.size();
  std::string out;
  for (int rank = 0; rank < r.stages; ++rank) {
    std::string name = "rank " + std::to_string(rank);
    name.resize(name_width, ' ');
    out += name + "|" + rows[rank] + "|\n";
  }
  std::string legend = "legend: F forward, B backward, I input-grad, W weight-grad; ";
  legend += r.chunks > 2 ? "label = op, virtual stage.microbatch"
                         : r.chunks == 2 ? "label = op, microbatch; lower case = chunk 1" : "label = op, microbatch";
  legend += "; '.' idle";
  out += wrapped(legend, max_width);
  if (hidden > 0)
    out += wrapped("(" + std::to_string(hidden) + " of " + std::to_string(r.events.size()) +
                       " actions are hidden under others: one column is " +
                       number_text(finite ? 1 / scale : r.makespan / step_cols) +
                       " time units here; the SVG and the Chrome trace draw every one)",
                   max_width);
  return out;
}

}  // namespace actorpipe
