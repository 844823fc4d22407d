// GLUE TSV -> encoded examples -> the BERT model definition.
#include "core/model/bert_task.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "core/data/glue_tsv.hpp"
#include "core/data/wordpiece.hpp"
#include "core/log.hpp"
#include "core/model/bert_model.hpp"
#include "core/run_room.hpp"

namespace actorpipe {

const char* const bert_description =
    "BERT for sequence classification on GLUE-format TSV (--data-file train.tsv, --eval-file dev.tsv, "
    "--vocab-file vocab.txt); Hugging Face parameter names";

namespace {

// --text-columns "A,LABEL" or "A,B,LABEL" (0-based), keeping the header setting.
glue_columns parse_columns(const std::string& text) {
  std::vector<int> v;
  // getline drops a trailing empty item: "0,1," read as "0,1".
  if (!text.empty() && text.back() == ',')
    throw std::invalid_argument("--text-columns=" + text + " must be A,LABEL or A,B,LABEL (0-based column numbers)");
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      // Digits only, as every number flag takes them (stoi skipped a leading blank and a '+').
      if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos) throw std::invalid_argument("");
      std::size_t used = 0;
      const int n = std::stoi(item, &used);
      if (used != item.size() || n < 0) throw std::invalid_argument("");
      v.push_back(n);
    } catch (const std::exception&) {
      throw std::invalid_argument("--text-columns=" + text + " must be A,LABEL or A,B,LABEL (0-based column numbers)");
    }
  }
  if (v.size() != 2 && v.size() != 3)
    throw std::invalid_argument("--text-columns=" + text + " must be A,LABEL or A,B,LABEL (0-based column numbers)");
  glue_columns c;
  c.text_a = v[0];
  c.text_b = v.size() == 3 ? v[1] : -1;
  c.label = v.back();
  c.layout = "--text-columns " + text;
  return c;
}

std::shared_ptr<encoded_examples> encode_all(const glue_dataset& d, const wordpiece_tokenizer& tok, int seq_len) {
  auto e = std::make_shared<encoded_examples>();
  e->seq_len = seq_len;
  const std::size_t n = d.examples.size() * static_cast<std::size_t>(seq_len);
  e->input_ids.reserve(n), e->token_type_ids.reserve(n), e->attention_mask.reserve(n);
  for (const auto& x : d.examples) {
    const encoded_text t = d.pairs() ? tok.encode_pair(x.text_a, x.text_b, seq_len) : tok.encode(x.text_a, seq_len);
    e->input_ids.insert(e->input_ids.end(), t.input_ids.begin(), t.input_ids.end());
    e->token_type_ids.insert(e->token_type_ids.end(), t.token_type_ids.begin(), t.token_type_ids.end());
    e->attention_mask.insert(e->attention_mask.end(), t.attention_mask.begin(), t.attention_mask.end());
    e->labels.push_back(x.label);
  }
  return e;
}

}  // namespace

model_definition bert_task_model(const train_options& o) {
  if (o.data_file.empty())
    throw std::invalid_argument("--model bert needs --data-file: a GLUE-format training TSV (e.g. SST-2's train.tsv)");
  const auto& t = o.text;
  if (t.max_positions < 0)
    throw std::invalid_argument("--max-positions must be >= 0 (0: --seq-len): got " + std::to_string(t.max_positions));
  if (t.intermediate < 0)
    throw std::invalid_argument("--intermediate must be >= 0 (0: 4 x --hidden): got " + std::to_string(t.intermediate));
  // A file's errors name the flag that gave it (and --text-columns, where the columns are its).
  const auto named = [&t](const char* flag, const auto& read) {
    try {
      return read();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string(flag) + ": " + e.what() +
                                  (t.columns.empty() ? "" : " (with --text-columns " + t.columns + ")"));
    }
  };
  glue_columns columns = t.columns.empty() ? named("--data-file", [&] { return glue_columns_from_file(o.data_file); })
                                           : parse_columns(t.columns);
  // Columns by number in a file without a header (CoLA's): its first row is an example.
  if (!t.columns.empty()) columns.header = named("--data-file", [&] { return glue_file_has_header(o.data_file, columns); });
  const glue_dataset train = named("--data-file", [&] { return read_glue_tsv(o.data_file, columns); });
  for (const std::string& note : train.notes) log_warn("--data-file " + o.data_file + ": " + note);
  glue_dataset eval;
  if (!t.eval_file.empty()) {
    // Columns by the dev file's own header (MNLI's dev files have more columns than train.tsv);
    // --text-columns names them in both files.
    eval = named("--eval-file", [&] {
      glue_columns eval_columns = columns;
      if (t.columns.empty())
        eval_columns = glue_columns_for_eval(t.eval_file, o.data_file, columns);
      else
        eval_columns.header = glue_file_has_header(t.eval_file, columns);  // its own line 1 decides
      return read_glue_tsv(t.eval_file, eval_columns, train.labels);
    });
  }
  wordpiece_options wo;
  wo.lower_case = t.lower_case;
  std::string vocab_text;
  wordpiece_tokenizer tok = [&] {
    if (!t.vocab_file.empty()) {
      vocab_text = "WordPiece vocabulary " + t.vocab_file;
      return named("--vocab-file", [&] { return wordpiece_tokenizer::from_vocab_file(t.vocab_file, wo); });
    }
    std::vector<std::string> texts;
    for (const auto& x : train.examples) {
      texts.push_back(x.text_a);
      if (train.pairs()) texts.push_back(x.text_b);
    }
    vocab_text = "a word vocabulary from the training file";
    return wordpiece_tokenizer::from_texts(texts, wo);
  }();

  bert_config c;
  c.vocab = tok.vocab_size();
  c.hidden = o.model.hidden;
  c.heads = o.model.heads;
  c.layers = o.model.layers;
  c.intermediate = t.intermediate > 0 ? t.intermediate : 4 * o.model.hidden;
  c.max_positions = t.max_positions > 0 ? t.max_positions : o.model.seq_len;
  c.num_labels = train.num_labels();
  c.init_std = o.model.init_std;
  c.seed = o.model.seed;
  if (c.max_positions < o.model.seq_len)
    throw std::invalid_argument("--max-positions=" + std::to_string(c.max_positions) + " is below --seq-len=" +
                                std::to_string(o.model.seq_len));
  {  // before the examples are encoded and the model built (as the GPT's, core/run_room.hpp)
    const double h = c.hidden, inner = c.intermediate;
    const double embeddings = (static_cast<double>(c.vocab) + c.max_positions + c.type_vocab + 2) * h;
    const double layer = 4 * h * h + 2 * h * inner + 9 * h + inner;
    const double heads = h * h + h + (h + 1) * c.num_labels;  // pooler, classifier
    require_model_memory("BERT with --layers " + std::to_string(c.layers) + " --hidden " + std::to_string(c.hidden) +
                             " --intermediate " + std::to_string(c.intermediate) + " --max-positions " +
                             std::to_string(c.max_positions) + " and a vocabulary of " + std::to_string(c.vocab),
                         embeddings + c.layers * layer + heads, pipeline_stages(o), ranks_in_this_process(o), o.microbatch_size,
                         o.model.seq_len, h, c.heads, blocks_kept_per_microbatch(o, c.layers), inner);
  }

  // Room for one token of each sentence at least (2 and 3 trained on no text at all).
  if (train.pairs() && o.model.seq_len < 5)
    throw std::invalid_argument("--seq-len must be >= 5 for sentence pairs ([CLS] a [SEP] b [SEP], a token of each): got " +
                                std::to_string(o.model.seq_len));
  if (!train.pairs() && o.model.seq_len < 3)
    throw std::invalid_argument("--seq-len must be >= 3 for single sentences ([CLS] a [SEP], a token of it): got " +
                                std::to_string(o.model.seq_len));
  bert_data d;
  d.train = encode_all(train, tok, o.model.seq_len);
  if (!t.eval_file.empty()) d.eval = encode_all(eval, tok, o.model.seq_len);
  d.pad_id = tok.pad_id();
  d.cls_id = tok.cls_id();
  d.seed = o.data_seed;
  d.microbatch_size = o.microbatch_size;
  d.microbatches_per_step = o.microbatches * o.dp;
  std::string labels;  // "2 labels: 0, 1; F1 of 1"
  for (int i = 0; i < std::min(train.num_labels(), 8); ++i) labels += (i ? ", " : ": ") + train.labels.names[i];
  if (train.num_labels() > 8) labels += ", ...";
  if (train.num_labels() == 2) labels += "; F1 of " + train.labels.names[1];
  d.description = o.data_file + ": " + std::to_string(train.examples.size()) + " rows (" + columns.layout + ", " +
                  std::to_string(train.num_labels()) + " labels" + labels + ")" +
                  (t.eval_file.empty() ? "" : "; eval " + t.eval_file + ": " + std::to_string(eval.examples.size()) + " rows") +
                  "; " + vocab_text + " (" + std::to_string(tok.vocab_size()) + " tokens" +
                  (t.lower_case ? ", lower-cased" : "") + ")";
  return bert_model(c, d);
}

}  // namespace actorpipe
