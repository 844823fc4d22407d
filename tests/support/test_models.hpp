// The tests' user models, registered by name (torch-free to include).
#pragma once

namespace actorpipe::testing {

// "test-mlp-bn": the tests' MLP (mlp_model.hpp) with a BatchNorm in its first layer.
void register_test_models();

}  // namespace actorpipe::testing
