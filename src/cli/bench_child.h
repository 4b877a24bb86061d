// What `bench decode` and `bench prefill` share: the scenarios' memory budgets and running the
// measurement in a child process inside a memory cgroup (docs/PERFORMANCE.md "Benchmark
// definitions").
//
// The parent works out the scenario's RAM budget from the model's plan, creates a memory cgroup
// with that limit, drops the page cache, and forks; the child joins the cgroup before it loads
// anything (it waits on a pipe until the parent has moved it), runs the measurement and hands its
// JSON back through a temporary file. The parent adds the cgroup's limit and peak memory use.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "deltafin/engine.h"

namespace deltafin::cli {

// Process overhead outside the engine's plan (binary, libraries, thread stacks, allocator).
inline constexpr uint64_t kBenchProcessOverhead = 192ull << 20;

// Sets `options` for a scenario: resident (experts mapped, no limit), stream-spine-resident
// (experts streamed, budget = spine + 1 GiB), stream-spine-streamed (experts streamed, budget =
// half the spine). Returns the cgroup limit (the engine's budget plus kBenchProcessOverhead; 0
// for no limit).
Result<uint64_t> ApplyBenchScenario(const std::string& scenario, EngineOptions* options);

// Adds `--scenario` (one of the three above, default as *scenario holds) to a bench subcommand.
void AddBenchScenarioOption(CLI::App* cmd, std::string* scenario);

// Runs `measure` in a child process under a memory cgroup of `limit` bytes (none when 0 or
// `no_memory_limit`) and stores its JSON, with "memory_limit" and "peak_memory_bytes" added, in
// *out. Returns 0, or the exit code of a failure already reported on stderr.
int RunMeasuredChild(uint64_t limit, bool no_memory_limit,
                     const std::function<Result<nlohmann::json>()>& measure, nlohmann::json* out);

}  // namespace deltafin::cli
