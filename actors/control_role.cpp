// What the hub and a member of the control plane share (see control_role.hpp).
#include "actors/control_role.hpp"

#include <algorithm>
#include <cstdio>

#include "core/process_layout.hpp"

#include "core/log.hpp"
#include "core/number_text.hpp"

namespace actorpipe {

control_role::control_role(caf::io::broker* self, cluster_options o, std::vector<std::uint8_t> own_address,
                           caf::actor owner)
    : self_(self), o_(std::move(o)), owner_(std::move(owner)) {
  addresses_.assign(o_.processes, {});
  addresses_[o_.process] = std::move(own_address);
}

void control_role::on_set_targets(msg::set_targets& t) {
  targets_ = std::move(t.targets);
  have_targets_ = true;
  auto held = std::move(held_);
  held_.clear();
  for (auto& [target, index, content] : held) deliver(target, index, std::move(content));
}

control_role::read_step control_role::read_frame(caf::io::connection_handle hdl, control_connection& c,
                                                 const caf::io::new_data_msg& m, std::uint32_t cap, std::string& why) {
  if (c.reading_body) return read_step::body;
  const std::uint32_t length = control_wire::frame_length(m.buf.data());
  why = control_wire::check_frame_length(length, cap);
  if (!why.empty()) return read_step::bad_length;
  c.reading_body = true;
  self_->configure_read(hdl, caf::io::receive_policy::exactly(length));
  return read_step::length;
}

void control_role::start_reading(caf::io::connection_handle hdl) {
  conns_[hdl].reading_body = false;
  self_->configure_read(hdl, caf::io::receive_policy::exactly(control_wire::length_bytes));
}

void control_role::write_frame(caf::io::connection_handle hdl, char type, const std::vector<char>& payload) {
  const std::vector<char> frame = control_wire::make_frame(type, payload);
  self_->write(hdl, frame.size(), frame.data());
  self_->flush(hdl);
}

bool control_role::write_envelope(caf::io::connection_handle hdl, std::uint8_t target, int process, int index,
                                  caf::message content) {
  control_envelope e{target, process, index, std::move(content)};
  std::vector<char> body = encode_envelope(self_->system(), e);
  if (body.empty()) {
    log_error("control plane: cannot serialize a message for process " + std::to_string(process));
    return false;
  }
  write_frame(hdl, control_wire::envelope, body);
  return true;
}

void control_role::deliver(std::uint8_t target, int index, caf::message content) {
  if (!have_targets_) {
    held_.emplace_back(target, index, std::move(content));
    return;
  }
  auto it = targets_.find({target, index});
  if (it == targets_.end()) {
    log_warn("control plane: a message for an unknown actor (kind " + std::to_string(target) + ", index " +
             std::to_string(index) + ") was dropped");
    return;
  }
  it->second->enqueue(nullptr, caf::make_message_id(), std::move(content), self_->context());
}

void control_role::fail_setup(std::string error, bool refused) {
  if (ready_ || failed_) return;
  failed_ = true;
  self_->send(owner_, msg::cluster_ready{{}, 0, std::move(error), 0, "", refused, ""});
}

caf::timespan control_role::heartbeat_interval() const {
  return seconds_span(std::min(1.0, o_.heartbeat_timeout_s / 4));
}

bool control_role::beat_and_check(caf::io::connection_handle hdl) {
  write_frame(hdl, control_wire::heartbeat, {});
  return silent_for(hdl) > o_.heartbeat_timeout_s;
}

double control_role::silent_for(caf::io::connection_handle hdl) {
  const auto now = std::chrono::steady_clock::now();
  auto [it, added] = heard_.try_emplace(hdl, now);  // first asked: the silence starts now
  return std::chrono::duration<double>(now - it->second).count();
}

std::string control_role::silence_text() const {
  return "nothing heard from it for " + number_text(o_.heartbeat_timeout_s) +
         " s (--heartbeat-timeout): it is stopped, frozen or cut off";
}

std::string control_role::ranks_label(int process) const { return actorpipe::ranks_label(o_.process_of_rank, process); }

std::string control_role::master() const { return endpoint_text(o_.master_addr, o_.master_port); }

std::string control_role::join_timeout_text() const { return number_text(o_.join_timeout_s); }

caf::timespan seconds_span(double s) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(s));
}

}  // namespace actorpipe
