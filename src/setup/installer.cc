#include "setup/installer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "base/log.h"
#include "net/hf_hub.h"
#include "setup/downloader.h"
#include "setup/manifest.h"
#include "setup/progress.h"
#include "setup/shard_layout.h"
#include "setup/stream_store.h"

namespace deltafin::setup {

namespace fs = std::filesystem;

uint64_t SpaceMargin(uint64_t bytes) { return bytes / 20 + (1ull << 30); }

Result<InstallKind> InspectInstall(const std::string& model_dir) {
  DF_ASSIGN_OR_RETURN(std::optional<Manifest> m, Manifest::Load(model_dir));
  if (!m) return InstallKind::kPlainFolder;
  if (!m->complete) {
    return Status::Error(model_dir + ": the " + m->mode + " install of " + m->repo +
                         " is unfinished; run `deltafin setup --" + m->mode + " --model-dir " +
                         model_dir + "` again to complete it");
  }
  return m->mode == "stream" ? InstallKind::kStream : InstallKind::kFull;
}

namespace {

bool InPlace(const std::string& dir, const ManifestFile& f) {
  std::error_code ec;
  const fs::path p = fs::path(dir) / f.path;
  return fs::is_regular_file(p, ec) && fs::file_size(p, ec) == f.size;
}

uint64_t PartialBytes(const std::string& dir, const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::path(dir) / (path + ".partial");
  return fs::is_regular_file(p, ec) ? fs::file_size(p, ec) : 0;
}

Status CheckWritable(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(StateDir(dir), ec);
  if (ec) return Status::Error(dir + ": cannot create " + StateDir(dir) + ": " + ec.message());
  const std::string probe = (fs::path(StateDir(dir)) / "write-probe").string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(dir + ": not writable: " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::Ok();
}

// Writes a stream shard: a sparse file of the full size holding the header and every resident
// range (spine tensors, gaps); expert spans stay holes. Renamed into place when complete.
Status InstallSparseShard(net::HttpClient& client, const std::string& url, const std::string& dest,
                          const ShardLayout& layout, Progress* progress) {
  const std::string partial = dest + ".partial";
  const int fd = ::open(partial.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(partial + ": cannot create: " + std::strerror(errno));
  Status s = Status::Ok();
  if (::ftruncate(fd, static_cast<off_t>(layout.file_size)) != 0) {
    s = WriteError(partial, errno, 0, layout.file_size);
  }
  for (const auto& [begin, end] : layout.resident) {
    if (!s.ok()) break;
    const uint64_t b = begin;
    auto sink = [&](const uint8_t* d, size_t n, uint64_t offset) -> Status {
      return PwriteAll(fd, d, n, b + offset, partial, layout.file_size);
    };
    s = client.GetRange(url, begin, end - begin, sink, "", nullptr, [&](uint64_t d) {
      if (progress != nullptr) progress->Add(d);
    });
  }
  if (s.ok() && ::fdatasync(fd) != 0) s = WriteError(partial, errno, 0, layout.file_size);
  ::close(fd);
  if (!s.ok()) return s;
  if (::rename(partial.c_str(), dest.c_str()) != 0) {
    return Status::Error(dest + ": cannot rename into place: " + std::strerror(errno));
  }
  SyncDirectory(fs::path(dest).parent_path().string());
  return Status::Ok();
}

struct Plan {
  Manifest manifest;
  std::map<std::string, ShardLayout> layouts;  // stream: headers of shards with experts
};

// Runs `work(i)` for i in [0, n) on up to `jobs` threads; returns the first error.
Status Parallel(size_t n, int jobs, const std::function<Status(size_t)>& work) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status first;
  auto worker = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      Status s = work(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = s;
        failed = true;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::min<int>(jobs, static_cast<int>(n)); ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return first;
}

}  // namespace

Status RunSetup(const SetupOptions& o) {
  const std::string& dir = o.model_dir;
  DF_ASSIGN_OR_RETURN(std::optional<Manifest> existing, Manifest::Load(dir));
  const std::string repo = !o.repo.empty() ? o.repo : existing ? existing->repo : net::kDefaultRepo;
  const std::string revision = !o.revision.empty() ? o.revision
                               : existing          ? existing->revision
                                                   : net::kDefaultRevision;
  DF_RETURN_IF_ERROR(net::CheckRepoId(repo));
  DF_RETURN_IF_ERROR(net::CheckRevision(revision));
  if (existing && (existing->repo != repo || existing->revision != revision)) {
    return Status::Error(dir + " already holds " + existing->repo + " at " + existing->revision +
                         "; choose another --model-dir for " + repo + " at " + revision);
  }
  // A finished install: nothing to do (no network), unless a stream install is asked to be full.
  if (existing && existing->complete) {
    bool all_there = true;
    for (const auto& f : existing->files) all_there = all_there && InPlace(dir, f);
    const bool upgrade = existing->mode == "stream" && o.mode == "full";
    if (all_there && !upgrade) {
      LogInfo("setup: " + dir + " already holds a complete " + existing->mode + " install of " +
              repo + " at commit " + existing->commit + "; nothing to do");
      return Status::Ok();
    }
    if (all_there && upgrade) return RunFetchExpertsAll(dir, o.token_flag, o.max_connections);
  }
  if (existing && existing->mode == "stream" && o.mode == "full") {
    return Status::Error(dir +
                         ": the stream install is unfinished; finish it with `deltafin setup "
                         "--stream` first, then upgrade with `deltafin fetch-experts-all`");
  }

  // ---- preflight: writable, endpoint reachable, token accepted, file list, disk space ----
  DF_RETURN_IF_ERROR(CheckWritable(dir));
  const net::TokenChoice token = net::ResolveToken(o.token_flag);
  net::HttpOptions http;
  http.endpoint =
      net::EndpointFromEnvironment(existing ? existing->endpoint : net::kDefaultEndpoint);
  http.token = token.token;
  http.max_connections = o.max_connections;
  net::HttpClient client(http);
  LogInfo("setup: " + repo + " at " + revision + " from " + http.endpoint +
          (token.token.empty() ? " (no token)" : " (token from " + token.source + ")"));
  // A pinned install keeps asking for the commit it started with.
  const std::string ask = existing ? existing->commit : revision;
  auto info = net::FetchRepoInfo(client, http.endpoint, repo, ask);
  if (!info.ok()) return info.status().WithContext("setup: cannot list the files of " + repo);
  const net::HubFile* largest = &info->files[0];
  for (const auto& f : info->files) {
    if (f.size > largest->size) largest = &f;
  }
  {  // token accepted for file downloads (redirects included): one byte of the largest file
    const std::string url = net::ResolveUrl(http.endpoint, repo, info->commit, largest->path);
    auto ignore = [](const uint8_t*, size_t, uint64_t) { return Status::Ok(); };
    if (largest->size > 0) {
      DF_RETURN_IF_ERROR(client.GetRange(url, 0, 1, ignore).WithContext("setup: preflight"));
    }
  }

  Plan plan;
  Manifest& m = plan.manifest;
  m.endpoint = http.endpoint;
  m.repo = repo;
  m.revision = revision;
  m.commit = info->commit;
  uint64_t full_bytes = 0;
  for (const auto& f : info->files) {
    ManifestFile mf{f.path, f.size, f.sha256, f.blob_id, "planned"};
    if (existing) {
      if (const ManifestFile* old = existing->Find(f.path)) mf.state = old->state;
    }
    full_bytes += f.size;
    m.files.push_back(std::move(mf));
  }
  auto still_needed = [&](bool stream) -> Result<uint64_t> {
    uint64_t need = 0;
    for (const auto& f : m.files) {
      if (InPlace(dir, f)) continue;
      uint64_t bytes = f.size;
      if (stream && IsSafetensorsFile(f.path)) {
        auto it = plan.layouts.find(f.path);
        if (it != plan.layouts.end() && !it->second.experts.empty())
          bytes = it->second.resident_bytes;
      }
      const uint64_t have = PartialBytes(dir, f.path);
      need += bytes > have ? bytes - have : 0;
    }
    return need;
  };
  auto settled = [&](const ManifestFile& f) {
    return (f.state == "complete" || f.state == "verified" || f.state == "sparse") &&
           InPlace(dir, f);
  };
  // Shard headers (two small ranged GETs each): a stream install needs them to know its resident
  // bytes; a full install uses them to fetch spine shards before expert shards, and both find a
  // malformed header before the bulk download. Full mode skips files already in place (all
  // verified); stream mode re-reads those it did not record as settled (they may be sparse).
  auto fetch_layouts = [&](bool stream) -> Status {
    for (const auto& f : m.files) {
      if (!IsSafetensorsFile(f.path) || (stream ? settled(f) : InPlace(dir, f))) continue;
      const std::string url = net::ResolveUrl(http.endpoint, repo, m.commit, f.path);
      DF_ASSIGN_OR_RETURN(ShardLayout layout, FetchRemoteLayout(client, url, f.size));
      plan.layouts[f.path] = std::move(layout);
    }
    return Status::Ok();
  };
  const uint64_t free_bytes = FreeBytes(dir);
  std::string mode = o.mode != "auto" ? o.mode : existing ? existing->mode : o.mode;
  DF_ASSIGN_OR_RETURN(const uint64_t full_need, still_needed(false));
  if (mode == "auto") {
    if (free_bytes >= full_need + SpaceMargin(full_bytes)) {
      mode = "full";
      LogInfo("setup: full install: " + HumanBytes(free_bytes) + " free on " + dir +
              " covers the whole model (" + HumanBytes(full_need) + " still to download, + " +
              HumanBytes(SpaceMargin(full_bytes)) + " margin)");
    } else {
      mode = "stream";
      LogInfo("setup: stream install: " + HumanBytes(free_bytes) + " free on " + dir +
              " is less than the whole model (" + HumanBytes(full_need) + " + " +
              HumanBytes(SpaceMargin(full_bytes)) +
              " margin), so experts will be fetched on first use; `deltafin fetch-experts-all` "
              "upgrades to full later");
    }
  }
  m.mode = mode;
  DF_RETURN_IF_ERROR(fetch_layouts(mode == "stream"));
  DF_ASSIGN_OR_RETURN(const uint64_t need, still_needed(mode == "stream"));
  const uint64_t margin = SpaceMargin(mode == "stream" ? need : full_bytes);
  if (!o.skip_space_check && free_bytes < need + margin) {
    return Status::Error("setup: not enough disk space on " + dir + " for a " + mode +
                         " install: " + std::to_string(free_bytes) + " bytes (" +
                         HumanBytes(free_bytes) + ") free, " + std::to_string(need) + " bytes (" +
                         HumanBytes(need) + ") still to download + " + HumanBytes(margin) +
                         " margin" + (mode == "full" ? "; `--stream` needs only the spine" : "") +
                         " (--skip-space-check downloads anyway)");
  }
  DF_RETURN_IF_ERROR(m.Save(dir));

  // ---- downloads: metadata, then shards ----
  std::vector<size_t> metadata, shards;
  for (size_t i = 0; i < m.files.size(); ++i) {
    (IsSafetensorsFile(m.files[i].path) ? shards : metadata).push_back(i);
  }
  // Spine first: shards without routed experts before those with them (listing order otherwise).
  auto has_experts = [&](size_t i) {
    auto it = plan.layouts.find(m.files[i].path);
    return it != plan.layouts.end() && !it->second.experts.empty();
  };
  std::stable_sort(shards.begin(), shards.end(),
                   [&](size_t a, size_t b) { return !has_experts(a) && has_experts(b); });
  Progress progress(mode == "full" ? "download" : "download (spine)", need);
  std::mutex manifest_mu;
  auto fetch = [&](size_t i) -> Status {
    ManifestFile& f = m.files[i];
    const std::string url = net::ResolveUrl(http.endpoint, repo, m.commit, f.path);
    const std::string dest = (fs::path(dir) / f.path).string();
    if (settled(f)) return Status::Ok();
    auto it = plan.layouts.find(f.path);
    // A shard with experts in a stream install is sparse, also when an earlier run renamed it
    // into place but stopped before recording that (the experts' bytes are then fetched again).
    const bool sparse = mode == "stream" && it != plan.layouts.end() && !it->second.experts.empty();
    std::string state = "complete";
    if (sparse) {
      state = "sparse";
      if (!InPlace(dir, f)) {
        DF_RETURN_IF_ERROR(InstallSparseShard(client, url, dest, it->second, &progress));
      }
    } else {
      bool fetched = false;
      DownloadTarget t{url, dest, f.size, f.sha256, f.blob_id};
      DF_RETURN_IF_ERROR(DownloadFile(client, t, &progress, &fetched));
    }
    std::lock_guard<std::mutex> lock(manifest_mu);
    f.state = state;
    return m.Save(dir);
  };
  for (size_t i : metadata) DF_RETURN_IF_ERROR(fetch(i));
  DF_RETURN_IF_ERROR(Parallel(shards.size(), o.jobs, [&](size_t k) { return fetch(shards[k]); }));
  progress.Finish();
  if (mode == "stream" && !token.token.empty() && token.source == "--token") {
    DF_RETURN_IF_ERROR(
        WriteFileDurably((fs::path(StateDir(dir)) / "token").string(), token.token + "\n", 0600));
  }
  m.complete = true;
  DF_RETURN_IF_ERROR(m.Save(dir));
  LogInfo("setup: " + mode + " install of " + repo + " at commit " + m.commit + " complete in " +
          dir);
  return Status::Ok();
}

Status RunFetchExpertsAll(const std::string& model_dir, const std::string& token_flag,
                          int max_connections) {
  DF_ASSIGN_OR_RETURN(InstallKind kind, InspectInstall(model_dir));
  if (kind == InstallKind::kPlainFolder) {
    return Status::Error(model_dir + ": not a deltafin install (run `deltafin setup` first)");
  }
  if (kind == InstallKind::kFull) {
    LogInfo("fetch-experts-all: " + model_dir + " is already a full install; nothing to do");
    return Status::Ok();
  }
  StreamOptions so;
  so.token_flag = token_flag;
  so.max_connections = max_connections;
  DF_ASSIGN_OR_RETURN(auto store, StreamStore::Open(model_dir, so));
  DF_RETURN_IF_ERROR(store->FetchAll());
  LogInfo("fetch-experts-all: " + model_dir + " is now a full install (" +
          std::to_string(store->fetched_experts()) + " experts fetched, every shard verified)");
  return Status::Ok();
}

}  // namespace deltafin::setup
