// `actorpipe train --model bert` end to end: a synthetic sentiment task written as GLUE TSV by
// the test is learned on 2 stages, eval results reach the progress, the summary and --metrics;
// malformed files are one error naming file and line; --init-from takes Hugging Face names,
// and a missing or mis-shaped tensor is an error naming it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/blas_kernels.hpp"
#include "core/model/safetensors.hpp"
#include "tests/apps/cli_runner.hpp"
#include "tests/apps/process_runner.hpp"
#include "tests/support/sentiment_task.hpp"

using namespace actorpipe;
using namespace actorpipe::testing;
using Catch::Contains;

namespace {

std::string write_text(const std::string& suffix, const std::string& text) {
  const std::string path = temp_path(suffix);
  std::ofstream(path) << text;
  return path;
}

const std::vector<std::string> small = {"train", "--model", "bert", "--stages", "2", "--layers", "2", "--hidden", "32",
                                        "--heads", "2", "--seq-len", "16", "--microbatches", "4", "--microbatch-size", "8"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

CATCH_TEST_CASE("train --model bert learns a sentiment task from TSV files to >= 90% dev accuracy on 2 stages",
                "[apps][bert]") {
  const std::string train = write_text(".train.tsv", sentiment_tsv(sentiment_rows(300, 11)));
  const std::string dev = write_text(".dev.tsv", sentiment_tsv(sentiment_rows(80, 12)));
  const std::string metrics = temp_path(".jsonl");
  auto r = cli(with(small, {"--data-file", train, "--eval-file", dev, "--eval-every", "20", "--steps", "60", "--lr",
                            "2e-3", "--warmup-steps", "5", "--metrics", metrics}));
  CATCH_INFO(r.out << r.err);
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains("model: BERT, 2 layers, hidden 32, 2 heads"));
  CATCH_CHECK_THAT(r.out, Contains(train + ": 300 rows (SST-2, 2 labels: 0, 1; F1 of 1); eval " + dev + ": 80 rows"));
  CATCH_CHECK_THAT(r.err + r.out, Contains("eval after step 20: loss "));
  CATCH_CHECK_THAT(r.out, Contains("final eval after step 60: loss "));
  // The last pass in --metrics: accuracy >= 90%.
  std::ifstream m(metrics);
  double accuracy = -1;
  int evals = 0;
  for (std::string line; std::getline(m, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("eval_after_step")) continue;
    ++evals;
    accuracy = j.at("accuracy").get<double>();
    CATCH_CHECK(j.contains("eval_loss"));
    CATCH_CHECK(j.contains("f1"));
  }
  CATCH_CHECK(evals == 3);
  CATCH_CHECK(accuracy >= 0.9);
}

CATCH_TEST_CASE("train --model bert trains on sentence pairs in MRPC's layout and reports F1", "[apps][bert]") {
  // Quality, #1 ID, #2 ID, #1 String, #2 String: the label is whether the second sentence is
  // the first one's sentiment.
  auto pairs = [](int n, std::uint64_t seed) {
    const auto rows = sentiment_rows(2 * n, seed);
    std::string tsv = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n";
    for (int i = 0; i < n; ++i) {
      const auto& a = rows[static_cast<std::size_t>(2 * i)];
      const auto& b = rows[static_cast<std::size_t>(2 * i + 1)];
      tsv += std::to_string(a.label == b.label ? 1 : 0) + "\t" + std::to_string(i) + "\t" + std::to_string(i + n) +
             "\t" + a.sentence + "\t" + b.sentence + "\n";
    }
    return tsv;
  };
  const std::string train = write_text(".train.tsv", pairs(80, 31)), dev = write_text(".dev.tsv", pairs(20, 32));
  std::vector<std::string> args = small;
  args[12] = "32";  // --seq-len: room for both sentences
  auto r = cli(with(args, {"--data-file", train, "--eval-file", dev, "--steps", "2"}));
  CATCH_INFO(r.out << r.err);
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains(train + ": 80 rows (MRPC, 2 labels: 0, 1; F1 of 1)"));
  // BERT's GELU and attention are LibTorch's ops: the compute line names only the loops it runs.
  CATCH_CHECK_THAT(r.out, Contains("; own loops: AdamW " + actorpipe::own_loops_isa() + "\n"));
  CATCH_CHECK_THAT(r.out, Contains("final eval after step 2: loss "));
  CATCH_CHECK_THAT(r.out, Contains("  f1 "));
}

CATCH_TEST_CASE("train --model bert: a malformed TSV row or a missing file is one error naming it", "[apps][bert][errors]") {
  const std::string bad = write_text(".bad.tsv", "sentence\tlabel\ngood film\t1\nno label here\n");
  auto r = cli(with(small, {"--data-file", bad, "--steps", "1"}));
  CATCH_CHECK(r.code != 0);
  CATCH_CHECK_THAT(r.err, Contains(bad));
  CATCH_CHECK_THAT(r.err, Contains("line 3"));
  CATCH_CHECK_THAT(r.err, Contains("error: --data-file: glue file '" + bad + "'"));  // the flag that gave it
  auto none = cli(with(small, {"--steps", "1"}));
  CATCH_CHECK(none.code != 0);
  CATCH_CHECK_THAT(none.err, Contains("--model bert needs --data-file"));
  const std::string train = write_text(".train.tsv", sentiment_tsv(sentiment_rows(40, 3)));
  auto cols = cli(with(small, {"--data-file", train, "--text-columns", "0,x", "--steps", "1"}));
  CATCH_CHECK_THAT(cols.err, Contains("--text-columns=0,x must be A,LABEL or A,B,LABEL"));
  // Digits only, as every number flag: a leading blank or a sign was taken.
  for (const char* odd : {" 0,1", "0,+1", "0,1,"}) {
    auto spaced = cli(with(small, {"--data-file", train, "--text-columns", odd, "--steps", "1"}));
    CATCH_CHECK(spaced.code == 2);
    CATCH_CHECK_THAT(spaced.err, Contains("--text-columns=" + std::string(odd) + " must be A,LABEL or A,B,LABEL"));
  }
  auto missing_eval = cli(with(small, {"--data-file", train, "--eval-file", train + ".none", "--steps", "1"}));
  CATCH_CHECK(missing_eval.code == 2);
  CATCH_CHECK_THAT(missing_eval.err, Contains("error: --eval-file: glue file '" + train + ".none' cannot be opened"));
  auto no_eval = cli(with(small, {"--data-file", train, "--eval-every", "2", "--steps", "1"}));
  CATCH_CHECK_THAT(no_eval.err, Contains("--eval-every=2 needs evaluation data (--eval-file: bert's GLUE dev TSV, the "
                                         "gpt's held-out token file; "));
  CATCH_CHECK_THAT(no_eval.err, Contains("and model 'bert' has none"));
  // The first N microbatches of the dev set, and no more than it has (40 rows of 8: 5).
  auto too_many = cli(with(small, {"--data-file", train, "--eval-file", train, "--eval-microbatches", "6", "--steps", "1"}));
  CATCH_CHECK(too_many.code == 2);
  CATCH_CHECK_THAT(too_many.err, Contains("--eval-microbatches=6 is more than the 5 microbatches of model 'bert''s eval set"));
  // A model past any machine's memory: refused before the examples are encoded or the model built.
  auto huge = cli({"train", "--model", "bert", "--data-file", train, "--layers", "1000000000", "--hidden", "32",
                   "--heads", "2", "--seq-len", "16", "--steps", "1"});
  CATCH_CHECK(huge.code == 2);
  CATCH_CHECK_THAT(huge.err, Contains("BERT with --layers 1000000000 --hidden 32 --intermediate 128 --max-positions 16 and "
                                      "a vocabulary of "));
  CATCH_CHECK_THAT(huge.err, Contains("billion parameters) on 2 stages, 2 ranks in this process, microbatch size 4 needs at least "));
  CATCH_CHECK_THAT(huge.err, Contains("GiB of memory and swap: lower those"));
  // So is a sequence whose attention alone is past it ([B, heads, S, S] floats for one layer).
  std::vector<std::string> long_rows = small;
  long_rows[12] = "100000";  // --seq-len
  auto attention = cli(with(long_rows, {"--data-file", train, "--steps", "1"}));
  CATCH_CHECK(attention.code == 2);
  CATCH_CHECK_THAT(attention.err, Contains("microbatch size 8 needs at least ") &&
                                      Contains("what one microbatch keeps for the backward of its blocks: q, k, v, the "
                                               "attention's output, the MLP's units and the [B, heads, seq-len, seq-len] "
                                               "attention)"));
  auto gpt_attention = cli({"train", "--layers", "2", "--hidden", "32", "--heads", "2", "--vocab", "64", "--seq-len",
                            "100000", "--steps", "1"});
  CATCH_CHECK(gpt_attention.code == 2);
  CATCH_CHECK_THAT(gpt_attention.err, Contains("the GPT of --layers 2 --hidden 32 --vocab 64 --seq-len 100000 ") &&
                                          Contains("[B, heads, seq-len, seq-len] attention"));
  // Labels that look like a mistake train, with a warning that says what was made of them.
  auto rows = sentiment_rows(40, 5);
  std::string stray_text = sentiment_tsv(rows) + "one more film\t1000\n";
  const std::string stray = write_text(".stray.tsv", stray_text);
  const std::string log = temp_path(".log");
  auto warned = cli(with(small, {"--data-file", stray, "--steps", "1", "--log-file", log}));
  CATCH_CHECK(warned.code == 0);
  std::stringstream logged;
  logged << std::ifstream(log).rdbuf();
  CATCH_CHECK_THAT(logged.str(), Contains(" warning: --data-file " + stray + ": labels 0..1000 make 1001 classes, "
                                          "998 of them with no training row (a stray label?)\n"));
  CATCH_CHECK_THAT(warned.out, Contains(stray + ": 41 rows (SST-2, 1001 labels: 0, 1, 2, 3, 4, 5, 6, 7, ...)"));
  // --vocab is the GPT's: named, not silently dropped.
  auto vocab = cli(with(small, {"--data-file", train, "--vocab", "50", "--steps", "1"}));
  CATCH_CHECK(vocab.code == 0);
  CATCH_CHECK_THAT(vocab.out, Contains("note: --vocab is the GPT's: --model bert takes its vocabulary from --vocab-file (or "
                                       "builds one from the training file)\n"));
  // 0 means "the default" for these two; below it is refused, not taken as 0.
  auto positions = cli(with(small, {"--data-file", train, "--max-positions", "-1", "--steps", "1"}));
  CATCH_CHECK(positions.code == 2);
  CATCH_CHECK_THAT(positions.err, Contains("--max-positions must be >= 0 (0: --seq-len): got -1"));
  auto inner = cli(with(small, {"--data-file", train, "--intermediate", "-1", "--steps", "1"}));
  CATCH_CHECK(inner.code == 2);
  CATCH_CHECK_THAT(inner.err, Contains("--intermediate must be >= 0 (0: 4 x --hidden): got -1"));
}

CATCH_TEST_CASE("train --model bert --init-from takes Hugging Face names, and names a missing or mis-shaped tensor",
                "[apps][bert][checkpoint]") {
  if (std::system("python3 -c 'import safetensors.numpy' 2>/dev/null") != 0) {
    CATCH_WARN("python3 with safetensors not found: skipped (make deps installs it)");
    return;
  }
  // A WordPiece vocabulary (so the embedding's shape is known) and random weights under
  // BertForSequenceClassification's names, written by Python's safetensors.
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (const auto& w : sentiment_words()) vocab += w + "\n";
  const std::string vocab_file = write_text(".vocab.txt", vocab);
  const std::string train = write_text(".train.tsv", sentiment_tsv(sentiment_rows(40, 5)));
  const std::string hf = temp_path(".hf.safetensors"), broken = temp_path(".broken.safetensors"),
                    pretrained = temp_path(".pretrained.safetensors"), bare = temp_path(".bare.safetensors");
  const std::string py = R"(
import sys, numpy as np
from safetensors.numpy import save_file
V, H, I, P, L = 21, 32, 128, 16, 2
rng = np.random.default_rng(0)
t = {}
def put(name, *shape): t[name] = rng.standard_normal(shape).astype(np.float32) * 0.02
put('bert.embeddings.word_embeddings.weight', V, H); put('bert.embeddings.position_embeddings.weight', P, H)
put('bert.embeddings.token_type_embeddings.weight', 2, H)
put('bert.embeddings.LayerNorm.weight', H); put('bert.embeddings.LayerNorm.bias', H)
for l in range(L):
    p = 'bert.encoder.layer.%d.' % l
    for q in ('attention.self.query.', 'attention.self.key.', 'attention.self.value.', 'attention.output.dense.'):
        put(p + q + 'weight', H, H); put(p + q + 'bias', H)
    put(p + 'attention.output.LayerNorm.weight', H); put(p + 'attention.output.LayerNorm.bias', H)
    put(p + 'intermediate.dense.weight', I, H); put(p + 'intermediate.dense.bias', I)
    put(p + 'output.dense.weight', H, I); put(p + 'output.dense.bias', H)
    put(p + 'output.LayerNorm.weight', H); put(p + 'output.LayerNorm.bias', H)
put('bert.pooler.dense.weight', H, H); put('bert.pooler.dense.bias', H)
put('classifier.weight', 2, H); put('classifier.bias', 2)
save_file(t, sys.argv[1])
# A pretrained checkpoint's layout (bert-base-uncased's model.safetensors): LayerNorm under
# TensorFlow's names, the pretraining heads, an old position_ids buffer, no classifier.
pre = {}
for k, v in t.items():
    if k.startswith('classifier.'): continue
    pre[k.replace('LayerNorm.weight', 'LayerNorm.gamma').replace('LayerNorm.bias', 'LayerNorm.beta')] = v
put('cls.predictions.bias', V); put('cls.predictions.transform.dense.weight', H, H); put('cls.seq_relationship.weight', 2, H)
for k in ('cls.predictions.bias', 'cls.predictions.transform.dense.weight', 'cls.seq_relationship.weight'): pre[k] = t.pop(k)
pre['bert.embeddings.position_ids'] = np.arange(P, dtype=np.int64).reshape(1, P)
save_file(pre, sys.argv[3])
# A bare BertModel's file (sentence-transformers and others): its names without 'bert.'.
save_file({k[5:]: v for k, v in pre.items() if k.startswith('bert.')}, sys.argv[4])
del t['bert.pooler.dense.bias']
t['classifier.weight'] = np.zeros((3, H), np.float32)
save_file(t, sys.argv[2])
)";
  const std::string script = write_text(".py", py);
  CATCH_REQUIRE(std::system(("python3 " + script + " " + hf + " " + broken + " " + pretrained + " " + bare).c_str()) == 0);

  // One step at a learning rate too small to move a float32: --save-final gives the file back.
  const std::string out = temp_path(".safetensors");
  auto r = cli(with(small, {"--data-file", train, "--vocab-file", vocab_file, "--steps", "1", "--lr", "1e-30",
                            "--init-from", hf, "--save-final", out}));
  CATCH_INFO(r.out << r.err);
  CATCH_REQUIRE(r.code == 0);
  const auto want = load_safetensors(hf), got = load_safetensors(out);
  CATCH_REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CATCH_CHECK(got[i].first == want[i].first);
    CATCH_CHECK(got[i].second.nbytes() == want[i].second.nbytes());
    CATCH_CHECK(std::memcmp(got[i].second.data(), want[i].second.data(), want[i].second.nbytes()) == 0);
  }
  auto bad = cli(with(small, {"--data-file", train, "--vocab-file", vocab_file, "--steps", "1", "--init-from", broken}));
  CATCH_CHECK(bad.code != 0);
  CATCH_CHECK_THAT(bad.err, Contains("1 missing: bert.pooler.dense.bias"));
  CATCH_CHECK_THAT(bad.err, Contains("classifier.weight (has [2, 32], given [3, 32])"));

  // A pretrained checkpoint, as Hugging Face's from_pretrained takes it: gamma and beta read as
  // LayerNorm's weight and bias, the pretraining heads and the old buffer skipped with a note,
  // the classifier started as built, with a warning. The rest is the file's, bit for bit.
  // One step at a learning rate too small to move a float32, from `weights`: the run, and its log.
  const auto init_run = [&](const std::string& weights, const std::string& save, const std::string& log) {
    auto r = cli(with(small, {"--data-file", train, "--vocab-file", vocab_file, "--steps", "1", "--lr", "1e-30",
                              "--init-from", weights, "--save-final", save, "--log-file", log}));
    std::stringstream logged;
    logged << std::ifstream(log).rdbuf();
    return std::make_pair(r, logged.str());
  };
  const std::string tuned = temp_path(".tuned.safetensors");
  auto [pre, logged] = init_run(pretrained, tuned, temp_path(".pretrained.log"));
  CATCH_INFO(pre.out << pre.err);
  CATCH_REQUIRE(pre.code == 0);
  CATCH_CHECK_THAT(logged, Contains("read 10 LayerNorm tensors under their TensorFlow names (gamma, beta as weight, bias)"));
  CATCH_CHECK_THAT(logged, Contains("skipped 4 tensors of " + pretrained + " that the model has no use for: "
                                          "bert.embeddings.position_ids, cls.predictions.bias, "
                                          "cls.predictions.transform.dense.weight, cls.seq_relationship.weight"));
  CATCH_CHECK_THAT(logged, Contains(" warning: 2 tensors of the model's task head are not in the weights: they start "
                                          "as initialised (train them before you use them): classifier.bias, classifier.weight"));
  const auto fine = load_safetensors(tuned);
  CATCH_REQUIRE(fine.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CATCH_INFO(want[i].first);
    CATCH_CHECK(fine[i].first == want[i].first);
    const bool same = std::memcmp(fine[i].second.data(), want[i].second.data(), want[i].second.nbytes()) == 0;
    CATCH_CHECK(same == (want[i].first.rfind("classifier.", 0) != 0));
  }
  // A bare base model's file loads under 'bert.', as from_pretrained loads it (it was 39
  // missing and 39 not in the model): the same bits as the pretrained file's.
  const std::string from_bare = temp_path(".from-bare.safetensors");
  auto [bare_run, bare_logged] = init_run(bare, from_bare, temp_path(".bare.log"));
  CATCH_INFO(bare_run.out << bare_run.err);
  CATCH_REQUIRE(bare_run.code == 0);
  CATCH_CHECK_THAT(bare_logged, Contains("tensors of a bare base model under 'bert.'"));
  const auto from_bare_weights = load_safetensors(from_bare);
  CATCH_REQUIRE(from_bare_weights.size() == fine.size());
  for (std::size_t i = 0; i < fine.size(); ++i)
    if (fine[i].first.rfind("classifier.", 0) != 0)
      CATCH_CHECK(std::memcmp(from_bare_weights[i].second.data(), fine[i].second.data(), fine[i].second.nbytes()) == 0);
  // A name no rule covers is still refused: the file is for a deeper model.
  std::vector<std::string> shallower = small;
  *(std::find(shallower.begin(), shallower.end(), "--layers") + 1) = "1";
  auto gpt_file = cli(with(shallower, {"--data-file", train, "--vocab-file", vocab_file, "--steps", "1", "--init-from", hf,
                                       "--partition", "uniform"}));
  CATCH_CHECK(gpt_file.code == 2);
  CATCH_CHECK_THAT(gpt_file.err, Contains("not in the model: bert.encoder.layer.1."));
}

CATCH_TEST_CASE("train --model bert reads CoLA's headerless files, refuses STS-B and UTF-16, and takes a generic header's "
                "text column by name", "[apps][bert]") {
  const auto rows = sentiment_rows(60, 7), dev_rows = sentiment_rows(20, 8);
  // CoLA: source, label, mark, sentence; no header (its first row was dropped as one).
  auto cola = [](const std::vector<sentiment_row>& r) {
    std::string tsv;
    for (const auto& row : r) tsv += "gj04\t" + std::to_string(row.label) + "\t" + (row.label ? "" : "*") + "\t" + row.sentence + "\n";
    return tsv;
  };
  const std::string train = write_text(".cola.tsv", cola(rows)), dev = write_text(".cola-dev.tsv", cola(dev_rows));
  const std::string metrics = temp_path(".jsonl");
  auto r = cli(with(small, {"--data-file", train, "--eval-file", dev, "--steps", "2", "--metrics", metrics}));
  CATCH_INFO(r.out << r.err);
  CATCH_REQUIRE(r.code == 0);
  CATCH_CHECK_THAT(r.out, Contains(train + ": 60 rows (CoLA (no header: source, label, mark, sentence), 2 labels: 0, 1; "
                                   "F1 of 1); eval " + dev + ": 20 rows"));
  CATCH_CHECK_THAT(r.out, Contains("  mcc "));  // CoLA's own metric
  std::string last;
  std::ifstream lines(metrics);
  for (std::string line; std::getline(lines, line);) last = line;
  CATCH_CHECK(nlohmann::json::parse(last).contains("mcc"));
  // Columns by number in such a file keep its first row.
  auto numbered = cli(with(small, {"--data-file", train, "--text-columns", "3,1", "--steps", "1"}));
  CATCH_CHECK_THAT(numbered.out, Contains(train + ": 60 rows (--text-columns 3,1"));
  // STS-B's score is no class.
  const std::string stsb =
      write_text(".stsb.tsv", "index\tgenre\tsentence1\tsentence2\tscore\n0\tmain\ta man plays\ta man plays music\t4.2\n");
  auto regression = cli(with(small, {"--data-file", stsb, "--steps", "1"}));
  CATCH_CHECK(regression.code == 2);
  CATCH_CHECK_THAT(regression.err, Contains("--data-file: glue file '" + stsb + "' line 1: the header names STS-B's columns "
                                            "(sentence1, sentence2, score): its score is a similarity on a real scale"));
  // "id, text, label": the text is the column named so, not the ids.
  std::string id_tsv = "id\ttext\tlabel\n";
  for (std::size_t i = 0; i < rows.size(); ++i) id_tsv += std::to_string(i) + "\t" + rows[i].sentence + "\t" + std::to_string(rows[i].label) + "\n";
  const std::string ids = write_text(".ids.tsv", id_tsv);
  auto generic = cli(with(small, {"--data-file", ids, "--steps", "1"}));
  CATCH_CHECK(generic.code == 0);
  CATCH_CHECK_THAT(generic.out, Contains("(generic: text 'text', label 'label', 2 labels"));
  // UTF-16 (Excel's "Unicode Text"): named, not read as one column.
  std::string utf16 = "\xFF\xFE";
  for (char ch : std::string("sentence\tlabel\ngood\t1\n")) utf16 += std::string(1, ch) + std::string(1, '\0');
  const std::string wide = write_text(".utf16.tsv", utf16);
  auto wide_run = cli(with(small, {"--data-file", wide, "--steps", "1"}));
  CATCH_CHECK(wide_run.code == 2);
  CATCH_CHECK_THAT(wide_run.err, Contains("starts with a UTF-16 byte-order mark: is it UTF-16 (Excel's \"Unicode Text\")? "
                                          "Convert it to UTF-8"));
  // One label only, a vocabulary file's fault, sentence pairs in 2 tokens: each names its flag.
  const std::string one_label = write_text(".one.tsv", "sentence\tlabel\ngood\t0\nbad\t0\n");
  CATCH_CHECK_THAT(cli(with(small, {"--data-file", one_label, "--steps", "1"})).err,
                   Contains("--data-file: a classification task needs >= 2 labels, the file's label column holds 1"));
  const std::string no_cls = write_text(".vocab.txt", "[PAD]\n[UNK]\n[SEP]\ngood\n");
  CATCH_CHECK_THAT(cli(with(small, {"--data-file", train, "--vocab-file", no_cls, "--steps", "1"})).err,
                   Contains("error: --vocab-file: "));
  const std::string pairs = write_text(".pairs.tsv", "sentence1\tsentence2\tlabel\na\tb\t0\nc\td\t1\n");
  std::vector<std::string> tiny_seq = small;
  tiny_seq[12] = "4";  // --seq-len: [CLS] a [SEP] [SEP], no room for b (3 and 2 trained on no text at all)
  CATCH_CHECK_THAT(cli(with(tiny_seq, {"--data-file", pairs, "--steps", "1"})).err,
                   Contains("--seq-len must be >= 5 for sentence pairs ([CLS] a [SEP] b [SEP], a token of each): got 4"));
  tiny_seq[12] = "2";
  CATCH_CHECK_THAT(cli(with(tiny_seq, {"--data-file", train, "--steps", "1"})).err,
                   Contains("--seq-len must be >= 3 for single sentences ([CLS] a [SEP], a token of it): got 2"));
  // A config that does not set lr leaves BERT's own default, 2e-4.
  const std::string config = write_text(".json", "{\"pp\": 2, \"model\": \"bert\"}");
  auto configured = cli({"train", "--config", config, "--data-file", train, "--layers", "2", "--hidden", "32", "--heads",
                         "2", "--seq-len", "16", "--steps", "1", "--warmup-steps", "0", "--metrics", metrics});
  CATCH_CHECK(configured.code == 0);
  std::ifstream m(metrics);
  std::string first;
  std::getline(m, first);
  CATCH_CHECK(nlohmann::json::parse(first).at("lr").get<double>() == Approx(2e-4));
  // The same config through a pipe (--config <(...)): it was read a second time to see whether
  // it set lr, found drained, taken as setting it, and the run trained at 3e-4.
  const std::string fifo = temp_path(".fifo");
  CATCH_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::thread writer([&] { std::ofstream(fifo) << "{\"pp\": 2, \"model\": \"bert\"}"; });
  auto piped = cli({"train", "--config", fifo, "--data-file", train, "--layers", "2", "--hidden", "32", "--heads", "2",
                    "--seq-len", "16", "--steps", "1", "--warmup-steps", "0", "--metrics", metrics});
  writer.join();
  CATCH_CHECK(piped.code == 0);
  std::ifstream pm(metrics);
  std::getline(pm, first);
  CATCH_CHECK(nlohmann::json::parse(first).at("lr").get<double>() == Approx(2e-4));
  // Drained already (another process of a launch read it first): said so, not "not valid JSON".
  std::thread empty_writer([&] { std::ofstream{fifo}; });
  auto drained = cli({"train", "--config", fifo, "--data-file", train, "--steps", "1"});
  empty_writer.join();
  CATCH_CHECK(drained.code == 2);
  CATCH_CHECK_THAT(drained.err, Contains("config file '" + fifo + "' is empty: a pipe gives its text to one reader"));
  for (const auto& f : {train, dev, metrics, stsb, ids, wide, one_label, no_cls, pairs, config, fifo}) std::remove(f.c_str());
}

// A checkpoint trained with a --vocab-file, resumed without it (a vocabulary built from the
// data, of another size) or with another file: the embedding's shape error names the
// vocabulary (it named only the tensor's shapes).
CATCH_TEST_CASE("train --model bert --resume with another vocabulary names --vocab-file in the error", "[apps][bert][checkpoint]") {
  const std::string train = write_text(".train.tsv", sentiment_tsv(sentiment_rows(60, 41)));
  const std::string vocab = write_text(".vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\na\ngood\nbad\n");
  const std::string other = write_text(".other-vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n");
  const std::string dir = temp_path(".vocab-ck");
  auto saved = cli(with(small, {"--data-file", train, "--vocab-file", vocab, "--steps", "1", "--save-dir", dir}));
  CATCH_INFO(saved.out << saved.err);
  CATCH_REQUIRE(saved.code == 0);
  auto without = cli(with(small, {"--data-file", train, "--steps", "2", "--resume", dir}));
  CATCH_CHECK(without.code == 2);
  CATCH_CHECK_THAT(without.err, Contains("bert.embeddings.word_embeddings.weight"));
  CATCH_CHECK_THAT(without.err, Contains("; the checkpoint was trained with a --vocab-file, and this run builds its "
                                         "vocabulary from --data-file: give the --vocab-file it was trained with"));
  auto wrong = cli(with(small, {"--data-file", train, "--vocab-file", other, "--steps", "2", "--resume", dir}));
  CATCH_CHECK(wrong.code == 2);
  CATCH_CHECK_THAT(wrong.err, Contains("; --vocab-file '" + other +
                                       "' is not the vocabulary the checkpoint was trained with: give the one it was "
                                       "trained with"));
  auto same = cli(with(small, {"--data-file", train, "--vocab-file", vocab, "--steps", "2", "--resume", dir}));
  CATCH_CHECK(same.code == 0);
  std::filesystem::remove_all(dir);
}
