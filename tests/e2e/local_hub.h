// The local hub the setup tests run against (tests/e2e/hub_fixture.py: nginx serving a generated
// tiny model as a hub repository, LFS files redirected to a second "CDN" server, a
// fault-injecting proxy in front of both, all on 127.0.0.1), and the helpers both setup test
// programs use: run deltafin in a clean environment, set the proxy's fault rules, read its log.
// One hub per test program (SetUpTestSuite); each test gets its own folder dir_.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"

namespace deltafin::hubtest {

namespace fs = std::filesystem;
using testing::RunCli;
using testing::ShellQuote;

inline constexpr char kToken[] = "hf_test_token_1234";

inline std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SetupTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ =
        new fs::path(fs::temp_directory_path() / ("deltafin_setup_" + std::to_string(::getpid())));
    fs::remove_all(*root_);
    fs::create_directories(*root_ / "hub");
    fs::create_directories(*root_ / "empty-hf-home");
    auto made = RunCli("make-model --preset tiny --seed 7 --no-sync --out " +
                       ShellQuote((*root_ / "model").string()));
    ASSERT_EQ(made.exit_code, 0) << made.output;
    // The fixture runs until its stdin closes: popen gives it our pipe as stdout; its stdin is a
    // FIFO we hold open.
    const std::string fifo = (*root_ / "fixture-stdin").string();
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const std::string cmd =
        "exec python3 " + ShellQuote(std::string(DF_SOURCE_DIR) + "/tests/e2e/hub_fixture.py") +
        " --model " + ShellQuote((*root_ / "model").string()) + " --root " +
        ShellQuote((*root_ / "hub").string()) + " --token " + kToken + " < " + ShellQuote(fifo);
    fixture_ = ::popen(cmd.c_str(), "r");
    ASSERT_NE(fixture_, nullptr);
    fifo_fd_ = ::open(fifo.c_str(), O_WRONLY);  // unblocks the shell's redirection
    char line[4096];
    ASSERT_NE(std::fgets(line, sizeof(line), fixture_), nullptr) << "hub fixture did not start";
    info_ = new nlohmann::json(nlohmann::json::parse(line));
  }
  static void TearDownTestSuite() {
    if (fifo_fd_ >= 0) ::close(fifo_fd_);  // the fixture stops nginx and exits
    if (fixture_ != nullptr) ::pclose(fixture_);
    if (root_ != nullptr) fs::remove_all(*root_);
    delete root_;
    delete info_;
  }

  void SetUp() override {
    dir_ = *root_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    SetRules(nlohmann::json::array());
  }

  static std::string Endpoint() { return (*info_)["endpoint"].get<std::string>(); }
  static std::string Repo() { return (*info_)["repo"].get<std::string>(); }
  static fs::path Model() { return *root_ / "model"; }

  // The environment of every command: our endpoint, an empty HF_HOME, no proxies.
  static std::string Env(const std::string& token, bool endpoint = true) {
    std::string env =
        "env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY "
        "-u all_proxy -u HF_TOKEN -u HF_TOKEN_PATH -u HF_ENDPOINT HF_HOME=" +
        ShellQuote((*root_ / "empty-hf-home").string());
    if (endpoint) env += " HF_ENDPOINT=" + Endpoint();
    if (!token.empty()) env += " HF_TOKEN=" + token;
    return env;
  }
  // Runs `deltafin <args>` with Env(token, endpoint) and `extra_env` (NAME=value ...), bounded by
  // `timeout 120`. A deltafin killed by a signal exits 128 + signal (timeout passes it on).
  static testing::CliRun Deltafin(const std::string& args, const std::string& token = kToken,
                                  bool endpoint = true, const std::string& extra_env = "") {
    const std::string cmd = "timeout 120 " + Env(token, endpoint) + " " + extra_env + " " +
                            ShellQuote(DF_BINARY) + " " + args + " 2>&1";
    testing::CliRun run;
    std::FILE* pipe = ::popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) run.output.append(buf, n);
    const int status = ::pclose(pipe);
    if (status != -1 && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
    if (status != -1 && WIFSIGNALED(status)) run.exit_code = 128 + WTERMSIG(status);
    return run;
  }
  std::string SetupArgs(const std::string& mode, const fs::path& dir) const {
    return "setup " + mode + " --repo " + Repo() + " --model-dir " + ShellQuote(dir.string());
  }

  static void SetRules(const nlohmann::json& rules) {
    std::ofstream((*info_)["rules"].get<std::string>() + ".tmp") << rules.dump();
    fs::rename((*info_)["rules"].get<std::string>() + ".tmp", (*info_)["rules"].get<std::string>());
  }
  // Shard bodies at 3 MB/s per request (nginx limit_rate, which sends the first second's worth at
  // once), so that a setup run lasts long enough to be interrupted.
  static void ThrottleShards() {
    SetRules({{{"id", "slow"},
               {"port", "cdn"},
               {"path", ".safetensors"},
               {"action", "rate"},
               {"bytes_per_second", 3000000},
               {"times", -1}}});
  }
  // Every request the proxy saw, in order.
  static std::vector<nlohmann::json> ProxyLog() {
    std::vector<nlohmann::json> out;
    std::ifstream in((*info_)["log"].get<std::string>());
    std::string line;
    while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
    return out;
  }
  // Files of the generated model that `dir` holds byte for byte.
  static void ExpectSameFiles(const fs::path& dir) {
    for (const auto& e : fs::directory_iterator(Model())) {
      const fs::path installed = dir / e.path().filename();
      ASSERT_TRUE(fs::exists(installed)) << installed;
      EXPECT_TRUE(ReadAll(installed) == ReadAll(e.path())) << installed << " differs";
    }
  }
  // The generated ids (the --ids-out JSON array), or the output of a failed run.
  // `extra`: more `run` options (e.g. how the experts are read).
  static std::string Generate(const fs::path& model, const std::string& token = kToken,
                              bool endpoint = true, const std::string& extra = "") {
    const fs::path ids =
        fs::temp_directory_path() / ("deltafin_setup_ids_" + std::to_string(::getpid()) + ".json");
    fs::remove(ids);
    auto run = Deltafin("run --model " + ShellQuote(model.string()) +
                            " --prompt-ids 72,101,108,108,111 --max-new 8 --ids-out " +
                            ShellQuote(ids.string()) + extra,
                        token, endpoint);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    const std::string out = run.exit_code == 0 ? ReadAll(ids) : run.output;
    fs::remove(ids);
    return out;
  }
  static bool AnyDownloadedFile(const fs::path& dir) {
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.find(".safetensors") != std::string::npos) return true;
    }
    return false;
  }

  inline static fs::path* root_ = nullptr;
  inline static nlohmann::json* info_ = nullptr;
  inline static std::FILE* fixture_ = nullptr;
  inline static int fifo_fd_ = -1;
  fs::path dir_;
};

}  // namespace deltafin::hubtest
