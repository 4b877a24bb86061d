#include "format/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace deltafin {

namespace {

using nlohmann::json;

// Upper bound on a header: K3's largest shard header is a few MB; anything near this is corrupt.
constexpr uint64_t kMaxHeaderBytes = 256ull << 20;

Status ParseEntry(const std::string& label, const std::string& name, const json& v,
                  uint64_t data_size, SafetensorsEntry* out) {
  auto err = [&](const std::string& what) {
    return Status::Error(label + ": tensor '" + name + "': " + what);
  };
  if (!v.is_object()) return err("header entry is not an object");
  auto dtype_it = v.find("dtype");
  auto shape_it = v.find("shape");
  auto offsets_it = v.find("data_offsets");
  if (dtype_it == v.end() || !dtype_it->is_string()) return err("missing or non-string dtype");
  if (shape_it == v.end() || !shape_it->is_array()) return err("missing or non-array shape");
  if (offsets_it == v.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return err("data_offsets must be two non-negative integers");
  }
  auto dtype = ParseDType(dtype_it->get<std::string>());
  if (!dtype) return err("unsupported dtype '" + dtype_it->get<std::string>() + "'");
  out->name = name;
  out->dtype = *dtype;
  out->shape.clear();
  uint64_t elements = 1;
  for (const json& d : *shape_it) {
    if (!d.is_number_unsigned()) return err("shape has a non-integer or negative dimension");
    uint64_t dim = d.get<uint64_t>();
    if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / 16 / dim) {
      return err("shape is absurdly large");
    }
    elements *= dim;
    out->shape.push_back(static_cast<int64_t>(dim));
  }
  out->begin = (*offsets_it)[0].get<uint64_t>();
  out->end = (*offsets_it)[1].get<uint64_t>();
  if (out->end < out->begin) return err("data_offsets end precedes begin");
  const uint64_t want = elements * DTypeSize(*dtype);
  if (out->end - out->begin != want) {
    return err("data_offsets span " + std::to_string(out->end - out->begin) +
               " bytes but dtype and shape need " + std::to_string(want));
  }
  if (out->end > data_size) {
    return err("lies outside the data section (ends at " + std::to_string(out->end) +
               ", data section has " + std::to_string(data_size) + " bytes; file truncated?)");
  }
  return Status::Ok();
}

}  // namespace

Result<uint64_t> SafetensorsHeaderLength(const uint8_t* first8, uint64_t file_size,
                                         const std::string& label) {
  if (file_size < 8) {
    return Status::Error(label + ": file too short for a safetensors header (" +
                         std::to_string(file_size) + " bytes)");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | first8[i];
  if (n > kMaxHeaderBytes || n > file_size - 8) {
    return Status::Error(label + ": header length " + std::to_string(n) +
                         " exceeds the file size " + std::to_string(file_size));
  }
  return n;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, uint64_t available,
                                                 uint64_t file_size, const std::string& label) {
  if (available < 8) {
    return Status::Error(label + ": file too short for a safetensors header (" +
                         std::to_string(file_size) + " bytes)");
  }
  DF_ASSIGN_OR_RETURN(const uint64_t n, SafetensorsHeaderLength(bytes, file_size, label));
  if (available < 8 + n) return Status::Error(label + ": header not fully available");
  json header = json::parse(bytes + 8, bytes + 8 + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Status::Error(label + ": header is not well-formed JSON");
  if (!header.is_object()) return Status::Error(label + ": header is not a JSON object");

  SafetensorsHeader out;
  out.data_offset = 8 + n;
  const uint64_t data_size = file_size - out.data_offset;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    SafetensorsEntry entry;
    DF_RETURN_IF_ERROR(ParseEntry(label, it.key(), it.value(), data_size, &entry));
    out.tensors.push_back(std::move(entry));
  }
  // Overlap check: sort a copy by begin and compare neighbours (zero-sized tensors never overlap).
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& t : out.tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return Status::Error(label + ": tensors '" + by_offset[i - 1]->name + "' and '" +
                           by_offset[i]->name + "' overlap in the data section");
    }
  }
  return out;
}

uint64_t SafetensorsWriter::TensorBytes(const Declaration& d) {
  uint64_t n = DTypeSize(d.dtype);
  for (int64_t dim : d.shape) n *= static_cast<uint64_t>(dim);
  return n;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status SafetensorsWriter::Open(const std::string& path, const std::vector<Declaration>& tensors) {
  path_ = path;
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& d : tensors) {
    const uint64_t bytes = TensorBytes(d);
    header[d.name] = {{"dtype", std::string(DTypeName(d.dtype))},
                      {"shape", d.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  expected_data_bytes_ = offset;
  written_data_bytes_ = 0;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) return Status::Error(path + ": cannot create: " + std::strerror(errno));
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  if (std::fwrite(len, 1, 8, file_) != 8 || std::fwrite(text.data(), 1, n, file_) != n) {
    return Status::Error(path + ": write failed: " + std::strerror(errno));
  }
  data_start_ = 8 + n;
  return Status::Ok();
}

Status SafetensorsWriter::Skip(uint64_t bytes) {
  if (file_ == nullptr) return Status::Error(path_ + ": skip in a closed writer");
  if (written_data_bytes_ + bytes > expected_data_bytes_) {
    return Status::Error(path_ + ": more tensor bytes than declared");
  }
  if (bytes == 0) return Status::Ok();
  const uint64_t target = data_start_ + written_data_bytes_ + bytes;
  if (target > static_cast<uint64_t>(std::numeric_limits<off_t>::max()) ||
      std::fflush(file_) != 0 || fseeko(file_, static_cast<off_t>(target), SEEK_SET) != 0) {
    return Status::Error(path_ + ": seek failed: " + std::strerror(errno));
  }
  written_data_bytes_ += bytes;
  return Status::Ok();
}

Status SafetensorsWriter::Append(const void* data, size_t bytes) {
  if (file_ == nullptr) return Status::Error(path_ + ": append to a closed writer");
  if (written_data_bytes_ + bytes > expected_data_bytes_) {
    return Status::Error(path_ + ": more tensor bytes than declared");
  }
  // An empty piece (e.g. a zero-sized tensor from an empty vector, data == nullptr) writes nothing;
  // fwrite must not see a null pointer.
  if (bytes == 0) return Status::Ok();
  if (std::fwrite(data, 1, bytes, file_) != bytes) {
    return Status::Error(path_ + ": write failed: " + std::strerror(errno));
  }
  written_data_bytes_ += bytes;
  return Status::Ok();
}

Status SafetensorsWriter::Close() {
  if (file_ == nullptr) return Status::Error(path_ + ": closed twice");
  // A trailing Skip() leaves the file short until something is written past it: set the size.
  bool flushed = std::fflush(file_) == 0;
  if (flushed && written_data_bytes_ == expected_data_bytes_) {
    flushed = ftruncate(fileno(file_), static_cast<off_t>(data_start_ + written_data_bytes_)) == 0;
  }
  flushed = std::fclose(file_) == 0 && flushed;
  file_ = nullptr;
  if (!flushed) return Status::Error(path_ + ": close failed: " + std::strerror(errno));
  if (written_data_bytes_ != expected_data_bytes_) {
    return Status::Error(path_ + ": wrote " + std::to_string(written_data_bytes_) +
                         " tensor bytes, declared " + std::to_string(expected_data_bytes_));
  }
  return Status::Ok();
}

}  // namespace deltafin
