// actorpipe's public API in one include: bring your own model (register_model, layer specs,
// ties, partition methods), schedules and policies, the actor runtime, and the CLI entry.
//
//   #include <actorpipe/actorpipe.hpp>
//   int main(int argc, char** argv) {
//     actorpipe::ensure_best_blas_kernels(argv);  // the best BLAS kernels (may restart once)
//     actorpipe::register_model("my-model", ...);
//     return actorpipe::cli_main(argc, argv, std::cout, std::cerr);
//   }
#pragma once

#include "actors/pipeline_runtime.hpp"
#include "apps/cli.hpp"
#include "apps/crash_report.hpp"
#include "core/blas_kernels.hpp"
#include "core/model/chunk_compute.hpp"  // certain_failure
#include "core/model/layer_model.hpp"
#include "core/model/tensor_box_torch.hpp"
#include "core/partition.hpp"
#include "core/schedule/policy.hpp"
#include "core/schedule/policy_registry.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/version.hpp"
#include "core/train/reference_trainer.hpp"
