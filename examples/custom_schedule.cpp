// Example: register your own pipeline schedule from C++ and compare it with a built-in.
//
// "eager-1f1b" is 1F1B with one more warm-up forward on every rank but the last. When
// messages between ranks take time (send latency), the extra microbatch in flight keeps each
// rank busy while the next input is still on the wire, at the price of one more live
// activation per rank. The validator checks the plan; the simulator measures it.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>

#include "core/schedule/plan_validator.hpp"
#include "core/schedule/schedule_registry.hpp"
#include "core/sim/simulator.hpp"

using namespace actorpipe;

static plan eager_one_f_one_b(const schedule_request& r) {
  if (r.chunks != 1) throw std::invalid_argument("eager-1f1b needs chunks == 1: got chunks=" + std::to_string(r.chunks));
  plan p;
  p.place = loop_placement(r.stages, 1);
  p.microbatches = r.microbatches;
  p.ranks.resize(r.stages);
  for (int rank = 0; rank < r.stages; ++rank) {
    auto& out = p.ranks[rank];
    int warmup = std::min(rank == r.stages - 1 ? 0 : r.stages - rank, r.microbatches);
    int f = 0, b = 0;
    while (f < warmup) out.push_back({op_kind::forward, rank, f++});
    while (f < r.microbatches) {
      out.push_back({op_kind::forward, rank, f++});
      out.push_back({op_kind::backward, rank, b++});
    }
    while (b < r.microbatches) out.push_back({op_kind::backward, rank, b++});
  }
  return p;
}

int main() {
  try {
    register_schedule("eager-1f1b", eager_one_f_one_b, "1f1b with one extra warm-up forward per rank");
    std::cout << "registered 'eager-1f1b'\n";

    const schedule_request req{4, 8, 1};  // stages, microbatches, chunks
    plan p = make_schedule("eager-1f1b", req);  // generates and validates
    std::cout << "plan is valid:\n" << format_plan(p);

    cost_model costs = cost_model::uniform(1.0, 2.0, 1.0, 1.0, /*send_latency=*/0.5);
    for (const char* name : {"1f1b", "eager-1f1b"}) {
      sim_result r = simulate(make_schedule(name, req), costs);
      std::printf("%-11s makespan %.2f  bubble %.2f%%  peak activations rank 0: %d\n", name, r.makespan,
                  100.0 * r.bubble_ratio, r.peak_activations[0]);
    }
  } catch (const std::exception& e) {
    std::cerr << "custom_schedule: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
