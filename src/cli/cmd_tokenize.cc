// `deltafin tokenize`: text on stdin → ids (JSON array); --decode: ids → bytes; --chat FILE:
// an OpenAI-style chat rendered with K3's template → ids (or, with --text, the rendered string).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/log.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "io/mapped_file.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::cli {

namespace {

using tokenizer::Tokenizer;

struct TokenizeArgs {
  std::string model_dir, tiktoken, config, pattern, input, chat, effort = "max";
  bool decode = false, allow_special = false, no_thinking = false, text = false, jsonl = false;
  int threads = 1;
};

std::string ReadAll(FILE* f) {
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return out;
}

void PrintIds(const std::vector<int32_t>& ids) {
  std::string out = "[";
  out.reserve(ids.size() * 7 + 3);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const TokenizeArgs& a) {
  if (!a.model_dir.empty()) return Tokenizer::LoadModelDir(a.model_dir);
  if (a.tiktoken.empty()) return Status::Error("give --model DIR or --tiktoken FILE --pattern P");
  DF_ASSIGN_OR_RETURN(auto kind, tokenizer::ParsePatternKind(a.pattern));
  DF_ASSIGN_OR_RETURN(auto vocab, tokenizer::Vocab::LoadTiktoken(a.tiktoken));
  if (!a.config.empty()) {
    DF_ASSIGN_OR_RETURN(std::string cfg, ReadFileToString(a.config));
    DF_RETURN_IF_ERROR(vocab.LoadSpecialsFromConfig(cfg, a.config));
  }
  return Tokenizer::Create(std::move(vocab), kind);
}

int RunTokenize(const TokenizeArgs& a) {
  if (a.model_dir.empty() && a.tiktoken.empty()) {
    return UsageError("give --model DIR, or --tiktoken FILE --pattern k3|cl100k|o200k");
  }
  auto tok = LoadTokenizer(a);
  if (!tok.ok()) return Fail(tok.status());
  std::string in;
  if (a.chat.empty()) {
    if (a.input.empty()) {
      in = ReadAll(stdin);
    } else {
      auto r = ReadFileToString(a.input);
      if (!r.ok()) return Fail(r.status());
      in = std::move(*r);
    }
  }
  if (a.decode) {
    // Accept a JSON array or a comma list; an empty list decodes to nothing.
    std::string list;
    for (char c : in) {
      if (c != '[' && c != ']' && c != '\n' && c != '\r' && c != ' ' && c != '\t') list += c;
    }
    if (list.empty()) return 0;
    auto ids = ParseTokenList(list);
    if (!ids.ok()) return Fail(ids.status());
    auto bytes = (*tok)->Decode(*ids);
    if (!bytes.ok()) return Fail(bytes.status());
    std::fwrite(bytes->data(), 1, bytes->size(), stdout);
    return 0;
  }
  if (!a.chat.empty()) {
    auto text = ReadFileToString(a.chat);
    if (!text.ok()) return Fail(text.status());
    tokenizer::ChatOptions opts;
    opts.reasoning_effort = a.effort;
    auto segs = tokenizer::RenderChatRequest(*text, &opts);
    if (!segs.ok()) return Fail(segs.status().WithContext(a.chat));
    if (a.no_thinking) {  // the flag wins over the file
      opts.thinking = false;
      segs = tokenizer::RenderChatRequest(*text, &opts);
      if (!segs.ok()) return Fail(segs.status().WithContext(a.chat));
    }
    if (a.text) {
      const std::string s = tokenizer::ChatText(*segs);
      std::fwrite(s.data(), 1, s.size(), stdout);
      return 0;
    }
    auto ids = tokenizer::EncodeChat(**tok, *segs);
    if (!ids.ok()) return Fail(ids.status());
    PrintIds(*ids);
    return 0;
  }
  tokenizer::EncodeOptions opts;
  opts.allow_all_special = a.allow_special;
  opts.threads = a.threads;
  if (a.jsonl) {  // one JSON string per line in, one JSON array per line out
    size_t pos = 0, line_no = 0;
    while (pos < in.size()) {
      size_t end = in.find('\n', pos);
      if (end == std::string::npos) end = in.size();
      ++line_no;
      const auto doc = nlohmann::json::parse(in.begin() + static_cast<ptrdiff_t>(pos),
                                             in.begin() + static_cast<ptrdiff_t>(end), nullptr,
                                             /*allow_exceptions=*/false);
      pos = end + 1;
      if (doc.is_discarded() || !doc.is_string()) {
        return Fail(Status::Error("line " + std::to_string(line_no) + ": not a JSON string"));
      }
      auto ids = (*tok)->Encode(doc.get_ref<const std::string&>(), opts);
      if (!ids.ok()) return Fail(ids.status().WithContext("line " + std::to_string(line_no)));
      PrintIds(*ids);
    }
    return 0;
  }
  auto ids = (*tok)->Encode(in, opts);
  if (!ids.ok()) return Fail(ids.status().WithContext(a.input.empty() ? "stdin" : a.input));
  PrintIds(*ids);
  return 0;
}

}  // namespace

void RegisterTokenize(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Text on stdin -> token ids (JSON array); --decode: ids -> bytes; --chat");
  auto* model = cmd->add_option("--model", a->model_dir,
                                "Model directory (tiktoken.model + tokenizer_config.json, K3 "
                                "pattern)");
  auto* tiktoken = cmd->add_option("--tiktoken", a->tiktoken,
                                   "A tiktoken rank file instead of --model (needs --pattern); "
                                   "the whole text is pre-tokenized at once, as tiktoken does "
                                   "(only a K3 --model folder cuts 25,000-character runs first, "
                                   "as tokenization_kimi.py does)")
                       ->excludes(model);
  cmd->add_option("--tokenizer-config", a->config,
                  "tokenizer_config.json with the special tokens (with --tiktoken)")
      ->needs(tiktoken);
  // No default: a rank file does not say which pre-tokenizer it was trained with, and the wrong
  // one silently gives other ids.
  auto* pattern = cmd->add_option("--pattern", a->pattern,
                                  "Pre-tokenizer of the --tiktoken file: k3, cl100k or o200k")
                      ->check(OneOf({"k3", "cl100k", "o200k"}))
                      ->needs(tiktoken);
  tiktoken->needs(pattern);
  cmd->add_option("--input", a->input, "Read this file instead of stdin");
  cmd->add_flag("--jsonl", a->jsonl,
                "Input lines are JSON strings, each encoded separately (one array per line)");
  cmd->add_flag("--decode", a->decode, "Read ids (JSON array or comma list), write the bytes");
  cmd->add_flag("--allow-special", a->allow_special,
                "Recognise special-token spellings in the text (default: ordinary text)");
  cmd->add_option("--threads", a->threads, "Threads for long inputs (0 = all cores)")
      ->check(IntRange(0, 1024));
  auto* chat = cmd->add_option("--chat", a->chat,
                               "Render this chat request (messages array, or {messages, tools, "
                               "thinking, reasoning_effort}) with K3's template");
  cmd->add_flag("--no-thinking", a->no_thinking, "With --chat: thinking off")->needs(chat);
  cmd->add_option("--reasoning-effort", a->effort, "With --chat: low, medium, high or max")
      ->check(OneOf({"low", "medium", "high", "max"}))
      ->needs(chat);
  cmd->add_flag("--text", a->text, "With --chat: print the rendered text instead of ids")
      ->needs(chat);
  cmd->callback([a, exit_code] { *exit_code = RunTokenize(*a); });
}

}  // namespace deltafin::cli
