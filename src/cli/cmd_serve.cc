// `deltafin serve`: loads the model and its tokenizer, then runs the OpenAI-compatible HTTP
// server (server/http_server.h, docs/SERVER.md) until SIGINT or SIGTERM.
#include <csignal>
#include <filesystem>
#include <thread>

#include "base/byte_size.h"
#include "base/log.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "server/cors.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::cli {

namespace {

struct ServeArgs {
  ModelFlags model;
  server::ServerOptions opt;
  double max_body_mib = 32;
  std::string log_level = "info";
  std::string cache_dir;  // "" = <model>/.deltafin/prefix-cache
  std::string cache_bytes = "8GiB";
  std::string cache_ram_bytes = "1GiB";
  std::string speculate = "ngram";  // off | ngram (docs/SPECULATION.md)
  int draft_max = 8;
};

int RunServe(ServeArgs& args) {
  // Block the stop signals in every thread; one thread waits for them and stops the server.
  // SIGUSR1 is the wake-up sent to that thread when the server ends by itself.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that vanishes mid-write is an error, not a kill

  // A server's log is read later against the clock: timestamp every line, filter by level.
  SetLogTimestamps(true);
  SetLogLevel(ParseLogLevel(args.log_level).value_or(LogLevel::kInfo));
  server::ServerOptions& opt = args.opt;
  for (const std::string& origin : opt.cors_origins) {
    if (std::string why = server::CheckCorsOrigin(origin); !why.empty()) {
      return Fail(Status::Error(why));
    }
  }
  if (!server::IsLoopback(opt.host) && opt.api_key.empty() && !opt.insecure_no_auth) {
    return Fail(Status::Error("refusing to listen on non-loopback address " + opt.host +
                              " without --api-key (add --insecure-no-auth to allow it)"));
  }
  auto tok = tokenizer::Tokenizer::LoadModelDir(args.model.model_dir);
  if (!tok.ok()) return Fail(tok.status().WithContext("serve needs the model's tokenizer"));
  // The sessions reserve the rollback memory of draft_max + 1 verify rows (19.4 MiB per row at K3
  // size, docs/SPECULATION.md).
  args.model.max_draft = args.speculate == "ngram" ? args.draft_max : 0;
  opt.draft_max = args.model.max_draft;
  auto engine = args.model.LoadEngine();
  if (!engine.ok()) return Fail(engine.status());
  if (opt.model_name.empty()) {
    opt.model_name = std::filesystem::path(args.model.model_dir).lexically_normal().filename();
    if (opt.model_name.empty()) {
      opt.model_name = std::filesystem::path(args.model.model_dir).parent_path().filename();
    }
  }
  opt.max_body_bytes = static_cast<size_t>(args.max_body_mib * 1024 * 1024);
  // A prompt is fed one wave per Prefill call: cancellation and keep-alives between waves.
  opt.prefill_piece = (*engine)->info().prefill_wave;
  if (opt.prefix_cache) {
    auto disk = ParseByteSize(args.cache_bytes, /*allow_zero=*/true);
    if (!disk.ok()) return Fail(disk.status().WithContext("--cache-bytes"));
    auto ram = ParseByteSize(args.cache_ram_bytes);
    if (!ram.ok()) return Fail(ram.status().WithContext("--cache-ram-bytes"));
    opt.cache_disk_bytes = *disk;
    opt.cache_ram_bytes = *ram;
    opt.cache_dir =
        args.cache_dir.empty()
            ? (std::filesystem::path(args.model.model_dir) / ".deltafin" / "prefix-cache").string()
            : args.cache_dir;
    if (opt.cache_disk_bytes == 0) opt.cache_dir.clear();  // --cache-bytes 0: RAM only
  }
  server::HttpServer http(**engine, **tok, opt);
  std::thread waiter([&http, stop_signals] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (sig != SIGUSR1) LogInfo("stopping (signal " + std::to_string(sig) + ")");
    http.Stop();
  });
  Status st = http.Run();
  // Wake the waiter if the server ended by itself.
  pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  return st.ok() ? 0 : Fail(st);
}

}  // namespace

void RegisterServe(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ServeArgs>();
  server::ServerOptions& o = args->opt;
  CLI::App* cmd =
      app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/chat/completions)");
  args->model.Add(cmd);
  cmd->add_option("--host", o.host, "Address to bind (non-loopback needs --api-key)");
  cmd->add_option("--port", o.port, "Port (0 = any free port)")->check(IntRange(0, 65535));
  cmd->add_option("--api-key", o.api_key, "Require Authorization: Bearer <key>");
  cmd->add_flag("--insecure-no-auth", o.insecure_no_auth,
                "Allow a non-loopback --host without --api-key");
  cmd->add_option("--served-model-name", o.model_name,
                  "Model id in /v1/models and responses (default: the model folder's name)");
  cmd->add_option("--max-queue", o.max_queue, "Requests that may wait for the engine (then 429)")
      ->check(IntRange(0, 100000));
  cmd->add_option("--ping-interval", o.ping_interval_s,
                  "Seconds between SSE keep-alive comments while nothing else is sent")
      ->check(NumberRange(0.01, 3600.0));
  cmd->add_option("--retry-after", o.retry_after_s, "Retry-After seconds of a 429")
      ->check(IntRange(0, 3600));
  cmd->add_option("--max-body-mib", args->max_body_mib, "Largest request body (then 413)")
      ->check(NumberRange(0.001, 4096.0));
  cmd->add_option("--http-threads", o.http_threads, "HTTP connection threads")
      ->check(IntRange(4, 4096));
  cmd->add_option("--read-timeout", o.read_timeout_s,
                  "Seconds a client may stall while sending a request body")
      ->check(NumberRange(0.1, 3600.0));
  cmd->add_option("--header-timeout", o.header_timeout_s,
                  "Seconds a connection has to send a complete request head (then 408)")
      ->check(NumberRange(0.1, 3600.0));
  cmd->add_option("--max-connections", o.max_connections,
                  "Open connections at once, idle or busy (then 503)")
      ->check(IntRange(8, 1000000));
  cmd->add_option("--completion-max-tokens", o.defaults.completion_max_tokens,
                  "Default max_tokens of /v1/completions")
      ->check(IntRange(1, int64_t{1} << 30));
  cmd->add_option("--reasoning-effort", o.defaults.reasoning_effort,
                  "Default thinking effort of chats: low, medium, high, max")
      ->check(OneOf({"low", "medium", "high", "max"}));
  cmd->add_flag(
      "--no-thinking", [args](int64_t) { args->opt.defaults.thinking = false; },
      "Chats default to thinking off (requests can still turn it on)");
  cmd->add_flag("--log-prompts", o.log_prompts, "Log prompts and outputs (off by default)");
  cmd->add_option("--log-level", args->log_level,
                  "Least severe log lines written: debug, info (one line per request), warn, "
                  "error")
      ->check(OneOf({"debug", "info", "warn", "error"}))
      ->capture_default_str();
  cmd->add_option("--cors-origin", o.cors_origins,
                  "Allow browser pages from this origin (scheme://host[:port], or * for any; "
                  "repeatable). Without it no CORS headers are sent")
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_flag(
      "--no-webui", [args](int64_t) { args->opt.web_ui = false; },
      "Do not serve the chat page at GET /");
  cmd->add_option("--cache-dir", args->cache_dir,
                  "Prefix cache folder (default: <model>/.deltafin/prefix-cache)");
  cmd->add_option("--cache-bytes", args->cache_bytes,
                  "Disk budget of the prefix cache (e.g. 8GiB; 0 = keep it in RAM only)")
      ->capture_default_str();
  cmd->add_option("--cache-ram-bytes", args->cache_ram_bytes,
                  "RAM budget of the prefix cache's snapshots")
      ->capture_default_str();
  cmd->add_option("--speculate", args->speculate,
                  "Speculative decoding of greedy and unseeded answers: ngram drafts from the "
                  "conversation (prompt lookup), verified losslessly in one pass, or off")
      ->check(OneOf({"off", "ngram"}))
      ->capture_default_str();
  cmd->add_option("--draft-max", args->draft_max, "Most draft tokens per verify pass")
      ->check(IntRange(1, 64))
      ->capture_default_str();
  cmd->add_flag(
      "--no-prefix-cache", [args](int64_t) { args->opt.prefix_cache = false; },
      "Do not snapshot or restore prompt prefixes");
  cmd->callback([args, exit_code] { *exit_code = RunServe(*args); });
}

}  // namespace deltafin::cli
