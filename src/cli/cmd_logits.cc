// `deltafin logits`: the stable verification interface. Feeds a token list and writes the fp32
// logits of every position as raw little-endian float32, row-major [positions, vocab].
// `--dump DIR` also writes per-layer activations ([positions, H] float32 files named
// L<layer>.<name>.f32) and the routes (routes.jsonl) for diffing against a reference.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/log.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace deltafin::cli {

namespace {

class DumpObserver : public ForwardObserver {
 public:
  explicit DumpObserver(std::string dir) : dir_(std::move(dir)) {}
  void OnActivation(int64_t, int64_t layer, const char* name,
                    std::span<const float> values) override {
    char file[64];
    if (layer < 0) {
      std::snprintf(file, sizeof(file), "%s.f32", name);
    } else {
      std::snprintf(file, sizeof(file), "L%02lld.%s.f32", static_cast<long long>(layer), name);
    }
    auto& buf = data_[file];
    buf.insert(buf.end(), values.begin(), values.end());
  }
  void OnRoute(int64_t position, int64_t layer, std::span<const int32_t> experts,
               std::span<const float> weights) override {
    nlohmann::json line = {{"position", position},
                           {"layer", layer},
                           {"experts", std::vector<int32_t>(experts.begin(), experts.end())},
                           {"weights", std::vector<float>(weights.begin(), weights.end())}};
    routes_ += line.dump() + "\n";
  }
  Status Write() const {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) return Status::Error(dir_ + ": cannot create: " + ec.message());
    for (const auto& [file, values] : data_) {
      DF_RETURN_IF_ERROR(
          WriteFileAtomically(dir_ + "/" + file, values.data(), values.size() * sizeof(float)));
    }
    return WriteFileAtomically(dir_ + "/routes.jsonl", routes_.data(), routes_.size());
  }

 private:
  std::string dir_;
  std::map<std::string, std::vector<float>> data_;
  std::string routes_;
};

struct LogitsArgs {
  ModelFlags model;
  std::string tokens;
  std::string out;
  std::string dump_dir;
};

int RunLogits(const LogitsArgs& args) {
  auto ids = ParseTokenList(args.tokens);
  if (!ids.ok()) return Fail(ids.status());
  // Before the model loads: a bad --out path must not cost a whole forward pass.
  if (Status st = CheckOutputPath("--out", args.out); !st.ok()) return Fail(st);
  // Token ids are checked against the vocabulary before loading, so that a bad id is the one line
  // of stderr rather than following the memory plan the load prints.
  if (auto options = args.model.Options(); options.ok()) {
    if (auto plan = Engine::Plan(*options); plan.ok()) {
      if (Status st = CheckTokenIds(*ids, plan->vocab_size); !st.ok()) return Fail(st);
    }
  }
  auto engine = args.model.LoadEngine();
  if (!engine.ok()) return Fail(engine.status());
  auto session = (*engine)->NewSession();
  std::unique_ptr<DumpObserver> dump;
  if (!args.dump_dir.empty()) {
    dump = std::make_unique<DumpObserver>(args.dump_dir);
    session->SetObserver(dump.get());
  }
  const auto vocab = static_cast<size_t>((*engine)->info().vocab_size);
  std::vector<float> logits(ids->size() * vocab);
  Status st = session->Prefill(*ids, logits);
  if (!st.ok()) return Fail(st);
  st = WriteFileAtomically(args.out, logits.data(), logits.size() * sizeof(float));
  if (!st.ok()) return Fail(st);
  if (dump) {
    st = dump->Write();
    if (!st.ok()) return Fail(st);
  }
  LogInfo("wrote " + std::to_string(ids->size()) + " x " + std::to_string(vocab) +
          " fp32 logits to " + args.out);
  return 0;
}

}  // namespace

void RegisterLogits(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<LogitsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "logits",
      "Write the fp32 logits of every position of a token list as raw little-endian float32, "
      "row-major [positions, vocab]");
  args->model.Add(cmd);
  cmd->add_option("--tokens", args->tokens, "Comma-separated token ids, e.g. 1,2,3")->required();
  cmd->add_option("--out", args->out, "Output file")->required();
  cmd->add_option("--dump", args->dump_dir,
                  "Also write per-layer activations and routes into this directory");
  cmd->callback([args, exit_code] { *exit_code = RunLogits(*args); });
}

}  // namespace deltafin::cli
