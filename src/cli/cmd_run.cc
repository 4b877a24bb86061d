// `deltafin run`: greedy generation from a prompt of token ids (--prompt-ids) or text (--prompt,
// optionally as one user turn of K3's chat template with --chat). Prints the generated ids (one
// JSON array on stdout) and, when the model folder has a tokenizer, the decoded text after it.
// --trace FILE writes the router trace (cli/router_trace.h, docs/TRACE.md).
#include <chrono>
#include <cstdio>
#include <vector>

#include "base/log.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/router_trace.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::cli {

namespace {

struct RunArgs {
  ModelFlags model;
  std::string prompt_ids;
  std::string prompt;
  bool chat = false;
  bool no_thinking = false;
  std::string effort = "max";
  int64_t max_new = 32;
  bool ignore_eos = false;
  std::string trace;
};

int RunGenerate(const RunArgs& args) {
  // The tokenizer is optional with --prompt-ids (test models may lack the files).
  auto tok = tokenizer::Tokenizer::LoadModelDir(args.model.model_dir);
  Result<std::vector<int32_t>> ids = Status::Error("give --prompt-ids or --prompt");
  if (args.prompt_ids.empty() && args.prompt.empty()) {
    return Fail(ids.status());
  } else if (!args.prompt_ids.empty()) {
    ids = ParseTokenList(args.prompt_ids);
  } else if (!tok.ok()) {
    return Fail(tok.status().WithContext("--prompt needs the model's tokenizer"));
  } else if (args.chat) {
    tokenizer::ChatOptions opts;
    opts.thinking = !args.no_thinking;
    opts.reasoning_effort = args.effort;
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", args.prompt}});
    auto segs = tokenizer::RenderChat(messages, nullptr, opts);
    if (!segs.ok()) return Fail(segs.status());
    ids = tokenizer::EncodeChat(**tok, *segs);
  } else {
    ids = (*tok)->Encode(args.prompt);
  }
  if (!ids.ok()) return Fail(ids.status());
  auto engine = args.model.LoadEngine();
  if (!engine.ok()) return Fail(engine.status());
  const ModelInfo& info = (*engine)->info();
  auto session = (*engine)->NewSession();
  std::unique_ptr<RouterTraceWriter> trace;
  if (!args.trace.empty()) {
    auto opened = RouterTraceWriter::Open(args.trace);
    if (!opened.ok()) return Fail(opened.status());
    trace = std::move(*opened);
    session->SetObserver(trace.get());
  }

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Status st = session->Prefill(*ids);
  if (!st.ok()) return Fail(st);
  if (trace) {
    st = trace->WritePositions(0, *ids);
    if (!st.ok()) return Fail(st);
  }
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
    if (trace) {
      st = trace->WritePositions(session->position() - 1, {&next, 1});
      if (!st.ok()) return Fail(st);
    }
  }
  if (trace) {
    session->SetObserver(nullptr);
    st = trace->Close();
    if (!st.ok()) return Fail(st);
  }
  const auto t2 = Clock::now();
  std::string out = "[";
  for (size_t i = 0; i < generated.size(); ++i) {
    out += (i ? "," : "") + std::to_string(generated[i]);
  }
  std::printf("%s]\n", out.c_str());
  if (tok.ok()) {  // the decoded text (invalid UTF-8 shown as U+FFFD), after the ids
    auto bytes = (*tok)->Decode(generated);
    if (bytes.ok()) std::printf("%s\n", tokenizer::DecodeUtf8Lossy(*bytes).c_str());
  }
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
  auto* ids_opt =
      cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt as comma-separated token ids");
  cmd->add_option("--prompt", args->prompt, "Prompt as text (needs the model's tokenizer)")
      ->excludes(ids_opt);
  cmd->add_flag("--chat", args->chat, "Render --prompt as one user turn of K3's chat template");
  cmd->add_flag("--no-thinking", args->no_thinking, "With --chat: thinking off");
  cmd->add_option("--reasoning-effort", args->effort, "With --chat: low, medium, high or max");
  cmd->add_option("--max-new", args->max_new, "Maximum tokens to generate")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating after the stop token");
  cmd->add_option("--trace", args->trace,
                  "Write the router trace (one JSON line per fed position) to this file");
  cmd->callback([args, exit_code] { *exit_code = RunGenerate(*args); });
}

}  // namespace deltafin::cli
