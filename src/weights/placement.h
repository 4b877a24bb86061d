// Placement: where each routed expert's bytes live when a model is spread over several drives
// (issue 35; docs/STREAMING.md "Several drives"). Written by `deltafin spread` (setup/spread.h),
// read at load by the drive set (weights/drive_set.h), which sends each expert read to one of the
// expert's copies.
//
// The model folder stays the folder users name with --model. Drive d (d >= 1) is a folder on
// another device holding files with the model's shard names and sizes: each is a valid
// safetensors file whose header is present and whose bytes outside the experts copied there are
// holes (sparse), so every copy sits at the same offset as in the model folder and nothing is
// converted. Drive 0 is the model folder itself.
//
// File DIR/.deltafin/placement.json, replaced durably (temp file, fsync, rename, fsync of the
// directory), so a crash leaves the previous or the next complete file:
//
//   line 1: "deltafin-placement/1 sha256=<64 hex>\n"   the SHA-256 of every byte after this line
//   rest:   JSON body
//     {"model": {"config_sha256": hex, "weights_sample_sha256": hex,
//                "shards": [{"name": s, "size": n}, ...]},
//      "drives": ["/abs/drive1", ...],                 drive d is drives[d - 1]
//      "layers": L, "experts": E,
//      "copies": [u32 × L·E],   bit d set: drive d holds a verified copy of (layer, expert);
//                               bit 0: the model folder still holds the bytes (cleared by --move)
//      "sha256": [hex or "" × L·E]}  the expert span's SHA-256, once copied anywhere
//   Entries are indexed layer · E + expert; dense layers' entries are 0 and "".
//
// A placement belongs to one model: the config.json hash, the shard names and sizes, and a sample
// of the weights must match or it is refused with the reason (a placement copied from another
// model or revision). The sample is the first 64 KiB of the largest tensor of each shard that is
// not a routed expert (spine bytes, which spread never moves; models that differ only in their
// weights, such as make-model seeds, share config.json and shard sizes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace deltafin {

// What identifies the model a placement was made for.
struct PlacementModel {
  std::string config_sha256;
  std::string weights_sample_sha256;
  struct Shard {
    std::string name;  // file name inside the model folder
    uint64_t size = 0;
    bool operator==(const Shard&) const = default;
  };
  std::vector<Shard> shards;  // every *.safetensors file, sorted by name
  bool operator==(const PlacementModel&) const = default;
};

struct Placement {
  static constexpr int kMaxDrives = 31;  // drives besides the model folder (bits 1..31)
  PlacementModel model;
  std::vector<std::string> drives;  // absolute folders; drive d is drives[d - 1]
  int64_t num_layers = 0, num_experts = 0;
  std::vector<uint32_t> copies;     // [layer * num_experts + expert], see the file comment
  std::vector<std::string> sha256;  // same indexing

  size_t Index(int64_t layer, int64_t expert) const {
    return static_cast<size_t>(layer * num_experts + expert);
  }
  // The folder of drive d (0: the model folder).
  std::string DrivePath(const std::string& model_dir, int d) const {
    return d == 0 ? model_dir : drives[static_cast<size_t>(d - 1)];
  }
};

std::string PlacementPath(const std::string& model_dir);  // DIR/.deltafin/placement.json

// The identity of the model in `model_dir` (hashes config.json, lists the shards, samples the
// spine: reads every shard's header and 64 KiB of one tensor).
Result<PlacementModel> DescribePlacementModel(const std::string& model_dir);

// The placement of `model_dir`, nullopt when it has none. Refused (an error with the reason) when
// the file is torn or corrupt, of another version, or made for another model than `model`.
Result<std::optional<Placement>> LoadPlacement(const std::string& model_dir,
                                               const PlacementModel& model);

// Replaces the placement file durably.
Status SavePlacement(const std::string& model_dir, const Placement& placement);

}  // namespace deltafin
