// `deltafin convert-spine-int8`: the command line of the row-int8 spine's writer
// (setup/spine_int8_convert.h), which writes <model>/spine-int8/ for `--spine int8` at run time
// (docs/INT8.md).
#include <cstdio>
#include <memory>
#include <string>

#include "base/log.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "setup/spine_int8_convert.h"

namespace deltafin::cli {

namespace {

struct ConvertArgs {
  std::string model_dir;
  bool verify = false;
};

int RunConvert(const ConvertArgs& args) {
  bool mismatched = false;
  const Status st = setup::ConvertSpineInt8(args.model_dir, args.verify, &mismatched);
  if (!st.ok()) return Fail(st);
  if (args.verify && mismatched) {
    LogError(
        "verify: files above did not match the manifest (now re-converted); rerun with "
        "--verify to confirm");
    return 1;
  }
  if (args.verify) std::printf("verify: every file matches the manifest\n");
  return 0;
}

}  // namespace

void RegisterConvertSpineInt8(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand(
      "convert-spine-int8",
      "Write the row-int8 copy of the spine linears into MODEL/spine-int8 (for --spine int8; "
      "resumable; docs/INT8.md)");
  cmd->add_option("--model", args->model_dir, "Model directory")->required();
  cmd->add_flag("--verify", args->verify,
                "Also re-hash every converted file against the manifest; mismatches are named, "
                "re-converted, and make the exit code 1");
  cmd->callback([args, exit_code] { *exit_code = RunConvert(*args); });
}

}  // namespace deltafin::cli
