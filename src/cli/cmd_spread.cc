// `deltafin spread`: copies a model's routed experts onto folders on other drives, so decode reads
// each expert from the drive expected to answer first (setup/spread.h, docs/STREAMING.md "Several
// drives"). Exit codes: 0 done, 1 failed (nothing recorded that does not read back right), 2 usage.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/byte_size.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "setup/spread.h"

namespace deltafin::cli {

void RegisterSpread(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<setup::SpreadOptions>();
  CLI::App* cmd = app.add_subcommand(
      "spread",
      "Copy (or move) the routed experts onto folders on other drives, for reads "
      "from several drives at once");
  cmd->add_option("--model-dir,--model", o->model_dir, "The installed model folder")->required();
  cmd->add_option("--drive", o->drives, "A folder on another drive (repeat for several)")
      ->required();
  auto* copies = cmd->add_option("--copies", o->copies,
                                 "Copies of every expert over the given drives, round-robin")
                     ->check(CLI::Range(1, 31))
                     ->capture_default_str();
  cmd->add_option("--hot", o->hot_trace,
                  "Router trace (run --trace): fill each drive with the most used experts first")
      ->excludes(copies);
  cmd->add_flag("--move", o->move,
                "Free each copied expert's bytes in the model folder (after its copy is verified)");
  cmd->callback([o, exit_code] {
    auto r = setup::Spread(*o);
    if (!r.ok()) {
      *exit_code = Fail(r.status());
      return;
    }
    std::printf("spread: %llu experts; %llu copies made this run (%s), %llu on drives in all",
                static_cast<unsigned long long>(r->experts),
                static_cast<unsigned long long>(r->copies_made),
                HumanBytes(r->bytes_copied).c_str(),
                static_cast<unsigned long long>(r->copies_recorded));
    if (r->experts_moved > 0) {
      std::printf("; %llu experts off the model folder (%s freed this run)",
                  static_cast<unsigned long long>(r->experts_moved),
                  HumanBytes(r->bytes_freed).c_str());
    }
    std::printf("\n");
    *exit_code = 0;
  });
}

}  // namespace deltafin::cli
