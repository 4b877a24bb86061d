// libFuzzer target: arbitrary bytes as a /v1/chat/completions or /v1/completions body (first
// byte picks the endpoint), through parsing, validation, chat-template rendering and encoding
// with the golden tiny tokenizer. Must never crash, leak, hit UB or throw; errors are fine.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "server/request.h"
#include "tokenizer/tokenizer.h"

namespace {
const deltafin::tokenizer::Tokenizer& Tok() {
  static auto tok = deltafin::tokenizer::Tokenizer::LoadModelDir(DF_FUZZ_MODEL_DIR);
  if (!tok.ok()) __builtin_trap();
  return **tok;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using deltafin::server::Endpoint;
  const Endpoint ep = data[0] & 1 ? Endpoint::kCompletion : Endpoint::kChat;
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  deltafin::server::GenerationRequest req;
  if (deltafin::server::ParseGenerationRequest(body, ep, {}, &req)) return 0;
  std::vector<int32_t> ids;
  (void)deltafin::server::BuildPrompt(req, Tok(), &ids);
  return 0;
}
