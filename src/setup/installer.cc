#include "setup/installer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "base/byte_size.h"
#include "base/log.h"
#include "io/sha256.h"
#include "net/hf_hub.h"
#include "setup/crash_point.h"
#include "setup/downloader.h"
#include "setup/drive_copies.h"
#include "setup/hash.h"
#include "setup/manifest.h"
#include "setup/progress.h"
#include "setup/shard_layout.h"
#include "setup/stream_store.h"
#include "weights/config.h"
#include "weights/placement.h"

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

// DIR/.deltafin exists; a file can be created in it.
Status CheckWritable(const std::string& dir) {
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
  CrashPoint("before-rename", dest);
  if (::rename(partial.c_str(), dest.c_str()) != 0) {
    return Status::Error(dest + ": cannot rename into place: " + std::strerror(errno));
  }
  SyncDirectory(fs::path(dest).parent_path().string());
  CrashPoint("after-rename", dest);
  return Status::Ok();
}

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

// The directories setup created for this run (the install folder, missing parents, .deltafin),
// so that a run that fails before its plan is saved can leave the disk as it found it. Only
// directories that are still empty are removed (rmdir semantics), so nothing a user put there is
// touched.
class CreatedDirs {
 public:
  // Creates `dir` and its missing parents, remembering which of them did not exist.
  Status Create(const fs::path& dir) {
    std::vector<fs::path> missing;
    std::error_code ec;
    for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
      missing.push_back(p);
      if (p == p.parent_path()) break;
    }
    fs::create_directories(dir, ec);
    created_.insert(created_.end(), missing.begin(), missing.end());  // deepest first
    if (ec) return Status::Error(dir.string() + ": cannot create: " + ec.message());
    return Status::Ok();
  }
  // Removes the created directories that are empty, deepest first.
  void RemoveEmpty() {
    for (const auto& p : created_) {
      std::error_code ec;
      fs::remove(p, ec);  // fails, harmlessly, on a directory that is not empty
    }
    created_.clear();
  }

 private:
  std::vector<fs::path> created_;
};

// What the request and the endpoint say, before any byte of the model is written.
struct Preflight {
  std::optional<Manifest> existing;
  std::string repo, revision;
  net::TokenChoice token;
  std::string endpoint;
  std::unique_ptr<net::HttpClient> client;
  net::HubRepoInfo info;
};

// What will be downloaded: the manifest (saved once planned) and the shard headers.
struct Plan {
  Manifest manifest;
  std::map<std::string, ShardLayout> layouts;  // stream: headers of shards with experts
  uint64_t need = 0;                           // bytes still to download
};

bool Settled(const std::string& dir, const ManifestFile& f) {
  return (f.state == "complete" || f.state == "verified" || f.state == "sparse" ||
          f.state == "placed") &&
         InPlace(dir, f);
}

// No network: which repository and revision, and whether an existing install allows them.
Status ResolveRequest(const SetupOptions& o, Preflight* p) {
  DF_ASSIGN_OR_RETURN(p->existing, Manifest::Load(o.model_dir));
  const std::optional<Manifest>& existing = p->existing;
  p->repo = !o.repo.empty() ? o.repo : existing ? existing->repo : net::kDefaultRepo;
  p->revision = !o.revision.empty() ? o.revision
                : existing          ? existing->revision
                                    : net::kDefaultRevision;
  DF_RETURN_IF_ERROR(net::CheckRepoId(p->repo));
  DF_RETURN_IF_ERROR(net::CheckRevision(p->revision));
  if (existing && (existing->repo != p->repo || existing->revision != p->revision)) {
    return Status::Error(o.model_dir + " already holds " + existing->repo + " at " +
                         existing->revision + "; choose another --model-dir for " + p->repo +
                         " at " + p->revision);
  }
  return Status::Ok();
}

// Preflight: the folder is writable, the endpoint answers with a file list whose names pass the
// checks, and the token is accepted for file downloads (one byte of the largest file, through the
// same redirects as the real download).
Status RunPreflight(const SetupOptions& o, Preflight* p, CreatedDirs* created) {
  const std::string& dir = o.model_dir;
  DF_RETURN_IF_ERROR(created->Create(StateDir(dir)));
  DF_RETURN_IF_ERROR(CheckWritable(dir));
  p->token = net::ResolveToken(o.token_flag);
  net::HttpOptions http;
  http.endpoint =
      net::EndpointFromEnvironment(p->existing ? p->existing->endpoint : net::kDefaultEndpoint);
  http.token = p->token.token;
  http.max_connections = o.max_connections;
  http.max_attempts = o.max_attempts;
  p->endpoint = http.endpoint;
  p->client = std::make_unique<net::HttpClient>(http);
  // A pinned install keeps asking for the commit it started with.
  const std::string ask = p->existing ? p->existing->commit : p->revision;
  auto info = net::FetchRepoInfo(*p->client, p->endpoint, p->repo, ask);
  if (!info.ok()) return info.status().WithContext("setup: cannot list the files of " + p->repo);
  p->info = std::move(*info);
  LogInfo("setup: " + p->repo + " at " + p->revision + " (commit " + p->info.commit + ") from " +
          p->endpoint +
          (p->token.token.empty() ? " (no token)" : " (token from " + p->token.source + ")"));
  CrashPoint("listed");
  const net::HubFile* largest = &p->info.files[0];
  for (const auto& f : p->info.files) {
    if (f.size > largest->size) largest = &f;
  }
  if (largest->size > 0) {
    const std::string url = net::ResolveUrl(p->endpoint, p->repo, p->info.commit, largest->path);
    auto ignore = [](const uint8_t*, size_t, uint64_t) { return Status::Ok(); };
    DF_RETURN_IF_ERROR(p->client->GetRange(url, 0, 1, ignore).WithContext("setup: preflight"));
  }
  return Status::Ok();
}

// Free space each drive keeps beyond the copies (as spread).
constexpr uint64_t kDriveReserveBytes = 64ull << 20;

// setup --drive, before anything is downloaded: the folders are usable drives and, on a first
// run, can hold the copies asked for (a resumed run checks again, counting the copies it made,
// before the experts' phase).
Status CheckDriveSpace(const SetupOptions& o, const Plan& plan) {
  const std::string& dir = o.model_dir;
  Placement p;
  std::vector<std::string> warnings;
  DF_ASSIGN_OR_RETURN(std::vector<int> given, AddDrives(dir, o.drives, &p, &warnings));
  if (std::filesystem::exists(PlacementPath(dir))) return Status::Ok();
  // Every expert of the planned shards, in any order (no copy exists yet).
  std::vector<std::optional<ExpertPlace>> where;
  uint64_t headers = 0;
  for (const auto& [name, layout] : plan.layouts) {
    headers += (layout.header.size() + 4095) / 4096 * 4096;
    for (const auto& x : layout.experts) where.emplace_back(ExpertPlace{0, x.offset, x.bytes});
  }
  p.copies.assign(where.size(), 0);
  return AssignCopies(p, where, given, o.copies, headers, kDriveReserveBytes).status();
}

// Plan: the mode (auto: full when the free disk covers the model), the shard headers, the bytes
// still to download against the free disk; saves the manifest.
Result<Plan> MakePlan(const SetupOptions& o, const Preflight& p) {
  const std::string& dir = o.model_dir;
  Plan plan;
  Manifest& m = plan.manifest;
  m.endpoint = p.endpoint;
  m.repo = p.repo;
  m.revision = p.revision;
  m.commit = p.info.commit;
  m.drives = o.drives;
  m.copies = o.drives.empty() ? 0 : o.copies;
  const bool drives = !o.drives.empty();
  uint64_t full_bytes = 0;
  for (const auto& f : p.info.files) {
    ManifestFile mf{f.path, f.size, f.sha256, f.blob_id, "planned"};
    if (p.existing) {
      if (const ManifestFile* old = p.existing->Find(f.path)) mf.state = old->state;
    }
    full_bytes += f.size;
    m.files.push_back(std::move(mf));
  }
  auto still_needed = [&](bool stream) {
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
  // Shard headers (two small ranged GETs each): a stream install needs them to know its resident
  // bytes; a full install uses them to fetch spine shards before expert shards, and both find a
  // malformed header before the bulk download. Full mode skips files already in place (all
  // verified); stream mode re-reads those it did not record as settled (they may be sparse).
  auto fetch_layouts = [&](bool stream) -> Status {
    for (const auto& f : m.files) {
      if (!IsSafetensorsFile(f.path) || (stream ? Settled(dir, f) : InPlace(dir, f))) continue;
      const std::string url = net::ResolveUrl(p.endpoint, p.repo, m.commit, f.path);
      DF_ASSIGN_OR_RETURN(ShardLayout layout, FetchRemoteLayout(*p.client, url, f.size));
      plan.layouts[f.path] = std::move(layout);
      CrashPoint("header-fetched", f.path);
    }
    return Status::Ok();
  };
  const uint64_t free_bytes = FreeBytes(dir);
  std::string mode = o.mode != "auto" ? o.mode : p.existing ? p.existing->mode : o.mode;
  if (mode == "auto") {
    const uint64_t full_need = still_needed(false);
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
  // With drives the model folder holds what a stream install does: the experts go to the drives.
  const bool sparse = mode == "stream" || drives;
  DF_RETURN_IF_ERROR(fetch_layouts(sparse));
  plan.need = still_needed(sparse);
  if (drives) DF_RETURN_IF_ERROR(CheckDriveSpace(o, plan));
  const uint64_t margin = SpaceMargin(sparse ? plan.need : full_bytes);
  if (!o.skip_space_check && free_bytes < plan.need + margin) {
    return Status::Error("setup: not enough disk space on " + dir + " for a " + mode +
                         " install: " + std::to_string(free_bytes) + " bytes (" +
                         HumanBytes(free_bytes) + ") free, " + std::to_string(plan.need) +
                         " bytes (" + HumanBytes(plan.need) + ") still to download + " +
                         HumanBytes(margin) + " margin" +
                         (mode == "full" ? "; `--stream` needs only the spine" : "") +
                         " (--skip-space-check downloads anyway)");
  }
  DF_RETURN_IF_ERROR(m.Save(dir));
  return plan;
}

// setup --drive, once every shard is in place (expert shards sparse): downloads each expert once
// and writes it to its drives (setup/drive_copies.h), shards `--jobs` at a time; each shard is
// then hashed whole against its LFS sha256 and marked "placed".
Status PlaceExperts(const SetupOptions& o, const Preflight& pf, Plan& plan) {
  const std::string& dir = o.model_dir;
  Manifest& m = plan.manifest;
  DF_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  DF_ASSIGN_OR_RETURN(PlacementModel identity, DescribePlacementModel(dir));
  DF_ASSIGN_OR_RETURN(std::optional<Placement> loaded, LoadPlacement(dir, identity));
  const int64_t L = config.num_hidden_layers, E = config.num_experts;
  Placement p;
  if (loaded) {
    p = std::move(*loaded);
  } else {
    p.model = identity;
    p.num_layers = L;
    p.num_experts = E;
    p.copies.assign(static_cast<size_t>(L * E), 0);  // the model folder holds none
    p.sha256.assign(static_cast<size_t>(L * E), "");
  }
  if (p.num_layers != L || p.num_experts != E) {
    return Status::Error("placement " + PlacementPath(dir) +
                         " does not match config.json's layers and experts; remove it");
  }
  // Every shard's layout from its local header (all are in place), experts keyed like p.
  std::vector<ShardLayout> layouts;
  std::vector<std::optional<ExpertPlace>> where(static_cast<size_t>(L * E));
  std::vector<CopyWriter::ShardFile> shard_files;
  uint64_t headers = 0;
  for (const auto& sh : identity.shards) {
    const std::string path = (fs::path(dir) / sh.name).string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::Error("cannot open " + path + ": " + std::strerror(errno));
    auto layout = ReadLocalLayout(fd, sh.size, path);
    ::close(fd);
    if (!layout.ok()) return layout.status();
    DF_RETURN_IF_ERROR(
        RecordExpertPlaces(*layout, static_cast<int>(layouts.size()), L, E, path, &where));
    headers += (layout->header.size() + 4095) / 4096 * 4096;
    shard_files.push_back({sh.name, layout->file_size, layout->header});
    layouts.push_back(std::move(*layout));
  }
  std::vector<std::string> warnings;
  DF_ASSIGN_OR_RETURN(std::vector<int> given, AddDrives(dir, m.drives, &p, &warnings));
  DF_ASSIGN_OR_RETURN(auto jobs,
                      AssignCopies(p, where, given, m.copies, headers, kDriveReserveBytes));
  std::vector<uint32_t> want(where.size(), 0);  // drive bits still to write, per expert
  uint64_t to_fetch = 0;
  for (const auto& [key, drive] : jobs) {
    if (want[key] == 0) to_fetch += where[key]->bytes;
    want[key] |= 1u << drive;
  }
  CopyWriter writer(dir, &p, std::move(shard_files));
  std::mutex mu;  // writer, p, m
  Progress progress("download (experts to " + std::to_string(given.size()) + " drive" +
                        (given.size() == 1 ? "" : "s") + ")",
                    to_fetch);

  auto place_shard = [&](int s) -> Status {
    const std::string& name = identity.shards[static_cast<size_t>(s)].name;
    const ShardLayout& layout = layouts[static_cast<size_t>(s)];
    const std::string path = (fs::path(dir) / name).string();
    const std::string url = net::ResolveUrl(pf.endpoint, pf.repo, m.commit, name);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::Error("cannot open " + path + ": " + std::strerror(errno));
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    // The whole file in order: spine ranges from the model folder, experts as downloaded (or,
    // recorded by an earlier run, read back from a drive that holds them).
    Hasher whole(Hasher::Kind::kSha256, layout.file_size);
    std::vector<uint8_t> buf;
    size_t r = 0, x = 0;
    while (r < layout.resident.size() || x < layout.experts.size()) {
      if (x == layout.experts.size() ||
          (r < layout.resident.size() && layout.resident[r].first < layout.experts[x].offset)) {
        const auto [begin, end] = layout.resident[r++];
        for (uint64_t at = begin; at < end;) {
          const uint64_t n = std::min<uint64_t>(end - at, 8ull << 20);
          buf.resize(n);
          DF_RETURN_IF_ERROR(PreadAll(fd, buf.data(), n, at, path));
          whole.Update(buf.data(), n);
          at += n;
        }
        continue;
      }
      const ExpertSpan& span = layout.experts[x++];
      const auto key = static_cast<size_t>(span.layer * E + span.expert);
      const ExpertPlace& at = *where[key];
      buf.resize(at.bytes);
      uint32_t todo = 0, have = 0;
      std::string recorded;
      {
        std::lock_guard<std::mutex> lock(mu);
        todo = want[key] & ~p.copies[key];
        have = p.copies[key] & ~1u;
        recorded = p.sha256[key];
      }
      bool fetched = false;
      if (todo == 0 && have != 0) {
        const int d = __builtin_ctz(have);
        const std::string copy = p.drives[static_cast<size_t>(d - 1)] + "/" + name;
        const int cfd = ::open(copy.c_str(), O_RDONLY | O_CLOEXEC);
        if (cfd < 0) return Status::Error("cannot open " + copy + ": " + std::strerror(errno));
        const Status read = PreadAll(cfd, buf.data(), at.bytes, at.offset, copy);
        ::close(cfd);
        DF_RETURN_IF_ERROR(read);
        if (Sha256Hex(buf.data(), buf.size()) != recorded) {
          return Status::Error(copy + ": the recorded copy of layer " + std::to_string(span.layer) +
                               " expert " + std::to_string(span.expert) +
                               " reads back differently from when it was written: the drive is "
                               "failing");
        }
      } else {
        auto sink = [&](const uint8_t* d, size_t n, uint64_t off) -> Status {
          if (off + n > at.bytes) return Status::Error(url + ": more bytes than asked for");
          std::memcpy(buf.data() + off, d, n);
          return Status::Ok();
        };
        DF_RETURN_IF_ERROR(pf.client->GetRange(url, at.offset, at.bytes, sink, "", nullptr,
                                               [&](uint64_t d) { progress.Add(d); }));
        fetched = true;
      }
      whole.Update(buf.data(), buf.size());
      if (fetched) {
        const std::string sha = Sha256Hex(buf.data(), buf.size());
        std::lock_guard<std::mutex> lock(mu);
        for (uint32_t bits = todo; bits != 0; bits &= bits - 1) {
          DF_RETURN_IF_ERROR(writer.Write(key, __builtin_ctz(bits), at, buf.data(), sha));
        }
        if (writer.pending() >= kCopyBatchExperts || writer.pending_bytes() >= kCopyBatchBytes) {
          DF_RETURN_IF_ERROR(writer.Commit());
        }
      }
    }
    const std::string digest = whole.HexDigest();
    std::lock_guard<std::mutex> lock(mu);
    if (writer.pending() > 0) DF_RETURN_IF_ERROR(writer.Commit());
    ManifestFile* f = m.Find(name);
    if (f != nullptr && !f->sha256.empty() && digest != f->sha256) {
      // Forget the shard's copies: a rerun downloads them again.
      for (const auto& span : layout.experts) {
        const auto key = static_cast<size_t>(span.layer * E + span.expert);
        p.copies[key] = 0;
        p.sha256[key].clear();
      }
      DF_RETURN_IF_ERROR(SavePlacement(dir, p));
      return Status::Error(path +
                           ": sha256 mismatch of the whole file, read from the model folder "
                           "and the drives (got " +
                           digest + ", the repository lists " + f->sha256 +
                           "); its experts' copies are forgotten: run setup again");
    }
    if (f != nullptr) f->state = "placed";
    return m.Save(dir);
  };
  std::vector<int> todo;
  for (size_t s = 0; s < identity.shards.size(); ++s) {
    const ManifestFile* f = m.Find(identity.shards[s].name);
    if (!layouts[s].experts.empty() && (f == nullptr || f->state != "placed")) {
      todo.push_back(static_cast<int>(s));
    }
  }
  DF_RETURN_IF_ERROR(Parallel(todo.size(), o.jobs, [&](size_t i) { return place_shard(todo[i]); }));
  progress.Finish();
  // A model whose shards were all placed by an earlier run still gets its placement file.
  if (!loaded && todo.empty()) DF_RETURN_IF_ERROR(SavePlacement(dir, p));
  for (const auto& w : warnings) LogInfo("setup: " + w);
  return Status::Ok();
}

// Transfer: metadata files one by one, then shards `--jobs` at a time, spine first; the manifest
// records each file as it lands and is marked complete last.
Status Transfer(const SetupOptions& o, const Preflight& p, Plan& plan) {
  const std::string& dir = o.model_dir;
  Manifest& m = plan.manifest;
  net::HttpClient& client = *p.client;
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
  const bool drives = !m.drives.empty();
  Progress progress(m.mode == "full" && !drives ? "download" : "download (spine)", plan.need);
  std::mutex manifest_mu;
  auto fetch = [&](size_t i) -> Status {
    ManifestFile& f = m.files[i];
    const std::string url = net::ResolveUrl(p.endpoint, p.repo, m.commit, f.path);
    const std::string dest = (fs::path(dir) / f.path).string();
    if (Settled(dir, f)) return Status::Ok();
    auto it = plan.layouts.find(f.path);
    // A shard with experts in a stream install is sparse, also when an earlier run renamed it
    // into place but stopped before recording that (the experts' bytes are then fetched again).
    const bool sparse =
        (m.mode == "stream" || drives) && it != plan.layouts.end() && !it->second.experts.empty();
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
  if (drives) DF_RETURN_IF_ERROR(PlaceExperts(o, p, plan));
  if (m.mode == "stream" && !p.token.token.empty() && p.token.source == "--token") {
    DF_RETURN_IF_ERROR(
        WriteFileDurably((fs::path(StateDir(dir)) / "token").string(), p.token.token + "\n", 0600));
  }
  CrashPoint("before-complete");
  m.complete = true;
  DF_RETURN_IF_ERROR(m.Save(dir));
  LogInfo("setup: " + m.mode + " install of " + p.repo + " at commit " + m.commit +
          " complete in " + dir);
  return Status::Ok();
}

}  // namespace

Status RunSetup(const SetupOptions& options) {
  SetupOptions o = options;
  const std::string& dir = o.model_dir;
  Preflight p;
  DF_RETURN_IF_ERROR(ResolveRequest(o, &p));
  // --drive: a full install whose experts go to the drives; a rerun without --drive resumes onto
  // the drives the unfinished install recorded.
  if (o.drives.empty() && p.existing && !p.existing->complete && !p.existing->drives.empty()) {
    o.drives = p.existing->drives;
    o.copies = p.existing->copies;
  }
  if (!o.drives.empty()) {
    if (o.copies < 1) return Status::Error("--copies must be at least 1");
    if (o.mode == "stream" || (p.existing && p.existing->mode == "stream")) {
      return Status::Error(
          "--drive places every expert on the drives as setup downloads it, which is a full "
          "install; a stream install fetches experts on first use into the model folder (install "
          "without --stream, or spread a stream install with `deltafin spread` after "
          "`deltafin fetch-experts-all`)");
    }
    if (p.existing && p.existing->mode == "full" && p.existing->drives.empty() &&
        !p.existing->complete) {
      return Status::Error(dir +
                           ": an unfinished full install without --drive is in this folder; "
                           "finish it without --drive, then `deltafin spread` its experts");
    }
    o.mode = "full";
  }
  // A finished install: nothing to do (no network), unless a stream install is asked to be full.
  if (p.existing && p.existing->complete) {
    bool all_there = true;
    for (const auto& f : p.existing->files) all_there = all_there && InPlace(dir, f);
    const bool upgrade = p.existing->mode == "stream" && o.mode == "full";
    if (all_there && !upgrade) {
      LogInfo("setup: " + dir + " already holds a complete " + p.existing->mode + " install of " +
              p.repo + " at commit " + p.existing->commit + "; nothing to do");
      return Status::Ok();
    }
    if (all_there && upgrade) return RunFetchExpertsAll(dir, o.token_flag, o.max_connections);
  }
  if (p.existing && p.existing->mode == "stream" && o.mode == "full") {
    return Status::Error(dir +
                         ": the stream install is unfinished; finish it with `deltafin setup "
                         "--stream` first, then upgrade with `deltafin fetch-experts-all`");
  }
  // Until the plan is saved nothing of the model is on disk; a failure removes the directories
  // this run created (if still empty), so a wrong endpoint or token leaves no trace.
  CreatedDirs created;
  Status s = RunPreflight(o, &p, &created);
  Result<Plan> plan = s.ok() ? MakePlan(o, p) : Result<Plan>(s);
  if (!plan.ok()) {
    created.RemoveEmpty();
    return plan.status();
  }
  return Transfer(o, p, *plan);
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
