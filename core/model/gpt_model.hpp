// The built-in GPT as a model definition: embedding, one layer per transformer block, final
// LayerNorm and an LM head tied to the token embedding, cross-entropy loss, token data.
// Layers: "embed", "blocks.0" .. "blocks.{L-1}", "ln_f", "lm_head"; default partition
// type:^blocks\. (blocks spread evenly, the embedding with the first, the head with the last).
#pragma once

#include <memory>

#include "core/data/token_source.hpp"
#include "core/model/layer_model.hpp"

namespace actorpipe {

// Throws std::invalid_argument (naming the option and value) for a bad shape.
model_definition gpt_model(const train_options& options);

// Opens the data the options name (synthetic or a file).
std::shared_ptr<const token_source> open_source(const train_options& options);

}  // namespace actorpipe
