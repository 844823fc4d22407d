#!/usr/bin/env bash
# The out-of-tree example against the installed package: cmake --install into a temporary
# prefix, build examples/byo_model with find_package(actorpipe), train its own model with its
# own policy on 2 stages in one process and in 2 processes; the loss must fall.
#   byo_model_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -x "$work/prefix/bin/actorpipe"
test -f "$work/prefix/lib/cmake/actorpipe/actorpipeConfig.cmake"
test -f "$work/prefix/include/actorpipe/core/model/layer_model.hpp"
cmake -S "$src/examples/byo_model" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }

# A consumer that finds the package twice (at its top and in a subfolder: Debian's UCX package
# failed the second time), asks for C++14 (the package's headers need 17, and say so) and links
# the transport alone (it lacked the library of tensor_box).
mkdir -p "$work/consumer/sub"
cat > "$work/consumer/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(consumer CXX)
set(CMAKE_CXX_STANDARD 14)
find_package(actorpipe REQUIRED)
add_subdirectory(sub)
EOF
cat > "$work/consumer/sub/CMakeLists.txt" <<'EOF'
find_package(actorpipe REQUIRED)
add_executable(local_only main.cpp)
target_link_libraries(local_only PRIVATE actorpipe::actorpipe_transport)
add_executable(version_of version.cpp)
target_link_libraries(version_of PRIVATE actorpipe::actorpipe_core)
# The static libraries inside a shared library of the user's (a plugin, a Python extension):
# the linker refuses objects built without -fPIC there.
add_library(trainer_plugin SHARED plugin.cpp)
target_link_libraries(trainer_plugin PRIVATE actorpipe::actorpipe)
add_executable(plugin_host host.cpp)
target_link_libraries(plugin_host PRIVATE ${CMAKE_DL_LIBS})
EOF
cat > "$work/consumer/sub/plugin.cpp" <<'EOF'
// A plugin: registers a model of its own when loaded and runs actorpipe's command line.
#include <torch/torch.h>

#include <actorpipe/actorpipe.hpp>

#include <iostream>

namespace {
actorpipe::model_definition tanh_mlp(const actorpipe::train_options& o) {
  actorpipe::model_definition m;
  for (int i = 0; i < 4; ++i)
    m.layers.push_back(actorpipe::make_layer("fc" + std::to_string(i), [i] {
      return actorpipe::layer_module(torch::nn::Sequential(torch::nn::Linear(i == 0 ? 8 : 16, i == 3 ? 1 : 16),
                                                           torch::nn::Tanh()));
    }));
  m.loss = [](const at::Tensor& out, const at::Tensor& y) { return torch::mse_loss(out, y); };
  const std::uint64_t seed = o.data_seed;
  const int batch = o.microbatch_size;
  m.data = [seed, batch](std::uint64_t step, int microbatch) {
    torch::NoGradGuard no_grad;
    auto gen = at::detail::createCPUGenerator(seed * 7919ULL + step * 31ULL + static_cast<std::uint64_t>(microbatch));
    at::Tensor x = at::normal(0.0, 1.0, {batch, 8}, gen, at::TensorOptions().dtype(at::kFloat));
    at::Tensor y = 0.5 * torch::tanh(x.sum(1, true));
    return actorpipe::microbatch_tensors{actorpipe::box(x), actorpipe::box(y)};
  };
  return m;
}
const bool registered = (actorpipe::register_model("plugin-mlp", tanh_mlp, "a plugin's model"), true);
}  // namespace

extern "C" int plugin_main(int argc, const char* const* argv) {
  return registered ? actorpipe::cli_main(argc, argv, std::cout, std::cerr) : 1;
}
EOF
cat > "$work/consumer/sub/host.cpp" <<'EOF'
// Loads a plugin by its path (argv[1]) and hands it the rest of the command line.
#include <dlfcn.h>
#include <cstdio>
int main(int argc, char** argv) {
  void* plugin = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (!plugin) { std::fprintf(stderr, "dlopen: %s\n", argc > 1 ? dlerror() : "no plugin given"); return 3; }
  auto entry = reinterpret_cast<int (*)(int, const char* const*)>(dlsym(plugin, "plugin_main"));
  if (!entry) { std::fprintf(stderr, "dlsym: %s\n", dlerror()); return 3; }
  return entry(argc - 1, argv + 1);
}
EOF
cat > "$work/consumer/sub/version.cpp" <<'EOF'
#include <core/version.hpp>
#include <cstdio>
#if ACTORPIPE_VERSION < 100
#error "ACTORPIPE_VERSION is below 0.1.0"
#endif
int main() { std::printf("actorpipe %s\n", ACTORPIPE_VERSION_STRING); }
EOF
cat > "$work/consumer/sub/main.cpp" <<'EOF'
#include <transport/local/local_transport.hpp>
int main() { return actorpipe::transport::make_local_transport() ? 0 : 1; }
EOF
cmake -S "$work/consumer" -B "$work/consumer/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" \
  > "$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; exit 1; }
cmake --build "$work/consumer/build" >> "$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; exit 1; }
"$work/consumer/build/sub/local_only" || { echo "the transport-only consumer failed"; exit 1; }
# The installed header's version is the installed program's and the package's. (The program
# runs as installed: one built on the pip LibTorch found the system's LibTorch or none.)
[ "$("$work/consumer/build/sub/version_of")" = "$("$work/prefix/bin/actorpipe" --version)" ] ||
  { echo "core/version.hpp says $("$work/consumer/build/sub/version_of"), actorpipe --version $("$work/prefix/bin/actorpipe" --version)"; exit 1; }
grep -q "PACKAGE_VERSION \"$("$work/consumer/build/sub/version_of" | cut -d' ' -f2)\"" \
  "$work/prefix/lib/cmake/actorpipe/actorpipeConfigVersion.cmake" || { echo "the package's version differs"; exit 1; }

falls() {  # "final loss X (first step Y)": X < Y
  local line
  line=$(sed -E 's/^\[p[0-9]+\] //' "$1" | grep '^final loss') || { echo "no final loss in $1:"; cat "$1"; return 1; }
  echo "$line"
  awk '{ gsub(/\)/, "", $6); exit !($3 < $6) }' <<<"$line" || { echo "the loss did not fall:"; cat "$1"; return 1; }
}
# SIGHUP's disposition at start (.preinit_array, apps/hangup_at_start.cpp) is recorded in the
# programs the package links, and left out of the plugin, where the linker refuses it.
nm "$work/build/byo_model" > "$work/byo.nm"
nm "$work/consumer/build/sub/libtrainer_plugin.so" > "$work/plugin.nm"
grep -q ' D actorpipe_hangup_at_start$' "$work/byo.nm" ||
  { echo "byo_model does not record SIGHUP's disposition at start"; exit 1; }
if grep -q ' D actorpipe_hangup_at_start$' "$work/plugin.nm"; then
  echo "the plugin holds the .preinit_array recorder"; exit 1
fi
# The plugin, loaded by a program that knows nothing of actorpipe, trains its own model. Where
# the package is a sanitizer build's (make test SANITIZE=address), such a program must load the
# sanitizer's runtime before anything else, as a user of that build would.
preload=()
if grep -q -- '-fsanitize=address' "$work/prefix/lib/cmake/actorpipe/actorpipeTargets.cmake"; then
  preload=(env "LD_PRELOAD=$(c++ -print-file-name=libasan.so)")
fi
"${preload[@]}" "$work/consumer/build/sub/plugin_host" "$work/consumer/build/sub/libtrainer_plugin.so" train --model plugin-mlp \
  --stages 2 --microbatches 4 --microbatch-size 8 --steps 10 --lr 1e-2 > "$work/plugin.log" 2>&1 ||
  { cat "$work/plugin.log"; exit 1; }
falls "$work/plugin.log"
common=(--model convnet --stages 2 --microbatches 4 --microbatch-size 8 --steps 12 --lr 1e-2)
# One process, its layers cut by their measured cost.
"$work/build/byo_model" train "${common[@]}" --schedule "${BYO_POLICY:-backward-first}" --partition profile > "$work/one.log" 2>&1 ||
  { cat "$work/one.log"; exit 1; }
grep -q '^partition: profile: 0: conv1' "$work/one.log" || { echo "no partition line:"; cat "$work/one.log"; exit 1; }
falls "$work/one.log"
# Two processes (launch restarts this same program, so each has the model registered).
"$work/build/byo_model" launch --nproc-per-node 2 --master-port $((20000 + RANDOM % 20000)) -- \
  train "${common[@]}" --schedule "${BYO_POLICY:-backward-first}" > "$work/two.log" 2>&1 || { cat "$work/two.log"; exit 1; }
falls "$work/two.log"
grep -q 'processes: 2' "$work/two.log" || { echo "not 2 processes:"; cat "$work/two.log"; exit 1; }
echo "byo_model: built against the installed package, trained in 1 and 2 processes; a plugin of it trained too"
