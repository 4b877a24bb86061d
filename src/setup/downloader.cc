#include "setup/downloader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/log.h"
#include "setup/crash_point.h"
#include "setup/hash.h"
#include "setup/manifest.h"

namespace deltafin::setup {

namespace fs = std::filesystem;

uint64_t FreeBytes(const std::string& path) {
  struct statvfs st {};
  fs::path p(path);
  while (!p.empty() && !fs::exists(p)) p = p.parent_path();
  if (::statvfs(p.empty() ? "." : p.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

Status WriteError(const std::string& path, int err, uint64_t written, uint64_t total) {
  std::string msg = path + ": write failed after " + std::to_string(written) + " of " +
                    std::to_string(total) + " bytes: " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) {
    msg += "; the disk is full: " + std::to_string(FreeBytes(path)) + " bytes free on " +
           fs::path(path).parent_path().string() + ", this file needs " +
           std::to_string(total - written) +
           " more. Free some space and run the same command again: it resumes from the partial "
           "file (nothing incomplete was put in place)";
  }
  return Status::Error(msg);
}

Status PwriteAll(int fd, const void* data, size_t size, uint64_t offset, const std::string& path,
                 uint64_t file_size) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, p + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return WriteError(path, n < 0 ? errno : ENOSPC, offset + done, file_size);
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

namespace {

std::string ReadSmall(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// Why an attempt's partial bytes were discarded, so that one more attempt from byte 0 makes sense.
enum class StartOver { kNo, kEtagChanged, kDigestMismatch };

// One attempt: resume or start the partial file, fetch the rest, hash it, compare.
Status FetchAndVerify(net::HttpClient& client, const DownloadTarget& t, Progress* progress,
                      StartOver* start_over) {
  *start_over = StartOver::kNo;
  const std::string partial = t.dest + ".partial", etag_path = partial + ".etag";
  const int fd = ::open(partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(partial + ": cannot create: " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  uint64_t have = static_cast<uint64_t>(st.st_size);
  std::string etag = have > 0 ? ReadSmall(etag_path) : "";
  if (have > t.size || (have > 0 && etag.empty() && t.size > (1u << 20))) {
    have = 0;  // longer than the file, or of unknown origin: start over
    if (::ftruncate(fd, 0) != 0) {
      ::close(fd);
      return Status::Error(partial + ": cannot truncate: " + std::strerror(errno));
    }
  }
  const bool use_sha = !t.sha256.empty();
  Hasher hasher(use_sha ? Hasher::Kind::kSha256 : Hasher::Kind::kGitBlobSha1, t.size);
  if (have > 0) {
    LogInfo("resuming " + t.dest + " at byte " + std::to_string(have) + " of " +
            std::to_string(t.size));
    Status s = HashFd(fd, have, partial, &hasher);
    if (!s.ok()) {
      ::close(fd);
      return s;
    }
  }
  Status s = Status::Ok();
  if (have < t.size) {
    net::HttpResponse response;
    bool etag_saved = false;
    auto sink = [&](const uint8_t* data, size_t n, uint64_t offset) -> Status {
      if (!etag_saved) {
        etag_saved = true;
        if (!response.etag.empty() && response.etag != etag) {
          DF_RETURN_IF_ERROR(WriteFileDurably(etag_path, response.etag + "\n"));
        }
      }
      DF_RETURN_IF_ERROR(PwriteAll(fd, data, n, have + offset, partial, t.size));
      hasher.Update(data, n);
      return Status::Ok();
    };
    s = client.GetRange(t.url, have, t.size - have, sink, etag, &response, [&](uint64_t d) {
      if (progress != nullptr) progress->Add(d);
    });
    if (!s.ok() && response.etag_changed) {
      // The partial bytes belong to another version of the file: drop them.
      if (::ftruncate(fd, 0) == 0) *start_over = StartOver::kEtagChanged;
      ::unlink(etag_path.c_str());
    }
  }
  if (s.ok() && ::fdatasync(fd) != 0) s = WriteError(partial, errno, t.size, t.size);
  ::close(fd);
  if (!s.ok()) return s;
  const std::string digest = hasher.HexDigest();
  const std::string& want = use_sha ? t.sha256 : t.blob_id;
  if (!want.empty() && digest != want) {
    // The corrupt bytes go at once: nothing a later run could resume from or trust.
    *start_over = StartOver::kDigestMismatch;
    ::unlink(partial.c_str());
    ::unlink(etag_path.c_str());
    return Status::Error(t.dest + ": " + (use_sha ? "sha256" : "git blob sha1") +
                         " mismatch: got " + digest + ", the repository lists " + want + " (from " +
                         t.url + ")");
  }
  CrashPoint("before-rename", t.dest);
  if (::rename(partial.c_str(), t.dest.c_str()) != 0) {
    return Status::Error(t.dest + ": cannot rename into place: " + std::strerror(errno));
  }
  ::unlink(etag_path.c_str());
  SyncDirectory(fs::path(t.dest).parent_path().string());
  CrashPoint("after-rename", t.dest);
  return Status::Ok();
}

}  // namespace

Status DownloadFile(net::HttpClient& client, const DownloadTarget& t, Progress* progress,
                    bool* fetched) {
  *fetched = false;
  std::error_code ec;
  if (fs::is_regular_file(t.dest, ec) && fs::file_size(t.dest, ec) == t.size) {
    // A kill between the rename into place and the removal of the ETag file (another file's
    // crash point can land there while this one finishes) leaves the ETag file behind: the file
    // is complete, so its resume state goes.
    fs::remove(t.dest + ".partial.etag", ec);
    return Status::Ok();
  }
  fs::create_directories(fs::path(t.dest).parent_path(), ec);
  *fetched = true;
  StartOver first = StartOver::kNo;
  for (int attempt = 1;; ++attempt) {
    StartOver start_over = StartOver::kNo;
    Status s = FetchAndVerify(client, t, progress, &start_over);
    if (s.ok()) return s;
    if (start_over == StartOver::kNo) return s;
    if (attempt >= 2) {
      if (first == StartOver::kDigestMismatch && start_over == StartOver::kDigestMismatch) {
        return Status::Error(s.message() +
                             "; the file failed its check twice, downloaded from byte 0 each "
                             "time, so the server or something between it and this machine "
                             "corrupts it; both copies were deleted");
      }
      return s;
    }
    first = start_over;
    LogInfo("warning: " + s.message() + "; discarded the partial copy, downloading it again");
  }
}

}  // namespace deltafin::setup
