// `deltafin run`: generation from a prompt of token ids (--prompt-ids) or text (--prompt,
// optionally as one user turn of K3's chat template with --chat), greedy unless --temperature.
//
// stdout carries only the generated text, printed as each token is decoded (cli/live_output.h):
// with --chat, K3's thinking is dimmed on a terminal, prefixed "thinking: " elsewhere, or hidden
// (--hide-thinking); special tokens are never printed unless --show-special. A model folder
// without a tokenizer gets the generated ids instead, space-separated. --ids-out FILE writes the
// ids as one JSON array. The engine's decode driver (deltafin/generator.h) generates: sampling,
// speculation and the stop rules are its own. stderr carries the memory plan, the prefill
// progress line, --stats and the closing summary. --trace FILE writes the router trace
// (trace/router_trace.h, docs/TRACE.md); --stats and --stats-json report where each token's time
// and bytes went (cli/token_stats.h).
//
// Nothing lost, nothing late: the command line and every output path are checked before the
// model loads, and an error after the first token still prints (and writes to --ids-out and
// --stats-json) everything generated before it, then the error.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <vector>

#include "base/log.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/live_output.h"
#include "cli/token_stats.h"
#include "deltafin/generator.h"
#include "deltafin/sampler.h"
#include "deltafin/speculate.h"
#include "tokenizer/chat.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "trace/router_trace.h"

namespace deltafin::cli {

namespace {

using trace::RouterTraceWriter;

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
  std::string ids_out;
  bool hide_thinking = false;
  bool show_special = false;
  bool progress = false;
  bool no_progress = false;
  double temperature = 0;
  double top_p = 1;
  int64_t top_k = 0;
  uint64_t seed = 0;
  double frequency_penalty = 0, presence_penalty = 0, repeat_penalty = 1;
  int64_t repeat_last_n = 64;
  std::string speculate = "ngram";  // off | ngram (docs/SPECULATION.md)
  int draft_max = 8;
  // Given on the command line (an empty --prompt is not a missing one).
  const CLI::Option* prompt_opt = nullptr;
  const CLI::Option* prompt_ids_opt = nullptr;
  const CLI::Option* top_p_opt = nullptr;
  const CLI::Option* top_k_opt = nullptr;
  const CLI::Option* seed_opt = nullptr;
};

// `--stats`: one line per fed position on stderr; `--stats-json`: the same as a JSON document.
class StatsReporter {
 public:
  StatsReporter(const RunArgs& args, const Engine& engine, const Session& session)
      : print_(args.stats), json_path_(args.stats_json), engine_(engine), session_(session) {
    if (!enabled()) return;
    const ModelInfo& info = engine.info();
    if (info.experts_streamed) {
      // The floor's disk bandwidth: the decode access pattern, measured now on these files.
      auto probe = engine.ProbeDiskBandwidth(
          256, static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
      if (probe.ok()) disk_bps_ = probe->bytes_per_second;
      const std::string pattern = probe.ok() ? probe->pattern : probe.status().message();
      char line[320];
      std::snprintf(line, sizeof line,
                    "stats: disk %.2f GB/s (%s, %s I/O); floor = max(disk bytes / that, compute)",
                    disk_bps_ / 1e9, pattern.c_str(), info.expert_read_mode);
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
  // Around the prefill, which is `run`'s own (the decode driver starts after it).
  void Begin() { meter_.Start(&session_); }
  void EndPrefill() { Add("prefill", meter_.Finish(session_), nullptr); }
  // Around each decode or verify step of the driver.
  void StartStep() { meter_.Start(); }
  void EndStep(const GenerationStep& step) {
    Add(step.pass.rows == 1 ? "decode" : "verify",
        meter_.Finish(step.delta, step.seconds, step.position - 1), &step.pass);
    if (print_ && step.pass.rows > 1) {
      LogInfo("speculate: drafted " + std::to_string(step.pass.drafted) + ", accepted " +
              std::to_string(step.pass.accepted) + ", rows " + std::to_string(step.pass.rows));
    }
  }
  // The speculation summary --stats prints (passes, drafts, acceptance, tokens per pass), and
  // whether speculation ran at all (off, or turned off by --trace: every pass then has 1 row).
  void Speculation(bool enabled, const SpeculativeTotals& t) {
    if (print_ && enabled) LogInfo("speculate: " + FormatSpeculation(t));
    doc_["speculation"] = SpeculationJson(enabled, t);
  }
  // `--stats`: the op-family summary table (cli/token_stats.h) after the last step.
  void PrintSummary() const {
    if (print_) LogInfo(table_.Format());
    const auto drives = engine_.DriveStatistics();
    if (print_ && !drives.empty()) LogInfo(FormatDrives(drives));
  }
  Status Write() {
    if (json_path_.empty()) return Status::Ok();
    // Per drive of a spread model (docs/STREAMING.md "Several drives"); empty otherwise.
    doc_["drives"] = DrivesJson(engine_.DriveStatistics());
    const std::string text = doc_.dump(1) + "\n";
    return WriteFileAtomically(json_path_, text.data(), text.size());
  }

 private:
  // `pass`: the speculative pass the step ran (null for prefill), recorded beside its timings.
  void Add(const char* kind, const StepStats& step, const SpeculativePass* pass) {
    if (print_) LogInfo(std::string(kind) + " " + FormatStep(step, disk_bps_));
    table_.Add(step, std::string(kind) == "decode");
    nlohmann::json j = StepJson(step, disk_bps_);
    j["kind"] = kind;
    j["positions"] = step.delta.positions;
    if (pass != nullptr) {
      j["rows"] = pass->rows;
      j["drafted"] = pass->drafted;
      j["accepted"] = pass->accepted;
    }
    doc_["steps"].push_back(std::move(j));
  }

  bool print_;
  std::string json_path_;
  const Engine& engine_;
  const Session& session_;
  double disk_bps_ = 0;
  nlohmann::json doc_;
  StepMeter meter_;
  OpBreakdownTable table_;
};

// What `run` does with the decode driver's output: each step to --stats and the router trace;
// each token to the ids list and stdout: K3's channels through the chat parser (--chat), the
// plain text through the incremental detokenizer, or the ids themselves when there is no
// tokenizer. The first error (a trace write, a token the text cannot take) stops the generation
// and is kept for the report, with everything before it.
class RunOutput final : public GenerationCallbacks {
 public:
  RunOutput(const tokenizer::Tokenizer* tok, const RunArgs& args, TextPrinter* printer,
            StatsReporter* stats, RouterTraceWriter* trace)
      : printer_(printer), ignore_eos_(args.ignore_eos), stats_(stats), trace_(trace) {
    generated.reserve(static_cast<size_t>(args.max_new));
    if (tok == nullptr) return;
    if (args.chat && !args.show_special) {
      chat_.emplace(*tok, !args.no_thinking);
    } else {
      plain_.emplace(*tok, args.show_special);
    }
  }
  void OnStepStart() override {
    if (stats_->enabled()) stats_->StartStep();
  }
  void OnStep(const GenerationStep& step) override {
    if (step.index == 0 || !status.ok()) return;  // the first token needs no pass
    if (stats_->enabled()) stats_->EndStep(step);
    // A trace decodes without speculation: the step fed the last token shown.
    if (trace_) status = trace_->WritePositions(step.position - 1, {&generated.back(), 1});
  }
  bool OnToken(int32_t id, std::span<const float> /*logits*/) override {
    if (!status.ok()) return false;
    generated.push_back(id);
    auto end = Show(id);
    if (!end.ok()) status = end.status();
    return end.ok() && (!*end || ignore_eos_);  // the chat parser saw the end of the message
  }
  // Shows what is held back (a partial character becomes U+FFFD) and ends the last line.
  void Finish() {
    if (chat_) {
      tokenizer::ChatDelta delta;
      chat_->Finish(&delta);
      Show(delta);
    } else if (plain_) {
      text_.clear();
      plain_->Finish(&text_);
      printer_->Content(text_);
    }
    printer_->Finish();
  }
  std::vector<int32_t> generated;
  Status status = Status::Ok();

 private:
  // Shows what `id` completes. True when the chat parser saw the end of the message.
  Result<bool> Show(int32_t id) {
    if (chat_) {
      tokenizer::ChatDelta delta;
      DF_RETURN_IF_ERROR(chat_->Feed(id, &delta));
      Show(delta);
      return delta.done;
    }
    if (plain_) {
      text_.clear();
      DF_RETURN_IF_ERROR(plain_->Feed(id, &text_));
      printer_->Content(text_);
      return false;
    }
    printer_->Content((generated.size() == 1 ? "" : " ") + std::to_string(id));
    return false;
  }
  void Show(const tokenizer::ChatDelta& delta) {
    printer_->Reasoning(delta.reasoning);
    printer_->Content(delta.content);
    for (const auto& call : delta.tool_calls) {
      printer_->Content("\n[tool call " + call.name + " " + call.arguments + "]\n");
    }
  }

  TextPrinter* printer_;
  const bool ignore_eos_;
  StatsReporter* stats_;
  RouterTraceWriter* trace_;
  std::optional<tokenizer::ChatOutputParser> chat_;
  std::optional<tokenizer::StreamDetokenizer> plain_;
  std::string text_;
};

std::string IdsJson(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out + "]\n";
}

// Everything that only needs the command line: a wrong one is exit code 2, found at once.
Status CheckUsage(const RunArgs& args) {
  if (args.prompt_opt->count() == 0 && args.prompt_ids_opt->count() == 0) {
    return Status::Error("give a prompt: --prompt TEXT or --prompt-ids 1,2,3");
  }
  if (args.prompt_opt->count() > 0 && args.prompt.empty() && !args.chat) {
    return Status::Error(
        "--prompt is empty: a plain prompt needs at least one token (give some text, or add "
        "--chat to send an empty user turn through the chat template)");
  }
  if (args.prompt_ids_opt->count() > 0) {
    if (args.prompt_ids.empty()) return Status::Error("--prompt-ids is empty: give e.g. 1,2,3");
    auto ids = ParseTokenList(args.prompt_ids);
    if (!ids.ok()) return ids.status().WithContext("--prompt-ids");
  }
  if (args.top_p <= 0) return Status::Error("--top-p must be greater than 0");
  if (args.temperature == 0) {
    for (const CLI::Option* opt : {args.top_p_opt, args.top_k_opt, args.seed_opt}) {
      if (opt->count() > 0) {
        return Status::Error(opt->get_name() +
                             " shapes sampling, but without --temperature (> 0) generation is "
                             "greedy and it would change nothing: add --temperature");
      }
    }
  }
  return args.model.CheckFlags();
}

int RunGenerate(const RunArgs& args) {
  if (Status st = CheckUsage(args); !st.ok()) return UsageError(st.message());
  // Files, before anything slow: the model folder, then every output path.
  if (Status st = args.model.CheckModelDir(); !st.ok()) return Fail(st);
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"--trace", args.trace},
        {"--stats-json", args.stats_json},
        {"--ids-out", args.ids_out}}) {
    if (path.empty()) continue;
    if (Status st = CheckOutputPath(flag, path); !st.ok()) return Fail(st);
  }
  // The tokenizer is optional with --prompt-ids (test models may lack the files).
  auto tok = tokenizer::Tokenizer::LoadModelDir(args.model.model_dir);
  Result<std::vector<int32_t>> ids = std::vector<int32_t>{};
  if (!args.prompt_ids.empty()) {
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
  if (!tok.ok()) {
    LogInfo("no tokenizer in " + args.model.model_dir + " (" + tok.status().message() +
            "): stdout gets the generated ids");
  }

  // The router trace records every fed position, and a verify pass feeds drafts it then drops:
  // tracing decodes without speculation.
  const bool speculate = args.speculate == "ngram" && args.trace.empty();
  ModelFlags model = args.model;
  model.max_draft = speculate ? args.draft_max : 0;
  auto engine = model.LoadEngine();
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

  SamplingParams sampling{
      .temperature = args.temperature, .top_p = args.top_p, .top_k = args.top_k, .seed = args.seed};
  if (args.temperature > 0 && args.seed_opt->count() == 0) {
    sampling.seed = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    LogInfo("sampling seed " + std::to_string(*sampling.seed) + " (--seed repeats this run)");
  }
  sampling.frequency_penalty = args.frequency_penalty;
  sampling.presence_penalty = args.presence_penalty;
  sampling.repetition_penalty = args.repeat_penalty;
  sampling.repeat_last_n = args.repeat_last_n;
  // The ends of the answer: the end of text and, with --chat, of the message.
  std::vector<int32_t> end_tokens;
  if (!args.ignore_eos) {
    end_tokens.push_back(static_cast<int32_t>(info.eos_token_id));
    if (args.chat && tok.ok()) end_tokens.push_back((*tok)->SpecialId("<|end_of_msg|>"));
  }

  TextPrinter printer(stdout, args.hide_thinking        ? ThinkingStyle::kHide
                              : ::isatty(STDOUT_FILENO) ? ThinkingStyle::kDim
                                                        : ThinkingStyle::kPrefix);
  const bool stderr_tty = ::isatty(STDERR_FILENO) != 0;
  PrefillProgressLine progress(stderr, stderr_tty);
  const bool show_progress = (stderr_tty || args.progress) && !args.no_progress;

  StatsReporter stats(args, **engine, *session);
  RunOutput output(tok.ok() ? tok->get() : nullptr, args, &printer, &stats, trace.get());
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (stats.enabled()) stats.Begin();
  if (show_progress)
    progress.Start(static_cast<int64_t>(ids->size()), (*engine)->info().prefill_wave);
  Status st = session->Prefill(*ids, {}, [&](int64_t done, int64_t total) {
    if (show_progress) progress.Update(done, total);
  });
  progress.Finish();
  if (!st.ok()) return Fail(st);
  if (stats.enabled()) stats.EndPrefill();
  if (trace) {
    st = trace->WritePositions(0, *ids);
    if (!st.ok()) return Fail(st);
  }

  // From the first generated token on, an error ends the generation but loses nothing.
  const auto t1 = Clock::now();
  GeneratorOptions options;
  if (speculate) options.drafter = std::make_shared<NgramDrafter>();
  options.speculate.draft_max = args.draft_max;
  Generator generator(session.get(), info, std::move(options));
  const GenerationResult result = generator.Generate(
      *ids, {.sampling = sampling, .max_tokens = args.max_new, .end_tokens = end_tokens}, output);
  st = !output.status.ok() ? output.status : result.status;
  if (st.ok() && result.reason == FinishReason::kContext) {
    st = Status::Error("context full: the session's " + std::to_string(info.context_capacity) +
                       " positions are used (raise --ctx)");
  }
  if (stats.enabled()) stats.Speculation(generator.speculated(), generator.totals());
  const auto t2 = Clock::now();
  output.Finish();
  const std::vector<int32_t>& generated = output.generated;
  if (trace) {
    session->SetObserver(nullptr);
    Status closed = trace->Close();
    if (st.ok()) st = closed;
  }
  Status written = Status::Ok();
  if (!args.ids_out.empty()) {
    const std::string json = IdsJson(generated);
    written = WriteFileAtomically(args.ids_out, json.data(), json.size());
  }
  if (Status s = stats.Write(); written.ok()) written = s;
  stats.PrintSummary();
  if (!st.ok()) {
    return Fail(st.WithContext(
        "after " + std::to_string(generated.size()) + " generated tokens (shown above" +
        ((args.ids_out.empty() || !written.ok()) ? "" : ", and in --ids-out") + ")"));
  }
  if (!written.ok()) return Fail(written);

  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  char line[240];
  // The first token comes from the prompt's logits; the rate is over the decode steps after it.
  const size_t steps = generated.size() - 1;
  if (steps == 0) {
    std::snprintf(line, sizeof line,
                  "prompt %zu tokens in %.3f s (%.2f tok/s); generated 1 token, from the prompt's "
                  "logits (no decode step, so no decode rate)",
                  ids->size(), prefill_s, static_cast<double>(ids->size()) / prefill_s);
  } else {
    std::snprintf(line, sizeof line,
                  "prompt %zu tokens in %.3f s (%.2f tok/s); generated %zu tokens: %zu decode "
                  "steps in %.3f s (%.2f tok/s)",
                  ids->size(), prefill_s, static_cast<double>(ids->size()) / prefill_s,
                  generated.size(), steps, decode_s, static_cast<double>(steps) / decode_s);
  }
  LogInfo(line);
  return kExitOk;
}

}  // namespace

void RegisterRun(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Generate from a prompt, printing the text as it is produced (greedy by default)");
  args->model.Add(cmd);
  auto* ids_opt =
      cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt as comma-separated token ids");
  args->prompt_ids_opt = ids_opt;
  args->prompt_opt =
      cmd->add_option("--prompt", args->prompt, "Prompt as text (needs the model's tokenizer)")
          ->excludes(ids_opt);
  auto* chat =
      cmd->add_flag("--chat", args->chat, "Render --prompt as one user turn of K3's chat template");
  cmd->add_flag("--no-thinking", args->no_thinking, "With --chat: thinking off")->needs(chat);
  cmd->add_option("--reasoning-effort", args->effort, "With --chat: low, medium, high or max")
      ->check(OneOf({"low", "medium", "high", "max"}))
      ->needs(chat);
  auto* show_special = cmd->add_flag(
      "--show-special", args->show_special,
      "Print special tokens as their spellings (<|open|>, ...) and, with --chat, the raw output "
      "without separating thinking from the answer");
  cmd->add_flag("--hide-thinking", args->hide_thinking,
                "With --chat: do not print K3's thinking (it is dimmed on a terminal, prefixed "
                "\"thinking: \" in a file or pipe)")
      ->needs(chat)
      ->excludes(show_special);
  cmd->add_option("--max-new", args->max_new, "Maximum tokens to generate")
      ->check(IntRange(1, int64_t{1} << 30));
  cmd->add_flag("--ignore-eos", args->ignore_eos,
                "Keep generating after the end-of-text token (and, with --chat, the end of the "
                "message)");
  auto* temperature = cmd->add_option("--temperature", args->temperature,
                                      "Sampling temperature; 0 = greedy (the highest logit)");
  temperature->check(NumberRange(0, 2));
  args->top_p_opt = cmd->add_option("--top-p", args->top_p,
                                    "With --temperature: sample from the smallest set of tokens "
                                    "whose probability reaches this (1 = no cut)")
                        ->check(NumberRange(0, 1));
  args->top_k_opt =
      cmd->add_option("--top-k", args->top_k,
                      "With --temperature: sample from the k most likely tokens (0 = no cut)")
          ->check(IntRange(0, INT32_MAX));
  args->seed_opt = cmd->add_option("--seed", args->seed,
                                   "With --temperature: random seed, for a repeatable run "
                                   "(default: a fresh one, printed on stderr)")
                       ->check(IntRange(0, INT64_MAX))
                       ->default_str("");
  // Penalties (docs/SERVER.md "Penalties"; greedy runs too): OpenAI's over the generated tokens,
  // llama-server's repetition penalty over the last --repeat-last-n tokens, prompt included.
  cmd->add_option("--frequency-penalty", args->frequency_penalty,
                  "Subtract this times a token's count in the answer so far from its logit")
      ->check(NumberRange(-2, 2));
  cmd->add_option("--presence-penalty", args->presence_penalty,
                  "Subtract this from the logit of every token the answer already has")
      ->check(NumberRange(-2, 2));
  cmd->add_option("--repeat-penalty", args->repeat_penalty,
                  "Divide a positive logit (multiply a negative one) of every token among the "
                  "last --repeat-last-n by this; 1 = off")
      ->check(NumberRange(0.01, 10));
  cmd->add_option("--repeat-last-n", args->repeat_last_n,
                  "The repetition penalty's window in tokens, prompt included")
      ->check(IntRange(0, 65536));
  cmd->add_option("--speculate", args->speculate,
                  "Speculative decoding: ngram drafts from the context (prompt lookup), verified "
                  "in one pass; lossless (docs/SPECULATION.md). off: one token per pass")
      ->check(OneOf({"off", "ngram"}));
  cmd->add_option("--draft-max", args->draft_max, "Most draft tokens per verify pass")
      ->check(IntRange(1, 64));
  cmd->add_option("--ids-out", args->ids_out,
                  "Write the generated token ids to this file as one JSON array");
  cmd->add_option("--trace", args->trace,
                  "Write the router trace (one JSON line per fed position) to this file");
  cmd->add_flag("--stats", args->stats,
                "Print per token: time, expert and spine bytes read, cache and prefetch hits, I/O "
                "wait vs compute, GB/s, the floor and the floor ratio");
  cmd->add_option("--stats-json", args->stats_json, "Write the --stats numbers to this JSON file");
  auto* progress = cmd->add_flag("--progress", args->progress,
                                 "Print the prefill progress line even when stderr is not a "
                                 "terminal (then one line per prefill chunk)");
  cmd->add_flag("--no-progress", args->no_progress, "No prefill progress line on a terminal")
      ->excludes(progress);
  cmd->callback([args, exit_code] { *exit_code = RunGenerate(*args); });
}

}  // namespace deltafin::cli
