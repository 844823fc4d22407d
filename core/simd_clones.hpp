// ACTORPIPE_SIMD_CLONES: compile a loop three times (AVX-512, AVX2 and plain x86-64) and pick
// the best at load time for this CPU, by its features ("arch=haswell" would test the CPU
// model and give every AVX2 CPU but a Haswell the plain loop). The kernels that use it
// (core/model/gelu_kernel.cpp, core/optim/adamw_kernel.cpp) are built without fused
// multiply-add or reassociation, so every clone gives the same bits (tests/core/kernel_clones.sh
// checks). ACTORPIPE_NO_SIMD_CLONES builds the plain loop only, for that check. A
// ThreadSanitizer build does too: the clones' resolvers run while the program is relocated,
// before TSan starts, and its instrumentation in them crashed every run (even --version).
#pragma once

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && !defined(ACTORPIPE_NO_SIMD_CLONES) && \
    !defined(__SANITIZE_THREAD__)
#define ACTORPIPE_HAS_SIMD_CLONES 1
#define ACTORPIPE_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ACTORPIPE_SIMD_CLONES
#endif

