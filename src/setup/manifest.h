// The install manifest and the on-disk layout of an install (docs/SETUP.md).
//
//   DIR/<repository files>           in place only once complete and verified, or (stream
//                                    installs) shards as sparse files: header + spine present,
//                                    routed-expert spans holes until fetched
//   DIR/<file>.partial               an unfinished download (resumed with a Range request)
//   DIR/<file>.partial.etag          the ETag the partial bytes came with
//   DIR/.deltafin/manifest.json      this file, written atomically (temp + rename)
//   DIR/.deltafin/experts.log        stream installs: which experts are present (expert_log.h)
//   DIR/.deltafin/token              only when setup was given --token for a stream install (0600)
//
// manifest.json:
//   {"format": "deltafin-install/1", "mode": "full"|"stream", "complete": bool,
//    "endpoint": URL, "repo": "org/name", "revision": requested, "commit": 40-hex sha,
//    "files": [{"path", "size", "sha256"?, "blob_id"?, "state": "planned"|"complete"|"sparse"|
//               "verified"}]}
//   "complete" is set only after every file reached its final state; "sparse" shards become
//   "verified" once every expert is present and the whole file matches its LFS sha256.
//   A full install made with `setup --drive` also records "drives": [folders] and "copies": N;
//   its shards with routed experts go "sparse" (header and spine downloaded, experts holes) and
//   then "placed": every expert is on the drives recorded in DIR/.deltafin/placement.json
//   (weights/placement.h) and the whole file, read from the model folder and the drives, matched
//   its LFS sha256.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/durable_file.h"

namespace deltafin::setup {

struct ManifestFile {
  std::string path;
  uint64_t size = 0;
  std::string sha256;
  std::string blob_id;
  std::string state = "planned";  // planned | complete | sparse | verified | placed
};

struct Manifest {
  std::string mode;  // full | stream
  bool complete = false;
  std::string endpoint, repo, revision, commit;
  std::vector<ManifestFile> files;
  std::vector<std::string> drives;  // setup --drive: the drive folders experts are placed on
  int copies = 0;                   // and how many copies of each (0: no drives)

  // nullopt when DIR has no manifest (a plain snapshot folder or a fresh directory).
  static Result<std::optional<Manifest>> Load(const std::string& model_dir);
  Status Save(const std::string& model_dir) const;
  ManifestFile* Find(const std::string& path);
  const ManifestFile* Find(const std::string& path) const;
};

std::string StateDir(const std::string& model_dir);      // DIR/.deltafin
std::string ManifestPath(const std::string& model_dir);  // DIR/.deltafin/manifest.json

// io/durable_file.h's WriteFileDurably (`path`.tmp, fsync, rename, fsync of the directory) with
// setup's crash point "durable-before-rename" (subject: `path`) between the temp file and the
// rename. SyncDirectory comes from io/durable_file.h.
Status WriteFileDurably(const std::string& path, const void* data, size_t size, int mode = 0644);
inline Status WriteFileDurably(const std::string& path, const std::string& text, int mode = 0644) {
  return WriteFileDurably(path, text.data(), text.size(), mode);
}

}  // namespace deltafin::setup
