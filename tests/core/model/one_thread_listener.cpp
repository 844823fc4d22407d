// Every model test starts on 1 intra-op thread, as each rank's compute thread runs by default
// (--threads-per-stage 1), so the bit-for-bit comparisons here test actorpipe's arithmetic, not
// the thread pools under it. On more threads the process is no longer a pure function of its
// inputs: OpenBLAS's threaded GEMM and ATen's parallel loops share the work out at run time. One
// CI run (2026-12-04, a CPU we could not see) failed such a comparison on the main thread's
// default thread count; it never failed here, on any OpenBLAS core or thread count, and valgrind
// found no uninitialised read. A test that wants more threads sets them itself.
#define CATCH_CONFIG_EXTERNAL_INTERFACES  // Catch::TestEventListenerBase
#include <catch2/catch.hpp>

#include "core/model/compute_threads.hpp"

namespace {

struct one_intra_op_thread : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    actorpipe::set_compute_threads(1);
    TestEventListenerBase::testCaseStarting(info);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(one_intra_op_thread)
