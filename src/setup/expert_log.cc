#include "setup/expert_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/mapped_file.h"
#include "setup/manifest.h"

namespace deltafin::setup {

namespace {

constexpr uint32_t kMagic = 0x58454644;

uint32_t Fnv1a(const uint8_t* p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t Get32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

std::string Record(int64_t layer, int32_t expert) {
  uint8_t r[16];
  Put32(r, kMagic);
  Put32(r + 4, static_cast<uint32_t>(layer));
  Put32(r + 8, static_cast<uint32_t>(expert));
  Put32(r + 12, Fnv1a(r, 12));
  return std::string(reinterpret_cast<const char*>(r), 16);
}

}  // namespace

ExpertLog::~ExpertLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status ExpertLog::Open(const std::string& path, std::vector<std::pair<int64_t, int32_t>>* present) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  DF_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t valid_end = 0;
  for (size_t i = 0; i + 16 <= bytes.size(); i += 16) {
    if (Get32(p + i) != kMagic || Get32(p + i + 12) != Fnv1a(p + i, 12)) break;
    present->emplace_back(Get32(p + i + 4), static_cast<int32_t>(Get32(p + i + 8)));
    valid_end = i + 16;
  }
  if (valid_end != bytes.size()) {
    // A torn tail (crash during an append): cut it so later appends stay 16-byte aligned.
    if (::ftruncate(fd_, static_cast<off_t>(valid_end)) != 0) {
      return Status::Error(path + ": cannot trim a torn record: " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

Status ExpertLog::Append(int64_t layer, const std::vector<int32_t>& experts) {
  std::string records;
  for (int32_t expert : experts) records += Record(layer, expert);
  std::lock_guard<std::mutex> lock(mu_);
  const ssize_t n = ::write(fd_, records.data(), records.size());
  if (n != static_cast<ssize_t>(records.size()) || ::fdatasync(fd_) != 0) {
    return Status::Error(path_ + ": cannot record " + std::to_string(experts.size()) +
                         " experts of layer " + std::to_string(layer) + ": " +
                         std::strerror(errno));
  }
  return Status::Ok();
}

Status ExpertLog::Rewrite(const std::vector<std::pair<int64_t, int32_t>>& present) {
  std::string bytes;
  for (const auto& [layer, expert] : present) bytes += Record(layer, expert);
  std::lock_guard<std::mutex> lock(mu_);
  DF_RETURN_IF_ERROR(WriteFileDurably(path_, bytes));
  ::close(fd_);
  fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) return Status::Error(path_ + ": cannot reopen: " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace deltafin::setup
