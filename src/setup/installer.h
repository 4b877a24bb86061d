// `deltafin setup`: installs a model from a Hugging Face-style endpoint (docs/SETUP.md).
//
// Three phases. Preflight: write access, the endpoint reachable (a never-answering endpoint fails
// at once), the file list, the token accepted for file downloads. Plan: the mode, the shard
// headers, the free disk against what is still to download; the manifest is saved. Until then
// nothing of the model is on disk, and a failure removes the directories setup created if they
// are still empty (never anything else). Transfer: metadata files, then the spine (full: every
// shard whole; stream: shards without experts whole, shards with experts as sparse files of their
// resident bytes), then the rest. Everything is resumable: rerunning the same command continues
// where the last run stopped (also after kill -9, docs/RELIABILITY.md), and on a finished install
// does nothing.
//
// --drive DIR (repeatable) [--copies N]: a full install whose routed experts go to the drive
// folders instead of the model folder (issue 35, docs/STREAMING.md "Several drives"). The model
// folder gets every spine shard whole and each shard with experts as a sparse file of its header
// and spine bytes; then each expert is downloaded once and written to N of the drives (round-
// robin), in the drive files and placement file `deltafin spread` makes, under its rule (a copy is
// recorded only once read back right, setup/drive_copies.h). Each shard is then hashed as a whole
// (spine bytes from the model folder, expert bytes as downloaded or, on a resumed run, read back
// from a drive) against its LFS sha256; a mismatch forgets the shard's copies. The drives are
// recorded in the manifest, so a rerun without --drive resumes onto the same ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace deltafin::setup {

struct SetupOptions {
  std::string model_dir;
  std::string mode = "auto";  // full | stream | auto
  std::string repo;           // default moonshotai/Kimi-K3
  std::string revision;       // default main
  std::string token_flag;
  bool skip_space_check = false;
  int jobs = 4;             // files downloaded at once
  int max_connections = 8;  // HTTP connections
  int max_attempts = 6;     // per HTTP request before giving up (net::HttpOptions::max_attempts)
  std::vector<std::string> drives;  // place the routed experts on these folders (full mode)
  int copies = 1;                   // copies of each expert over `drives`
};

Status RunSetup(const SetupOptions& options);

// `deltafin fetch-experts-all`: upgrades a stream install to full.
Status RunFetchExpertsAll(const std::string& model_dir, const std::string& token_flag,
                          int max_connections);

// What kind of model folder `model_dir` is, for engine loading.
enum class InstallKind { kPlainFolder, kFull, kStream };
// Errors for an unfinished install (a manifest that is not complete).
Result<InstallKind> InspectInstall(const std::string& model_dir);

// Free space an install of `bytes` needs beyond the bytes themselves: 5% plus 1 GiB.
uint64_t SpaceMargin(uint64_t bytes);

}  // namespace deltafin::setup
