// End-to-end tests of `deltafin setup`, stream installs and `fetch-experts-all` against real HTTP
// servers on 127.0.0.1 (tests/e2e/hub_fixture.py: nginx serving a generated tiny model as a hub
// repository, LFS files redirected to a second "CDN" server, a fault-injecting proxy in front of
// both; fixture and helpers in e2e/local_hub.h). No test reaches the internet. The fault campaign
// (kill -9 points, corruption, full disk, 429/5xx, unreachable endpoint) is setup_faults_test.cc.
// `setup --drive` (experts placed on drive folders as they download, issue 35) is tested here too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "e2e/local_hub.h"

extern char** environ;

namespace deltafin::hubtest {
namespace {

TEST_F(SetupTest, NoTokenIs401WithHowToProvideOneBeforeAnyLargeDownload) {
  auto run = Deltafin(SetupArgs("--full", dir_ / "m"), "");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("401"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("HF_TOKEN"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--token"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("no token was found"), std::string::npos) << run.output;
  EXPECT_FALSE(AnyDownloadedFile(dir_)) << "a shard was written before auth was checked";
  // A wrong token is refused the same way, with a different hint.
  auto wrong = Deltafin(SetupArgs("--full", dir_ / "m"), "hf_wrong");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.output.find("the token that was sent was refused"), std::string::npos)
      << wrong.output;
  EXPECT_FALSE(AnyDownloadedFile(dir_));
}

TEST_F(SetupTest, AutoFullInstallMatchesTheRepoTokenNeverReachesTheCdnRerunDoesNothing) {
  auto run = Deltafin(SetupArgs("", dir_ / "m"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("setup: full install:"), std::string::npos) << run.output;
  ExpectSameFiles(dir_ / "m");
  const std::string manifest = ReadAll(dir_ / "m/.deltafin/manifest.json");
  EXPECT_NE(manifest.find((*info_)["sha"].get<std::string>()), std::string::npos);
  // Shards were redirected to the CDN; no request there carried the token (the CDN answers 403
  // to any Authorization header, so the install succeeding already says so), and nginx's own log
  // of the CDN shows no Authorization value at all.
  int cdn_requests = 0;
  for (const auto& r : ProxyLog()) {
    if (r["port"] == "cdn") {
      ++cdn_requests;
      EXPECT_FALSE(r["auth"].get<bool>()) << r.dump();
    }
  }
  EXPECT_GE(cdn_requests, 9);
  const std::string cdn_access = ReadAll((*info_)["cdn_access"].get<std::string>());
  EXPECT_EQ(cdn_access.find(kToken), std::string::npos);
  EXPECT_NE(ReadAll((*info_)["hub_access"].get<std::string>()).find(kToken), std::string::npos)
      << "the hub itself must have received the token";
  // The installed model runs like the source.
  EXPECT_EQ(Generate(dir_ / "m"), Generate(Model()));
  // Rerun: nothing to do, no request at all.
  const size_t before = ProxyLog().size();
  auto again = Deltafin(SetupArgs("", dir_ / "m"));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("nothing to do"), std::string::npos) << again.output;
  EXPECT_EQ(ProxyLog().size(), before);
}

TEST_F(SetupTest, MissingFileIs404NamingTheFile) {
  SetRules(
      {{{"path", "generation_config.json"}, {"action", "status"}, {"status", 404}, {"times", -1}}});
  auto run = Deltafin(SetupArgs("--full", dir_ / "m"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("404"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("generation_config.json"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(dir_ / "m/generation_config.json"));
}

TEST_F(SetupTest, DroppedConnectionResumesFromThePartialFile) {
  const std::string shard = "model-00001-of-000009.safetensors";
  SetRules({{{"port", "cdn"}, {"path", shard}, {"action", "drop"}, {"at", 6000000}}});
  auto run = Deltafin(SetupArgs("--full", dir_ / "m"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ExpectSameFiles(dir_ / "m");
  // The shard was requested again from where the broken response stopped, not from byte 0.
  bool resumed = false;
  for (const auto& r : ProxyLog()) {
    const std::string range = r["range"].get<std::string>();
    if (r["port"] == "cdn" && r["path"].get<std::string>().find(shard) != std::string::npos &&
        range.rfind("bytes=", 0) == 0) {
      const uint64_t start = std::stoull(range.substr(6));
      if (start >= 5000000) resumed = true;
    }
  }
  EXPECT_TRUE(resumed) << "no Range request resumed the dropped download";
}

TEST_F(SetupTest, KilledSetupResumesWithoutRefetchingFinishedFiles) {
  // Throttle shard bodies (3 MB/s per request) so that a run takes seconds, and kill -9 it at
  // three points of progress: the spine shard (fetched first, 15.9 MB) 1 MB in; then 3 MB in
  // with at least one expert shard finished; then 6 MB in.
  ThrottleShards();
  const fs::path m = dir_ / "m";
  const fs::path spine_partial = m / "model-00001-of-000009.safetensors.partial";
  const std::string cmd = "exec " + Env(kToken) + " " + ShellQuote(DF_BINARY) + " " +
                          SetupArgs("--full", m) + " --jobs 2 > " +
                          ShellQuote((dir_ / "killed.log").string()) + " 2>&1";
  auto expert_shards_done = [&] {
    std::set<std::string> done;
    if (!fs::exists(m)) return done;
    for (const auto& e : fs::directory_iterator(m)) {
      const std::string name = e.path().filename().string();
      if (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors") done.insert(name);
    }
    return done;
  };
  std::set<std::string> done_at_kill;
  size_t log_at_kill = 0;
  for (const auto& [spine_bytes, expert_shards] :
       std::vector<std::pair<uint64_t, size_t>>{{1000000, 0}, {3000000, 1}, {6000000, 1}}) {
    pid_t pid = 0;
    const char* argv[] = {"sh", "-c", cmd.c_str(), nullptr};
    ASSERT_EQ(::posix_spawnp(&pid, "sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::error_code ec;
    while (std::chrono::steady_clock::now() < deadline &&
           !(fs::exists(spine_partial, ec) && fs::file_size(spine_partial, ec) >= spine_bytes &&
             expert_shards_done().size() >= expert_shards)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "setup finished before the kill at " << spine_bytes
                                     << " bytes: " << ReadAll(dir_ / "killed.log");
    ASSERT_GE(fs::file_size(spine_partial, ec), spine_bytes) << ReadAll(dir_ / "killed.log");
    done_at_kill = expert_shards_done();
    log_at_kill = ProxyLog().size();
  }
  EXPECT_FALSE(done_at_kill.empty());
  // The engine refuses the unfinished install and says how to finish it.
  auto early = Deltafin("run --model " + ShellQuote(m.string()) + " --prompt-ids 1 --max-new 1");
  EXPECT_EQ(early.exit_code, 1) << early.output;
  EXPECT_NE(early.output.find("unfinished; run `deltafin setup --full"), std::string::npos)
      << early.output;
  SetRules(nlohmann::json::array());
  auto run = Deltafin(SetupArgs("--full", m));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("resuming " + spine_partial.parent_path().string()), std::string::npos)
      << run.output;
  ExpectSameFiles(m);
  // Files finished before the last kill were not requested again (not even their headers), and
  // the spine shard continued from its partial bytes rather than from byte 0.
  const auto log = ProxyLog();
  bool spine_resumed = false;
  for (size_t i = log_at_kill; i < log.size(); ++i) {
    const std::string path = log[i]["path"].get<std::string>();
    for (const auto& name : done_at_kill) {
      EXPECT_EQ(path.find(name), std::string::npos)
          << name << " was finished before the last kill but fetched again";
    }
    const std::string range = log[i]["range"].get<std::string>();
    if (log[i]["port"] == "cdn" && path.find("model-00001-of") != std::string::npos &&
        range.rfind("bytes=", 0) == 0 && std::stoull(range.substr(6)) >= 6000000) {
      spine_resumed = true;
    }
  }
  EXPECT_TRUE(spine_resumed);
}

TEST_F(SetupTest, ChangedEtagDiscardsThePartialFileAndStartsOver) {
  ThrottleShards();
  const fs::path m = dir_ / "m";
  const std::string spine = "model-00001-of-000009.safetensors";
  const fs::path partial = m / (spine + ".partial");
  const std::string cmd = "exec " + Env(kToken) + " " + ShellQuote(DF_BINARY) + " " +
                          SetupArgs("--full", m) + " > /dev/null 2>&1";
  pid_t pid = 0;
  const char* argv[] = {"sh", "-c", cmd.c_str(), nullptr};
  ASSERT_EQ(::posix_spawnp(&pid, "sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::error_code ec;
  while (std::chrono::steady_clock::now() < deadline &&
         !(fs::exists(partial, ec) && fs::file_size(partial, ec) >= 2000000)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_GE(fs::file_size(partial, ec), 2000000u);
  // The served file gets a new modification time, so nginx gives it a new ETag.
  const fs::path served =
      *root_ / "hub/www" / Repo() / "resolve" / (*info_)["sha"].get<std::string>() / spine;
  fs::last_write_time(served, fs::last_write_time(served) + std::chrono::hours(1));
  SetRules(nlohmann::json::array());
  const size_t before = ProxyLog().size();
  auto run = Deltafin(SetupArgs("--full", m));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("the remote file changed"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("downloading it again"), std::string::npos) << run.output;
  ExpectSameFiles(m);
  bool from_zero = false;
  const auto log = ProxyLog();
  for (size_t i = before; i < log.size(); ++i) {
    from_zero |= log[i]["port"] == "cdn" &&
                 log[i]["path"].get<std::string>().find(spine) != std::string::npos &&
                 log[i]["range"] == "bytes=0-" + std::to_string(fs::file_size(Model() / spine) - 1);
  }
  EXPECT_TRUE(from_zero) << "the spine shard was not fetched again from byte 0";
}

TEST_F(SetupTest, CorruptByteFailsSha256AndTheFileIsFetchedAgain) {
  const std::string shard = "model-00003-of-000009.safetensors";
  SetRules({{{"port", "cdn"}, {"path", shard}, {"action", "corrupt"}, {"at", 1000000}}});
  auto run = Deltafin(SetupArgs("--full", dir_ / "m"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("sha256 mismatch"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(shard), std::string::npos) << run.output;
  ExpectSameFiles(dir_ / "m");
}

TEST_F(SetupTest, FileNamesWithDotDotOrAbsolutePathsAreRefused) {
  for (const std::string repo : {"evil/dotdot", "evil/abs"}) {
    auto run = Deltafin("setup --full --repo " + repo + " --model-dir " +
                        ShellQuote((dir_ / "m").string()));
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_NE(run.output.find("refusing file name"), std::string::npos) << run.output;
    EXPECT_FALSE(fs::exists(dir_ / "m/config.json"));
  }
  EXPECT_FALSE(fs::exists(dir_ / "escaped.json"));
  EXPECT_FALSE(fs::exists("/tmp/deltafin-abs-escape.json"));
}

TEST_F(SetupTest, StreamInstallGeneratesTheSameTokensAsFullAndUpgradesToFull) {
  const fs::path s = dir_ / "stream";
  // The token comes from --token (no HF_TOKEN): setup keeps it, owner-only, for run time.
  auto run = Deltafin(SetupArgs("--stream", s) + " --token " + kToken, "");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  struct stat token_stat {};
  ASSERT_EQ(::stat((s / ".deltafin/token").c_str(), &token_stat), 0);
  EXPECT_EQ(token_stat.st_mode & 0777, 0600u);
  // Expert shards are sparse files of full size: their experts are holes.
  for (int i = 2; i <= 9; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-000009.safetensors", i);
    struct stat st {};
    ASSERT_EQ(::stat((s / name).c_str(), &st), 0);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), fs::file_size(Model() / name));
    EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, fs::file_size(Model() / name) / 2)
        << name << " is not sparse";
  }
  const size_t before_run = ProxyLog().size();
  // Neither HF_ENDPOINT nor HF_TOKEN: the endpoint recorded at setup and the saved token serve.
  // The experts are fetched, then read through the streamer with both lookaheads guessing (a
  // guess of an expert not fetched yet is dropped, never read as its hole): the same ids as the
  // full model's mapped experts.
  EXPECT_EQ(Generate(s, "", /*endpoint=*/false, " --experts streamed --lookahead both"),
            Generate(Model()));
  // Each expert came with exactly one ranged GET of its whole span, over a few keep-alive
  // connections (the pool holds at most 8 handles, each keeping its connection to hub and CDN).
  const auto log = ProxyLog();
  int expert_gets = 0;
  std::set<std::pair<std::string, int>> connections;
  for (size_t i = before_run; i < log.size(); ++i) {
    connections.insert({log[i]["port"].get<std::string>(), log[i]["client"].get<int>()});
    if (log[i]["port"] != "cdn") continue;
    const std::string range = log[i]["range"].get<std::string>();
    const size_t dash = range.find('-');
    ASSERT_NE(dash, std::string::npos) << log[i].dump();
    const uint64_t b = std::stoull(range.substr(6)), e = std::stoull(range.substr(dash + 1));
    EXPECT_EQ(e - b + 1, 19584u) << "not one tiny-preset expert span (19,584 bytes): "
                                 << log[i].dump();
    ++expert_gets;
  }
  EXPECT_GT(expert_gets, 32);
  EXPECT_LE(connections.size(), 16u)
      << expert_gets << " experts fetched over " << connections.size() << " connections";
  // A second identical run needs nothing new.
  const size_t before_second = ProxyLog().size();
  EXPECT_EQ(Generate(s), Generate(Model()));
  EXPECT_EQ(ProxyLog().size(), before_second);
  // Upgrade: every hole filled, every shard verified, the install is full.
  const size_t before_all = ProxyLog().size();
  auto all = Deltafin("fetch-experts-all --model-dir " + ShellQuote(s.string()));
  ASSERT_EQ(all.exit_code, 0) << all.output;
  // It fetched exactly the experts the runs had not: tiny has 8 MoE layers of 64 experts.
  const auto after = ProxyLog();
  int upgrade_gets = 0;
  for (size_t i = before_all; i < after.size(); ++i) upgrade_gets += after[i]["port"] == "cdn";
  EXPECT_EQ(upgrade_gets + expert_gets, 8 * 64);
  ExpectSameFiles(s);
  const std::string manifest = ReadAll(s / ".deltafin/manifest.json");
  EXPECT_NE(manifest.find("\"mode\": \"full\""), std::string::npos) << manifest;
  EXPECT_EQ(Generate(s), Generate(Model()));
}

// The logits of a fixed prompt through streamed experts, or the failed run's output.
std::string DriveLogits(const fs::path& model, const fs::path& out, const std::string& extra = "") {
  auto run = RunCli("logits --model " + ShellQuote(model.string()) +
                    " --tokens 72,101,108,108,111 --experts streamed --expert-cache 1M " +
                    "--io-threads 2 --out " + ShellQuote(out.string()) + " " + extra);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return run.exit_code == 0 ? ReadAll(out) : run.output;
}

uint64_t AllocatedBytes(const fs::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST_F(SetupTest, DriveInstallPlacesTheExpertsOnTheDrivesWithTheSameLogits) {
  const fs::path m = dir_ / "m", d1 = dir_ / "drive1", d2 = dir_ / "drive2";
  const std::string drives =
      " --drive " + ShellQuote(d1.string()) + " --drive " + ShellQuote(d2.string());
  auto run = Deltafin(SetupArgs("", m) + drives + " --copies 2");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // Every folder here is on one device: said, not refused.
  EXPECT_NE(run.output.find("on the same device as"), std::string::npos) << run.output;
  const std::string want = DriveLogits(Model(), dir_ / "plain.f32", "");
  EXPECT_EQ(DriveLogits(m, dir_ / "drives.f32"), want);
  // The model folder's expert shards hold their spine only; each drive holds every expert.
  const std::string shard = "model-00003-of-000009.safetensors";
  EXPECT_EQ(fs::file_size(m / shard), fs::file_size(Model() / shard));
  EXPECT_LT(AllocatedBytes(m / shard), fs::file_size(Model() / shard) / 2);
  EXPECT_GE(AllocatedBytes(d1 / shard), fs::file_size(Model() / shard) / 2);
  const auto placement = ReadAll(m / ".deltafin/placement.json");
  EXPECT_EQ(placement.rfind("deltafin-placement/1 sha256=", 0), 0u);
  const std::string manifest = ReadAll(m / ".deltafin/manifest.json");
  EXPECT_NE(manifest.find("\"placed\""), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("\"complete\": true"), std::string::npos) << manifest;
  // spread accepts it (the placement validates) and finds nothing to copy.
  auto spread = RunCli("spread --model " + ShellQuote(m.string()) + drives + " --copies 2");
  ASSERT_EQ(spread.exit_code, 0) << spread.output;
  EXPECT_NE(spread.output.find("0 copies made this run"), std::string::npos) << spread.output;
  // A rerun does nothing; fetch-experts-all has nothing to fetch (the install is full).
  const size_t before = ProxyLog().size();
  run = Deltafin(SetupArgs("", m) + drives);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("nothing to do"), std::string::npos) << run.output;
  run = Deltafin("fetch-experts-all --model-dir " + ShellQuote(m.string()));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(ProxyLog().size(), before);
  // One drive gone: the other's copies serve, with a warning naming it.
  fs::remove_all(d1);
  EXPECT_EQ(DriveLogits(m, dir_ / "one-drive.f32"), want);
}

TEST_F(SetupTest, DriveInstallKilledAnywhereResumesAndAChangedByteIsCaught) {
  const fs::path m = dir_ / "m", d1 = dir_ / "drive1", d2 = dir_ / "drive2";
  const std::string drives =
      " --drive " + ShellQuote(d1.string()) + " --drive " + ShellQuote(d2.string());
  const std::string want = DriveLogits(Model(), dir_ / "plain.f32", "");
  // kill -9 while copies are written, before and after a batch is recorded; each rerun goes on
  // from there, the last without --drive (the manifest names the drives).
  for (const char* point :
       {"spread-after-write#40", "spread-before-save#1", "spread-after-save#2"}) {
    auto killed = Deltafin(SetupArgs("", m) + drives, kToken, true,
                           std::string("DELTAFIN_CRASH_AT=") + point);
    EXPECT_EQ(killed.exit_code, 137) << point << ": " << killed.output;
  }
  auto run = Deltafin(SetupArgs("", m));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(DriveLogits(m, dir_ / "resumed.f32"), want);

  // A byte of an expert changed in transit: the shard's whole-file hash catches it, its copies
  // are forgotten, and a rerun fetches them again.
  const fs::path c = dir_ / "c", d3 = dir_ / "drive3";
  SetRules({{{"id", "drive-install-corrupt"},  // rules count their firings by id for the suite
             {"port", "cdn"},
             {"path", "model-00003-of-000009.safetensors"},
             {"action", "corrupt"},
             {"at", 1000000}}});
  run = Deltafin(SetupArgs("", c) + " --drive " + ShellQuote(d3.string()));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("sha256 mismatch"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("copies are forgotten"), std::string::npos) << run.output;
  run = Deltafin(SetupArgs("", c));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(DriveLogits(c, dir_ / "c.f32"), want);
}

TEST_F(SetupTest, DriveInstallRefusesBadDrivesBeforeDownloading) {
  const fs::path m = dir_ / "m";
  // --stream with --drive: the experts would land in the model folder on first use.
  auto run = Deltafin(SetupArgs("--stream", m) + " --drive " + ShellQuote((dir_ / "d").string()));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("a full install"), std::string::npos) << run.output;
  // A drive folder inside the model folder.
  run = Deltafin(SetupArgs("", m) + " --drive " + ShellQuote((m / "inside").string()));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("inside it"), std::string::npos) << run.output;
  EXPECT_FALSE(AnyDownloadedFile(m));
  // A drive that cannot be created (below a regular file).
  std::ofstream(dir_ / "file") << "x";
  run = Deltafin(SetupArgs("", m) + " --drive " + ShellQuote((dir_ / "file" / "sub").string()));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("cannot create the drive folder"), std::string::npos) << run.output;
  EXPECT_FALSE(AnyDownloadedFile(m));
  // spread refuses a stream install (its experts are holes until fetched), with what to do.
  const fs::path s = dir_ / "stream";
  run = Deltafin(SetupArgs("--stream", s));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  run = Deltafin("spread --model " + ShellQuote(s.string()) + " --drive " +
                 ShellQuote((dir_ / "d").string()));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("fetch-experts-all"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(s / ".deltafin/placement.json"));
}

TEST_F(SetupTest, StreamFetchNeverMarksACorruptExpertPresent) {
  const fs::path s = dir_ / "stream";
  ASSERT_EQ(Deltafin(SetupArgs("--stream", s)).exit_code, 0);
  // Every expert request fails: the run fails naming layer, expert, URL and range, and no
  // expert is recorded as present.
  SetRules({{{"port", "cdn"},
             {"path", "model-0000"},
             {"action", "status"},
             {"status", 404},
             {"times", -1}}});
  auto run = Deltafin("run --model " + ShellQuote(s.string()) + " --prompt-ids 72,101 --max-new 2");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("layer "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(" expert "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("bytes "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("404"), std::string::npos) << run.output;
  EXPECT_EQ(fs::file_size(s / ".deltafin/experts.log"), 0u);
  SetRules(nlohmann::json::array());
  EXPECT_EQ(Generate(s), Generate(Model()));
}

}  // namespace
}  // namespace deltafin::hubtest
