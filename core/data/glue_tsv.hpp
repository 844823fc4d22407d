// GLUE task files (SST-2, MRPC, QQP, ...): tab-separated rows of one or two sentences and a
// label, read into examples with label ids. The files are not CSV-quoted: a quote is text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace actorpipe {

// Which 0-based columns hold what.
struct glue_columns {
  int text_a = 0;
  int text_b = -1;  // -1: a single-sentence task
  int label = 1;
  bool header = true;  // the first line names the columns and is not an example
  std::string layout;  // for logs: the layout glue_columns_for_header recognised, else empty
};

// Columns by header names, first match wins:
//   MNLI     sentence1, sentence2, gold_label
//   RTE/WNLI sentence1, sentence2, label
//   QNLI     question, sentence, label
//   QQP      question1, question2, is_duplicate
//   MRPC     #1 String, #2 String, Quality
//   SST-2    sentence, label
//   generic  anything else: the label is the column named label (any case), else the last; the
//            sentence is a column named text, sentence, sentence1, question, review, content or
//            document (any case), else the first other one not named id, idx, index or guid
// Throws std::invalid_argument when a generic header has fewer than two columns, and for STS-B's
// (sentence1, sentence2, score: a regression task).
glue_columns glue_columns_for_header(const std::vector<std::string>& header);
// The same from a file's first line; CoLA's files, which have no header (source, label 0/1,
// mark, sentence), are known by their first row: header false. A generic layout whose line 1
// is an example (its last cell an integer label, or the label of a later line: no header
// names its label column so) has no header either: text column 0 (1 if the label is 0), label
// the last, layout "no header ...". Throws std::invalid_argument naming the file when it
// cannot be read, is empty or is UTF-16.
glue_columns glue_columns_from_file(const std::string& path);
// Whether the file's first line is a header: not CoLA's layout, and not an example by the rule
// above for `columns`' label column (columns given by number, --text-columns).
bool glue_file_has_header(const std::string& path, const glue_columns& columns);
// A dev file's columns, for a train file read with `train` (columns from its header): the
// columns of the dev file's header that carry the train columns' names (MNLI's dev files have
// 16 columns where train.tsv has 12; a file may order them otherwise), else the dev header's
// own layout. Throws std::invalid_argument naming the dev file when that layout has other
// roles (a sentence pair against one sentence).
glue_columns glue_columns_for_eval(const std::string& eval_path, const std::string& train_path, const glue_columns& train);

// Label ids. When every label of the train file is a decimal integer of at most 4 digits
// (a leading '-' allowed), they are integer labels: with none below 0 the id is the integer
// and there are max + 1 labels ("0", "1", ...); with negative ones, ids follow the distinct
// values in numeric order ("-1" = 0, "1" = 1). '01' is 1. Otherwise each distinct string is a
// label, ids in order of first appearance (e.g. entailment=0, neutral=1, contradiction=2).
// STS-B's real-valued scores are not labels: they would read as strings.
struct glue_labels {
  bool integer = false;
  std::vector<std::string> names;  // id -> label as written (integers in decimal)
  std::vector<std::int32_t> without_rows;  // integer classes no training row has (0 and 2 make a class 1)
  int count() const { return static_cast<int>(names.size()); }
  // -1 when `label` is not one of these labels.
  std::int32_t id_of(const std::string& label) const;
};

struct glue_example {
  std::string text_a;
  std::string text_b;  // empty for a single-sentence task
  std::int32_t label = 0;
  int line = 0;  // 1-based line of the file, for messages
};

struct glue_dataset {
  std::string path;
  glue_columns columns;
  // Lines holding bytes that are not valid UTF-8 (the tokenizer drops those bytes; reading the
  // file warned), and the first of them (1-based; 0 when there is none).
  int invalid_utf8_lines = 0;
  int first_invalid_utf8_line = 0;
  glue_labels labels;
  std::vector<glue_example> examples;
  // What a user should know about the labels (a class with no training row, integers mixed with
  // other text, about as many labels as rows): one sentence each, for a warning.
  std::vector<std::string> notes;
  bool pairs() const { return columns.text_b >= 0; }
  int num_labels() const { return labels.count(); }
};

// A train file: its labels make the label map. Throws std::invalid_argument naming the file and
// the 1-based line for a malformed row (fewer columns than needed, more columns than the header,
// an empty label, an empty line before the end), and naming the file when it cannot be read, is
// empty or has a header only. CRLF line ends, a UTF-8 BOM and trailing empty lines are fine, and
// so are CR line ends (old Mac) in a file without LF. Lines that are not valid UTF-8 are read with
// one warning (log_warn) naming the file, the first such line and how many there are.
glue_dataset read_glue_tsv(const std::string& path, const glue_columns& columns);
// A dev / test file read with the train file's labels; a label not among them is an error naming
// the file, the line and the label.
glue_dataset read_glue_tsv(const std::string& path, const glue_columns& columns, const glue_labels& labels);

}  // namespace actorpipe
