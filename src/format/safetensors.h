// safetensors container: parse and validate a header; write a file tensor by tensor.
//
// File layout:
//   u64 little-endian N | N bytes of JSON header | data section
//   header: {"__metadata__": {...}?, "<name>": {"dtype": "BF16", "shape": [..],
//            "data_offsets": [begin, end]}, ...}
//   Offsets are relative to the data section, which starts at byte 8 + N.
// Validation (once, at load) covers everything a corrupt or truncated file can get wrong, so later
// code may trust every offset: header length inside the file, well-formed JSON, a known dtype,
// byte size = product(shape) * dtype size, every tensor inside the data section, no two tensors
// overlapping.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace deltafin {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // relative to the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;  // absolute file offset of the data section (8 + N)
  std::vector<SafetensorsEntry> tensors;
};

// N, the header length in a file's first 8 bytes, checked against the file size and a sanity
// bound. For callers that must read the header themselves (pread, range requests) before parsing.
Result<uint64_t> SafetensorsHeaderLength(const uint8_t* first8, uint64_t file_size,
                                         const std::string& label);

// `bytes` holds at least the first min(file_size, 8 + N) bytes of the file; `file_size` is the
// whole file's size. `label` (usually the path) prefixes every error message.
Result<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, uint64_t available,
                                                 uint64_t file_size, const std::string& label);

// Writes a safetensors file in one pass: the header is computed from the declared tensors (data
// laid out in declaration order, header padded with spaces to a multiple of 8 bytes), then each
// tensor's bytes are appended in that order, possibly in pieces. Close() checks that exactly the
// declared bytes arrived, so a generator bug cannot produce a silently truncated shard.
class SafetensorsWriter {
 public:
  struct Declaration {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };

  SafetensorsWriter() = default;
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  ~SafetensorsWriter();

  Status Open(const std::string& path, const std::vector<Declaration>& tensors);
  Status Append(const void* data, size_t bytes);
  // Advances past `bytes` of tensor data without writing them: they read as zeros and, on file
  // systems with sparse files, occupy no blocks (a hole). Close() sets the file's final size.
  Status Skip(uint64_t bytes);
  Status Close();

  // Size in bytes of a declared tensor.
  static uint64_t TensorBytes(const Declaration& d);

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  uint64_t expected_data_bytes_ = 0;
  uint64_t written_data_bytes_ = 0;
  uint64_t data_start_ = 0;  // file offset of the data section
};

}  // namespace deltafin
