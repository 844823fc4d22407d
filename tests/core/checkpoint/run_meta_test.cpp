// A checkpoint's metadata and what a resumed run changes of it.
#include "core/checkpoint/run_meta.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

using namespace actorpipe;

CATCH_TEST_CASE("resume_changes names the settings that make the resumed steps differ", "[checkpoint][resume]") {
  train_options saved;
  saved.steps = 10;
  saved.microbatches = 4;
  saved.microbatch_size = 2;
  const nlohmann::json meta = checkpoint_meta(saved, 6);
  CATCH_CHECK(meta["step"] == 6);
  CATCH_CHECK(meta["data_seed"] == saved.data_seed);

  // The same settings, and another layout of them (schedule, stages, chunks, the batch split
  // into microbatches otherwise, dp with the batch kept): nothing.
  train_options o = saved;
  CATCH_CHECK(resume_changes(meta, o).empty());
  o.schedule = "zbv";
  o.stages = 4;
  o.chunks = 2;
  o.microbatches = 2;
  o.microbatch_size = 4;
  CATCH_CHECK(resume_changes(meta, o).empty());
  o.dp = 2;
  o.microbatches = 1;
  CATCH_CHECK(resume_changes(meta, o).empty());

  o = saved;
  o.data_seed = 7;
  o.microbatch_size = 3;
  o.lr = 1e-2;
  o.steps = 20;
  o.weight_decay = 0;
  CATCH_CHECK(resume_changes(meta, o) ==
              std::vector<std::string>{"data_seed 1234 -> 7",
                                       "global batch 8 -> 12 sequences (microbatches x microbatch_size x dp)",
                                       "lr 0.0003 -> 0.01", "lr_decay_steps 10 -> 20", "steps 10 -> 20",
                                       "weight_decay 0.1 -> 0"});
  // The same end of the decay given aloud: a longer run on the same schedule, no change.
  o = saved;
  o.steps = 20;
  o.lr_decay_steps = 10;
  CATCH_CHECK(resume_changes(meta, o).empty());
  o.lr_decay_steps = 15;
  CATCH_CHECK(resume_changes(meta, o) == std::vector<std::string>{"lr_decay_steps 10 -> 15", "steps 10 -> 20"});
  o = saved;
  o.data = "file";
  o.data_file = "tokens.bin";
  o.warmup_steps = 3;
  o.min_lr_ratio = 0.5;
  o.grad_clip = 0;
  CATCH_CHECK(resume_changes(meta, o) ==
              std::vector<std::string>{"data 'synthetic' -> 'file'", "data_file '' -> 'tokens.bin'", "warmup_steps 0 -> 3",
                                       "min_lr_ratio 0.1 -> 0.5", "grad_clip 1 -> 0"});
  o = saved;
  o.adam_beta1 = 0.8;
  o.adam_beta2 = 0.999;
  o.adam_eps = 1e-6;
  CATCH_CHECK(resume_changes(meta, o) ==
              std::vector<std::string>{"adam_beta1 0.9 -> 0.8", "adam_beta2 0.95 -> 0.999", "adam_eps 1e-08 -> 1e-06"});
  // A checkpoint from before AdamW's settings were saved ran at 0.9, 0.95 and 1e-8.
  nlohmann::json unsaved = meta;
  unsaved.erase("adam_beta1");
  unsaved.erase("adam_beta2");
  unsaved.erase("adam_eps");
  CATCH_CHECK(resume_changes(unsaved, saved).empty());
  o = saved;
  o.adam_beta2 = 0.999;
  CATCH_CHECK(resume_changes(unsaved, o) == std::vector<std::string>{"adam_beta2 0.95 (before it was saved) -> 0.999"});
  o = saved;
  o.lr_decay_style = "cosine";
  CATCH_CHECK(resume_changes(meta, o) == std::vector<std::string>{"lr_decay_style 'linear' -> 'cosine'"});
  unsaved.erase("lr_decay_style");
  CATCH_CHECK(resume_changes(unsaved, saved).empty());
  CATCH_CHECK(resume_changes(unsaved, o) ==
              std::vector<std::string>{"lr_decay_style 'linear' (before it was saved) -> 'cosine'"});
  // Another share of the data file held out for evaluation trains on other windows: named, as
  // is a share where a checkpoint from before --eval-split held none out.
  o = saved;
  o.eval_split = 0.05;
  CATCH_CHECK(resume_changes(meta, o) == std::vector<std::string>{"eval_split 0 -> 0.05"});
  unsaved.erase("eval_split");
  CATCH_CHECK(resume_changes(unsaved, saved).empty());
  CATCH_CHECK(resume_changes(unsaved, o) == std::vector<std::string>{"eval_split 0 (before it was saved) -> 0.05"});

  // The same data path with other contents, or another vocab.txt (BERT): named (a resume took
  // them without a word, and the embeddings' rows then meant other words).
  {
    const std::string data = "/tmp/actorpipe_run_meta_" + std::to_string(::getpid()) + ".txt";
    const std::string vocab = data + ".vocab";
    std::ofstream(data) << "some text to train on";
    std::ofstream(vocab) << "[PAD]\n[UNK]\nhello\n";
    train_options files = saved;
    files.data = "file";
    files.data_file = data;
    files.text.vocab_file = vocab;
    const nlohmann::json with_files = checkpoint_meta(files, 6);
    CATCH_CHECK(resume_changes(with_files, files).empty());
    // The same file by another path (from another folder): no change (it said data_file 'x' -> '../x').
    train_options moved = files;
    moved.data_file = "/tmp/../tmp/actorpipe_run_meta_" + std::to_string(::getpid()) + ".txt";
    CATCH_CHECK(resume_changes(with_files, moved).empty());
    std::ofstream(data) << "other text, of another length";
    std::ofstream(vocab) << "[PAD]\n[UNK]\nworld\n";
    files.text.lower_case = false;
    const auto changes = resume_changes(with_files, files);
    CATCH_REQUIRE(changes.size() == 3);
    CATCH_CHECK_THAT(changes[0], Catch::StartsWith("data_content '21 bytes, digest "));
    CATCH_CHECK_THAT(changes[1], Catch::StartsWith("vocab_file_content '18 bytes, digest "));
    CATCH_CHECK(changes[2] == "lower_case true -> false");
    std::remove(data.c_str());
    std::remove(vocab.c_str());
  }
  // A token file's Megatron index gives its tokens' type: a resume without it reads other tokens.
  {
    const std::string bin = "/tmp/actorpipe_run_meta_" + std::to_string(::getpid()) + ".bin";
    const std::string idx = bin.substr(0, bin.size() - 4) + ".idx";
    std::ofstream(bin) << "0123456789";
    std::ofstream(idx) << "an index";
    train_options files = saved;
    files.data = "file";
    files.data_file = bin;
    const nlohmann::json with_index = checkpoint_meta(files, 6);
    CATCH_CHECK_THAT(with_index["data_content"].get<std::string>(), Catch::Contains("; its index 8 bytes, digest "));
    CATCH_CHECK(resume_changes(with_index, files).empty());
    std::remove(idx.c_str());
    const auto changes = resume_changes(with_index, files);
    CATCH_REQUIRE(changes.size() == 1);
    CATCH_CHECK_THAT(changes[0], Catch::StartsWith("data_content '10 bytes, digest ") &&
                                     Catch::Contains("; its index 8 bytes, digest "));
    const std::string now = changes[0].substr(changes[0].find(" -> "));
    CATCH_CHECK_THAT(now, Catch::StartsWith(" -> '10 bytes, digest ") && !Catch::Contains("index"));
    std::remove(bin.c_str());
  }

  // A blend's files and weights (--data-file 0.3 a 0.7 b): other weights draw other samples.
  {
    const std::string a = "/tmp/actorpipe_run_meta_" + std::to_string(::getpid()) + "_a.bin", b = a + ".b.bin";
    std::ofstream(a) << "0123456789";
    std::ofstream(b) << "abcdefghijkl";
    train_options blend = saved;
    blend.data = "file";
    blend.data_file = "0.3 " + a + " 0.7 " + b;
    blend.data_blend = {{0.3, a}, {0.7, b}};
    const nlohmann::json with_blend = checkpoint_meta(blend, 6);
    CATCH_CHECK_THAT(with_blend["data_content"].get<std::string>(),
                     Catch::StartsWith("a blend of 2 files, 0.3: 10 bytes, digest ") &&
                         Catch::Contains("; 0.7: 12 bytes, digest "));
    CATCH_CHECK(resume_changes(with_blend, blend).empty());
    train_options other = blend;
    other.data_file = "0.5 " + a + " 0.5 " + b;
    other.data_blend = {{0.5, a}, {0.5, b}};
    const auto changes = resume_changes(with_blend, other);
    CATCH_REQUIRE(changes.size() == 2);
    CATCH_CHECK(changes[0] == "data_file '0.3 " + a + " 0.7 " + b + "' -> '0.5 " + a + " 0.5 " + b + "'");
    CATCH_CHECK_THAT(changes[1], Catch::StartsWith("data_content 'a blend of 2 files, 0.3: 10 bytes") &&
                                     Catch::Contains(" -> 'a blend of 2 files, 0.5: 10 bytes"));
    train_options by_tokens = blend;
    by_tokens.data_blend = {{0, a}, {0, b}};
    CATCH_CHECK_THAT(data_content_digest(by_tokens), Catch::StartsWith("a blend of 2 files, by its tokens: 10 bytes"));
    // One file is its digest alone, as before blends; the synthetic corpus has none.
    train_options one = saved;
    one.data = "file";
    one.data_file = a;
    CATCH_CHECK(data_content_digest(one) == data_file_digest(a));
    CATCH_CHECK(data_content_digest(saved).empty());
    std::remove(a.c_str());
    std::remove(b.c_str());
  }

  // Other threads per stage: other rounding in LibTorch's sums, so other bits from here on
  // (a resume took it without a word).
  o = saved;
  o.threads_per_stage = 2;
  CATCH_CHECK(resume_changes(meta, o) ==
              std::vector<std::string>{"threads_per_stage 1 -> 2 (LibTorch splits its sums by thread: other rounding)"});

  // A checkpoint written before a key existed: that key is not compared.
  nlohmann::json older = meta;
  older.erase("data_seed");
  older.erase("dp");
  o = saved;
  o.data_seed = 7;
  o.microbatch_size = 3;
  CATCH_CHECK(resume_changes(older, o).empty());
  CATCH_CHECK(resume_changes(nlohmann::json(), o).empty());
}

CATCH_TEST_CASE("pending_eval_change names other evaluation data: another count or share held out", "[checkpoint][resume]") {
  train_options saved;  // (the share's own checks are the model's: here only what the checkpoint records)
  saved.eval_split = 0.05;
  const nlohmann::json meta = checkpoint_meta(saved, 4, true);
  CATCH_CHECK(pending_eval_change(meta, saved).empty());
  train_options o = saved;
  o.eval_split = 0.1;
  CATCH_CHECK_THAT(pending_eval_change(meta, o), Catch::StartsWith("other evaluation data than the interrupted run's"));
  o = saved;
  o.eval_microbatches = 3;
  CATCH_CHECK_THAT(pending_eval_change(meta, o), Catch::StartsWith("other evaluation data than the interrupted run's"));
  // Without a share the eval set reads as checkpoints wrote it before --eval-split: no change.
  train_options plain;
  const nlohmann::json before = checkpoint_meta(plain, 4, true);
  CATCH_CHECK(before["eval_set"] == "/0");
  CATCH_CHECK(pending_eval_change(before, plain).empty());
  plain.eval_split = 0.05;
  CATCH_CHECK_FALSE(pending_eval_change(before, plain).empty());
}

// A GPT checkpoint given to --model bert (or back) listed dozens of missing tensors.
CATCH_TEST_CASE("resume_model_mismatch names another model before any shape", "[checkpoint][resume]") {
  train_options gpt;
  gpt.model_name = "gpt";
  const nlohmann::json meta = checkpoint_meta(gpt, 2);
  train_options bert = gpt;
  bert.model_name = "bert";
  CATCH_CHECK(resume_model_mismatch(meta, bert) ==
              "the checkpoint is of --model gpt, this run trains --model bert: its tensors belong to another model "
              "(give --model gpt)");
  CATCH_CHECK(resume_model_mismatch(meta, gpt).empty());
  gpt.model.layers = gpt.model.layers + 1;
  CATCH_CHECK_THAT(resume_model_mismatch(meta, gpt), Catch::Contains("has --layers"));
}
