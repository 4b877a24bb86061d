// Downloads one repository file to its place in the install, resumably and verified.
//
//   DIR/<path>.partial       bytes so far; a rerun continues with Range: bytes=<size>-
//   DIR/<path>.partial.etag  the ETag those bytes came with; a different ETag restarts the file
// When the last byte is written the whole file is hashed (the resumed prefix is re-read), compared
// with the hub's sha256 (LFS) or git blob id, fdatasync'ed and renamed into place; the directory
// is fsync'ed. A file whose final name exists with the listed size is therefore complete and
// verified, and is skipped. A digest mismatch or a changed ETag discards the partial bytes and
// downloads the file once more from byte 0.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "net/http_client.h"
#include "setup/progress.h"

namespace deltafin::setup {

struct DownloadTarget {
  std::string url;
  std::string dest;  // final path
  uint64_t size = 0;
  std::string sha256;   // hex; verified when set
  std::string blob_id;  // git blob sha1 hex; verified when sha256 is empty
};

// *fetched is false when the file was already in place.
Status DownloadFile(net::HttpClient& client, const DownloadTarget& target, Progress* progress,
                    bool* fetched);

// Free bytes for an unprivileged writer on the filesystem holding `path`.
uint64_t FreeBytes(const std::string& path);

// The error for a failed write: names the file, the numbers and, for ENOSPC/EDQUOT, the free space.
Status WriteError(const std::string& path, int err, uint64_t written, uint64_t total);

// pwrite of all `size` bytes at `offset`, retrying short writes.
Status PwriteAll(int fd, const void* data, size_t size, uint64_t offset, const std::string& path,
                 uint64_t file_size);

}  // namespace deltafin::setup
