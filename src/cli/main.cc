// deltafin: one binary, many subcommands (DESIGN.md §2).
#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"deltafin: Kimi K3 inference on one machine, experts streamed from disk"};
  app.require_subcommand(1);
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
