// The built-in "bert": BERT for sequence classification on GLUE-format TSV files, tokenized with
// WordPiece (a vocab.txt) or a word vocabulary built from the training file. Sizes come from
// the options (hidden, heads, layers, seq_len; text.max_positions, text.intermediate).
#pragma once

#include "core/model/layer_model.hpp"

namespace actorpipe {

// Throws std::invalid_argument naming the flag, file and line for bad input (no --data-file,
// a malformed row, a bad --text-columns, ...).
model_definition bert_task_model(const train_options& options);

// "bert: BERT for sequence classification on GLUE TSV (--data-file, --eval-file, --vocab-file)".
extern const char* const bert_description;

}  // namespace actorpipe
