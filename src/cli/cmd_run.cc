// `deltafin run`: greedy generation from a prompt of token ids (--prompt-ids) or text (--prompt,
// optionally as one user turn of K3's chat template with --chat). Prints the generated ids (one
// JSON array on stdout) and, when the model folder has a tokenizer, the decoded text after it.
// --trace FILE writes the router trace (cli/router_trace.h, docs/TRACE.md); --stats and
// --stats-json report where each token's time and bytes went (cli/token_stats.h).
#include <chrono>
#include <cstdio>
#include <vector>

#include "base/log.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/router_trace.h"
#include "cli/token_stats.h"
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
  bool stats = false;
  std::string stats_json;
};

// `--stats`: one line per fed position on stderr; `--stats-json`: the same as a JSON document.
class StatsReporter {
 public:
  StatsReporter(const RunArgs& args, const Engine& engine, const Session& session)
      : print_(args.stats), json_path_(args.stats_json), session_(session) {
    if (!enabled()) return;
    const ModelInfo& info = engine.info();
    if (info.experts_streamed) {
      // The floor's disk bandwidth: the decode access pattern, measured now on these files.
      auto bps = engine.ProbeExpertReadBandwidth(
          256, static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
      if (bps.ok()) disk_bps_ = *bps;
      char line[160];
      std::snprintf(line, sizeof line,
                    "stats: disk %.2f GB/s (256 random expert reads, %s I/O); floor = max(disk "
                    "bytes / that, compute)",
                    disk_bps_ / 1e9, info.expert_read_mode);
      LogInfo(line);
    } else {
      LogInfo("stats: experts are mapped (all in RAM); floor = compute time");
    }
    doc_ = {{"model", info.model_dir},
            {"experts_streamed", info.experts_streamed},
            {"expert_read_mode", info.expert_read_mode},
            {"disk_gbps", disk_bps_ / 1e9},
            {"steps", nlohmann::json::array()}};
  }
  bool enabled() const { return print_ || !json_path_.empty(); }
  void Begin() {
    before_ = session_.stats();
    io_before_ = ProcReadBytes();
    start_ = std::chrono::steady_clock::now();
  }
  void End(const char* kind) {
    StepStats step;
    step.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    step.delta = Subtract(session_.stats(), before_);
    step.proc_read_bytes = ProcReadBytes() - io_before_;
    step.position = session_.position() - 1;
    if (print_) LogInfo(std::string(kind) + " " + FormatStep(step, disk_bps_));
    table_.Add(step, std::string(kind) == "decode");
    nlohmann::json j = StepJson(step, disk_bps_);
    j["kind"] = kind;
    j["positions"] = step.delta.positions;
    doc_["steps"].push_back(std::move(j));
  }
  // `--stats`: the op-family summary table (cli/token_stats.h) after the last step.
  void PrintSummary() const {
    if (print_) LogInfo(table_.Format());
  }
  Status Write() const {
    if (json_path_.empty()) return Status::Ok();
    const std::string text = doc_.dump(1) + "\n";
    return WriteFileAtomically(json_path_, text.data(), text.size());
  }

 private:
  bool print_;
  std::string json_path_;
  const Session& session_;
  double disk_bps_ = 0;
  nlohmann::json doc_;
  SessionStats before_;
  uint64_t io_before_ = 0;
  std::chrono::steady_clock::time_point start_;
  OpBreakdownTable table_;
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

  StatsReporter stats(args, **engine, *session);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (stats.enabled()) stats.Begin();
  Status st = session->Prefill(*ids);
  if (!st.ok()) return Fail(st);
  if (stats.enabled()) stats.End("prefill");
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
    if (stats.enabled()) stats.Begin();
    st = session->Decode(next);
    if (!st.ok()) return Fail(st);
    if (stats.enabled()) stats.End("decode");
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
  st = stats.Write();
  if (!st.ok()) return Fail(st);
  stats.PrintSummary();
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
  cmd->add_flag("--stats", args->stats,
                "Print per token: time, expert and spine bytes read, cache and prefetch hits, I/O "
                "wait vs compute, GB/s, the floor and the floor ratio");
  cmd->add_option("--stats-json", args->stats_json, "Write the --stats numbers to this JSON file");
  cmd->callback([args, exit_code] { *exit_code = RunGenerate(*args); });
}

}  // namespace deltafin::cli
