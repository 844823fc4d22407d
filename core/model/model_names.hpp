// Which models are registered, by name, for front ends that must not pay for torch headers
// (the model API itself is core/model/layer_model.hpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace actorpipe {

bool has_model(const std::string& name);
// name -> description, the built-in gpt and bert first, then registered ones in name order.
std::vector<std::pair<std::string, std::string>> list_models();

}  // namespace actorpipe
