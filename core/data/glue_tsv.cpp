// Reading GLUE TSV files: split rows on tabs only (no CSV quoting, as the GLUE files are written),
// check every row against the layout, and turn labels into ids.
#include "core/data/glue_tsv.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include "core/data/wordpiece.hpp"
#include "core/log.hpp"

namespace actorpipe {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::invalid_argument("glue file '" + path + "' " + what);
}

[[noreturn]] void fail_line(const std::string& path, int line, const std::string& what) {
  fail(path, "line " + std::to_string(line) + ": " + what);
}

std::ifstream open(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory, not a TSV file");
  // Read more than once (its header, then its rows): a pipe would give its header only, a
  // FIFO with no writer would hang, /dev/zero would fill the memory.
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    fail(path, "is not a regular file (a pipe or a device?): give a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot be opened (missing or unreadable)");
  return f;
}

// UTF-16 (Excel's "Unicode Text", Windows tools): its byte-order mark, or the NUL bytes of
// ASCII text in it. Read as bytes it parsed into one column with a leftover byte at the end.
void check_not_utf16(const std::string& path, const std::string& start) {
  const bool mark = start.compare(0, 2, "\xFF\xFE") == 0 || start.compare(0, 2, "\xFE\xFF") == 0;
  const std::size_t line_end = start.find('\n');
  if (mark || start.substr(0, line_end).find('\0') != std::string::npos)
    fail(path, std::string(mark ? "starts with a UTF-16 byte-order mark" : "holds NUL bytes on its first line") +
                   ": is it UTF-16 (Excel's \"Unicode Text\")? Convert it to UTF-8 (iconv -f utf-16 -t utf-8 IN > OUT)");
}

void strip_line_end(std::string& line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
}

void strip_bom(std::string& line) {
  if (line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
}

// The text's lines without line ends; line i is lines[i - 1]. Lines end with LF or CRLF; a file
// with more lone CRs than LFs (old Mac line ends, perhaps with an LF added at the end by a
// tool) has CR line ends too. In a file with LF line ends a CR alone stays text (the tokenizer
// takes it for a space).
// At most `max_lines` of them (the header needs one; the line ends are the whole text's).
std::vector<std::string> split_lines(const std::string& text, std::size_t max_lines = std::string::npos) {
  const auto lf = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
  std::size_t lone_cr = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\r'));
  for (std::size_t at = text.find("\r\n"); at != std::string::npos; at = text.find("\r\n", at + 2)) --lone_cr;
  const char* const ends = lone_cr > lf ? "\r\n" : "\n";
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size() && lines.size() < max_lines) {
    std::size_t end = text.find_first_of(ends, start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + (text.compare(end, 2, "\r\n") == 0 ? 2 : 1);  // CRLF is one end
  }
  for (std::string& l : lines) strip_line_end(l);  // LF files: CRLF
  if (!lines.empty()) strip_bom(lines.front());
  return lines;
}

std::string read_text(const std::string& path) {
  std::ifstream f = open(path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) fail(path, "could not be read to the end");
  check_not_utf16(path, text.substr(0, std::min<std::size_t>(text.size(), 4096)));
  return text;
}

// The file's lines (split_lines). Trailing empty lines are dropped.
// A file with lines that are not valid UTF-8 is read (such bytes vanish in tokenization) with a
// warning naming it, the first such line and their count, which *invalid_utf8 and
// *first_invalid_utf8 get.
std::vector<std::string> read_lines(const std::string& path, int* invalid_utf8 = nullptr,
                                    int* first_invalid_utf8 = nullptr) {
  std::vector<std::string> lines = split_lines(read_text(path));
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  int bad = 0, first_bad = 0;
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (!is_valid_utf8(lines[i]) && bad++ == 0) first_bad = static_cast<int>(i + 1);
  if (bad > 0)
    log_warn("glue file '" + path + "': " + std::to_string(bad) + (bad == 1 ? " line holds" : " lines hold") +
             " bytes that are not valid UTF-8, the first on line " + std::to_string(first_bad) +
             "; the tokenizer drops them (\"caf\\xe9\" reads as \"caf\"). Is the file Latin-1 or another "
             "encoding? Convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8)");
  if (invalid_utf8 != nullptr) *invalid_utf8 = bad;
  if (first_invalid_utf8 != nullptr) *first_invalid_utf8 = first_bad;
  return lines;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  for (;;) {
    const std::size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return fields;
    start = tab + 1;
  }
}

int index_of(const std::vector<std::string>& header, const char* name) {
  const auto it = std::find(header.begin(), header.end(), name);
  return it == header.end() ? -1 : static_cast<int>(it - header.begin());
}

// Whether a label is written as a decimal with a zero fraction ("1.0", "0.00": a float column
// exported by pandas), which parse_integer_label reads as the integer it equals.
bool zero_fraction(const std::string& s) {
  const std::size_t dot = s.find('.');
  return dot != std::string::npos && dot + 1 < s.size() && s.find_first_not_of('0', dot + 1) == std::string::npos;
}

// A decimal label of at most 4 digits (and a leading '-'; a zero fraction allowed), else
// nothing: integer labels become ids 0..max, so a larger number is more likely a score or a
// name than a class.
std::optional<std::int32_t> parse_integer_label(const std::string& s) {
  const bool negative = !s.empty() && s[0] == '-';
  std::string digits = negative ? s.substr(1) : s;
  if (zero_fraction(digits)) digits.erase(digits.find('.'));
  if (digits.empty() || digits.size() > 4) return std::nullopt;
  std::int32_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return negative ? -v : v;
}

std::string list_labels(const glue_labels& labels) {
  std::string out;
  const int shown = std::min(labels.count(), 10);
  for (int i = 0; i < shown; ++i) out += (i > 0 ? ", " : "") + labels.names[i];
  if (labels.count() > shown) out += ", ... (" + std::to_string(labels.count()) + " in all)";
  return out;
}

void check_columns(const glue_columns& c) {
  // A single-sentence task's columns are two (text_b -1 is "none", not a column to show).
  const bool pair = c.text_b != -1;
  const auto bad = [&](const std::string& what) {
    throw std::invalid_argument("glue columns " + what + ": got text_a=" + std::to_string(c.text_a) +
                                (pair ? ", text_b=" + std::to_string(c.text_b) : std::string()) +
                                ", label=" + std::to_string(c.label));
  };
  if (c.text_a < 0 || c.label < 0) bad("text_a and label must be >= 0");
  if (c.text_b < -1) bad("text_b must be >= 0, or -1 for a single-sentence task");
  if (c.text_a == c.label || c.text_b == c.label || c.text_b == c.text_a)
    bad(pair ? "must be three different columns" : "must be two different columns");
}

std::string column_role(const glue_columns& c, int column) {
  if (column == c.label) return "the label";
  if (column == c.text_b) return "the second sentence";
  return "the first sentence";
}

struct raw_row {
  glue_example example;
  std::string label;
};

struct raw_rows {
  std::vector<raw_row> rows;
  int invalid_utf8_lines = 0;
  int first_invalid_utf8_line = 0;
};

// Every example with its label as written; the label ids are filled in by the caller.
raw_rows read_rows(const std::string& path, const glue_columns& columns) {
  check_columns(columns);
  raw_rows out;
  const std::vector<std::string> lines = read_lines(path, &out.invalid_utf8_lines, &out.first_invalid_utf8_line);
  if (lines.empty()) fail(path, "is empty: expected tab-separated rows");
  if (columns.header && lines.size() == 1) fail(path, "has a header (line 1) but no examples");

  const int last_needed = std::max({columns.text_a, columns.text_b, columns.label});
  // Every row must have as many columns as the header (or, without one, the first row): GLUE
  // files are not quoted, so a tab inside a sentence or a lost field shifts the columns silently.
  const std::size_t first_row = columns.header ? 1 : 0;
  const std::size_t width = split_tabs(lines[0]).size();
  if (static_cast<int>(width) <= last_needed)
    fail_line(path, 1,
              std::string(columns.header ? "the header" : "the first row") + " has " + std::to_string(width) +
                  " column(s); " + column_role(columns, last_needed) + " is column " + std::to_string(last_needed) +
                  " (0-based), so at least " + std::to_string(last_needed + 1) + " are needed");
  const std::string like = columns.header ? "the header (line 1)" : "line 1";

  std::vector<raw_row>& rows = out.rows;
  rows.reserve(lines.size() - first_row);
  for (std::size_t i = first_row; i < lines.size(); ++i) {
    const int line = static_cast<int>(i + 1);
    if (lines[i].empty()) fail_line(path, line, "is empty (only lines at the end of the file may be)");
    std::vector<std::string> fields = split_tabs(lines[i]);
    if (fields.size() < width)
      fail_line(path, line, "has " + std::to_string(fields.size()) + " column(s), fewer than the " +
                                std::to_string(width) + " of " + like);
    if (fields.size() > width)
      fail_line(path, line, "has " + std::to_string(fields.size()) + " columns, more than the " +
                                std::to_string(width) + " of " + like +
                                " (GLUE files are not quoted: is there a tab inside a sentence?)");
    raw_row r;
    r.label = std::move(fields[columns.label]);
    if (r.label.empty()) fail_line(path, line, "the label (column " + std::to_string(columns.label) + ") is empty");
    r.example.text_a = std::move(fields[columns.text_a]);
    if (columns.text_b >= 0) r.example.text_b = std::move(fields[columns.text_b]);
    r.example.line = line;
    rows.push_back(std::move(r));
  }
  return out;
}

glue_dataset make_dataset(const std::string& path, const glue_columns& columns, glue_labels labels, raw_rows raw) {
  std::vector<raw_row>& rows = raw.rows;
  glue_dataset d;
  d.path = path;
  d.invalid_utf8_lines = raw.invalid_utf8_lines;
  d.first_invalid_utf8_line = raw.first_invalid_utf8_line;
  d.columns = columns;
  d.labels = std::move(labels);
  d.examples.reserve(rows.size());
  for (raw_row& r : rows) {
    r.example.label = d.labels.id_of(r.label);
    const bool gap = std::find(d.labels.without_rows.begin(), d.labels.without_rows.end(), r.example.label) !=
                     d.labels.without_rows.end();
    if (r.example.label < 0 || gap)
      fail_line(path, r.example.line,
                "label '" + r.label + "' is not one of the train file's labels (" + list_labels(d.labels) + ")" +
                    (gap ? ": no training row has it" : ""));
    d.examples.push_back(std::move(r.example));
  }
  return d;
}

}  // namespace

std::int32_t glue_labels::id_of(const std::string& label) const {
  std::string key = label;
  if (integer) {
    const auto v = parse_integer_label(label);
    if (!v) return -1;
    key = std::to_string(*v);
  }
  const auto it = std::find(names.begin(), names.end(), key);
  return it == names.end() ? -1 : static_cast<std::int32_t>(it - names.begin());
}

namespace {
std::string lower_case(std::string name) {
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return name;
}

// The column a generic header names "label" (in any case), or -1.
int column_named_label(const std::vector<std::string>& header) {
  for (std::size_t i = 0; i < header.size(); ++i)
    if (lower_case(header[i]) == "label") return static_cast<int>(i);
  return -1;
}
}  // namespace

glue_columns glue_columns_for_header(const std::vector<std::string>& header) {
  struct layout {
    const char* name;
    const char* a;
    const char* b;  // nullptr: single sentence
    const char* label;
  };
  // Most specific first: QNLI's header also holds SST-2's "sentence" and "label".
  static const layout layouts[] = {
      {"MNLI", "sentence1", "sentence2", "gold_label"}, {"RTE/WNLI", "sentence1", "sentence2", "label"},
      {"QNLI", "question", "sentence", "label"},         {"QQP", "question1", "question2", "is_duplicate"},
      {"MRPC", "#1 String", "#2 String", "Quality"},     {"SST-2", "sentence", nullptr, "label"},
  };
  for (const layout& l : layouts) {
    const int a = index_of(header, l.a), label = index_of(header, l.label);
    const int b = l.b != nullptr ? index_of(header, l.b) : -1;
    if (a < 0 || label < 0 || (l.b != nullptr && b < 0)) continue;
    glue_columns c;
    c.text_a = a;
    c.text_b = b;
    c.label = label;
    c.layout = l.name;
    return c;
  }
  // STS-B (sentence1, sentence2, score): a similarity on a real scale is no class.
  if (index_of(header, "sentence1") >= 0 && index_of(header, "sentence2") >= 0 && index_of(header, "score") >= 0)
    throw std::invalid_argument("the header names STS-B's columns (sentence1, sentence2, score): its score is a "
                                "similarity on a real scale (regression), and --model bert classifies; STS-B is not "
                                "supported");
  if (header.size() < 2)
    throw std::invalid_argument("a GLUE header needs at least two columns (a sentence and a label): got " +
                                std::to_string(header.size()));
  glue_columns c;
  const int named = column_named_label(header);
  c.label = named >= 0 ? named : static_cast<int>(header.size()) - 1;
  // The text: a column named as text is ("text", "sentence", ...), else the first other one
  // that is not named as an id ("id, text, label" trained on the ids).
  c.text_a = -1;
  for (const char* text : {"text", "sentence", "sentence1", "question", "review", "content", "document"})
    for (std::size_t i = 0; i < header.size() && c.text_a < 0; ++i)
      if (static_cast<int>(i) != c.label && lower_case(header[i]) == text) c.text_a = static_cast<int>(i);
  for (std::size_t i = 0; i < header.size() && c.text_a < 0; ++i) {
    const std::string name = lower_case(header[i]);
    if (static_cast<int>(i) != c.label && name != "id" && name != "idx" && name != "index" && name != "guid")
      c.text_a = static_cast<int>(i);
  }
  if (c.text_a < 0) c.text_a = c.label == 0 ? 1 : 0;
  // Named in the summary: an id column first is taken as the text ("id, text, label"), which
  // trained on the ids without a word.
  c.layout = "generic: text '" + header[c.text_a] + "', label '" + header[c.label] + "'";
  return c;
}

namespace {
// CoLA's files have no header: source, label (0/1), the original's mark ("" or "*"), sentence.
bool is_cola_row(const std::vector<std::string>& fields) {
  return fields.size() == 4 && (fields[1] == "0" || fields[1] == "1") && (fields[2].empty() || fields[2] == "*") &&
         !fields[3].empty();
}

glue_columns cola_columns() {
  glue_columns c;
  c.text_a = 3;
  c.label = 1;
  c.header = false;
  c.layout = "CoLA (no header: source, label, mark, sentence)";
  return c;
}

// The file's lines (at most `max_lines`), as read_rows reads them (the same line ends), without
// its warnings.
std::vector<std::string> lines_of(const std::string& path, std::size_t max_lines = std::string::npos) {
  std::vector<std::string> lines = split_lines(read_text(path), max_lines);
  if (lines.empty()) fail(path, "is empty: expected a header line");
  return lines;
}

std::vector<std::string> header_of(const std::string& path) { return split_tabs(lines_of(path, 1).front()); }

// Whether line 1 is an example rather than a header: its cell in the label column is an integer
// label, or the label of a later line. A header names that column ("label", "Quality"); a file
// without one lost its first example to it, and its cells were taken for column names.
bool line_one_is_example(const std::vector<std::string>& lines, int label) {
  const std::vector<std::string> first = split_tabs(lines.front());
  if (label < 0 || label >= static_cast<int>(first.size()) || first[label].empty()) return false;
  if (parse_integer_label(first[label])) return true;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> fields = split_tabs(lines[i]);
    if (label < static_cast<int>(fields.size()) && fields[label] == first[label]) return true;
  }
  return false;
}

std::string headerless_layout(const glue_columns& c, const std::string& first_label) {
  return "no header (line 1 is an example: its label '" + first_label + "' is a label value): text column " +
         std::to_string(c.text_a) + (c.text_b >= 0 ? ", second text column " + std::to_string(c.text_b) : std::string()) +
         ", label column " + std::to_string(c.label);
}
}  // namespace

bool glue_file_has_header(const std::string& path, const glue_columns& columns) {
  const std::vector<std::string> lines = lines_of(path);
  return !is_cola_row(split_tabs(lines.front())) && !line_one_is_example(lines, columns.label);
}

glue_columns glue_columns_from_file(const std::string& path) {
  const std::vector<std::string> lines = lines_of(path);
  const std::vector<std::string> header = split_tabs(lines.front());
  if (is_cola_row(header)) return cola_columns();
  glue_columns c;
  try {
    c = glue_columns_for_header(header);
  } catch (const std::invalid_argument& e) {
    fail_line(path, 1, e.what());
  }
  // A generic layout's line 1 may be an example: then the columns go by position, the label
  // the last, the text the first other one.
  if (c.layout.rfind("generic", 0) == 0 && line_one_is_example(lines, c.label)) {
    c.header = false;
    c.text_a = c.label == 0 ? 1 : 0;
    c.text_b = -1;
    c.layout = headerless_layout(c, header[c.label]);
  }
  return c;
}

glue_columns glue_columns_for_eval(const std::string& eval_path, const std::string& train_path, const glue_columns& train) {
  if (!train.header && train.layout.rfind("no header", 0) == 0) {  // the same columns; a header of its own is read as one
    glue_columns c = train;
    c.header = glue_file_has_header(eval_path, train);
    return c;
  }
  const std::vector<std::string> train_header = header_of(train_path), header = header_of(eval_path);
  if (!train.header) {  // CoLA's: the dev file has its layout
    if (!is_cola_row(header))
      fail_line(eval_path, 1,
                "does not read as CoLA's layout (no header; source, label 0 or 1, mark, sentence), as the train file '" +
                    train_path + "' does");
    return train;
  }
  const auto name = [&](int column) {
    return column >= 0 && column < static_cast<int>(train_header.size()) ? train_header[column] : std::string();
  };
  const auto find = [&](int column) { return name(column).empty() ? -1 : index_of(header, name(column).c_str()); };
  glue_columns c = train;
  c.text_a = find(train.text_a);
  c.text_b = train.text_b >= 0 ? find(train.text_b) : -1;
  c.label = find(train.label);
  const bool named = c.text_a >= 0 && c.label >= 0 && (train.text_b < 0 || c.text_b >= 0) &&
                     c.text_a != c.label && c.text_a != c.text_b && c.text_b != c.label;
  if (named) return c;  // the train file's columns by name
  try {
    c = glue_columns_for_header(header);
  } catch (const std::invalid_argument& e) {
    fail_line(eval_path, 1, e.what());
  }
  // The generic layout takes the last column for the label where none is named so: in GLUE's
  // test.tsv (index, sentence) that is the sentence.
  if (c.layout.rfind("generic", 0) == 0 && column_named_label(header) < 0 && !name(train.label).empty())
    fail_line(eval_path, 1,
              "the header has no column '" + name(train.label) + "', the train file's label: an eval file needs its "
              "labels (GLUE's test.tsv has none; evaluate on dev.tsv)");
  if ((c.text_b >= 0) != (train.text_b >= 0))
    fail_line(eval_path, 1,
              "the header reads as " + c.layout + " (" + (c.text_b >= 0 ? "a sentence pair" : "one sentence") +
                  "), the train file '" + train_path + "' as " + train.layout + " (" +
                  (train.text_b >= 0 ? "a sentence pair" : "one sentence") + "): name the columns as the train file does ('" +
                  name(train.label) + "' for the label)");
  return c;
}

glue_dataset read_glue_tsv(const std::string& path, const glue_columns& columns) {
  raw_rows raw = read_rows(path, columns);
  const std::vector<raw_row>& rows = raw.rows;
  glue_labels labels;
  const raw_row* first_integer = nullptr;
  const raw_row* first_text = nullptr;
  const raw_row* first_decimal = nullptr;
  std::set<std::int32_t> values;
  for (const raw_row& r : rows) {
    const auto v = parse_integer_label(r.label);
    if (v) values.insert(*v);
    if (v && !first_decimal && zero_fraction(r.label)) first_decimal = &r;
    const raw_row*& first = v ? first_integer : first_text;
    if (!first) first = &r;
  }
  labels.integer = first_text == nullptr;
  std::vector<std::string> notes;
  if (labels.integer && first_decimal)
    notes.push_back("labels written as decimals ('" + first_decimal->label + "' on line " +
                    std::to_string(first_decimal->example.line) + ") are read as the integers they equal");
  if (labels.integer && *values.begin() >= 0) {
    for (std::int32_t i = 0; i <= *values.rbegin(); ++i) {
      labels.names.push_back(std::to_string(i));
      if (!values.count(i)) labels.without_rows.push_back(i);
    }
    const std::size_t empty = labels.names.size() - values.size();
    if (empty > 0)
      notes.push_back("labels 0.." + labels.names.back() + " make " + std::to_string(labels.names.size()) + " classes, " +
                      std::to_string(empty) + " of them with no training row (a stray label?)");
  } else if (labels.integer) {
    for (std::int32_t v : values) labels.names.push_back(std::to_string(v));
  } else {
    for (const raw_row& r : rows)
      if (labels.id_of(r.label) < 0) labels.names.push_back(r.label);
    if (first_integer)
      notes.push_back("the labels mix integers ('" + first_integer->label + "' on line " +
                      std::to_string(first_integer->example.line) + ") with other text ('" + first_text->label +
                      "' on line " + std::to_string(first_text->example.line) +
                      "): each distinct text is a class of its own, " + std::to_string(labels.count()) + " in all");
  }
  const std::size_t distinct = labels.integer ? values.size() : labels.names.size();
  const bool text_as_labels = distinct > 20 && 2 * distinct > rows.size();
  // A label only one row has, in a file of some size: a typo or a stray value ('-1' among 0/1
  // labels, which the gap above cannot see once labels are signed).
  if (rows.size() >= 20 && !text_as_labels) {
    std::map<std::string, std::pair<int, int>> seen;  // label as numbered -> rows, first line
    for (const raw_row& r : rows) {
      const auto v = labels.integer ? parse_integer_label(r.label) : std::nullopt;
      auto& [count, line] = seen[v ? std::to_string(*v) : r.label];
      if (count++ == 0) line = r.example.line;
    }
    std::string lone;
    int shown = 0, total = 0;
    for (const auto& [label, at] : seen)
      if (at.first == 1 && ++total <= 5) lone += (shown++ > 0 ? ", '" : "'") + label + "' (line " + std::to_string(at.second) + ")";
    if (total > 5) lone += ", ... (" + std::to_string(total) + " in all)";
    if (total > 0)
      notes.push_back(std::string(total == 1 ? "label " : "labels ") + lone + (total == 1 ? " has" : " have") +
                      " one training row of " + std::to_string(rows.size()) + " (a stray label?)");
  }
  if (text_as_labels)
    notes.push_back("column " + std::to_string(columns.label) + " holds " + std::to_string(distinct) + " distinct " +
                    (labels.integer ? "integer labels" : "labels") + " in " + std::to_string(rows.size()) + " rows: is it " +
                    (labels.integer ? "an index or a count" : "text") +
                    " rather than a label? (--text-columns A,LABEL names the columns)");
  glue_dataset d = make_dataset(path, columns, std::move(labels), std::move(raw));
  d.notes = std::move(notes);
  return d;
}

glue_dataset read_glue_tsv(const std::string& path, const glue_columns& columns, const glue_labels& labels) {
  if (labels.count() == 0)
    throw std::invalid_argument("glue file '" + path + "': the train labels to read it with are empty");
  return make_dataset(path, columns, labels, read_rows(path, columns));
}

}  // namespace actorpipe
