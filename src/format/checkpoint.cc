#include "format/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace deltafin {

namespace fs = std::filesystem;

namespace {

// Parses min_digits..max_digits decimal digits at s[*pos]; advances *pos past them.
bool ParseDigits(const std::string& s, size_t* pos, size_t min_digits, size_t max_digits,
                 int* value) {
  size_t n = 0;
  int v = 0;
  while (*pos + n < s.size() && n < max_digits && s[*pos + n] >= '0' && s[*pos + n] <= '9') {
    v = v * 10 + (s[*pos + n] - '0');
    ++n;
  }
  if (n < min_digits) return false;
  *pos += n;
  *value = v;
  return true;
}

bool ConsumeLiteral(const std::string& s, size_t* pos, const char* literal) {
  const size_t len = std::strlen(literal);
  if (s.compare(*pos, len, literal) != 0) return false;
  *pos += len;
  return true;
}

}  // namespace

bool ParseShardName(const std::string& file_name, int* index, int* total) {
  // model-NNNNN-of-MMMMM.safetensors (HF) or model-NNNNN-of-MMMMMM.safetensors (K3).
  size_t pos = 0;
  if (!ConsumeLiteral(file_name, &pos, "model-") || !ParseDigits(file_name, &pos, 5, 5, index) ||
      !ConsumeLiteral(file_name, &pos, "-of-") || !ParseDigits(file_name, &pos, 5, 6, total) ||
      !ConsumeLiteral(file_name, &pos, ".safetensors") || pos != file_name.size()) {
    return false;
  }
  return *index >= 1 && *index <= *total;
}

namespace {

// Reads the index into shard file -> tensor names (ordered so errors are deterministic).
Result<std::map<std::string, std::vector<std::string>>> ReadIndex(const std::string& path) {
  DF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) {
    return Status::Error(path + ": not well-formed JSON");
  }
  auto map_it = index.find("weight_map");
  if (map_it == index.end() || !map_it->is_object() || map_it->empty()) {
    return Status::Error(path + ": missing or empty 'weight_map'");
  }
  std::map<std::string, std::vector<std::string>> by_shard;
  for (auto it = map_it->begin(); it != map_it->end(); ++it) {
    if (!it.value().is_string()) {
      return Status::Error(path + ": weight_map entry '" + it.key() + "' is not a file name");
    }
    by_shard[it.value().get<std::string>()].push_back(it.key());
  }
  return by_shard;
}

Status CheckShardSet(const std::string& index_path,
                     const std::map<std::string, std::vector<std::string>>& by_shard) {
  int expected_total = -1;
  std::vector<bool> seen;
  for (const auto& [file, names] : by_shard) {
    int index = 0, total = 0;
    if (by_shard.size() == 1 && file == "model.safetensors") return Status::Ok();
    if (!ParseShardName(file, &index, &total)) {
      return Status::Error(index_path + ": shard name '" + file +
                           "' is not of the form model-NNNNN-of-MMMMM(M).safetensors");
    }
    if (expected_total < 0) {
      expected_total = total;
      seen.assign(static_cast<size_t>(total) + 1, false);
    } else if (total != expected_total) {
      return Status::Error(index_path + ": shard '" + file + "' disagrees on the shard count (" +
                           std::to_string(expected_total) + " elsewhere)");
    }
    seen[static_cast<size_t>(index)] = true;
  }
  for (int i = 1; i <= expected_total; ++i) {
    if (!seen[static_cast<size_t>(i)]) {
      return Status::Error(index_path + ": shard " + std::to_string(i) + " of " +
                           std::to_string(expected_total) + " holds no tensor in weight_map");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Checkpoint> Checkpoint::Open(const std::string& dir) {
  Checkpoint ckpt;
  ckpt.dir_ = dir;
  if (!fs::is_directory(dir)) return Status::Error(dir + ": not a directory");
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  std::map<std::string, std::vector<std::string>> by_shard;
  const bool has_index = fs::exists(index_path);
  if (has_index) {
    DF_ASSIGN_OR_RETURN(by_shard, ReadIndex(index_path));
    DF_RETURN_IF_ERROR(CheckShardSet(index_path, by_shard));
  } else if (fs::exists(fs::path(dir) / "model.safetensors")) {
    by_shard["model.safetensors"] = {};
  } else {
    return Status::Error(dir + ": no model.safetensors.index.json or model.safetensors");
  }

  for (const auto& [file, names] : by_shard) {
    const std::string path = (fs::path(dir) / file).string();
    DF_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
    DF_ASSIGN_OR_RETURN(SafetensorsHeader header,
                        ParseSafetensorsHeader(mapped.data(), mapped.size(), mapped.size(), path));
    const int shard = static_cast<int>(ckpt.shards_.size());
    for (auto& entry : header.tensors) {
      TensorRecord record;
      record.shard = shard;
      record.file_offset = header.data_offset + entry.begin;
      std::string name = entry.name;
      record.entry = std::move(entry);
      if (ckpt.records_.count(name)) {
        return Status::Error(path + ": tensor '" + name + "' also appears in another shard");
      }
      ckpt.records_.emplace(name, std::move(record));
    }
    if (has_index) {
      for (const auto& name : names) {
        auto it = ckpt.records_.find(name);
        if (it == ckpt.records_.end() || it->second.shard != shard) {
          return Status::Error(path + ": tensor '" + name +
                               "' is listed in the index for this shard but missing from it");
        }
      }
      if (header.tensors.size() != names.size()) {
        // Every listed name was found above, so some tensor of this shard is not in the index.
        const std::set<std::string> listed(names.begin(), names.end());
        for (const auto& [name, record] : ckpt.records_) {
          if (record.shard == shard && !listed.count(name)) {
            return Status::Error(path + ": tensor '" + name +
                                 "' is in this shard but not in the index's weight_map");
          }
        }
      }
    }
    ckpt.shard_paths_.push_back(path);
    ckpt.shards_.push_back(std::move(mapped));
  }
  return ckpt;
}

const TensorRecord* Checkpoint::Find(const std::string& name) const {
  auto it = records_.find(name);
  return it == records_.end() ? nullptr : &it->second;
}

TensorView Checkpoint::View(const TensorRecord& record) const {
  TensorView v;
  v.dtype = record.entry.dtype;
  v.shape = record.entry.shape;
  v.data = shards_[static_cast<size_t>(record.shard)].data() + record.file_offset;
  v.bytes = record.entry.end - record.entry.begin;
  return v;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(records_.size());
  for (const auto& [name, record] : records_) names.push_back(name);
  return names;
}

void Checkpoint::AdviseRandomAccess() const {
  for (const MappedFile& shard : shards_) shard.AdviseRandomAccess();
}

}  // namespace deltafin
