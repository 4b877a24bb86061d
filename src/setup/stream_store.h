// StreamStore: the ExpertFetcher of a stream install (include/deltafin/expert_fetcher.h).
//
// Opened from DIR/.deltafin/manifest.json: each "sparse" shard is a local file of its full size
// whose header and non-expert bytes are present and whose routed-expert spans are holes until
// fetched. The in-memory presence table (one byte per layer × expert) is loaded from the expert
// log (expert_log.h); experts of complete shards are present by definition.
//
// FetchExperts: one ranged GET per missing expert (its six tensors are one span), up to
// `max_connections` at once over the HTTP client's keep-alive pool, each into a buffer; the length
// must match and every MXFP4 scale byte must lie in [2, 252] before the bytes are pwritten at the
// expert's offset, fdatasync'ed and logged. When the last expert of a shard arrives the whole shard
// is hashed against its LFS sha256 on a background thread (a K3 shard is ~16 GB: seconds of
// hashing that must not stall the forward pass that fetched the expert); a mismatch forgets that
// shard's experts, so they are fetched again on next use, and is logged as an error. Endpoint:
// $HF_ENDPOINT, else the one recorded at setup; token: $HF_TOKEN, else DIR/.deltafin/token (saved
// by `setup --token`), else the HF token files.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltafin/expert_fetcher.h"
#include "net/http_client.h"
#include "setup/expert_log.h"
#include "setup/manifest.h"
#include "setup/progress.h"
#include "setup/shard_layout.h"
#include "weights/config.h"
#include "weights/weights.h"

namespace deltafin::setup {

struct StreamOptions {
  int max_connections = 8;
  std::string token_flag;  // overrides every other token source when set
};

class StreamStore final : public ExpertFetcher {
 public:
  static Result<std::shared_ptr<StreamStore>> Open(const std::string& model_dir,
                                                   const StreamOptions& options);
  ~StreamStore() override;

  bool IsLocal(int64_t layer, int32_t expert) const override;
  Status FetchExperts(int64_t layer, std::span<const int32_t> experts) override;

  // fetch-experts-all: fetches every missing expert, verifies every shard against its sha256 and
  // marks the install full and complete.
  Status FetchAll();
  uint64_t MissingBytes() const;
  uint64_t fetched_experts() const { return fetched_.load(); }

 private:
  struct Shard {
    std::string rel_path, path, url, sha256;
    uint64_t size = 0;
    int fd = -1;
    std::vector<ExpertSpan> experts;
  };
  struct Slot {
    int shard = -1;
    uint64_t offset = 0, bytes = 0;
  };
  StreamStore() = default;
  size_t Index(int64_t layer, int32_t expert) const {
    return static_cast<size_t>(layer * num_experts_ + expert);
  }
  Status FetchOne(int64_t layer, int32_t expert, Progress* progress);
  Status FetchList(int64_t layer, const std::vector<int32_t>& missing, Progress* progress);
  Status VerifyShard(int shard);  // hashes a shard whose experts are all present
  bool ShardComplete(int shard) const;
  // The background verifier: shards queued by FetchList are hashed one at a time.
  void VerifierLoop();
  void QueueVerify(int shard);
  void DrainVerifier();  // returns when the queue is empty and nothing is being hashed

  std::string dir_;
  Manifest manifest_;
  std::mutex manifest_mu_, fetch_mu_;
  std::unique_ptr<net::HttpClient> client_;
  int max_parallel_ = 8;
  ModelConfig config_;
  ExpertLayout layout_;
  int64_t num_layers_ = 0, num_experts_ = 0;
  std::vector<Shard> shards_;
  std::vector<Slot> slots_;                          // [layer * num_experts + expert]
  std::unique_ptr<std::atomic<uint8_t>[]> present_;  // same indexing
  ExpertLog log_;
  std::atomic<uint64_t> fetched_{0};
  std::mutex verify_mu_;
  std::condition_variable verify_cv_;
  std::vector<int> verify_queue_;
  bool verifying_ = false, verify_stop_ = false;
  std::thread verifier_;
};

// The token a stream install uses at run time (see the file comment).
std::string StreamToken(const std::string& model_dir, const std::string& flag);

}  // namespace deltafin::setup
