// deltafin: one binary, many subcommands (README.md lists them). Every command shares the exit
// codes and the wording of command-line errors set here (cli/cli_util.h).
#include <cstdio>
#include <exception>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/version.h"

namespace {

constexpr char kFooter[] = R"(Exit codes:
  0  success
  1  the command ran and failed (model folder, files, memory budget, I/O, generation); the
     message says what to do. `run` prints what it generated before the error.
  2  the command line is wrong (unknown, malformed, missing or conflicting options); nothing ran
Environment:
  DF_THREADS=N      compute threads when --threads is 0 or absent (default: every CPU the
                    process may use, cgroup quota included)
  HF_ENDPOINT, HF_TOKEN, HF_TOKEN_PATH, HF_HOME   `deltafin setup` (see `deltafin setup --help`))";

int Main(int argc, char** argv) {
  CLI::App app{"deltafin: Kimi K3 inference on one machine, experts streamed from disk"};
  app.require_subcommand(1);
  app.footer(kFooter);
  app.set_version_flag("--version", deltafin::cli::VersionText,
                       "Print the version, build type, SIMD target and library versions");
  app.failure_message(deltafin::cli::ParseFailureMessage);
  // --help shows every option's default; subcommands inherit this (and the failure message).
  app.option_defaults()->always_capture_default();
  int exit_code = 0;
  deltafin::cli::RegisterMakeModel(app, &exit_code);
  deltafin::cli::RegisterRun(app, &exit_code);
  deltafin::cli::RegisterLogits(app, &exit_code);
  deltafin::cli::RegisterTokenize(app, &exit_code);
  deltafin::cli::RegisterBench(app, &exit_code);
  deltafin::cli::RegisterTraceStats(app, &exit_code);
  deltafin::cli::RegisterServe(app, &exit_code);
  deltafin::cli::RegisterSetup(app, &exit_code);
  deltafin::cli::RegisterFetchExpertsAll(app, &exit_code);
  deltafin::cli::RegisterConvertSpineInt8(app, &exit_code);
  deltafin::cli::RegisterPlan(app, &exit_code);
  deltafin::cli::RegisterSpread(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every parse error is the usage exit code.
    return app.exit(e) == 0 ? deltafin::cli::kExitOk : deltafin::cli::kExitUsage;
  }
  return exit_code;
}

}  // namespace

// Commands report errors as Status; an exception reaching here is a bug, reported as one line
// with the failure exit code rather than std::terminate's abort.
int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "error: internal error: unknown exception\n");
  }
  return deltafin::cli::kExitFailure;
}
