// Checkpoint: the tensor directory of a Hugging Face model folder.
//
// Opens `model.safetensors.index.json` (or a single `model.safetensors`), maps every shard, parses
// and validates every header, and answers "where is tensor X" for the rest of the engine. Shard
// names follow HF's `model-NNNNN-of-MMMMM.safetensors` (5-digit total) or K3's
// `model-NNNNN-of-MMMMMM.safetensors` (6-digit total); the index must list every tensor of every
// shard exactly once and every shard 1..total must be present.
//
// This module knows containers, not models: which tensors must exist with which shapes is decided
// by weights/weights.cc.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "format/safetensors.h"
#include "io/mapped_file.h"
#include "tensor/tensor_view.h"

namespace deltafin {

struct TensorRecord {
  int shard = 0;  // index into Checkpoint::shard_paths()
  SafetensorsEntry entry;
  uint64_t file_offset = 0;  // absolute offset of the first byte in the shard file
};

class Checkpoint {
 public:
  static Result<Checkpoint> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::vector<std::string>& shard_paths() const { return shard_paths_; }
  size_t num_tensors() const { return records_.size(); }

  // nullptr when the checkpoint has no tensor of that name.
  const TensorRecord* Find(const std::string& name) const;
  TensorView View(const TensorRecord& record) const;
  // Every tensor name, for validation passes that look for unexpected tensors.
  std::vector<std::string> Names() const;
  // The mapped shards, in shard_paths() order (where a tensor's bytes sit in which file).
  const std::vector<MappedFile>& shards() const { return shards_; }
  // MappedFile::AdviseRandomAccess on every shard.
  void AdviseRandomAccess() const;

 private:
  std::string dir_;
  std::vector<std::string> shard_paths_;
  std::vector<MappedFile> shards_;
  std::unordered_map<std::string, TensorRecord> records_;
};

// Parses `model-00001-of-000096.safetensors` into (1, 96); false if the name has another form.
bool ParseShardName(const std::string& file_name, int* index, int* total);

}  // namespace deltafin
