// `deltafin make-model`: writes a deterministic K3-shaped checkpoint (modelgen/make_model.h).
//
// Tests, demos and benchmarks need a model with K3's exact on-disk layout but a size this machine
// can hold; this command is the only way the project makes one. Progress and the summary go to
// stderr so stdout stays free for scripts.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "base/byte_size.h"
#include "cli/commands.h"
#include "modelgen/make_model.h"

namespace deltafin::cli {

namespace {

constexpr char kFooter[] = R"(Presets:
  tiny   docs/MODEL.md §7 (hidden 256, 9 layers, 64 experts top-4, 4 expert groups keep 2)
         with a 1024-entry vocabulary (768 BPE ranks + 256 specials); about 27 MB.
  bench  K3's structure and routing shape scaled down (docs/PERFORMANCE.md): 93 layers,
         hidden 1024, 896 experts top-16, groups 1/1, vocabulary 32768; about 19 GB
         (17.2 GB of experts).
  k3     K3's real text dimensions (docs/MODEL.md §1: hidden 7168, 93 layers, 896 experts top-16,
         vocabulary 163840) and real file layout: 96 shards (spine in 3, one per MoE layer's
         experts, one of vision_tower.*/mm_projector.* tensors); 1.56 TB, so use --sparse.

Sparse (--sparse): headers and index as usual, every tensor's data left as a hole (zeros) by
seeking instead of writing, so a model of any size costs only metadata and writes in seconds.
It loads like any checkpoint; run it with --audit-scales off --no-verify-reads (zero MXFP4
scale bytes are outside the engine's exact range). Its logits are all zero: it exercises
layout, I/O and memory plans at full size, not numerics.

Overrides (--set, repeatable) replace text_config fields by name; the value must have the
field's type (integer, number or true/false). Nested KDA fields are linear_attn_config.<name>.
num_hidden_layers regenerates K3's KDA/MLA schedule (zero-based layer i is MLA iff (i+1)%4==0
or it is the last); vocab_size sets the BPE rank count to vocab_size-256 and moves the
special-token ids. The resulting config is validated like any checkpoint's.

Output (the layout of a real K3 download): config.json, generation_config.json,
model-NNNNN-of-MMMMMM.safetensors (non-expert tensors first, then one shard per MoE layer's
experts), model.safetensors.index.json, tiktoken.model, tokenizer_config.json. Files are
written under temporary names and renamed at the end, config.json last. Weights depend only on
the seed: the same seed gives byte-identical files on any thread count.

Examples:
  deltafin make-model --preset tiny --out /tmp/tiny
  deltafin make-model --preset bench --out /data/bench --seed 7
  deltafin make-model --preset bench --out /tmp/b9 --set num_hidden_layers=9 --set vocab_size=4096
  deltafin make-model --preset k3 --sparse --out /tmp/k3-sparse)";

// One line every few seconds for large models; small ones finish before anyone would read it.
void PrintProgress(uint64_t done, uint64_t total) {
  using Clock = std::chrono::steady_clock;
  static Clock::time_point last;
  if (total < (1ull << 30) || done == total) return;
  if (Clock::now() - last < std::chrono::seconds(5)) return;
  last = Clock::now();
  std::fprintf(stderr, "make-model: %s / %s (%.0f%%)\n", HumanBytes(done).c_str(),
               HumanBytes(total).c_str(),
               100.0 * static_cast<double>(done) / static_cast<double>(total));
}

}  // namespace

void RegisterMakeModel(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<MakeModelOptions>();
  auto no_sync = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "make-model", "Write a deterministic, randomly initialised checkpoint in K3's exact layout");
  cmd->add_option("--preset", opts->preset, "Model dimensions: tiny, bench or k3")->required();
  cmd->add_option("--out", opts->out_dir, "Output directory (created if missing)")->required();
  cmd->add_option("--seed", opts->seed, "Seed for the weights")->capture_default_str();
  cmd->add_option("--set", opts->overrides,
                  "Override a text_config field, key=value (repeatable), e.g. "
                  "--set num_hidden_layers=9 --set linear_attn_config.num_heads=2");
  cmd->add_flag("--force", opts->force,
                "Replace the model files in a non-empty --out (other files are left alone)");
  cmd->add_flag("--sparse", opts->sparse,
                "Leave all tensor data as holes (zeros): full-size files that cost only metadata");
  cmd->add_option("--threads", opts->threads, "Generator threads (0 = one per CPU)")
      ->capture_default_str();
  cmd->add_flag("--no-sync", *no_sync,
                "Skip fsync before the final renames (faster; after a crash the files may be "
                "incomplete although renamed)");
  cmd->footer(kFooter);

  cmd->callback([opts, no_sync, exit_code] {
    opts->fsync = !*no_sync;
    opts->progress = PrintProgress;
    MakeModelSummary summary;
    const Status status = MakeModel(*opts, &summary);
    if (!status.ok()) {
      std::fprintf(stderr, "error: %s\n", status.message().c_str());
      *exit_code = 1;
      return;
    }
    const double mb = static_cast<double>(summary.total_bytes) / 1e6;
    std::fprintf(
        stderr, "make-model: wrote %zu files, %llu bytes (%.1f MB) to %s in %.2f s (%.0f MB/s)\n",
        summary.files.size(), static_cast<unsigned long long>(summary.total_bytes), mb,
        opts->out_dir.c_str(), summary.seconds, summary.seconds > 0 ? mb / summary.seconds : 0.0);
    *exit_code = 0;
  });
}

}  // namespace deltafin::cli
