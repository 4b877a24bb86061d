// Where the routed experts sit inside a safetensors shard, from its header alone.
//
// A routed-expert tensor is named language_model.model.layers.{L}.block_sparse_moe.experts.{E}.*;
// the tensors of one (L, E) must be back to back (docs/MODEL.md §2.8), which makes the expert one
// span of bytes: one ranged GET in a stream install. Everything else in the shard (header, spine
// tensors, any gap) is the shard's "resident" part that a stream install fetches at setup.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "net/http_client.h"

namespace deltafin::setup {

struct ExpertSpan {
  int64_t layer = 0;
  int32_t expert = 0;
  uint64_t offset = 0;  // absolute file offset
  uint64_t bytes = 0;
};

struct ShardLayout {
  uint64_t file_size = 0;
  std::vector<uint8_t> header;      // the first 8 + N bytes of the file
  std::vector<ExpertSpan> experts;  // sorted by offset
  // [begin, end) byte ranges that are not routed-expert spans, coalesced, sorted.
  std::vector<std::pair<uint64_t, uint64_t>> resident;
  uint64_t resident_bytes = 0;
};

// Builds the layout from the header bytes (at least 8 + N of them). `label` prefixes errors.
Result<ShardLayout> LayoutFromHeader(std::vector<uint8_t> header, uint64_t file_size,
                                     const std::string& label);
// Reads the header of a local shard file.
Result<ShardLayout> ReadLocalLayout(int fd, uint64_t file_size, const std::string& path);
// Fetches the header of a remote shard with two ranged GETs (length prefix, then the JSON).
Result<ShardLayout> FetchRemoteLayout(net::HttpClient& client, const std::string& url,
                                      uint64_t file_size);

bool IsSafetensorsFile(const std::string& path);

}  // namespace deltafin::setup
