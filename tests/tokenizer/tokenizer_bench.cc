// Encode throughput benchmark (not a test): MB/s of Tokenizer::Encode on one input, single-
// threaded and on N threads, checking that every thread count gives the same ids. Driven by
// tests/tokenizer/bench.sh, which runs npm tiktoken on the same input in the same run.
//
//   tokenizer_bench (--model DIR | --tiktoken FILE --pattern k3|cl100k|o200k) --input FILE
//                   [--threads 1,4,16] [--repeat N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "tokenizer/tokenizer.h"

using deltafin::ReadFileToString;
using namespace deltafin::tokenizer;

int main(int argc, char** argv) {
  std::string model, tiktoken, pattern = "k3", input, threads_list = "1";
  int repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      model = v;
    else if (k == "--tiktoken")
      tiktoken = v;
    else if (k == "--pattern")
      pattern = v;
    else if (k == "--input")
      input = v;
    else if (k == "--threads")
      threads_list = v;
    else if (k == "--repeat")
      repeat = std::atoi(v.c_str());
  }
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "error: %s\n", m.c_str());
    return 1;
  };
  deltafin::Result<std::unique_ptr<Tokenizer>> tok =
      deltafin::Status::Error("give --model or --tiktoken");
  if (!model.empty()) {
    tok = Tokenizer::LoadModelDir(model);
  } else if (!tiktoken.empty()) {
    auto kind = ParsePatternKind(pattern);
    if (!kind.ok()) return fail(kind.status().message());
    auto vocab = Vocab::LoadTiktoken(tiktoken);
    if (!vocab.ok()) return fail(vocab.status().message());
    tok = Tokenizer::Create(std::move(*vocab), *kind);
  }
  if (!tok.ok()) return fail(tok.status().message());
  auto text = ReadFileToString(input);
  if (!text.ok()) return fail(text.status().message());
  std::vector<int32_t> reference;
  size_t pos = 0;
  while (pos <= threads_list.size()) {
    size_t comma = threads_list.find(',', pos);
    if (comma == std::string::npos) comma = threads_list.size();
    EncodeOptions opts;
    opts.threads = std::atoi(threads_list.substr(pos, comma - pos).c_str());
    pos = comma + 1;
    auto ids = (*tok)->Encode(*text, opts);  // warm-up (and the ids to compare)
    if (!ids.ok()) return fail(ids.status().message());
    if (reference.empty()) reference = *ids;
    if (*ids != reference) return fail("ids differ between thread counts");
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < repeat; ++r) {
      auto again = (*tok)->Encode(*text, opts);
      if (!again.ok()) return fail(again.status().message());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "{\"engine\": \"deltafin\", \"threads\": %d, \"mb_per_s\": %.2f, \"tokens\": %zu}\n",
        opts.threads, static_cast<double>(text->size()) * repeat / 1e6 / s, ids->size());
  }
  return 0;
}
