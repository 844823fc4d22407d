#!/bin/bash
# A kernel's loops give the same bits on every clone (core/simd_clones.hpp): runs CHECK (linked
# with the library's clones) natively (this CPU's clone: AVX-512 here) and under valgrind (whose
# emulated CPU has no AVX-512: the AVX2 clone), and PLAIN_CHECK (the same source built for plain
# x86-64, no clones); each must match the per-element definition, and all must print the same
# outputs hash. Without valgrind the emulated run is left out, and said so. Used for the GELU
# (gelu_clones_check), AdamW (adamw_clones_check) and attention (attention_clones_check: its
# loops serve only CPUs with FMA, so PLAIN_CHECK is "-", no plain build) kernels.
# usage: kernel_clones.sh path/to/CHECK path/to/PLAIN_CHECK|-
set -u
bin=${1:?usage: kernel_clones.sh path/to/CHECK path/to/PLAIN_CHECK}
plain=${2:?usage: kernel_clones.sh path/to/CHECK path/to/PLAIN_CHECK}
run() {  # label, command...: prints "label: clone ... hash ..."; fails the test on a mismatch
  local label=$1 out
  shift
  out=$("$@") || { echo "$label: $out"; exit 1; }
  echo "$label: $(echo "$out" | tr '\n' ' ')"
  hashes+=("$(echo "$out" | tail -1)")
}
hashes=()
run "native        " "$bin"
if [ "$plain" != - ]; then run "plain x86-64  " "$plain"; fi
if nm "$bin" 2>/dev/null | grep -q ' __asan_init$'; then
  # A sanitizer build (make test SANITIZE=address): valgrind cannot run it. The default build's test runs it.
  echo "(a sanitizer build: valgrind cannot run it, so the AVX2 clone is not run here; the default build's test runs it)"
elif command -v valgrind >/dev/null; then
  run "under valgrind" valgrind -q --error-exitcode=3 "$bin"
else
  echo "(valgrind is not installed: the AVX2 clone is not run here; apt-get install valgrind)"
fi
for h in "${hashes[@]}"; do
  [ "$h" = "${hashes[0]}" ] || { echo "the builds' outputs differ"; exit 1; }
done
