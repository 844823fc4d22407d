// GLUE TSV files: the SST-2, MRPC and other header layouts, integer and string labels (a dev file
// with the train file's labels), literal quotes, CRLF and CR line ends, the warning for lines that
// are not valid UTF-8, and every malformed-row error.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/data/glue_tsv.hpp"
#include "core/log.hpp"

using namespace actorpipe;
using Catch::Contains;
using strings = std::vector<std::string>;

namespace {

// A file under the temp directory, removed when the test ends.
struct temp_file {
  std::string path;
  explicit temp_file(const std::string& name, const std::string& text)
      : path("/tmp/actorpipe_glue_test_" + std::to_string(::getpid()) + "_" + name) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
  }
  ~temp_file() { std::remove(path.c_str()); }
};

const char* const sst2 =
    "sentence\tlabel\n"
    "hide new secretions from the parental units \t0\n"
    "contains no wit , only labored gags \t0\n"
    "that loves its characters and communicates something rather beautiful about human nature \t1\n";

// MRPC's layout, quotes and all: the sentences hold '"' as text.
const char* const mrpc =
    "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    "1\t702876\t702977\tAmrozi accused his brother , whom he called \" the witness \" , of deliberately "
    "distorting his evidence .\tReferring to him as only \" the witness \" , Amrozi accused his brother of "
    "deliberately distorting his evidence .\n"
    "0\t2108705\t2108831\tYucaipa owned Dominick 's before selling the chain to Safeway in 1998 for $ 2.5 billion ."
    "\tYucaipa bought Dominick 's in 1995 for $ 693 million and sold it to Safeway for $ 1.8 billion in 1998 .\n";

glue_columns sst2_columns() {
  glue_columns c;
  c.text_a = 0;
  c.label = 1;
  return c;
}

}  // namespace

CATCH_TEST_CASE("an SST-2 file: columns by header, integer labels", "[data][glue]") {
  temp_file f("sst2.tsv", sst2);
  const glue_columns c = glue_columns_from_file(f.path);
  CATCH_CHECK(c.layout == "SST-2");
  CATCH_CHECK(c.text_a == 0);
  CATCH_CHECK(c.text_b == -1);
  CATCH_CHECK(c.label == 1);
  CATCH_CHECK(c.header);

  const glue_dataset d = read_glue_tsv(f.path, c);
  CATCH_CHECK(!d.pairs());
  CATCH_CHECK(d.labels.integer);
  CATCH_CHECK(d.num_labels() == 2);
  CATCH_CHECK(d.labels.names == strings{"0", "1"});
  CATCH_REQUIRE(d.examples.size() == 3);
  CATCH_CHECK(d.examples[0].text_a == "hide new secretions from the parental units ");
  CATCH_CHECK(d.examples[0].text_b.empty());
  CATCH_CHECK(d.examples[0].label == 0);
  CATCH_CHECK(d.examples[0].line == 2);
  CATCH_CHECK(d.examples[2].label == 1);
  CATCH_CHECK(d.examples[2].line == 4);
}

CATCH_TEST_CASE("an MRPC file: a sentence pair, quotes are text", "[data][glue]") {
  temp_file f("mrpc.tsv", mrpc);
  const glue_columns c = glue_columns_from_file(f.path);
  CATCH_CHECK(c.layout == "MRPC");
  CATCH_CHECK(c.text_a == 3);
  CATCH_CHECK(c.text_b == 4);
  CATCH_CHECK(c.label == 0);

  const glue_dataset d = read_glue_tsv(f.path, c);
  CATCH_CHECK(d.pairs());
  CATCH_CHECK(d.num_labels() == 2);
  CATCH_REQUIRE(d.examples.size() == 2);
  CATCH_CHECK(d.examples[0].label == 1);
  CATCH_CHECK(d.examples[0].text_a ==
              "Amrozi accused his brother , whom he called \" the witness \" , of deliberately distorting his evidence .");
  CATCH_CHECK(d.examples[0].text_b.substr(0, 33) == "Referring to him as only \" the wi");
  CATCH_CHECK(d.examples[1].label == 0);
  CATCH_CHECK(d.examples[1].text_b.substr(0, 7) == "Yucaipa");
}

CATCH_TEST_CASE("a quote that never closes is literal text, not the start of a multi-line field", "[data][glue]") {
  temp_file f("quote.tsv", "sentence\tlabel\n\"it 's a bare quote\t1\nthe next row \"\t0\n'\t1\n");
  const glue_dataset d = read_glue_tsv(f.path, sst2_columns());
  CATCH_REQUIRE(d.examples.size() == 3);
  CATCH_CHECK(d.examples[0].text_a == "\"it 's a bare quote");
  CATCH_CHECK(d.examples[1].text_a == "the next row \"");
  CATCH_CHECK(d.examples[1].line == 3);
  CATCH_CHECK(d.examples[2].text_a == "'");
}

CATCH_TEST_CASE("header names pick the columns of the known layouts, else first and last", "[data][glue]") {
  const glue_columns qqp = glue_columns_for_header({"id", "qid1", "qid2", "question1", "question2", "is_duplicate"});
  CATCH_CHECK(qqp.layout == "QQP");
  CATCH_CHECK(qqp.text_a == 3);
  CATCH_CHECK(qqp.text_b == 4);
  CATCH_CHECK(qqp.label == 5);
  // QNLI's header also holds SST-2's names: it must not be read as a single-sentence task.
  const glue_columns qnli = glue_columns_for_header({"index", "question", "sentence", "label"});
  CATCH_CHECK(qnli.layout == "QNLI");
  CATCH_CHECK(qnli.text_a == 1);
  CATCH_CHECK(qnli.text_b == 2);
  CATCH_CHECK(qnli.label == 3);
  const glue_columns rte = glue_columns_for_header({"index", "sentence1", "sentence2", "label"});
  CATCH_CHECK(rte.layout == "RTE/WNLI");
  CATCH_CHECK(rte.text_b == 2);
  const glue_columns generic = glue_columns_for_header({"text", "source", "y"});
  CATCH_CHECK(generic.layout == "generic: text 'text', label 'y'");  // the summary names the columns it took
  CATCH_CHECK(generic.text_a == 0);
  CATCH_CHECK(generic.text_b == -1);
  CATCH_CHECK(generic.label == 2);
  CATCH_CHECK_THROWS_WITH(glue_columns_for_header({"text"}), Contains("at least two columns") && Contains("got 1"));
  temp_file one("one_column.tsv", "text\nhello\n");
  CATCH_CHECK_THROWS_WITH(glue_columns_from_file(one.path), Contains(one.path) && Contains("line 1"));
}

CATCH_TEST_CASE("string labels get ids in order of first appearance, and a dev file reuses them", "[data][glue]") {
  temp_file train("train.tsv",
                  "index\tsentence1\tsentence2\tgold_label\n"
                  "0\tA man eats.\tSomeone eats.\tentailment\n"
                  "1\tA man eats.\tA man sleeps.\tcontradiction\n"
                  "2\tA man eats.\tA man eats pie.\tneutral\n"
                  "3\tA cat sits.\tAn animal sits.\tentailment\n");
  const glue_dataset t = read_glue_tsv(train.path, glue_columns_from_file(train.path));
  CATCH_CHECK(!t.labels.integer);
  CATCH_CHECK(t.labels.names == strings{"entailment", "contradiction", "neutral"});
  CATCH_CHECK(t.num_labels() == 3);
  CATCH_REQUIRE(t.examples.size() == 4);
  CATCH_CHECK(t.examples[1].label == 1);
  CATCH_CHECK(t.examples[2].label == 2);
  CATCH_CHECK(t.examples[3].label == 0);
  CATCH_CHECK(t.examples[2].text_b == "A man eats pie.");

  // The dev file's first label is neutral: it keeps the train file's id 2.
  temp_file dev("dev.tsv",
                "index\tsentence1\tsentence2\tgold_label\n"
                "0\tA dog runs.\tA dog is still.\tneutral\n"
                "1\tA dog runs.\tAn animal moves.\tentailment\n");
  const glue_dataset d = read_glue_tsv(dev.path, t.columns, t.labels);
  CATCH_REQUIRE(d.examples.size() == 2);
  CATCH_CHECK(d.examples[0].label == 2);
  CATCH_CHECK(d.examples[1].label == 0);
  CATCH_CHECK(d.num_labels() == 3);

  temp_file unknown("dev_unknown.tsv",
                    "index\tsentence1\tsentence2\tgold_label\n"
                    "0\tA dog runs.\tA dog is still.\tneutral\n"
                    "1\tA dog runs.\tA dog might run.\tmaybe\n");
  CATCH_CHECK_THROWS_WITH(read_glue_tsv(unknown.path, t.columns, t.labels),
                          Contains("glue file '" + unknown.path + "' line 3: label 'maybe'") &&
                              Contains("(entailment, contradiction, neutral)"));

  // Integer train labels: a dev label outside them is unknown too.
  temp_file sst_train("sst_train.tsv", sst2);
  temp_file sst_dev("sst_dev.tsv", "sentence\tlabel\ngood\t1\nodd\t2\n");
  const glue_dataset st = read_glue_tsv(sst_train.path, sst2_columns());
  CATCH_CHECK_THROWS_WITH(read_glue_tsv(sst_dev.path, sst2_columns(), st.labels),
                          Contains("line 3: label '2' is not one of the train file's labels (0, 1)"));
}

CATCH_TEST_CASE("integer labels are ids as written, mixed labels are all strings", "[data][glue]") {
  temp_file gap("gap.tsv", "sentence\tlabel\na\t2\nb\t0\n");
  const glue_dataset g = read_glue_tsv(gap.path, sst2_columns());
  CATCH_CHECK(g.labels.integer);
  CATCH_CHECK(g.num_labels() == 3);  // 0..2, though 1 is never seen
  CATCH_CHECK(g.examples[0].label == 2);
  // ... which the reader says: a stray 1000 among 0/1 labels makes a 1001-way classifier.
  CATCH_CHECK(g.notes == strings{"labels 0..2 make 3 classes, 1 of them with no training row (a stray label?)"});
  // A dev row with that class, which the model never saw: refused, naming the line (it was
  // taken, and scored as a class no prediction could be right about).
  temp_file gap_dev("gap_dev.tsv", "sentence\tlabel\na\t1\nb\t0\n");
  CATCH_CHECK_THROWS_WITH(read_glue_tsv(gap_dev.path, sst2_columns(), g.labels),
                          Contains("line 2: label '1' is not one of the train file's labels") &&
                              Contains(": no training row has it"));
  temp_file stray("stray.tsv", "sentence\tlabel\na\t1\nb\t0\nc\t1000\n");
  CATCH_CHECK(read_glue_tsv(stray.path, sst2_columns()).notes ==
              strings{"labels 0..1000 make 1001 classes, 998 of them with no training row (a stray label?)"});

  temp_file mixed("mixed.tsv", "sentence\tlabel\na\t1\nb\tyes\nc\t0\n");
  const glue_dataset m = read_glue_tsv(mixed.path, sst2_columns());
  CATCH_CHECK(!m.labels.integer);
  CATCH_CHECK(m.labels.names == strings{"1", "yes", "0"});
  CATCH_CHECK(m.examples[2].label == 2);
  CATCH_CHECK(m.notes == strings{"the labels mix integers ('1' on line 2) with other text ('yes' on line 3): each "
                                 "distinct text is a class of its own, 3 in all"});
  // One '1.5' among 0/1 labels: three classes, and a note that says why.
  temp_file point("point.tsv", "sentence\tlabel\na\t1\nb\t0\nc\t1.5\n");
  const glue_dataset p = read_glue_tsv(point.path, sst2_columns());
  CATCH_CHECK(p.num_labels() == 3);
  CATCH_REQUIRE(p.notes.size() == 1);
  CATCH_CHECK_THAT(p.notes[0], Contains("('1.5' on line 4)"));
  // Decimals with a zero fraction (a float column exported by pandas) are the integers they
  // equal: 1.0 among 0/1 is class 1, and a file of 1.0 / 0.0 has labels 0, 1 (F1 of 1), where
  // it had '1.0' = 0, '0.0' = 1 and the F1 of the negative class.
  temp_file floats("floats.tsv", "sentence\tlabel\na\t1.0\nb\t0.0\nc\t1\nd\t-0.00\n");
  const glue_dataset f = read_glue_tsv(floats.path, sst2_columns());
  CATCH_CHECK(f.labels.integer);
  CATCH_CHECK(f.labels.names == strings{"0", "1"});
  CATCH_CHECK(f.examples[0].label == 1);
  CATCH_CHECK(f.examples[1].label == 0);
  CATCH_CHECK(f.examples[3].label == 0);
  CATCH_CHECK(f.notes == strings{"labels written as decimals ('1.0' on line 2) are read as the integers they equal"});
  CATCH_CHECK(f.labels.id_of("1.00") == 1);
  CATCH_CHECK(f.labels.id_of("1.") == -1);
  // Plain integer labels say nothing.
  temp_file plain("plain.tsv", sst2);
  CATCH_CHECK(read_glue_tsv(plain.path, sst2_columns()).notes.empty());
}

CATCH_TEST_CASE("negative integer labels are numbered in numeric order, and '01' is 1", "[data][glue]") {
  temp_file f("signed.tsv", "sentence\tlabel\na\t1\nb\t-1\nc\t01\n");
  const glue_dataset d = read_glue_tsv(f.path, sst2_columns());
  CATCH_CHECK(d.labels.integer);
  CATCH_CHECK(d.labels.names == strings{"-1", "1"});  // F1 is label 1's, as for 0/1 labels
  CATCH_REQUIRE(d.examples.size() == 3);
  CATCH_CHECK(d.examples[0].label == 1);
  CATCH_CHECK(d.examples[1].label == 0);
  CATCH_CHECK(d.examples[2].label == 1);
  CATCH_CHECK(d.notes.empty());
  CATCH_CHECK(d.labels.id_of("-01") == 0);
  CATCH_CHECK(d.labels.id_of("0") == -1);
  CATCH_CHECK(d.labels.id_of("x") == -1);
}

// The gap note cannot see a stray label among signed ones ('-1' among 0/1 made 3 classes and
// renumbered the real ones without a word), nor a typo among string labels.
CATCH_TEST_CASE("a label only one row of a sizeable file has is named as a stray label", "[data][glue]") {
  std::string text = "sentence\tlabel\n";
  for (int i = 0; i < 24; ++i) text += "row " + std::to_string(i) + "\t" + std::to_string(i % 2) + "\n";
  temp_file signed_stray("signed_stray.tsv", text + "odd\t-1\n");
  const glue_dataset d = read_glue_tsv(signed_stray.path, sst2_columns());
  CATCH_CHECK(d.labels.names == strings{"-1", "0", "1"});
  CATCH_CHECK(d.notes == strings{"label '-1' (line 26) has one training row of 25 (a stray label?)"});
  std::string words = "sentence\tlabel\n";
  for (int i = 0; i < 24; ++i) words += "row " + std::to_string(i) + "\t" + (i % 2 ? "positive" : "negative") + "\n";
  temp_file typo("typo.tsv", words + "odd\tpostive\nodd\tnegativ\n");
  CATCH_CHECK(read_glue_tsv(typo.path, sst2_columns()).notes ==
              strings{"labels 'negativ' (line 27), 'postive' (line 26) have one training row of 26 (a stray label?)"});
  // A small file, or every class with rows to spare, says nothing.
  temp_file fine("fine.tsv", text);
  CATCH_CHECK(read_glue_tsv(fine.path, sst2_columns()).notes.empty());
}

// A file without a header whose layout is not CoLA's lost its first row to a header, and its
// cells were shown as column names ("generic: text 'ugly great happy', label '1'"): line 1 is
// an example where its label cell is an integer label or the label of a later row.
CATCH_TEST_CASE("a headerless file's first row is an example, not a header", "[data][glue]") {
  temp_file f("headerless.tsv", "good film\t1\nbad film\t0\nok film\t1\n");
  const glue_columns c = glue_columns_from_file(f.path);
  CATCH_CHECK(!c.header);
  CATCH_CHECK(c.text_a == 0);
  CATCH_CHECK(c.label == 1);
  CATCH_CHECK(c.layout == "no header (line 1 is an example: its label '1' is a label value): text column 0, label column 1");
  const glue_dataset d = read_glue_tsv(f.path, c);
  CATCH_REQUIRE(d.examples.size() == 3);
  CATCH_CHECK(d.examples[0].text_a == "good film");
  CATCH_CHECK(d.examples[0].line == 1);
  // String labels: line 1's label is a later row's.
  temp_file words("headerless_words.tsv", "good film\tpos\nbad film\tneg\nfine\tpos\n");
  CATCH_CHECK(!glue_columns_from_file(words.path).header);
  // Its dev file alike, or with a header of its own, which is read as one.
  temp_file dev("headerless_dev.tsv", "fine film\t1\n");
  const glue_columns e = glue_columns_for_eval(dev.path, f.path, c);
  CATCH_CHECK(!e.header);
  CATCH_CHECK(read_glue_tsv(dev.path, e, d.labels).examples.size() == 1);
  temp_file dev_header("dev_header.tsv", "text\tlabel\nfine film\t1\n");
  CATCH_CHECK(glue_columns_for_eval(dev_header.path, f.path, c).header);
  // Columns by number (--text-columns) decide it alike; a header naming its label column stays one.
  glue_columns numbered;
  numbered.text_a = 0;
  numbered.label = 1;
  CATCH_CHECK(!glue_file_has_header(f.path, numbered));
  temp_file named("named.tsv", "text\tlabel\ngood film\t1\n");
  CATCH_CHECK(glue_file_has_header(named.path, numbered));
  CATCH_CHECK(glue_columns_from_file(named.path).header);
}

CATCH_TEST_CASE("a column of text read as labels is named", "[data][glue]") {
  std::string text = "review\tscore\n";
  for (int i = 0; i < 30; ++i) text += "1\tsentence number " + std::to_string(i) + "\n";
  temp_file f("swapped.tsv", text);
  const glue_dataset d = read_glue_tsv(f.path, glue_columns_from_file(f.path));
  CATCH_CHECK(d.num_labels() == 30);
  CATCH_CHECK(d.notes == strings{"column 1 holds 30 distinct labels in 30 rows: is it text rather than a label? "
                                 "(--text-columns A,LABEL names the columns)"});
  // An index column read as the label: integers, as many as the rows.
  std::string indexed = "sentence\tidx\n";
  for (int i = 0; i < 30; ++i) indexed += "sentence number " + std::to_string(i) + "\t" + std::to_string(i) + "\n";
  temp_file g("indexed.tsv", indexed);
  const glue_dataset x = read_glue_tsv(g.path, glue_columns_from_file(g.path));
  CATCH_CHECK(x.notes == strings{"column 1 holds 30 distinct integer labels in 30 rows: is it an index or a count rather "
                                 "than a label? (--text-columns A,LABEL names the columns)"});
}

CATCH_TEST_CASE("a dev file without the train file's label column, or not a file, is one error naming it", "[data][glue]") {
  temp_file train("lab_train.tsv", "sentence\tlabel\ngood\t1\nbad\t0\n");
  temp_file test("lab_test.tsv", "index\tsentence\n0\tgood\n1\tbad\n");  // GLUE's test.tsv: no labels
  const glue_columns tc = glue_columns_from_file(train.path);
  CATCH_CHECK_THROWS_WITH(glue_columns_for_eval(test.path, train.path, tc),
                          Contains("line 1: the header has no column 'label', the train file's label: an eval file needs "
                                   "its labels (GLUE's test.tsv has none; evaluate on dev.tsv)"));
  // A pipe gave its header, then nothing; a FIFO without a writer hung; /dev/zero filled memory.
  CATCH_CHECK_THROWS_WITH(glue_columns_from_file("/dev/zero"),
                          "glue file '/dev/zero' is not a regular file (a pipe or a device?): give a file");
}

CATCH_TEST_CASE("a dev file's columns come from its own header, by the train file's column names", "[data][glue]") {
  // MNLI: train.tsv has gold_label in column 11 of 12; dev_matched.tsv has label1..label5 first,
  // so its column 11 is an annotator's label2 and gold_label is column 15.
  std::string train_text = "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                           "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n";
  std::string dev_text = "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
                         "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\t"
                         "label5\tgold_label\n";
  for (const char* l : {"entailment", "neutral", "contradiction"}) {
    train_text += std::string("0\t1\t2\tg\t(a)\t(b)\t(a)\t(b)\tA man eats.\tSomeone eats.\t") + l + "\t" + l + "\n";
    dev_text += std::string("0\t1\t2\tg\t(a)\t(b)\t(a)\t(b)\tA man eats.\tSomeone eats.\t") + l +
                "\tneutral\tneutral\tneutral\tneutral\t" + l + "\n";
  }
  temp_file train("mnli_train.tsv", train_text), dev("mnli_dev.tsv", dev_text);
  const glue_columns tc = glue_columns_from_file(train.path);
  CATCH_CHECK(tc.label == 11);
  const glue_dataset t = read_glue_tsv(train.path, tc);
  const glue_columns dc = glue_columns_for_eval(dev.path, train.path, tc);
  CATCH_CHECK(dc.text_a == 8);
  CATCH_CHECK(dc.text_b == 9);
  CATCH_CHECK(dc.label == 15);
  const glue_dataset d = read_glue_tsv(dev.path, dc, t.labels);
  CATCH_REQUIRE(d.examples.size() == 3);
  for (int i = 0; i < 3; ++i) CATCH_CHECK(d.examples[i].label == t.examples[i].label);  // gold, not label2

  // SST-2's columns in the other order; a generic header with a label column first.
  temp_file sst_train("sst_order_train.tsv", sst2), swapped("sst_swapped.tsv", "label\tsentence\n1\tgood\n0\tbad\n");
  const glue_columns sc = glue_columns_from_file(sst_train.path);
  const glue_columns sw = glue_columns_for_eval(swapped.path, sst_train.path, sc);
  CATCH_CHECK(sw.label == 0);
  CATCH_CHECK(sw.text_a == 1);
  const glue_dataset s = read_glue_tsv(swapped.path, sw, read_glue_tsv(sst_train.path, sc).labels);
  CATCH_CHECK(s.examples[0].text_a == "good");
  CATCH_CHECK(s.examples[0].label == 1);
  const glue_columns g = glue_columns_for_header({"Label", "review", "source"});
  CATCH_CHECK(g.label == 0);
  CATCH_CHECK(g.text_a == 1);

  // Other names fall back to the dev header's own layout; a pair against one sentence is refused.
  temp_file rte("rte_dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n");
  const glue_columns rc = glue_columns_for_eval(rte.path, train.path, tc);
  CATCH_CHECK(rc.label == 3);
  CATCH_CHECK(rc.text_b == 2);
  CATCH_CHECK_THROWS_WITH(glue_columns_for_eval(rte.path, sst_train.path, sc),
                          Contains("glue file '" + rte.path + "' line 1: the header reads as RTE/WNLI (a sentence pair), "
                                   "the train file '" + sst_train.path + "' as SST-2 (one sentence): name the columns as "
                                   "the train file does ('label' for the label)"));
}

CATCH_TEST_CASE("CRLF line ends, a BOM and trailing empty lines read like plain LF", "[data][glue]") {
  temp_file f("crlf.tsv", "\xEF\xBB\xBFsentence\tlabel\r\nfine film\t1\r\nbad film\t0\r\n\r\n\n");
  const glue_columns c = glue_columns_from_file(f.path);
  CATCH_CHECK(c.layout == "SST-2");
  const glue_dataset d = read_glue_tsv(f.path, c);
  CATCH_REQUIRE(d.examples.size() == 2);
  CATCH_CHECK(d.examples[0].text_a == "fine film");
  CATCH_CHECK(d.examples[1].text_a == "bad film");
  CATCH_CHECK(d.labels.names == strings{"0", "1"});  // "1\r" would have made string labels
  CATCH_CHECK(d.examples[1].label == 0);
}

CATCH_TEST_CASE("a file without a header: columns by index, CoLA style", "[data][glue]") {
  temp_file f("cola.tsv",
              "gj04\t1\t\tOur friends won't buy this analysis, let alone the next one we propose.\n"
              "gj04\t0\t*\tThey drank the pub.\n");
  glue_columns c;
  c.text_a = 3;
  c.label = 1;
  c.header = false;
  const glue_dataset d = read_glue_tsv(f.path, c);
  CATCH_REQUIRE(d.examples.size() == 2);
  CATCH_CHECK(d.examples[0].line == 1);
  CATCH_CHECK(d.examples[1].text_a == "They drank the pub.");
  CATCH_CHECK(d.examples[1].label == 0);
}

CATCH_TEST_CASE("every malformed row is an error naming the file and the line", "[data][glue]") {
  const auto error_of = [](const std::string& name, const std::string& text, glue_columns c) {
    temp_file f(name, text);
    try {
      read_glue_tsv(f.path, c);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const glue_columns c = sst2_columns();
  const std::string prefix = "glue file '/tmp/actorpipe_glue_test_" + std::to_string(::getpid()) + "_";

  CATCH_CHECK(error_of("few.tsv", "sentence\tlabel\ngood\t1\nno label here\n", c) ==
              prefix + "few.tsv' line 3: has 1 column(s), fewer than the 2 of the header (line 1)");
  CATCH_CHECK_THAT(error_of("many.tsv", "sentence\tlabel\ngood\t1\na\ttab\t0\n", c),
                   Contains(prefix + "many.tsv' line 3: has 3 columns, more than the 2 of the header (line 1)") &&
                       Contains("tab inside a sentence"));
  CATCH_CHECK(error_of("nolabel.tsv", "sentence\tlabel\ngood\t1\r\nbad\t\r\n", c) ==
              prefix + "nolabel.tsv' line 3: the label (column 1) is empty");
  CATCH_CHECK(error_of("gap.tsv", "sentence\tlabel\ngood\t1\n\nbad\t0\n", c) ==
              prefix + "gap.tsv' line 3: is empty (only lines at the end of the file may be)");
  CATCH_CHECK(error_of("empty.tsv", "", c) == prefix + "empty.tsv' is empty: expected tab-separated rows");
  CATCH_CHECK(error_of("blank.tsv", "\r\n\n", c) == prefix + "blank.tsv' is empty: expected tab-separated rows");
  CATCH_CHECK(error_of("header_only.tsv", "sentence\tlabel\r\n", c) ==
              prefix + "header_only.tsv' has a header (line 1) but no examples");

  glue_columns pair = c;
  pair.text_b = 2;
  CATCH_CHECK(error_of("narrow.tsv", "sentence\tlabel\ngood\t1\n", pair) ==
              prefix + "narrow.tsv' line 1: the header has 2 column(s); the second sentence is column 2 (0-based), "
                       "so at least 3 are needed");
  glue_columns no_header = c;
  no_header.header = false;
  no_header.label = 3;
  CATCH_CHECK_THAT(error_of("narrow2.tsv", "good\t1\n", no_header),
                   Contains("narrow2.tsv' line 1: the first row has 2 column(s); the label is column 3"));
  CATCH_CHECK_THAT(error_of("ragged.tsv", "a\tb\tc\t1\nd\te\t0\n", no_header),
                   Contains("ragged.tsv' line 2: has 3 column(s), fewer than the 4 of line 1"));

  CATCH_CHECK_THROWS_WITH(read_glue_tsv("/tmp/actorpipe_glue_no_such_file.tsv", c),
                          Contains("'/tmp/actorpipe_glue_no_such_file.tsv' cannot be opened"));
  CATCH_CHECK_THROWS_WITH(read_glue_tsv("/tmp", c), "glue file '/tmp' is a directory, not a TSV file");
  glue_columns same = c;
  same.label = 0;
  // One sentence: two columns, and no text_b=-1 in the message (it said "three" and showed it).
  CATCH_CHECK_THAT(error_of("same.tsv", sst2, same), Contains("glue columns must be two different columns: got text_a=0, label=0"));
  glue_columns two_texts;
  two_texts.text_a = 0;
  two_texts.text_b = 1;
  two_texts.label = 1;
  CATCH_CHECK_THAT(error_of("pair.tsv", sst2, two_texts),
                   Contains("glue columns must be three different columns: got text_a=0, text_b=1, label=1"));
  glue_columns negative = c;
  negative.text_a = -1;
  CATCH_CHECK_THAT(error_of("negative.tsv", sst2, negative), Contains("text_a=-1"));
}

CATCH_TEST_CASE("CR line ends (an old Mac file) read like LF, and in an LF file a lone CR is text", "[data][glue]") {
  temp_file f("cr.tsv", "sentence\tlabel\rfine film\t1\rbad film\t0\r\r");
  const glue_columns c = glue_columns_from_file(f.path);
  CATCH_CHECK(c.layout == "SST-2");
  const glue_dataset d = read_glue_tsv(f.path, c);
  CATCH_REQUIRE(d.examples.size() == 2);
  CATCH_CHECK(d.examples[0].text_a == "fine film");
  CATCH_CHECK(d.examples[0].line == 2);
  CATCH_CHECK(d.examples[1].text_a == "bad film");
  CATCH_CHECK(d.examples[1].label == 0);
  CATCH_CHECK(d.labels.names == strings{"0", "1"});
  // A dev file with CR line ends, read with the train labels; and one without a final CR.
  temp_file dev("cr_dev.tsv", "\xEF\xBB\xBFsentence\tlabel\rok film\t1");
  const glue_dataset e = read_glue_tsv(dev.path, glue_columns_for_eval(dev.path, f.path, c), d.labels);
  CATCH_REQUIRE(e.examples.size() == 1);
  CATCH_CHECK(e.examples[0].text_a == "ok film");
  CATCH_CHECK(e.examples[0].label == 1);

  // CR line ends with one LF at the end (a tool added it): CR lines still, not one long line
  // ("has a header (line 1) but no examples").
  temp_file cr_lf("cr_lf.tsv", "sentence\tlabel\rfine film\t1\rbad film\t0\r\n");
  const glue_columns cl = glue_columns_from_file(cr_lf.path);
  CATCH_CHECK(cl.layout == "SST-2");
  CATCH_CHECK(read_glue_tsv(cr_lf.path, cl).examples.size() == 2);

  temp_file g("lone_cr.tsv", "sentence\tlabel\na\rb\t1\n");
  const glue_dataset x = read_glue_tsv(g.path, sst2_columns());
  CATCH_REQUIRE(x.examples.size() == 1);
  CATCH_CHECK(x.examples[0].text_a == "a\rb");
}

CATCH_TEST_CASE("lines that are not valid UTF-8 are read, with one warning naming the file, line and count",
                "[data][glue]") {
  // A Latin-1 file: "caf\xe9" would train as "caf".
  temp_file f("latin1.tsv", "sentence\tlabel\ngood\t1\ncaf\xE9 cr\xE8me\t1\nbad\t0\nna\xEFve\t0\n");
  temp_file log("latin1.log", "");
  setup_logging({log_level::warn, log.path});
  const glue_dataset d = read_glue_tsv(f.path, sst2_columns());
  reset_logging();
  CATCH_REQUIRE(d.examples.size() == 4);
  CATCH_CHECK(d.examples[1].text_a == "caf\xE9 cr\xE8me");  // the bytes as they are
  CATCH_CHECK(d.invalid_utf8_lines == 2);
  CATCH_CHECK(d.first_invalid_utf8_line == 3);
  std::ifstream in(log.path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CATCH_CHECK_THAT(text, Contains("glue file '" + f.path + "': 2 lines hold bytes that are not valid UTF-8, the first on "
                                  "line 3; the tokenizer drops them"));
  CATCH_CHECK_THAT(text, Contains("Convert it to UTF-8"));
  CATCH_CHECK(std::count(text.begin(), text.end(), '\n') == 1);  // once per file

  // Valid UTF-8 (and a BOM) gives no warning; neither does a dev file read with the labels.
  temp_file ok("utf8.tsv", "\xEF\xBB\xBFsentence\tlabel\ncaf\xC3\xA9\t1\n");
  setup_logging({log_level::warn, log.path});
  const glue_dataset e = read_glue_tsv(ok.path, sst2_columns(), d.labels);
  reset_logging();
  CATCH_CHECK(e.invalid_utf8_lines == 0);
  CATCH_CHECK(e.first_invalid_utf8_line == 0);
  std::ifstream again(log.path);
  const std::string after((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
  CATCH_CHECK(after == text);
}
