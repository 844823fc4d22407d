// Command-line front: CLI11 subcommands. Every bad request ends in one error line, exit 2.
#include "apps/cli.hpp"

#include <CLI/CLI.hpp>
#include <ostream>

#include "apps/simulate_command.hpp"

namespace actorpipe {

int cli_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"actorpipe: pipeline-parallel training on the actor model.\n"
               "Schedules are data: print, validate, simulate and draw them before you train."};
  app.name("actorpipe");
  app.require_subcommand(1);

  simulate_options sim;
  bool list = false;
  int stages = 0, microbatches = 0, chunks = 0;
  auto* s = app.add_subcommand("simulate",
                               "Validate a pipeline schedule and simulate it on a cost model: ASCII timeline, makespan, "
                               "bubble ratio, peak activations per rank; optional Chrome trace and SVG picture.");
  s->footer(
      "\nExamples:\n"
      "  actorpipe simulate                                   # 1f1b, 4 stages, 8 microbatches\n"
      "  actorpipe simulate --schedule interleaved --stages 4 --microbatches 8 --chunks 2 --svg interleaved.svg\n"
      "  actorpipe simulate --schedule zbv --stages 4 --microbatches 8 --cost 1,2,1,1 --format json\n"
      "  actorpipe simulate --schedule-file my_plan.txt --trace my_plan.json\n"
      "  actorpipe simulate --config examples/job.json --set num_microbatches=16\n"
      "\nSchedule file format: one line per rank, 'RANK: ACTION ...', ACTION = <op><virtual_stage>.<microbatch>\n"
      "with op F (forward), B (backward), I (input-grad), W (weight-grad); '#' starts a comment.");
  std::string schedule;
  auto* opt_schedule = s->add_option("--schedule", schedule, "Registered schedule name (see --list) [default: 1f1b]");
  auto* opt_file = s->add_option("--schedule-file", sim.schedule_file, "Read the plan from a text file instead");
  opt_schedule->excludes(opt_file);
  auto* opt_stages = s->add_option("--stages,-P", stages, "Pipeline stages (ranks) P [default: 4]");
  auto* opt_mb = s->add_option("--microbatches,-M", microbatches, "Microbatches per step M [default: 8]");
  auto* opt_chunks = s->add_option("--chunks,-V", chunks,
                                   "Virtual stages per rank V [default: 2 for interleaved, zbv, dualpipev; else 1]");
  auto* opt_config = s->add_option("--config", sim.config_path,
                                   "Job config (JSON): schedule, pp, num_microbatches, chunks and the batch rules");
  auto* opt_set = s->add_option("--set", sim.overrides, "Override a config key, KEY=VALUE (repeatable)");
  opt_file->excludes(opt_config);
  opt_file->excludes(opt_set);
  s->add_option("--cost", sim.cost, "Costs per virtual stage 'F,B,I,W' (or 'F,,I,W': B = I+W; or 'F,B')")
      ->default_val("1,2,1,1");
  s->add_option("--latency", sim.send_latency, "Send latency added to every message between ranks")->default_val(0);
  s->add_option("--format", sim.format, "Output format: text or json")->default_val("text");
  s->add_option("--trace", sim.trace_path, "Write the timeline as Chrome trace JSON (Perfetto, chrome://tracing)");
  s->add_option("--svg", sim.svg_path, "Write the timeline as an SVG picture");
  s->add_flag("--print-plan", sim.print_plan, "Also print the plan in its text form");
  s->add_option("--width", sim.width, "Maximum width of the ASCII timeline in columns")->default_val(200);
  s->add_flag("--list", list, "List the registered schedules and exit");

  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      err << "actorpipe: error: unknown command '" << argv[1] << "' (commands: " << names << "; see --help)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (what.find("subcommand") != std::string::npos && what.find("required") != std::string::npos)
      what = "missing command (try: actorpipe simulate, or actorpipe --help)";
    err << "actorpipe: error: " << what << '\n';
    return 2;
  }

  try {
    if (s->parsed()) {
      if (list) {
        list_schedules_command(out);
        return 0;
      }
      if (*opt_schedule) sim.schedule = schedule;
      if (*opt_stages) sim.stages = stages;
      if (*opt_mb) sim.microbatches = microbatches;
      if (*opt_chunks) sim.chunks = chunks;
      run_simulate(sim, out);
    }
  } catch (const std::exception& e) {
    err << "actorpipe simulate: error: " << e.what() << '\n';
    return 2;
  }
  return 0;
}

}  // namespace actorpipe
