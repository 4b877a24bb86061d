// The persistent prefix cache (docs/SERVER.md "Prefix cache"): session state snapshots
// (Session::SaveState) keyed by the token prefix they were taken after and the model's identity,
// kept in RAM (bounded, LRU) and on disk (a byte budget, LRU by file mtime), so that a request —
// or the same request after a restart — restores the longest cached prefix of its prompt and
// prefills only the rest.
//
// Files: <dir>/<key>.dfpc, written as <dir>/.<key>.tmp.<pid>, fsynced, renamed into place and the
// directory fsynced (a crash leaves either the old set of files or the new one, never a partial
// entry under its final name). Layout (host byte order):
//   "DFPCACH1", u64 model identity, u64 token count n, u64 state bytes s,
//   int32 tokens[n], state[s], u64 checksum of everything before it.
// A file whose size, header or checksum is wrong is deleted and ignored, with a warning. Files of
// another model identity are left alone and not counted. Disk writes run on a background thread,
// so a request does not wait for them; a directory that cannot be written disables the disk part
// (a warning), the RAM part still works.
//
// Every entry keeps its full token prefix, and a lookup compares tokens, so a hash collision can
// never restore the wrong state. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace deltafin::server {

struct PrefixCacheOptions {
  std::string dir;                          // "" = no disk cache
  uint64_t disk_bytes = uint64_t{8} << 30;  // budget of the .dfpc files in dir
  uint64_t ram_bytes = uint64_t{1} << 30;   // budget of the snapshots held in RAM
  // Shorter prefixes are not snapshotted: prefilling them costs less than a snapshot's copy and
  // disk write (and the conversation state reuse covers a short chat's next turn).
  size_t min_tokens = 128;
  // The model identity (config and weight files, spine kind): entries of another are never used.
  uint64_t model_identity = 0;
};

// 64-bit hash of bytes (word-wise multiply-xor; fast enough to checksum GB-sized snapshots).
uint64_t HashBytes(std::span<const uint8_t> bytes, uint64_t seed = 0);

// The model identity of a folder: config.json and every weight file's name, size and mtime,
// and whether the spine is the row-int8 one.
uint64_t ModelIdentity(const std::string& model_dir, bool spine_int8);

class PrefixCache {
 public:
  explicit PrefixCache(PrefixCacheOptions options);
  ~PrefixCache();  // finishes the queued disk writes

  // The longest cached prefix of `prompt` (at most prompt.size() tokens): its length and state,
  // or 0 and nothing. A RAM miss reads the disk entry (checksum verified) and keeps it in RAM.
  struct Hit {
    size_t tokens = 0;
    std::shared_ptr<const std::vector<uint8_t>> state;
  };
  Hit Lookup(std::span<const int32_t> prompt);
  // Whether exactly this prefix is cached (in RAM or on disk).
  bool Contains(std::span<const int32_t> prefix);
  // Keeps the state after `prefix` in RAM and queues its disk write.
  void Insert(std::span<const int32_t> prefix, std::vector<uint8_t> state);
  // Waits until every queued disk write is done (tests, shutdown).
  void Flush();

  bool disk_enabled() const { return disk_enabled_; }
  size_t min_tokens() const { return opt_.min_tokens; }
  uint64_t ram_bytes() const;
  uint64_t disk_bytes() const;
  size_t disk_entries() const;

 private:
  struct Entry {
    uint64_t key = 0;
    std::vector<int32_t> tokens;
    std::shared_ptr<const std::vector<uint8_t>> state;  // null: on disk only
    uint64_t file_bytes = 0;                            // 0: not on disk
  };
  uint64_t Key(std::span<const int32_t> tokens) const;
  std::string PathOf(uint64_t key) const;
  void ScanDisk();
  std::shared_ptr<const std::vector<uint8_t>> LoadFile(const Entry& e);
  void WriterLoop();
  bool WriteFile(const Entry& e, const std::vector<uint8_t>& state);
  void EvictRam();   // mu_ held
  void EvictDisk();  // mu_ held
  void Touch(std::list<Entry>::iterator it);

  PrefixCacheOptions opt_;
  bool disk_enabled_ = false;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // most recently used first
  uint64_t ram_used_ = 0;
  uint64_t disk_used_ = 0;
  std::condition_variable writer_cv_;
  std::condition_variable flushed_cv_;
  std::deque<Entry> write_queue_;  // copies (the state is shared): eviction may drop the entry
  bool writing_ = false;
  bool stopping_ = false;
  std::thread writer_;
};

}  // namespace deltafin::server
