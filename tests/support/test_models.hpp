// The tests' user models, registered by name (torch-free to include).
#pragma once

namespace actorpipe::testing {

// "test-mlp-bn": the tests' MLP (mlp_model.hpp) with a BatchNorm in its first layer;
// "test-mlp-no-path": the MLP whose h1 (layer 3) ignores its input; "test-cut-empty",
// "test-cut-scalar", "test-cut-nine-dims": a cut (counts:2,2) that carries a tensor of no
// elements, of no dimensions, of 9 dimensions, beside a parameter of no elements;
// "test-mlp-counting": the MLP whose h0 counts its training forwards in a buffer.
void register_test_models();

}  // namespace actorpipe::testing
