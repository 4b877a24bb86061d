// `deltafin setup` and `deltafin fetch-experts-all`: install a model from a Hugging Face-style
// endpoint, full or streamed, and upgrade a stream install to full (setup/installer.h,
// docs/SETUP.md).
#include <memory>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "setup/installer.h"

namespace deltafin::cli {

namespace {

constexpr char kSetupFooter[] = R"(Modes:
  --full    download every file (a real K3: about 1.56 TB, so about 1.7 TB of free disk)
  --stream  download metadata and the spine (about 114 GB for K3, so about 120 GB free plus room
            for the experts fetched on first use); shards become sparse files whose expert spans
            are fetched by `run`/`logits`/`serve` when first routed to
  neither   full when the free disk covers the whole model plus a margin (5% + 1 GiB), else stream

Endpoint and auth: HF_ENDPOINT (default https://huggingface.co); the token is the first of
--token, HF_TOKEN, $HF_TOKEN_PATH, $HF_HOME/token, ~/.cache/huggingface/token. The resolved commit
is recorded in DIR/.deltafin/manifest.json and every later fetch asks for that commit.

Several drives: --drive DIR (repeatable) [--copies N] downloads each routed expert once and writes
it to N of the drive folders (round-robin), in the sparse shard files and placement file that
`deltafin spread` makes; the spine stays in --model-dir, whose expert shards hold only their header
and spine bytes. A rerun without --drive resumes onto the drives the install recorded.

Interrupted runs resume: rerun the same command (also after kill -9 or a full disk). A finished
install makes it a no-op. An endpoint that cannot be reached fails at once and leaves no folder
behind that setup created.)";

}  // namespace

void RegisterSetup(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<setup::SetupOptions>();
  auto full = std::make_shared<bool>(false), stream = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("setup", "Install a model from a Hugging Face-style endpoint");
  auto* full_flag = cmd->add_flag("--full", *full, "Download every file");
  cmd->add_flag("--stream", *stream, "Download the spine; fetch experts on first use")
      ->excludes(full_flag);
  cmd->add_option("--model-dir", o->model_dir, "Install directory (created if missing)")
      ->required();
  cmd->add_option("--repo", o->repo, "Repository ORG/NAME (default moonshotai/Kimi-K3)");
  cmd->add_option("--revision", o->revision, "Branch, tag or commit (default main)");
  cmd->add_option("--token", o->token_flag, "Hugging Face access token (else HF_TOKEN, ...)");
  cmd->add_option("--jobs", o->jobs, "Files downloaded at once")
      ->check(IntRange(1, 64))
      ->capture_default_str();
  cmd->add_option("--connections", o->max_connections, "HTTP connections at most")
      ->check(IntRange(1, 64))
      ->capture_default_str();
  cmd->add_option("--retries", o->max_attempts,
                  "Attempts per HTTP request before giving up (429/5xx/broken transfers; waits "
                  "0.5 s doubling, or the server's Retry-After)")
      ->check(IntRange(1, 20))
      ->capture_default_str();
  cmd->add_flag("--skip-space-check", o->skip_space_check,
                "Download even when the free disk looks too small");
  cmd->add_option("--drive", o->drives,
                  "Put the routed experts in this folder on another drive instead of the model "
                  "folder (repeatable; a full install; docs/STREAMING.md \"Several drives\")");
  cmd->add_option("--copies", o->copies, "With --drive: copies of each expert over the drives")
      ->check(IntRange(1, 31))
      ->capture_default_str();
  cmd->footer(kSetupFooter);
  cmd->callback([o, full, stream, exit_code] {
    o->mode = *full ? "full" : *stream ? "stream" : "auto";
    const Status s = setup::RunSetup(*o);
    *exit_code = s.ok() ? 0 : Fail(s);
  });
}

void RegisterFetchExpertsAll(CLI::App& app, int* exit_code) {
  auto dir = std::make_shared<std::string>();
  auto token = std::make_shared<std::string>();
  auto connections = std::make_shared<int>(8);
  CLI::App* cmd = app.add_subcommand(
      "fetch-experts-all",
      "Upgrade a stream install to full: fetch every missing expert, verify every shard");
  cmd->add_option("--model-dir,--model", *dir, "The stream install")->required();
  cmd->add_option("--token", *token, "Hugging Face access token (else HF_TOKEN, ...)");
  cmd->add_option("--connections", *connections, "HTTP connections at most")
      ->check(IntRange(1, 64))
      ->capture_default_str();
  cmd->callback([dir, token, connections, exit_code] {
    const Status s = setup::RunFetchExpertsAll(*dir, *token, *connections);
    *exit_code = s.ok() ? 0 : Fail(s);
  });
}

}  // namespace deltafin::cli
