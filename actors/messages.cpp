// Registration of the messages that cross processes (their names are part of the wire format).
#include "actors/messages.hpp"

#include "actors/control_plane.hpp"

namespace actorpipe {

void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<msg::loss_report>("actorpipe.loss_report");
  cfg.add_message_type<msg::flush>("actorpipe.flush");
  cfg.add_message_type<msg::waiting>("actorpipe.waiting");
  cfg.add_message_type<msg::replan>("actorpipe.replan");
  cfg.add_message_type<msg::failure>("actorpipe.failure");
  cfg.add_message_type<msg::stop_request>("actorpipe.stop_request");
  cfg.add_message_type<msg::grad_sq_parts>("actorpipe.grad_sq_parts");
  cfg.add_message_type<msg::optimizer_step>("actorpipe.optimizer_step");
  cfg.add_message_type<msg::optimizer_done>("actorpipe.optimizer_done");
  cfg.add_message_type<msg::gather_parameters>("actorpipe.gather_parameters");
  cfg.add_message_type<msg::save_state>("actorpipe.save_state");
  cfg.add_message_type<msg::state_snapshotted>("actorpipe.state_snapshotted");
  cfg.add_message_type<msg::state_written>("actorpipe.state_written");
  cfg.add_message_type<msg::parameter_names>("actorpipe.parameter_names");
  cfg.add_message_type<msg::run_finished>("actorpipe.run_finished");
  cfg.add_message_type<msg::start_step>("actorpipe.start_step");
  cfg.add_message_type<msg::start_eval>("actorpipe.start_eval");
  cfg.add_message_type<msg::eval_output>("actorpipe.eval_output");
  add_control_plane_types(cfg);
}

}  // namespace actorpipe
