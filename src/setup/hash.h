// SHA-256 and git blob SHA-1 over files and streams (OpenSSL libcrypto EVP).
//
// Whole files are verified against the hub's LFS sha256 (shards, large files) or, for small files
// kept in git, against the git blob id: sha1("blob " + decimal size + "\0" + content).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace deltafin::setup {

class Hasher {
 public:
  enum class Kind { kSha256, kGitBlobSha1 };
  // kGitBlobSha1 needs the file size up front (it is part of the hashed prefix).
  Hasher(Kind kind, uint64_t size);
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void Update(const void* data, size_t size);
  std::string HexDigest();  // finishes; call once

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// Hashes the first `size` bytes of an open file descriptor into `hasher`.
Status HashFd(int fd, uint64_t size, const std::string& label, Hasher* hasher);
// SHA-256 of a whole file, lower-case hex.
Result<std::string> Sha256File(const std::string& path);

}  // namespace deltafin::setup
