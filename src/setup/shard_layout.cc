#include "setup/shard_layout.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "format/safetensors.h"

namespace deltafin::setup {

namespace {

// Parses "language_model.model.layers.{L}.block_sparse_moe.experts.{E}." at the start of name.
bool ParseExpertName(const std::string& name, int64_t* layer, int32_t* expert) {
  static const std::string kPrefix = "language_model.model.layers.";
  static const std::string kMid = ".block_sparse_moe.experts.";
  if (name.rfind(kPrefix, 0) != 0) return false;
  size_t pos = kPrefix.size();
  char* end = nullptr;
  const long long l = std::strtoll(name.c_str() + pos, &end, 10);
  if (end == name.c_str() + pos) return false;
  pos = static_cast<size_t>(end - name.c_str());
  if (name.compare(pos, kMid.size(), kMid) != 0) return false;
  pos += kMid.size();
  const long long e = std::strtoll(name.c_str() + pos, &end, 10);
  if (end == name.c_str() + pos || *end != '.' || e < 0 || e > INT32_MAX || l < 0) return false;
  *layer = l;
  *expert = static_cast<int32_t>(e);
  return true;
}

}  // namespace

bool IsSafetensorsFile(const std::string& path) {
  const std::string ext = ".safetensors";
  return path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

Result<ShardLayout> LayoutFromHeader(std::vector<uint8_t> header, uint64_t file_size,
                                     const std::string& label) {
  DF_ASSIGN_OR_RETURN(SafetensorsHeader parsed,
                      ParseSafetensorsHeader(header.data(), header.size(), file_size, label));
  ShardLayout layout;
  layout.file_size = file_size;
  struct Acc {
    uint64_t begin = UINT64_MAX, end = 0, sum = 0;
  };
  std::map<std::pair<int64_t, int32_t>, Acc> acc;
  for (const auto& t : parsed.tensors) {
    int64_t layer = 0;
    int32_t expert = 0;
    if (!ParseExpertName(t.name, &layer, &expert)) continue;
    Acc& a = acc[{layer, expert}];
    const uint64_t b = parsed.data_offset + t.begin, e = parsed.data_offset + t.end;
    a.begin = std::min(a.begin, b);
    a.end = std::max(a.end, e);
    a.sum += e - b;
  }
  for (const auto& [key, a] : acc) {
    if (a.end - a.begin != a.sum) {
      return Status::Error(label + ": the tensors of expert " + std::to_string(key.second) +
                           " of layer " + std::to_string(key.first) +
                           " are not contiguous (an expert must be one span of bytes)");
    }
    layout.experts.push_back({key.first, key.second, a.begin, a.sum});
  }
  std::sort(layout.experts.begin(), layout.experts.end(),
            [](const ExpertSpan& a, const ExpertSpan& b) { return a.offset < b.offset; });
  uint64_t pos = 0;
  for (const auto& e : layout.experts) {
    if (e.offset > pos) layout.resident.emplace_back(pos, e.offset);
    pos = e.offset + e.bytes;
  }
  if (pos < file_size) layout.resident.emplace_back(pos, file_size);
  for (const auto& [b, e] : layout.resident) layout.resident_bytes += e - b;
  layout.header = std::move(header);
  return layout;
}

Result<ShardLayout> ReadLocalLayout(int fd, uint64_t file_size, const std::string& path) {
  std::vector<uint8_t> first(8);
  if (file_size < 8 || ::pread(fd, first.data(), 8, 0) != 8) {
    return Status::Error(path + ": cannot read the safetensors header length");
  }
  DF_ASSIGN_OR_RETURN(const uint64_t n, SafetensorsHeaderLength(first.data(), file_size, path));
  std::vector<uint8_t> header(8 + n);
  uint64_t done = 0;
  while (done < header.size()) {
    const ssize_t got =
        ::pread(fd, header.data() + done, header.size() - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return Status::Error(path + ": cannot read the safetensors header");
    done += static_cast<uint64_t>(got);
  }
  return LayoutFromHeader(std::move(header), file_size, path);
}

Result<ShardLayout> FetchRemoteLayout(net::HttpClient& client, const std::string& url,
                                      uint64_t file_size) {
  if (file_size < 8) return Status::Error(url + ": too small to be a safetensors file");
  std::vector<uint8_t> bytes;
  auto sink = [&](const uint8_t* d, size_t n, uint64_t) -> Status {
    bytes.insert(bytes.end(), d, d + n);
    return Status::Ok();
  };
  DF_RETURN_IF_ERROR(client.GetRange(url, 0, 8, sink));
  if (bytes.size() != 8) return Status::Error(url + ": cannot read the safetensors header length");
  DF_ASSIGN_OR_RETURN(const uint64_t n, SafetensorsHeaderLength(bytes.data(), file_size, url));
  DF_RETURN_IF_ERROR(client.GetRange(url, 8, n, sink));
  return LayoutFromHeader(std::move(bytes), file_size, url);
}

}  // namespace deltafin::setup
