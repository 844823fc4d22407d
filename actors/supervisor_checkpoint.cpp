// The supervisor's checkpoints: after a due step every optimizer shard snapshots its state
// (training goes on once all have), writes it on a thread of its own, and reports; process 0
// then commits the manifest, renames the directory into place and prunes old ones.
#include <string>

#include <nlohmann/json.hpp>

#include "actors/supervisor.hpp"
#include "core/checkpoint/run_meta.hpp"
#include "core/log.hpp"
#include "core/model/error_text.hpp"

namespace actorpipe::detail {

void supervisor::start_save(int done, double due_at) {
  save_.emplace();
  save_->step = done;
  save_->due_at = due_at;
  save_->started_at = ctx_->now();
  save_->partial = partial_checkpoint_name(done);
  save_->eval_pending = ctx_->eval_microbatches > 0 && eval_due(ctx_->options, done) && evaluated_after_ != done;
  save_->snapshots_left = save_->writes_left = shards_;
  try {
    checkpoint_writer make_dir(ctx_->options.save_dir, done, save_->partial);  // creates the partial directory
  } catch (const std::exception& e) {
    checkpoint_failed(std::string("checkpoint at step ") + std::to_string(done) + ": " + error_text(e));
    save_.reset();
    go_on(done);  // no snapshot comes: on to the end
    return;
  }
  const std::string path = ctx_->options.save_dir + "/" + save_->partial;
  for (auto& shard : ctx_->optimizer_shards) self_->send(shard, msg::save_state{done, path});
}

void supervisor::on_state_snapshotted(const msg::state_snapshotted& s) {
  if (!save_ || s.step != save_->step || --save_->snapshots_left > 0) return;
  save_->resumed_at = ctx_->now();
  go_on(s.step);
}

// A checkpoint that cannot be written (a full disk): what the run trained must not go with it,
// nor the checkpoints before it. The run takes no more checkpoints and stops after the step in
// flight, finishing as a stopped run does (its parameters gathered for --save-final); the
// error goes with the result, and the command reports it once its files are written. The
// checkpoint's directory goes (the parts still being written find it gone).
void supervisor::checkpoint_failed(const std::string& why) {
  if (saves_failed_) return;  // another part of the same checkpoint: said once
  log_error(why + (failed_run_ ? std::string(": the failed run has no checkpoint of that step")
                               : std::string(": no more checkpoints are taken; the run stops after the step in flight")));
  if (ctx_->result && ctx_->result->checkpoint_error.empty()) ctx_->result->checkpoint_error = why;
  saves_failed_ = true;
  stopping_ = true;
  if (save_ && !save_->failed) {
    save_->failed = true;
    ctx_->checkpoint_parts->discard(ctx_->options.save_dir + "/" + save_->partial);
  }
}

// Every part is durable: the manifest, the rename, `latest`, pruning.
void supervisor::on_state_written(const msg::state_written& w) {
  if (!save_ || w.step != save_->step) return;
  save_->written.insert(w.stage_id);
  if (!w.error.empty())
    checkpoint_failed("checkpoint at step " + std::to_string(w.step) + ": writing " + w.file + " failed: " + w.error);
  else
    save_->files.push_back({w.file, w.bytes, w.sha256});
  if (--save_->writes_left > 0) return;
  if (save_->failed) {
    save_ended();
    return;
  }
  const auto& o = ctx_->options;
  try {
    checkpoint_writer writer(o.save_dir, save_->step, save_->partial);
    for (const auto& f : save_->files) writer.add_file(f);
    const std::string path = writer.commit(checkpoint_meta(ctx_->options, save_->step, save_->eval_pending));
    prune_checkpoints(o.save_dir, o.keep_last);
    log_info("saved checkpoint " + path);
    if (ctx_->result) {
      checkpoint_record r;
      r.path = path;
      r.step = save_->step;
      for (const auto& f : save_->files) r.bytes += static_cast<long long>(f.bytes);
      r.pause_seconds = save_->resumed_at - save_->due_at;
      r.write_seconds = ctx_->now() - save_->started_at;
      ctx_->result->checkpoints.push_back(r);
    }
  } catch (const std::exception& e) {
    checkpoint_failed("checkpoint at step " + std::to_string(save_->step) + ": " + error_text(e));
  }
  save_ended();
}

// The checkpoint in flight is over (committed or failed): the save that waited for it, or the
// end the run waited for. After a failed one, a save that waited is skipped and the run goes on
// to its end.
void supervisor::save_ended() {
  save_.reset();
  if (failed_run_) {  // the run failed while it was written: it ends now
    end_run(*failed_run_);
    return;
  }
  if (deferred_save_ >= 0) {
    const int done = deferred_save_;
    deferred_save_ = -1;
    if (saves_failed_)
      go_on(done);
    else
      start_save(done, deferred_at_);
  } else if (finish_after_save_) {
    finish_after_save_ = false;
    finish();
  }
}

}  // namespace actorpipe::detail
