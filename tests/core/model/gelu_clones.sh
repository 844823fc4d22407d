#!/bin/bash
# gelu_kernel's loops give the same bits on every clone: runs gelu_clones_check natively (this
# CPU's clone: AVX-512 here) and under valgrind (whose emulated CPU has no AVX-512: the AVX2
# clone); each must match the per-element function, and both must print the same hash.
# Exits 77 (ctest: skipped) where valgrind is not installed.
# usage: gelu_clones.sh path/to/gelu_clones_check
set -u
bin=${1:?usage: gelu_clones.sh path/to/gelu_clones_check}
command -v valgrind >/dev/null || { echo "skipped: valgrind is not installed (apt-get install valgrind)"; exit 77; }
native=$("$bin") || { echo "native run: $native"; exit 1; }
emulated=$(valgrind -q --error-exitcode=3 "$bin") || { echo "under valgrind: $emulated"; exit 1; }
echo "native:         $native" | tr '\n' ' '; echo
echo "under valgrind: $emulated" | tr '\n' ' '; echo
[ "$(echo "$native" | tail -1)" = "$(echo "$emulated" | tail -1)" ] || { echo "the clones' outputs differ"; exit 1; }
[ "$(echo "$native" | head -1)" != "$(echo "$emulated" | head -1)" ] || echo "(both runs took the same clone on this CPU: checked against the per-element function only)"
