// Every model test starts on 1 intra-op thread, as each rank's compute thread runs by default
// (--threads-per-stage 1), so the bit-for-bit comparisons here test actorpipe's arithmetic, not
// the thread pools under it: on more threads, OpenBLAS's threaded GEMM (which has had races
// before) and ATen's parallel loops are the only parts of such a process whose work depends on
// timing. One CI run (2026-12-04, on a CPU we could not see) failed such a comparison on the
// main thread's default thread count, which is 1 on the machine where it was written. It never
// failed there: 338 runs on 2 threads, single runs on eight OpenBLAS cores and on 1 to 8 threads,
// and valgrind found no uninitialised read. A test that wants more threads sets them itself.
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
