// PrefixCache: RAM LRU + disk files with checksums, crash-safe writes on a background thread.
#include "server/prefix_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/log.h"

namespace deltafin::server {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'D', 'F', 'P', 'C', 'A', 'C', 'H', '1'};
constexpr size_t kHeader = sizeof(kMagic) + 3 * sizeof(uint64_t);
constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;

uint64_t Mix(uint64_t h, uint64_t w) {
  h ^= w * kMul;
  h = (h << 27) | (h >> 37);
  return h * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
}

// Writes all of `bytes` to fd.
bool WriteAll(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    b += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

uint64_t HashBytes(std::span<const uint8_t> bytes, uint64_t seed) {
  uint64_t h = Mix(seed, bytes.size());
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = Mix(h, w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  return Mix(h, tail ^ 0xFF);
}

uint64_t ModelIdentity(const std::string& model_dir, bool spine_int8) {
  std::string desc = spine_int8 ? "spine=int8\n" : "spine=bf16\n";
  std::vector<std::string> lines;
  auto add_dir = [&](const fs::path& dir) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      const bool weights = name.ends_with(".safetensors") || name.ends_with(".json") ||
                           name.ends_with(".bin") || name.ends_with(".model");
      if (!weights || !e.is_regular_file(ec)) continue;
      const auto size = e.file_size(ec);
      const auto mtime = e.last_write_time(ec).time_since_epoch().count();
      lines.push_back(dir.filename().string() + "/" + name + " " + std::to_string(size) + " " +
                      std::to_string(mtime));
    }
  };
  add_dir(model_dir);
  if (spine_int8) add_dir(fs::path(model_dir) / "spine-int8");
  std::sort(lines.begin(), lines.end());
  for (const auto& l : lines) desc += l + "\n";
  return HashBytes({reinterpret_cast<const uint8_t*>(desc.data()), desc.size()}, 1);
}

PrefixCache::PrefixCache(PrefixCacheOptions options) : opt_(std::move(options)) {
  if (!opt_.dir.empty()) {
    std::error_code ec;
    fs::create_directories(opt_.dir, ec);
    // Probe: the directory must take a file (a read-only mount, a file in the way, permissions).
    const std::string probe = opt_.dir + "/.probe." + std::to_string(::getpid());
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(probe.c_str());
      disk_enabled_ = true;
    } else {
      LogWarn("prefix cache: cannot write to " + opt_.dir + " (" + std::strerror(errno) +
              "); running without the disk cache");
    }
  }
  if (disk_enabled_) {
    ScanDisk();
    writer_ = std::thread([this] { WriterLoop(); });
  }
}

PrefixCache::~PrefixCache() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  writer_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

uint64_t PrefixCache::Key(std::span<const int32_t> tokens) const {
  return HashBytes({reinterpret_cast<const uint8_t*>(tokens.data()), tokens.size_bytes()},
                   opt_.model_identity);
}

std::string PrefixCache::PathOf(uint64_t key) const {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.dfpc", static_cast<unsigned long long>(key));
  return opt_.dir + "/" + name;
}

void PrefixCache::ScanDisk() {
  std::error_code ec;
  struct Found {
    fs::file_time_type mtime;
    Entry e;
  };
  std::vector<Found> found;
  for (const auto& de : fs::directory_iterator(opt_.dir, ec)) {
    const std::string name = de.path().filename().string();
    if (name.starts_with(".") && name.find(".tmp.") != std::string::npos) {
      fs::remove(de.path(), ec);  // a write a crash interrupted
      continue;
    }
    if (!name.ends_with(".dfpc")) continue;
    const uint64_t size = de.file_size(ec);
    std::ifstream in(de.path(), std::ios::binary);
    char magic[8];
    uint64_t hdr[3] = {0, 0, 0};
    in.read(magic, 8);
    in.read(reinterpret_cast<char*>(hdr), sizeof(hdr));
    auto corrupt = [&](const char* why) {
      LogWarn("prefix cache: " + de.path().string() + " is " + why + "; deleted");
      fs::remove(de.path(), ec);
    };
    if (!in || std::memcmp(magic, kMagic, 8) != 0) {
      corrupt("not a cache file (bad header)");
      continue;
    }
    if (hdr[0] != opt_.model_identity) continue;  // another model's entry: not ours to judge
    const uint64_t n = hdr[1], s = hdr[2];
    if (n > (uint64_t{1} << 32) || size != kHeader + n * 4 + s + 8) {
      corrupt("truncated or of the wrong size");
      continue;
    }
    Found f;
    f.e.tokens.resize(n);
    in.read(reinterpret_cast<char*>(f.e.tokens.data()), static_cast<std::streamsize>(n * 4));
    if (!in) {
      corrupt("truncated");
      continue;
    }
    f.e.key = Key(f.e.tokens);
    f.e.file_bytes = size;
    f.mtime = de.last_write_time(ec);
    found.push_back(std::move(f));
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime > b.mtime; });
  for (auto& f : found) {
    disk_used_ += f.e.file_bytes;
    entries_.push_back(std::move(f.e));
  }
  EvictDisk();
  if (!entries_.empty()) {
    LogInfo("prefix cache: " + std::to_string(entries_.size()) + " entries (" +
            std::to_string(disk_used_ >> 20) + " MiB) in " + opt_.dir);
  }
}

std::shared_ptr<const std::vector<uint8_t>> PrefixCache::LoadFile(const Entry& e) {
  const std::string path = PathOf(e.key);
  std::error_code ec;
  auto corrupt = [&](const char* why) -> std::shared_ptr<const std::vector<uint8_t>> {
    LogWarn("prefix cache: " + path + " " + why + "; deleted");
    fs::remove(path, ec);
    return nullptr;
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  std::vector<uint8_t> all(e.file_bytes);
  in.read(reinterpret_cast<char*>(all.data()), static_cast<std::streamsize>(all.size()));
  if (!in || in.peek() != std::char_traits<char>::eof()) return corrupt("changed size");
  uint64_t sum = 0;
  std::memcpy(&sum, all.data() + all.size() - 8, 8);
  if (HashBytes({all.data(), all.size() - 8}) != sum) return corrupt("fails its checksum");
  uint64_t hdr[3];
  std::memcpy(hdr, all.data() + sizeof(kMagic), sizeof(hdr));
  const uint64_t n = hdr[1];
  if (n != e.tokens.size() || std::memcmp(all.data() + kHeader, e.tokens.data(), n * 4) != 0) {
    return corrupt("holds another prefix");
  }
  const size_t off = kHeader + n * 4;
  auto state = std::make_shared<std::vector<uint8_t>>(all.begin() + static_cast<ptrdiff_t>(off),
                                                      all.end() - 8);
  // Touch: the file's mtime orders the disk LRU across restarts.
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);
  return state;
}

void PrefixCache::Touch(std::list<Entry>::iterator it) {
  entries_.splice(entries_.begin(), entries_, it);
}

PrefixCache::Hit PrefixCache::Lookup(std::span<const int32_t> prompt) {
  std::unique_lock lock(mu_);
  for (;;) {
    auto best = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      const auto& t = it->tokens;
      if (t.empty() || t.size() > prompt.size()) continue;
      if (best != entries_.end() && t.size() <= best->tokens.size()) continue;
      if (std::equal(t.begin(), t.end(), prompt.begin())) best = it;
    }
    if (best == entries_.end()) return {};
    Touch(best);
    if (best->state) return {best->tokens.size(), best->state};
    // On disk only: read it (without the lock: it may be large).
    Entry copy{best->key, best->tokens, nullptr, best->file_bytes};
    lock.unlock();
    auto state = LoadFile(copy);
    lock.lock();
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.key == copy.key; });
    if (!state) {  // corrupt: it was deleted; try the next best
      if (it != entries_.end()) {
        disk_used_ -= it->file_bytes;
        entries_.erase(it);
      } else {
        return {};
      }
      continue;
    }
    if (it != entries_.end() && !it->state) {
      it->state = state;
      ram_used_ += state->size();
      Touch(it);
      EvictRam();
    }
    return {copy.tokens.size(), state};
  }
}

bool PrefixCache::Contains(std::span<const int32_t> prefix) {
  std::lock_guard lock(mu_);
  for (const auto& e : entries_) {
    if (e.tokens.size() == prefix.size() &&
        std::equal(e.tokens.begin(), e.tokens.end(), prefix.begin())) {
      return true;
    }
  }
  return false;
}

void PrefixCache::Insert(std::span<const int32_t> prefix, std::vector<uint8_t> state) {
  if (prefix.empty()) return;
  auto shared = std::make_shared<const std::vector<uint8_t>>(std::move(state));
  const uint64_t key = Key(prefix);
  {
    std::lock_guard lock(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->key == key &&
          std::equal(it->tokens.begin(), it->tokens.end(), prefix.begin(), prefix.end())) {
        Touch(it);
        return;  // already cached
      }
    }
    Entry e{key, std::vector<int32_t>(prefix.begin(), prefix.end()), shared, 0};
    if (disk_enabled_) {
      write_queue_.push_back(Entry{e.key, e.tokens, shared, 0});
    }
    ram_used_ += shared->size();
    entries_.push_front(std::move(e));
    EvictRam();
  }
  writer_cv_.notify_all();
}

void PrefixCache::EvictRam() {
  // Drop RAM copies from the least recently used end; an entry with no disk copy goes entirely.
  for (auto it = entries_.end(); ram_used_ > opt_.ram_bytes && it != entries_.begin();) {
    --it;
    if (!it->state) continue;
    ram_used_ -= it->state->size();
    it->state.reset();
    if (it->file_bytes == 0 && !disk_enabled_) it = entries_.erase(it);
  }
}

void PrefixCache::EvictDisk() {
  std::error_code ec;
  for (auto it = entries_.end(); disk_used_ > opt_.disk_bytes && it != entries_.begin();) {
    --it;
    if (it->file_bytes == 0) continue;
    fs::remove(PathOf(it->key), ec);
    disk_used_ -= it->file_bytes;
    it->file_bytes = 0;
    if (!it->state) it = entries_.erase(it);
  }
}

bool PrefixCache::WriteFile(const Entry& e, const std::vector<uint8_t>& state) {
  const std::string path = PathOf(e.key);
  const std::string tmp =
      opt_.dir + "/." + fs::path(path).filename().string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  const uint64_t hdr[3] = {opt_.model_identity, e.tokens.size(), state.size()};
  // The checksum covers header, tokens and state, computed as they are written.
  std::vector<uint8_t> head(kHeader + e.tokens.size() * 4);
  std::memcpy(head.data(), kMagic, 8);
  std::memcpy(head.data() + 8, hdr, sizeof(hdr));
  std::memcpy(head.data() + kHeader, e.tokens.data(), e.tokens.size() * 4);
  std::vector<uint8_t> whole;
  whole.reserve(head.size() + state.size());
  whole.insert(whole.end(), head.begin(), head.end());
  whole.insert(whole.end(), state.begin(), state.end());
  const uint64_t sum = HashBytes(whole);
  bool ok = WriteAll(fd, whole.data(), whole.size()) && WriteAll(fd, &sum, 8) && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  if (ok) ok = ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) {
    ::unlink(tmp.c_str());
    return false;
  }
  FsyncDir(opt_.dir);
  return true;
}

void PrefixCache::WriterLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    writer_cv_.wait(lock, [&] { return stopping_ || !write_queue_.empty(); });
    if (write_queue_.empty()) return;  // stopping, nothing left
    Entry w = std::move(write_queue_.front());
    write_queue_.pop_front();
    writing_ = true;
    lock.unlock();
    const bool ok = WriteFile(w, *w.state);
    const uint64_t bytes = kHeader + w.tokens.size() * 4 + w.state->size() + 8;
    if (!ok) LogWarn("prefix cache: writing " + PathOf(w.key) + " failed: " + std::strerror(errno));
    lock.lock();
    writing_ = false;
    if (ok) {
      auto it = std::find_if(entries_.begin(), entries_.end(),
                             [&](const Entry& e) { return e.key == w.key; });
      if (it != entries_.end() && it->file_bytes == 0) {
        it->file_bytes = bytes;
        disk_used_ += bytes;
      } else if (it == entries_.end()) {
        std::error_code ec;
        fs::remove(PathOf(w.key), ec);  // evicted while it was being written
      }
      EvictDisk();
    }
    flushed_cv_.notify_all();
  }
}

void PrefixCache::Flush() {
  std::unique_lock lock(mu_);
  flushed_cv_.wait(lock, [&] { return (write_queue_.empty() && !writing_) || !disk_enabled_; });
}

uint64_t PrefixCache::ram_bytes() const {
  std::lock_guard lock(mu_);
  return ram_used_;
}
uint64_t PrefixCache::disk_bytes() const {
  std::lock_guard lock(mu_);
  return disk_used_;
}
size_t PrefixCache::disk_entries() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& e : entries_) n += e.file_bytes > 0;
  return n;
}

}  // namespace deltafin::server
