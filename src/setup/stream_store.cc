#include "setup/stream_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/byte_size.h"
#include "base/log.h"
#include "io/mapped_file.h"
#include "net/hf_hub.h"
#include "setup/crash_point.h"
#include "setup/downloader.h"
#include "setup/hash.h"

namespace deltafin::setup {

namespace fs = std::filesystem;

std::string StreamToken(const std::string& model_dir, const std::string& flag) {
  return net::ResolveToken(flag, (fs::path(StateDir(model_dir)) / "token").string()).token;
}

StreamStore::~StreamStore() {
  if (verifier_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(verify_mu_);
      verify_stop_ = true;
    }
    verify_cv_.notify_all();
    verifier_.join();
  }
  for (auto& s : shards_) {
    if (s.fd >= 0) ::close(s.fd);
  }
}

Result<std::shared_ptr<StreamStore>> StreamStore::Open(const std::string& model_dir,
                                                       const StreamOptions& options) {
  std::shared_ptr<StreamStore> store(new StreamStore());
  store->dir_ = model_dir;
  DF_ASSIGN_OR_RETURN(std::optional<Manifest> manifest, Manifest::Load(model_dir));
  if (!manifest) return Status::Error(model_dir + ": not a deltafin install (no manifest)");
  store->manifest_ = std::move(*manifest);
  const Manifest& m = store->manifest_;
  DF_ASSIGN_OR_RETURN(store->config_, LoadModelConfig(model_dir));
  const ModelConfig& c = store->config_;
  store->layout_ = ExpertLayout::For(c);
  store->num_layers_ = c.num_hidden_layers;
  store->num_experts_ = c.num_experts;
  const size_t n = static_cast<size_t>(c.num_hidden_layers * c.num_experts);
  store->slots_.assign(n, Slot{});
  store->present_ = std::make_unique<std::atomic<uint8_t>[]>(n);
  for (size_t i = 0; i < n; ++i) store->present_[i] = 1;  // until a sparse shard claims it

  net::HttpOptions http;
  http.endpoint = net::EndpointFromEnvironment(m.endpoint);
  http.token = StreamToken(model_dir, options.token_flag);
  http.max_connections = options.max_connections;
  store->max_parallel_ = options.max_connections;
  store->client_ = std::make_unique<net::HttpClient>(http);

  for (const auto& f : m.files) {
    if (f.state != "sparse") continue;
    Shard s;
    s.rel_path = f.path;
    s.path = (fs::path(model_dir) / f.path).string();
    s.url = net::ResolveUrl(http.endpoint, m.repo, m.commit, f.path);
    s.sha256 = f.sha256;
    s.size = f.size;
    s.fd = ::open(s.path.c_str(), O_RDWR | O_CLOEXEC);
    if (s.fd < 0)
      return Status::Error(s.path + ": cannot open for writing: " + std::strerror(errno));
    store->shards_.push_back(std::move(s));
    Shard& shard = store->shards_.back();
    DF_ASSIGN_OR_RETURN(ShardLayout layout, ReadLocalLayout(shard.fd, shard.size, shard.path));
    for (const auto& e : layout.experts) {
      if (e.layer >= c.num_hidden_layers || e.expert >= c.num_experts) {
        return Status::Error(shard.path + ": expert " + std::to_string(e.expert) + " of layer " +
                             std::to_string(e.layer) + " is outside the model's config");
      }
      if (e.bytes != store->layout_.bytes) {
        return Status::Error(shard.path + ": expert " + std::to_string(e.expert) + " of layer " +
                             std::to_string(e.layer) + " spans " + std::to_string(e.bytes) +
                             " bytes, the config implies " + std::to_string(store->layout_.bytes));
      }
      const size_t i = store->Index(e.layer, e.expert);
      store->slots_[i] = {static_cast<int>(store->shards_.size() - 1), e.offset, e.bytes};
      store->present_[i] = 0;
    }
    shard.experts = std::move(layout.experts);
  }
  std::vector<std::pair<int64_t, int32_t>> logged;
  std::error_code ec;
  fs::create_directories(StateDir(model_dir), ec);
  DF_RETURN_IF_ERROR(
      store->log_.Open((fs::path(StateDir(model_dir)) / "experts.log").string(), &logged));
  for (const auto& [layer, expert] : logged) {
    if (layer < store->num_layers_ && expert >= 0 && expert < store->num_experts_) {
      store->present_[store->Index(layer, expert)] = 1;
    }
  }
  store->verifier_ = std::thread([p = store.get()] { p->VerifierLoop(); });
  return store;
}

void StreamStore::QueueVerify(int shard) {
  {
    std::lock_guard<std::mutex> lock(verify_mu_);
    if (std::find(verify_queue_.begin(), verify_queue_.end(), shard) != verify_queue_.end()) return;
    verify_queue_.push_back(shard);
  }
  verify_cv_.notify_all();
}

void StreamStore::DrainVerifier() {
  std::unique_lock<std::mutex> lock(verify_mu_);
  verify_cv_.wait(lock, [&] { return verify_queue_.empty() && !verifying_; });
}

void StreamStore::VerifierLoop() {
  std::unique_lock<std::mutex> lock(verify_mu_);
  for (;;) {
    verify_cv_.wait(lock, [&] { return verify_stop_ || !verify_queue_.empty(); });
    if (verify_stop_) return;
    const int shard = verify_queue_.front();
    verify_queue_.erase(verify_queue_.begin());
    verifying_ = true;
    lock.unlock();
    const Status s = VerifyShard(shard);
    if (!s.ok()) LogError(s.message());
    lock.lock();
    verifying_ = false;
    verify_cv_.notify_all();
  }
}

bool StreamStore::IsLocal(int64_t layer, int32_t expert) const {
  if (layer < 0 || layer >= num_layers_ || expert < 0 || expert >= num_experts_) return false;
  return present_[Index(layer, expert)].load(std::memory_order_acquire) != 0;
}

uint64_t StreamStore::MissingBytes() const {
  uint64_t bytes = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!present_[i]) bytes += slots_[i].bytes;
  }
  return bytes;
}

bool StreamStore::ShardComplete(int shard) const {
  for (const auto& e : shards_[static_cast<size_t>(shard)].experts) {
    if (!present_[Index(e.layer, e.expert)]) return false;
  }
  return true;
}

Status StreamStore::FetchOne(int64_t layer, int32_t expert, Progress* progress) {
  const Slot& slot = slots_[Index(layer, expert)];
  const Shard& shard = shards_[static_cast<size_t>(slot.shard)];
  const std::string what = "layer " + std::to_string(layer) + " expert " + std::to_string(expert) +
                           " (" + shard.url + ", bytes " + std::to_string(slot.offset) + "-" +
                           std::to_string(slot.offset + slot.bytes - 1) + ")";
  std::vector<uint8_t> buf(slot.bytes);
  uint64_t got = 0;
  auto sink = [&](const uint8_t* d, size_t n, uint64_t offset) -> Status {
    if (offset + n > buf.size()) return Status::Error("the server sent more bytes than asked for");
    std::memcpy(buf.data() + offset, d, n);
    got = std::max<uint64_t>(got, offset + n);
    return Status::Ok();
  };
  Status s =
      client_->GetRange(shard.url, slot.offset, slot.bytes, sink, "", nullptr, [&](uint64_t d) {
        if (progress != nullptr) progress->Add(d);
      });
  if (!s.ok()) return s.WithContext("fetching " + what);
  if (got != slot.bytes) {
    return Status::Error("fetching " + what + ": got " + std::to_string(got) + " bytes");
  }
  DF_RETURN_IF_ERROR(AuditExpertScales(config_, layout_, buf.data(), layer, expert)
                         .WithContext("fetched " + what + " is corrupt"));
  DF_RETURN_IF_ERROR(
      PwriteAll(shard.fd, buf.data(), buf.size(), slot.offset, shard.path, shard.size)
          .WithContext("storing " + what));
  CrashPoint("expert-stored", what);  // in the shard, not yet durable nor in the log
  return Status::Ok();                // durable and logged by FetchList, once for the whole list
}

Status StreamStore::FetchList(int64_t layer, const std::vector<int32_t>& missing,
                              Progress* progress) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first_error;
  std::vector<int32_t> stored;  // written to their shard, not yet durable
  auto worker = [&] {
    for (size_t i = next++; i < missing.size(); i = next++) {
      Status s = FetchOne(layer, missing[i], progress);
      std::lock_guard<std::mutex> lock(mu);
      if (s.ok()) {
        stored.push_back(missing[i]);
      } else if (first_error.ok()) {
        first_error = s;
      }
    }
  };
  const size_t threads = std::min<size_t>(missing.size(), static_cast<size_t>(max_parallel_));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  // Data before the log: one fdatasync per shard that received bytes (a layer's experts usually
  // share one), then one durable log write for all of them; only then are they present.
  std::vector<int> synced;
  for (int32_t e : stored) {
    const int s = slots_[Index(layer, e)].shard;
    if (std::find(synced.begin(), synced.end(), s) != synced.end()) continue;
    const Shard& shard = shards_[static_cast<size_t>(s)];
    if (::fdatasync(shard.fd) != 0) {
      return Status::Error(shard.path + ": fdatasync failed: " + std::strerror(errno));
    }
    synced.push_back(s);
  }
  if (!stored.empty()) DF_RETURN_IF_ERROR(log_.Append(layer, stored));
  for (int32_t e : stored) present_[Index(layer, e)].store(1, std::memory_order_release);
  fetched_ += stored.size();
  DF_RETURN_IF_ERROR(first_error);
  // A shard whose last expert just arrived is checked against its sha256, in the background.
  int checked = -1;  // a layer's experts share one shard: check it once
  for (int32_t e : missing) {
    const int s = slots_[Index(layer, e)].shard;
    if (s != checked && ShardComplete(s)) QueueVerify(s);
    checked = s;
  }
  return Status::Ok();
}

Status StreamStore::FetchExperts(int64_t layer, std::span<const int32_t> experts) {
  std::lock_guard<std::mutex> lock(fetch_mu_);
  std::vector<int32_t> missing;
  for (int32_t e : experts) {
    if (layer < 0 || layer >= num_layers_ || e < 0 || e >= num_experts_) {
      return Status::Error("expert " + std::to_string(e) + " of layer " + std::to_string(layer) +
                           " does not exist in this model");
    }
    if (!IsLocal(layer, e) && std::find(missing.begin(), missing.end(), e) == missing.end()) {
      missing.push_back(e);
    }
  }
  if (missing.empty()) return Status::Ok();
  return FetchList(layer, missing, nullptr);
}

Status StreamStore::VerifyShard(int shard_index) {
  Shard& shard = shards_[static_cast<size_t>(shard_index)];
  {
    std::lock_guard<std::mutex> lock(manifest_mu_);
    const ManifestFile* f = manifest_.Find(shard.rel_path);
    if (f != nullptr && f->state == "verified") return Status::Ok();
  }
  if (!shard.sha256.empty()) {
    Hasher h(Hasher::Kind::kSha256, shard.size);
    DF_RETURN_IF_ERROR(HashFd(shard.fd, shard.size, shard.path, &h));
    const std::string digest = h.HexDigest();
    if (digest != shard.sha256) {
      // Some expert bytes are wrong and there is no telling which: forget this shard's experts.
      // fetch_mu_ keeps fetches from appending to the log while it is rewritten.
      std::lock_guard<std::mutex> fetch_lock(fetch_mu_);
      std::vector<std::pair<int64_t, int32_t>> keep;
      for (const auto& e : shard.experts) present_[Index(e.layer, e.expert)] = 0;
      for (int64_t l = 0; l < num_layers_; ++l) {
        for (int32_t e = 0; e < num_experts_; ++e) {
          if (slots_[Index(l, e)].shard >= 0 && present_[Index(l, e)]) keep.emplace_back(l, e);
        }
      }
      DF_RETURN_IF_ERROR(log_.Rewrite(keep));
      return Status::Error(shard.path + ": sha256 mismatch once every expert was fetched (got " +
                           digest + ", the repository lists " + shard.sha256 +
                           "); its experts were marked missing and will be fetched again");
    }
  }
  std::lock_guard<std::mutex> lock(manifest_mu_);
  if (ManifestFile* f = manifest_.Find(shard.rel_path)) f->state = "verified";
  return manifest_.Save(dir_);
}

Status StreamStore::FetchAll() {
  const uint64_t missing_bytes = MissingBytes();
  const uint64_t free_bytes = FreeBytes(dir_);
  if (missing_bytes > free_bytes) {
    return Status::Error(dir_ + ": the missing experts need " + std::to_string(missing_bytes) +
                         " bytes (" + HumanBytes(missing_bytes) + "), only " +
                         std::to_string(free_bytes) + " (" + HumanBytes(free_bytes) + ") are free");
  }
  LogInfo("fetch-experts-all: " + HumanBytes(missing_bytes) + " of experts to fetch");
  Progress progress("experts", missing_bytes);
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    std::vector<int32_t> missing;
    for (int32_t e = 0; e < num_experts_; ++e) {
      if (!IsLocal(layer, e)) missing.push_back(e);
    }
    if (missing.empty()) continue;
    std::lock_guard<std::mutex> lock(fetch_mu_);
    DF_RETURN_IF_ERROR(FetchList(layer, missing, &progress));
  }
  progress.Finish();
  DrainVerifier();  // shards completed above are being checked; verified ones are skipped below
  for (size_t s = 0; s < shards_.size(); ++s) {
    DF_RETURN_IF_ERROR(VerifyShard(static_cast<int>(s)));
  }
  std::lock_guard<std::mutex> lock(manifest_mu_);
  for (auto& f : manifest_.files) {
    if (f.state == "verified" || f.state == "sparse") f.state = "complete";
  }
  manifest_.mode = "full";
  manifest_.complete = true;
  return manifest_.Save(dir_);
}

}  // namespace deltafin::setup
