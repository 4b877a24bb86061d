// `deltafin bench kernels`: memory bandwidth and kernel throughput on K3's shapes
// (bench/kernels_bench.h), `bench decode` (cmd_bench_decode.cc) and `bench prefill`
// (cmd_bench_prefill.cc).
#include <memory>

#include "bench/kernels_bench.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace deltafin::cli {

void RegisterBench(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto opts = std::make_shared<bench::KernelsBenchOptions>();
  CLI::App* kernels = bench->add_subcommand(
      "kernels",
      "Memory read bandwidth, then every matrix kernel on K3's shapes (weights cold in cache), "
      "1 thread and all threads: GB/s of weight bytes and the ratio to the bandwidth");
  kernels->add_option("--json", opts->json_path,
                      "Also write one JSON record per kernel, shape and thread count");
  kernels->add_option("--threads", opts->threads, "\"All threads\" (0 = every available CPU)")
      ->check(IntRange(0, 4096))
      ->capture_default_str();
  kernels->add_option("--min-seconds", opts->min_seconds, "Time per measurement")
      ->check(NumberRange(0.0, 60.0))
      ->capture_default_str();
  kernels
      ->add_option("--lm-head-rows", opts->lm_head_rows,
                   "Rows of the lm_head shapes (K3 has 163840; BF16 would be 2.35 GB)")
      ->check(IntRange(32, 163840))
      ->capture_default_str();
  kernels->add_flag("--quick", opts->quick, "Shapes 8x smaller in each dimension (smoke test)");
  kernels->callback([opts, exit_code] { *exit_code = bench::RunKernelsBench(*opts); });
  RegisterBenchDecode(bench, exit_code);
  RegisterBenchPrefill(bench, exit_code);
}

}  // namespace deltafin::cli
