// Subcommand registration. Each cmd_*.cc adds one CLI11 subcommand and its handler; main.cc only
// wires them together. Handlers print one clear line on error and return a non-zero exit code.
#pragma once

#include <CLI/CLI.hpp>

namespace deltafin::cli {

// Each Register* adds its subcommand to `app`; when that subcommand is chosen, CLI11 runs the
// callback, which stores its exit code in *exit_code.
void RegisterMakeModel(CLI::App& app, int* exit_code);
void RegisterRun(CLI::App& app, int* exit_code);
void RegisterLogits(CLI::App& app, int* exit_code);
void RegisterTokenize(CLI::App& app, int* exit_code);
void RegisterBench(CLI::App& app, int* exit_code);
void RegisterTraceStats(CLI::App& app, int* exit_code);
void RegisterServe(CLI::App& app, int* exit_code);
// `bench decode`, added under the `bench` subcommand.
void RegisterBenchDecode(CLI::App* bench, int* exit_code);
void RegisterBenchPrefill(CLI::App* bench, int* exit_code);
void RegisterSetup(CLI::App& app, int* exit_code);
void RegisterFetchExpertsAll(CLI::App& app, int* exit_code);
void RegisterConvertSpineInt8(CLI::App& app, int* exit_code);
void RegisterPlan(CLI::App& app, int* exit_code);
// `spread` (cmd_spread.cc): experts over several drives.
void RegisterSpread(CLI::App& app, int* exit_code);

}  // namespace deltafin::cli
