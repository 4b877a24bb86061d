// deltafin's side of the differential tokenizer fuzzer (tests/tokenizer/oracle/difffuzz.cjs).
// A long-lived child of the node process that runs npm tiktoken: it loads the three tokenizers
// under test once, then answers binary requests on stdin until EOF, so one process start serves
// the whole campaign and raw bytes (including invalid UTF-8, which JSON cannot carry) pass as is.
//
//   tokenizer_difffuzz_peer RANKS_DIR MODEL_DIR
//     config 0: RANKS_DIR/cl100k_base.tiktoken + cl100k_base.specials.json, cl100k pattern
//     config 1: RANKS_DIR/o200k_base.tiktoken + o200k_base.specials.json, o200k pattern
//     config 2: MODEL_DIR (a K3 model folder: tiktoken.model + tokenizer_config.json), K3's
//               tokenizer: the Kimi split, then K3's pattern
//     config 3: RANKS_DIR/o200k_base ranks + specials with K3's pattern over the whole text
//               (tiktoken with K3's pattern: no Kimi split)
//     configs 4, 5, 6: MODEL_DIR's ranks and specials with the cl100k, o200k and K3 patterns over
//               the whole text. The tiny vocabulary has no whitespace merges but "\n\n" and has
//               " a"-style tokens, so piece boundaries at the end of a whitespace run show in the
//               ids while tiktoken's quadratic merge loop stays cheap on million-character runs.
//
// Request (little-endian u32s): config, flags (bit 0: allow every special spelling; bit 1: encode
// on 4 threads), byte count, bytes. Reply: status (0 ok, 1 refused), then for ok the id count and
// the ids, for refused the message length and the message.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "tokenizer/tokenizer.h"

using namespace deltafin;
using namespace deltafin::tokenizer;

namespace {

int Die(const std::string& message) {
  std::fprintf(stderr, "tokenizer_difffuzz_peer: %s\n", message.c_str());
  return 2;
}

// A tiktoken encoding as the npm package ships it: ranks plus a {"spelling": id} specials file.
Result<std::unique_ptr<Tokenizer>> LoadEncoding(const std::string& dir, const std::string& name,
                                                PatternKind pattern) {
  DF_ASSIGN_OR_RETURN(Vocab vocab, Vocab::LoadTiktoken(dir + "/" + name + ".tiktoken"));
  const std::string specials_path = dir + "/" + name + ".specials.json";
  DF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(specials_path));
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return Status::Error(specials_path + ": not a JSON object");
  for (const auto& [spelling, id] : json.items()) {
    if (!id.is_number_unsigned()) return Status::Error(specials_path + ": id is not a number");
    DF_RETURN_IF_ERROR(vocab.AddSpecial(spelling, id.get<uint32_t>()));
  }
  return Tokenizer::Create(std::move(vocab), pattern, InputSplit::kNone);
}

// MODEL_DIR's ranks and specials with any pattern, no Kimi split.
Result<std::unique_ptr<Tokenizer>> LoadModelVocab(const std::string& dir, PatternKind pattern) {
  DF_ASSIGN_OR_RETURN(Vocab vocab, Vocab::LoadTiktoken(dir + "/tiktoken.model"));
  const std::string config_path = dir + "/tokenizer_config.json";
  DF_ASSIGN_OR_RETURN(std::string config, ReadFileToString(config_path));
  DF_RETURN_IF_ERROR(vocab.LoadSpecialsFromConfig(config, config_path));
  return Tokenizer::Create(std::move(vocab), pattern, InputSplit::kNone);
}

bool ReadU32(uint32_t* v) { return std::fread(v, 4, 1, stdin) == 1; }
void WriteU32(uint32_t v) { std::fwrite(&v, 4, 1, stdout); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return Die("usage: tokenizer_difffuzz_peer RANKS_DIR MODEL_DIR");
  std::vector<std::unique_ptr<Tokenizer>> configs;
  for (auto [name, pattern] : {std::pair{"cl100k_base", PatternKind::kCl100k},
                               std::pair{"o200k_base", PatternKind::kO200k}}) {
    auto tok = LoadEncoding(argv[1], name, pattern);
    if (!tok.ok()) return Die(tok.status().message());
    configs.push_back(std::move(*tok));
  }
  auto k3 = Tokenizer::LoadModelDir(argv[2]);
  if (!k3.ok()) return Die(k3.status().message());
  configs.push_back(std::move(*k3));
  auto o200k_k3 = LoadEncoding(argv[1], "o200k_base", PatternKind::kK3);
  if (!o200k_k3.ok()) return Die(o200k_k3.status().message());
  configs.push_back(std::move(*o200k_k3));
  for (PatternKind pattern : {PatternKind::kCl100k, PatternKind::kO200k, PatternKind::kK3}) {
    auto tok = LoadModelVocab(argv[2], pattern);
    if (!tok.ok()) return Die(tok.status().message());
    configs.push_back(std::move(*tok));
  }

  std::string text;
  uint32_t config = 0, flags = 0, size = 0;
  while (ReadU32(&config)) {
    if (!ReadU32(&flags) || !ReadU32(&size)) return Die("truncated request header");
    if (config >= configs.size()) return Die("unknown config " + std::to_string(config));
    text.resize(size);
    if (size > 0 && std::fread(text.data(), 1, size, stdin) != size)
      return Die("truncated request body");
    EncodeOptions options;
    options.allow_all_special = (flags & 1) != 0;
    options.threads = (flags & 2) != 0 ? 4 : 1;
    const auto ids = configs[config]->Encode(text, options);
    if (ids.ok()) {
      WriteU32(0);
      WriteU32(static_cast<uint32_t>(ids->size()));
      std::fwrite(ids->data(), 4, ids->size(), stdout);
    } else {
      const std::string& message = ids.status().message();
      WriteU32(1);
      WriteU32(static_cast<uint32_t>(message.size()));
      std::fwrite(message.data(), 1, message.size(), stdout);
    }
    std::fflush(stdout);
  }
  return 0;
}
