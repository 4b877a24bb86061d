#include "cli/bench_child.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "base/byte_size.h"
#include "base/log.h"
#include "cli/cli_util.h"
#include "cli/memory_cgroup.h"

namespace deltafin::cli {

void AddBenchScenarioOption(CLI::App* cmd, std::string* scenario) {
  cmd->add_option("--scenario", *scenario,
                  "stream-spine-resident (budget: spine + 1 GiB), stream-spine-streamed (half "
                  "the spine), resident (no limit, after a warm-up pass)")
      ->check(OneOf({"stream-spine-resident", "stream-spine-streamed", "resident"}))
      ->capture_default_str();
}

Result<uint64_t> ApplyBenchScenario(const std::string& scenario, EngineOptions* options) {
  if (scenario == "resident") {
    options->experts = EngineOptions::Experts::kMapped;
    return uint64_t{0};
  }
  if (scenario != "stream-spine-resident" && scenario != "stream-spine-streamed") {
    return Status::Error("unknown scenario " + scenario);
  }
  DF_ASSIGN_OR_RETURN(const ModelInfo plan, Engine::Plan(*options));
  options->experts = EngineOptions::Experts::kStreamed;
  uint64_t limit =
      scenario == "stream-spine-resident" ? plan.spine_bytes + (1ull << 30) : plan.spine_bytes / 2;
  limit += kBenchProcessOverhead;
  options->mem_limit = limit - kBenchProcessOverhead;
  return limit;
}

int RunMeasuredChild(uint64_t limit, bool no_memory_limit,
                     const std::function<Result<nlohmann::json>()>& measure, nlohmann::json* out) {
  MemoryCgroup cgroup;
  if (limit > 0 && !no_memory_limit) {
    auto cg = MemoryCgroup::Create(limit);
    if (!cg.ok()) return Fail(cg.status());
    cgroup = std::move(*cg);
    if (!DropPageCache()) LogInfo("warning: cannot drop the page cache (not root)");
    LogInfo("running under a memory cgroup limit of " + HumanBytes(limit) + " (" + cgroup.path() +
            ")");
  } else if (limit > 0) {
    LogInfo("warning: --no-memory-limit: the page cache may serve reads the budget excludes");
  }
  char json_tmp[] = "/tmp/deltafin-bench-XXXXXX";
  const int fd = ::mkstemp(json_tmp);
  if (fd < 0) return Fail(Status::Error("cannot create a temporary file"));
  ::close(fd);
  int sync_pipe[2];
  if (::pipe(sync_pipe) != 0) return Fail(Status::Error("pipe failed"));
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(sync_pipe[1]);
    char go = 0;
    if (::read(sync_pipe[0], &go, 1) != 1 || go != 1) ::_exit(3);
    auto result = measure();
    if (!result.ok()) ::_exit(Fail(result.status()));
    std::ofstream(json_tmp) << result->dump();
    std::fflush(nullptr);
    ::_exit(0);
  }
  ::close(sync_pipe[0]);
  char go = 1;
  if (!cgroup.path().empty()) {
    Status st = cgroup.AddProcess(child);
    if (!st.ok()) go = 0;
  }
  if (::write(sync_pipe[1], &go, 1) != 1) go = 0;
  ::close(sync_pipe[1]);
  int wstatus = 0;
  ::waitpid(child, &wstatus, 0);
  if (go != 1) return Fail(Status::Error("could not move the benchmark into its cgroup"));
  if (WIFSIGNALED(wstatus)) {
    std::remove(json_tmp);
    return Fail(Status::Error(
        "the benchmark process was killed by signal " + std::to_string(WTERMSIG(wstatus)) +
        (limit > 0 ? " (out of memory under the " + HumanBytes(limit) + " limit?)"
                   : std::string())));
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    std::remove(json_tmp);
    return WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 1;
  }
  std::ifstream in(json_tmp);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  std::remove(json_tmp);
  if (j.is_discarded()) return Fail(Status::Error("the benchmark wrote no result"));
  j["memory_limit"] = cgroup.path().empty() ? 0 : limit;
  j["peak_memory_bytes"] = cgroup.path().empty() ? 0 : cgroup.PeakBytes();
  *out = std::move(j);
  return 0;
}

}  // namespace deltafin::cli
