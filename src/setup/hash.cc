#include "setup/hash.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "io/sha256.h"

namespace deltafin::setup {

struct Hasher::Ctx {
  EVP_MD_CTX* md = nullptr;
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Hasher::Hasher(Kind kind, uint64_t size) : ctx_(std::make_unique<Ctx>()) {
  ctx_->md = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx_->md, kind == Kind::kSha256 ? EVP_sha256() : EVP_sha1(), nullptr);
  if (kind == Kind::kGitBlobSha1) {
    const std::string prefix = "blob " + std::to_string(size);
    Update(prefix.c_str(), prefix.size() + 1);  // with the terminating NUL
  }
}

Hasher::~Hasher() = default;

void Hasher::Update(const void* data, size_t size) { EVP_DigestUpdate(ctx_->md, data, size); }

std::string Hasher::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_->md, digest, &n);
  return HexLower(digest, n);
}

Status HashFd(int fd, uint64_t size, const std::string& label, Hasher* hasher) {
  std::vector<uint8_t> buf(8 << 20);
  uint64_t pos = 0;
  while (pos < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - pos));
    const ssize_t got = ::pread(fd, buf.data(), want, static_cast<off_t>(pos));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return Status::Error(label + ": read failed at byte " + std::to_string(pos) + ": " +
                           (got < 0 ? std::strerror(errno) : "unexpected end of file"));
    }
    hasher->Update(buf.data(), static_cast<size_t>(got));
    pos += static_cast<uint64_t>(got);
  }
  return Status::Ok();
}

Result<std::string> Sha256File(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  Hasher h(Hasher::Kind::kSha256, 0);
  Status s = HashFd(fd, static_cast<uint64_t>(st.st_size), path, &h);
  ::close(fd);
  if (!s.ok()) return s;
  return h.HexDigest();
}

}  // namespace deltafin::setup
