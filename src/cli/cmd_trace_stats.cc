// `deltafin trace-stats FILE [--json OUT] [--svg OUT] [--max-cache N]`: statistics of a router
// trace written by `run --trace` (trace/trace_stats.h, docs/TRACE.md): consecutive-token expert
// overlap, per-layer usage spread, and the hit-rate curve of an LRU expert cache of 1..N entries;
// --svg draws them (usage heatmap, overlap against chance, hit-rate curve).
#include <cstdio>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "trace/trace_stats.h"

namespace deltafin::cli {

namespace {

struct TraceStatsArgs {
  std::string trace;
  std::string json;
  std::string svg;
  int64_t max_cache = 0;
};

int RunTraceStats(const TraceStatsArgs& args) {
  auto trace = trace::ReadTraceFile(args.trace);
  if (!trace.ok()) return Fail(trace.status());
  const trace::TraceStats stats = trace::ComputeTraceStats(*trace, args.max_cache);
  std::printf("trace %s\n%s", args.trace.c_str(), trace::FormatTraceStats(stats).c_str());
  if (!args.json.empty()) {
    const std::string text = trace::TraceStatsJson(stats);
    Status st = WriteFileAtomically(args.json, text.data(), text.size());
    if (!st.ok()) return Fail(st);
  }
  if (!args.svg.empty()) {
    const std::string text = trace::TraceStatsSvg(stats);
    Status st = WriteFileAtomically(args.svg, text.data(), text.size());
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

}  // namespace

void RegisterTraceStats(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<TraceStatsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "trace-stats", "Expert overlap, usage spread and LRU hit rates of a router trace");
  cmd->add_option("trace", args->trace, "Router trace (run --trace), one JSON line per position")
      ->required();
  cmd->add_option("--json", args->json, "Also write every statistic (all cache sizes) as JSON");
  cmd->add_option("--svg", args->svg,
                  "Also draw the statistics as a plain SVG: layer x expert usage heatmap, overlap "
                  "per layer against chance, LRU hit-rate curve");
  cmd->add_option("--max-cache", args->max_cache,
                  "Largest LRU cache in entries (default: distinct (layer, expert) pairs seen)")
      ->check(IntRange(1, int64_t{1} << 30));
  cmd->callback([args, exit_code] { *exit_code = RunTraceStats(*args); });
}

}  // namespace deltafin::cli
