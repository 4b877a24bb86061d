// `deltafin run`: greedy generation from a prompt of token ids. Prints the generated ids (one JSON
// array on stdout) and, when the model folder has a tokenizer, the decoded text.
#include <chrono>
#include <cstdio>
#include <vector>

#include "base/log.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace deltafin::cli {

namespace {

struct RunArgs {
  ModelFlags model;
  std::string prompt_ids;
  int64_t max_new = 32;
  bool ignore_eos = false;
};

int RunGenerate(const RunArgs& args) {
  auto ids = ParseTokenList(args.prompt_ids);
  if (!ids.ok()) return Fail(ids.status());
  auto engine = args.model.LoadEngine();
  if (!engine.ok()) return Fail(engine.status());
  const ModelInfo& info = (*engine)->info();
  auto session = (*engine)->NewSession();

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Status st = session->Prefill(*ids);
  if (!st.ok()) return Fail(st);
  const auto t1 = Clock::now();
  std::vector<int32_t> generated;
  generated.reserve(static_cast<size_t>(args.max_new));
  for (int64_t i = 0; i < args.max_new; ++i) {
    const int32_t next = ArgmaxToken(session->Logits());
    generated.push_back(next);
    if (next == info.eos_token_id && !args.ignore_eos) break;
    if (i + 1 == args.max_new) break;
    st = session->Decode(next);
    if (!st.ok()) return Fail(st);
  }
  const auto t2 = Clock::now();
  std::string out = "[";
  for (size_t i = 0; i < generated.size(); ++i) {
    out += (i ? "," : "") + std::to_string(generated[i]);
  }
  std::printf("%s]\n", out.c_str());
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  char line[200];
  std::snprintf(line, sizeof(line),
                "prompt %zu tokens in %.3f s; generated %zu tokens in %.3f s (%.2f tok/s)",
                ids->size(), prefill_s, generated.size(), decode_s,
                decode_s > 0 ? static_cast<double>(generated.size()) / decode_s : 0.0);
  LogInfo(line);
  return 0;
}

}  // namespace

void RegisterRun(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Generate tokens greedily from a prompt");
  args->model.Add(cmd);
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt as comma-separated token ids")
      ->required();
  cmd->add_option("--max-new", args->max_new, "Maximum tokens to generate")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating after the stop token");
  cmd->callback([args, exit_code] { *exit_code = RunGenerate(*args); });
}

}  // namespace deltafin::cli
