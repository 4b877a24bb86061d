// Setup under faults (docs/RELIABILITY.md §Setup under faults): `deltafin setup`, stream installs'
// expert fetches and `fetch-experts-all` against the local hub (e2e/local_hub.h) while things go
// wrong: kill -9 at sixteen points of a full install, a stream install, a decode that fetches
// experts and an upgrade; a proxy flipping a byte, once and for good; a disk that fills up;
// 429 with Retry-After and 5xx; an endpoint nobody listens on. The invariant every case checks:
// afterwards `deltafin logits` on the folder either refuses (an unfinished install, with the
// command that finishes it) or gives the source model's logits byte for byte, and rerunning the
// same command after the fault is gone reaches the exact logits.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "e2e/local_hub.h"

extern char** environ;

namespace deltafin::hubtest {
namespace {

constexpr char kPrompt[] = "72,101,108,108,111";
constexpr char kSpine[] = "model-00001-of-000009.safetensors";

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

uint64_t SizeOr0(const fs::path& p) {
  std::error_code ec;
  const uint64_t n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

class SetupFaultsTest : public SetupTest {
 protected:
  // The source model's logits for kPrompt: what every finished install must reproduce.
  static const std::string& ReferenceLogits() {
    static const std::string* ref = [] {
      const fs::path out = *root_ / "reference.f32";
      auto run = Deltafin("logits --model " + ShellQuote(Model().string()) + " --tokens " +
                          kPrompt + " --out " + ShellQuote(out.string()));
      EXPECT_EQ(run.exit_code, 0) << run.output;
      return new std::string(ReadAll(out));
    }();
    return *ref;
  }

  enum class Outcome { kExact, kRefused };
  // `deltafin logits` on `model` must give exactly the reference logits or refuse with one error;
  // which of the two is `want`. A folder with a manifest must be refused as unfinished.
  void ExpectOutcome(const fs::path& model, Outcome want, const std::string& after) {
    const fs::path out = dir_ / "logits.f32";
    fs::remove(out);
    auto run = Deltafin("logits --model " + ShellQuote(model.string()) + " --tokens " + kPrompt +
                        " --out " + ShellQuote(out.string()));
    if (run.exit_code == 0) {
      EXPECT_EQ(want, Outcome::kExact) << "after " << after << ": logits of an unfinished install";
      ASSERT_EQ(ReadAll(out).size(), ReferenceLogits().size()) << after;
      EXPECT_TRUE(ReadAll(out) == ReferenceLogits()) << "after " << after << ": logits differ";
      return;
    }
    EXPECT_EQ(want, Outcome::kRefused) << "after " << after << ": " << run.output;
    EXPECT_EQ(run.exit_code, 1) << after << ": " << run.output;
    EXPECT_EQ(run.output.rfind("error: ", 0), 0u) << after << ": " << run.output;
    EXPECT_FALSE(fs::exists(out)) << after;
    if (fs::exists(model / ".deltafin/manifest.json")) {
      EXPECT_NE(run.output.find("is unfinished; run `deltafin setup"), std::string::npos)
          << after << ": " << run.output;
    }
  }

  // Runs `deltafin <args>` with DELTAFIN_CRASH_AT=point: it must die by SIGKILL there.
  void CrashAt(const std::string& args, const std::string& point) {
    auto run = Deltafin(args, kToken, true, "DELTAFIN_CRASH_AT=" + ShellQuote(point));
    EXPECT_EQ(run.exit_code, 128 + SIGKILL)
        << "crash point " << point << " not reached: " << run.output;
    ++kills_;
  }

  // Starts `deltafin <args>`, waits (60 s at most) until `reached()`, then kill -9s it; it must
  // still have been running.
  void KillWhen(const std::string& args, const std::function<bool()>& reached,
                const std::string& what) {
    const fs::path log = dir_ / "killed.log";
    const std::string cmd = "exec " + Env(kToken) + " " + ShellQuote(DF_BINARY) + " " + args +
                            " > " + ShellQuote(log.string()) + " 2>&1";
    pid_t pid = 0;
    const char* argv[] = {"sh", "-c", cmd.c_str(), nullptr};
    ASSERT_EQ(::posix_spawnp(&pid, "sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    bool ok = false;
    while (!(ok = reached()) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(ok) << what << " never happened: " << ReadAll(log);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "finished before the kill at " << what << ": " << ReadAll(log);
    ++kills_;
  }

  static void Throttle(const std::string& path, int bytes_per_second) {
    SetRules({{{"id", "slow"},
               {"port", "cdn"},
               {"path", path},
               {"action", "rate"},
               {"bytes_per_second", bytes_per_second},
               {"times", -1}}});
  }

  int kills_ = 0;
};

// Eight kill points over a full install: while it lists the repository, just after the index file
// was renamed into place, between a manifest's temp file and its rename, 1 MB into the spine shard
// (throttled to 3 MB/s), between the verified spine's fdatasync and its rename, inside an expert
// shard with another already in place, just after the last shard's rename, and before the
// manifest is marked complete. After each: logits refused; at the end: the exact logits.
TEST_F(SetupFaultsTest, FullInstallSurvivesKillNineAtEightPoints) {
  const fs::path m = dir_ / "m";
  const std::string args = SetupArgs("--full", m) + " --jobs 2";
  auto refused = [&](const std::string& after) { ExpectOutcome(m, Outcome::kRefused, after); };
  CrashAt(args, "listed");
  EXPECT_FALSE(fs::exists(m / ".deltafin/manifest.json"));
  refused("a kill while listing");
  CrashAt(args, "after-rename:model.safetensors.index.json");
  EXPECT_TRUE(fs::exists(m / "model.safetensors.index.json"));
  refused("a kill after the index's rename");
  CrashAt(args, "durable-before-rename:manifest.json#3");
  EXPECT_TRUE(fs::exists(m / ".deltafin/manifest.json.tmp"));
  refused("a kill between a manifest's temp file and its rename");

  ThrottleShards();
  KillWhen(
      args, [&] { return SizeOr0(m / (std::string(kSpine) + ".partial")) >= 1000000; },
      "1 MB into the spine shard");
  refused("a kill 1 MB into the spine shard");
  SetRules(nlohmann::json::array());
  CrashAt(args, std::string("before-rename:") + kSpine);
  EXPECT_EQ(SizeOr0(m / (std::string(kSpine) + ".partial")), SizeOr0(Model() / kSpine));
  EXPECT_FALSE(fs::exists(m / kSpine));
  refused("a kill between the spine's fdatasync and its rename");

  // Expert shards (1.25 MB) at 500 KB/s: nginx sends the first 500 KB at once, the rest over 1.5 s.
  Throttle(".safetensors", 500000);
  auto expert_shard_midway = [&] {
    int done = 0;
    bool midway = false;
    for (int i = 2; i <= 9; ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05d-of-000009.safetensors", i);
      done += fs::exists(m / name);
      midway |= SizeOr0(m / (std::string(name) + ".partial")) >= 600000;
    }
    return done >= 1 && midway;
  };
  KillWhen(args, expert_shard_midway, "inside an expert shard with another in place");
  refused("a kill inside an expert shard");
  SetRules(nlohmann::json::array());
  CrashAt(args, "after-rename:model-00009-of-000009");
  refused("a kill after the last shard's rename");
  CrashAt(args, "before-complete");
  refused("a kill before the manifest was marked complete");

  EXPECT_EQ(kills_, 8);
  auto run = Deltafin(args);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ExpectSameFiles(m);
  for (const auto& e : fs::recursive_directory_iterator(m)) {
    EXPECT_EQ(e.path().string().find(".partial"), std::string::npos) << e.path() << " left over";
  }
  ExpectOutcome(m, Outcome::kExact, "the resumed full install");
}

// Eight kill points over a stream install and its use: during the shard-header phase, before and
// after a sparse shard's rename, inside the spine shard (throttled); then, on the finished install,
// while a decode's expert fetch is in flight (throttled), between an expert's pwrite and its log
// record; then during fetch-experts-all (an expert stored but not logged; a manifest write). After
// each: refused while unfinished, the exact logits once finished; at the end a full install, exact.
TEST_F(SetupFaultsTest, StreamInstallDecodeAndUpgradeSurviveKillNineAtEightPoints) {
  const fs::path s = dir_ / "s";
  const std::string args = SetupArgs("--stream", s);
  auto refused = [&](const std::string& after) { ExpectOutcome(s, Outcome::kRefused, after); };
  auto exact = [&](const std::string& after) { ExpectOutcome(s, Outcome::kExact, after); };
  // The spine shard (whole, verified) is throttled to 1 MB/s throughout, so the sparse shards
  // (just their headers: the tiny model's expert shards hold only experts) are renamed while it
  // downloads, and each crash run adds only a megabyte or two to its 15.9 MB.
  Throttle(".safetensors", 1000000);
  CrashAt(args, "header-fetched:model-00005");
  refused("a kill while fetching shard headers");
  CrashAt(args, "before-rename:model-00004-of-000009");
  refused("a kill before a sparse shard's rename");
  CrashAt(args, "after-rename:model-00006-of-000009");
  refused("a kill after a sparse shard's rename");
  const fs::path spine_partial = s / (std::string(kSpine) + ".partial");
  const uint64_t spine_before = SizeOr0(spine_partial);
  KillWhen(
      args, [&] { return SizeOr0(spine_partial) >= spine_before + 1000000; },
      "1 MB further into the spine shard");
  EXPECT_LT(SizeOr0(spine_partial), SizeOr0(Model() / kSpine));
  refused("a kill inside the spine shard of a stream install");
  SetRules(nlohmann::json::array());
  auto run = Deltafin(args);
  ASSERT_EQ(run.exit_code, 0) << run.output;

  // Decode: every expert comes from the CDN at 8 KB/s (an expert is 19,584 bytes; nginx sends the
  // first second's worth at once), so each takes over a second and the kill lands while the
  // fetches of the layer after the first one recorded are in flight.
  const std::string logits = "logits --model " + ShellQuote(s.string()) + " --tokens " + kPrompt +
                             " --out " + ShellQuote((dir_ / "killed.f32").string());
  Throttle("model-0000", 8000);
  KillWhen(
      logits, [&] { return SizeOr0(s / ".deltafin/experts.log") >= 16; },
      "an expert fetch in flight during decode");
  const uint64_t logged = SizeOr0(s / ".deltafin/experts.log");
  EXPECT_GT(logged, 0u);
  // The proxy saw an expert's response cut off by the kill (it logs it once its next write
  // fails): the kill landed while bytes were on the wire.
  auto cut_expert = [&] {
    for (const auto& r : ProxyLog()) {
      if (r["port"] == "cdn" && r["range"].get<std::string>().rfind("bytes=", 0) == 0 &&
          r["sent"].get<uint64_t>() < 19584) {
        return true;
      }
    }
    return false;
  };
  const auto cut_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!cut_expert() && std::chrono::steady_clock::now() < cut_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(cut_expert()) << "no expert transfer was in flight at the kill";
  SetRules(nlohmann::json::array());
  CrashAt(logits, "expert-stored#3");
  EXPECT_EQ(SizeOr0(s / ".deltafin/experts.log"), logged) << "experts were logged before the kill";
  exact("kills during decode's expert fetches");

  const std::string upgrade = "fetch-experts-all --model-dir " + ShellQuote(s.string());
  CrashAt(upgrade, "expert-stored#50");
  exact("a kill during fetch-experts-all");
  CrashAt(upgrade, "durable-before-rename:manifest.json");
  exact("a kill while fetch-experts-all recorded a verified shard");
  EXPECT_EQ(kills_, 8);
  run = Deltafin(upgrade);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ExpectSameFiles(s);
  EXPECT_NE(ReadAll(s / ".deltafin/manifest.json").find("\"mode\": \"full\""), std::string::npos);
  exact("the resumed upgrade");
}

// A byte flipped once is caught by the sha256 and the file fetched again; flipped every time, the
// second mismatch is a clear error, the corrupt bytes are deleted, and nothing wrong is in place.
TEST_F(SetupFaultsTest, CorruptByteIsFetchedAgainOnceThenAClearErrorAndNeverUsed) {
  const std::string shard = "model-00003-of-000009.safetensors";
  const fs::path m = dir_ / "m";
  SetRules({{{"id", "flip"},
             {"port", "cdn"},
             {"path", shard},
             {"action", "corrupt"},
             {"at", 1000000},
             {"times", -1}}});
  const size_t before = ProxyLog().size();
  auto run = Deltafin(SetupArgs("--full", m) + " --jobs 1");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(Count(run.output, "sha256 mismatch"), 2) << run.output;
  EXPECT_NE(run.output.find("downloading it again"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("failed its check twice"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(m / shard));
  EXPECT_FALSE(fs::exists(m / (shard + ".partial")));
  // Exactly two whole-file downloads of that shard from the CDN (besides its header's two small
  // reads).
  const auto log = ProxyLog();
  int whole = 0;
  for (size_t i = before; i < log.size(); ++i) {
    whole += log[i]["port"] == "cdn" &&
             log[i]["path"].get<std::string>().find(shard) != std::string::npos &&
             log[i]["range"] == "bytes=0-" + std::to_string(SizeOr0(Model() / shard) - 1);
  }
  EXPECT_EQ(whole, 2);
  ExpectOutcome(m, Outcome::kRefused, "a persistently corrupted shard");
  SetRules(nlohmann::json::array());
  run = Deltafin(SetupArgs("--full", m));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ExpectSameFiles(m);
  ExpectOutcome(m, Outcome::kExact, "the corruption stopped");
}

// A disk that fills up: an 8 MiB tmpfs. The preflight refuses with the numbers and leaves nothing;
// forced past it, the full disk mid-file is a clear error with the numbers and nothing wrong is in
// place; once the filesystem is grown to 64 MiB the same command resumes from the partial file.
TEST_F(SetupFaultsTest, DiskFullGivesTheNumbersLeavesNothingWrongAndResumesWhenSpaceIsFreed) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root (CI runs as root)";
  const fs::path mnt = dir_ / "tmpfs";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=8m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "): the disk-full case needs a mount namespace that allows it";
  }
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  auto pre = Deltafin(SetupArgs("--full", mnt / "m"));
  EXPECT_EQ(pre.exit_code, 1) << pre.output;
  EXPECT_NE(pre.output.find("not enough disk space"), std::string::npos) << pre.output;
  EXPECT_NE(pre.output.find(" free, "), std::string::npos) << pre.output;
  EXPECT_NE(pre.output.find("still to download"), std::string::npos) << pre.output;
  EXPECT_FALSE(fs::exists(mnt / "m")) << "the refused run left the folder it created";

  const std::string args = SetupArgs("--full", mnt / "m") + " --skip-space-check --jobs 1";
  auto run = Deltafin(args);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("the disk is full"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("bytes free"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("more. Free some space"), std::string::npos) << run.output;
  for (const auto& e : fs::directory_iterator(mnt / "m")) {
    const fs::path source = Model() / e.path().filename();
    if (fs::exists(source)) {
      EXPECT_TRUE(ReadAll(e.path()) == ReadAll(source)) << e.path() << " is in place but wrong";
    }
  }
  EXPECT_FALSE(fs::exists(mnt / "m" / kSpine));
  const uint64_t partial = SizeOr0(mnt / "m" / (std::string(kSpine) + ".partial"));
  EXPECT_GT(partial, 0u);
  ExpectOutcome(mnt / "m", Outcome::kRefused, "a full disk");

  ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT, "size=64m"), 0)
      << std::strerror(errno);
  auto resumed = Deltafin(args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming " + (mnt / "m" / kSpine).string() + " at byte " +
                                std::to_string(partial)),
            std::string::npos)
      << resumed.output;
  ExpectSameFiles(mnt / "m");
  ExpectOutcome(mnt / "m", Outcome::kExact, "the disk was grown");
}

// 429 with Retry-After and 503: waited out (Retry-After over the shorter backoff), then the
// install completes exactly. Persistent: a clear error after --retries attempts with the time
// spent; a Retry-After beyond 300 s is an error at once.
TEST_F(SetupFaultsTest, RetryAfterAnd5xxAreWaitedOutThenAClearError) {
  const fs::path m = dir_ / "m";
  SetRules({{{"id", "api429"},
             {"port", "hub"},
             {"path", "/api/models/"},
             {"action", "status"},
             {"status", 429},
             {"retry_after", "2"},
             {"times", 1}},
            {{"id", "shard503"},
             {"port", "cdn"},
             {"path", "model-00002-of"},
             {"action", "status"},
             {"status", 503},
             {"times", 2}}});
  auto start = std::chrono::steady_clock::now();
  auto run = Deltafin(SetupArgs("--full", m));
  const double transient_s = SecondsSince(start);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("HTTP 429 Too Many Requests; retrying in 2.0 s"), std::string::npos)
      << run.output;
  EXPECT_EQ(Count(run.output, "HTTP 503; retrying in"), 2) << run.output;
  EXPECT_GE(transient_s, 2.0 + 0.5 + 1.0);
  ExpectOutcome(m, Outcome::kExact, "transient 429 and 503");

  // Persistent 503 on the listing: three attempts (0.5 s, then 1 s apart), one error line, and the
  // folder this run created is gone.
  const fs::path fresh = dir_ / "fresh";
  SetRules({{{"port", "hub"},
             {"path", "/api/models/"},
             {"action", "status"},
             {"status", 503},
             {"times", -1}}});
  start = std::chrono::steady_clock::now();
  run = Deltafin(SetupArgs("--full", fresh) + " --retries 3");
  const double persistent_s = SecondsSince(start);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("giving up after 3 attempts over "), std::string::npos) << run.output;
  EXPECT_EQ(Count(run.output, "error: "), 1) << run.output;
  EXPECT_GE(persistent_s, 1.5);
  EXPECT_LT(persistent_s, 30.0);
  EXPECT_FALSE(fs::exists(fresh));

  // A server that asks for more than deltafin waits: an error at once, saying to come back later.
  SetRules({{{"port", "hub"},
             {"path", "/api/models/"},
             {"action", "status"},
             {"status", 429},
             {"retry_after", "3600"},
             {"times", -1}}});
  start = std::chrono::steady_clock::now();
  run = Deltafin(SetupArgs("--full", fresh));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("asks to wait 3600.0 s"), std::string::npos) << run.output;
  EXPECT_LT(SecondsSince(start), 30.0);
  EXPECT_FALSE(fs::exists(fresh));

  // Persistent 503 on a file mid-install (after the plan was saved): a clear error, the install
  // stays unfinished (refused), and the same command finishes it once the server recovers.
  const fs::path mid = dir_ / "mid";
  SetRules({{{"port", "hub"},
             {"path", "generation_config.json"},
             {"action", "status"},
             {"status", 503},
             {"times", -1}}});
  run = Deltafin(SetupArgs("--full", mid) + " --retries 2");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("HTTP 503"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("giving up after 2 failed attempts"), std::string::npos) << run.output;
  EXPECT_TRUE(fs::exists(mid / ".deltafin/manifest.json"));
  ExpectOutcome(mid, Outcome::kRefused, "a file that keeps answering 503");
  SetRules(nlohmann::json::array());
  ASSERT_EQ(Deltafin(SetupArgs("--full", mid)).exit_code, 0);
  ExpectOutcome(mid, Outcome::kExact, "the server recovered");
}

// Nobody listens at the endpoint: one error line within seconds (no backoff), and nothing left:
// the folders setup created are removed, a folder that existed keeps what the user put in it.
TEST_F(SetupFaultsTest, UnreachableEndpointFailsFastWithOneLineAndLeavesNothingBehind) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  ::close(s);  // bound, never listened, closed: connections are refused
  const std::string env = "HF_ENDPOINT=" + endpoint;

  const fs::path nested = dir_ / "a/b/m";
  const auto start = std::chrono::steady_clock::now();
  auto run = Deltafin(SetupArgs("--full", nested), kToken, /*endpoint=*/false, env);
  const double seconds = SecondsSince(start);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(Count(run.output, "\n"), 1) << "not one line: " << run.output;
  EXPECT_EQ(run.output.rfind("error: ", 0), 0u) << run.output;
  EXPECT_NE(run.output.find("cannot reach " + endpoint), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("HF_ENDPOINT"), std::string::npos) << run.output;
  EXPECT_LT(seconds, 5.0) << "retried instead of failing fast";
  EXPECT_FALSE(fs::exists(dir_ / "a")) << "left the folders it created";
  EXPECT_TRUE(fs::exists(dir_));

  // A folder the user made, with a file in it: kept as it was (no .deltafin either).
  const fs::path mine = dir_ / "mine";
  fs::create_directories(mine);
  std::ofstream(mine / "notes.txt") << "mine\n";
  run = Deltafin(SetupArgs("--full", mine), kToken, false, env);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(ReadAll(mine / "notes.txt"), "mine\n");
  EXPECT_FALSE(fs::exists(mine / ".deltafin"));
  // An empty folder the user made stays too (setup did not create it).
  const fs::path empty = dir_ / "empty";
  fs::create_directories(empty);
  run = Deltafin(SetupArgs("--full", empty), kToken, false, env);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(fs::exists(empty));
  EXPECT_TRUE(fs::is_empty(empty));
  // An unfinished install whose endpoint went away: its state is kept for the resume.
  const fs::path partial = dir_ / "partial";
  CrashAt(SetupArgs("--full", partial), "after-rename:config.json");
  const std::string manifest = ReadAll(partial / ".deltafin/manifest.json");
  run = Deltafin(SetupArgs("--full", partial), kToken, false, env);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(Count(run.output, "\n"), 1) << run.output;
  EXPECT_EQ(ReadAll(partial / ".deltafin/manifest.json"), manifest);
  EXPECT_TRUE(fs::exists(partial / "config.json"));
  ExpectOutcome(partial, Outcome::kRefused, "an unreachable endpoint");
}

}  // namespace
}  // namespace deltafin::hubtest
