// libFuzzer target: arbitrary bytes as the body of each endpoint that takes one
// (/v1/chat/completions, /v1/completions, /v1/messages or /v1/responses; the first byte mod 4
// picks it), taken through everything the
// server does with a body short of the engine: parsing, validation, chat-template rendering and
// encoding with the golden tiny tokenizer, then the answer's side — the prompt's own ids (rich in
// the chat template's special tokens) followed by ids taken from the input's last bytes are fed
// to the OutputAssembler as if generated, and rendered as the whole response, the stream's chunks
// and the usage chunk (or the Anthropic message and events, the Responses object and events, and
// the response store). Must never crash, leak, hit UB or throw; errors are fine.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "server/anthropic_api.h"
#include "server/output.h"
#include "server/request.h"
#include "server/response_json.h"
#include "server/responses_api.h"
#include "tokenizer/tokenizer.h"

namespace {

const deltafin::tokenizer::Tokenizer& Tok() {
  static auto tok = deltafin::tokenizer::Tokenizer::LoadModelDir(DF_FUZZ_MODEL_DIR);
  if (!tok.ok()) __builtin_trap();
  return **tok;
}

// As the server serialises for the wire (http_internal.h): invalid UTF-8 is replaced, never thrown.
void Render(const nlohmann::ordered_json& j) {
  (void)j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace deltafin::server;
  const int api = data[0] % 4;  // 0 chat, 1 completions, 2 messages, 3 responses
  const Endpoint ep = api == 1 ? Endpoint::kCompletion : Endpoint::kChat;
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  GenerationRequest req;
  static ResponseStore store(4, 1 << 16);
  ResponsesContext ctx;
  if (api < 2 && ParseGenerationRequest(body, ep, {}, &req)) return 0;
  if (api == 2 && ParseAnthropicRequest(body, {}, data[0] & 4, &req)) return 0;
  if (api == 3 && ParseResponsesRequest(body, {}, &store, &req, &ctx)) return 0;
  std::vector<int32_t> ids;
  if (BuildPrompt(req, Tok(), &ids)) return 0;

  // "Generated" ids: the prompt, then up to 32 ids from the input's last bytes, in the vocabulary.
  const int32_t vocab = static_cast<int32_t>(Tok().vocab().vocab_size());
  const int32_t eos = Tok().SpecialId("<|end_of_msg|>");
  std::vector<int32_t> generated = ids;
  for (size_t i = size > 65 ? size - 64 : 1; i + 1 < size; i += 2) {
    generated.push_back(static_cast<int32_t>((data[i] | (data[i + 1] << 8)) % vocab));
  }
  OutputAssembler out(req, Tok(), eos);
  const ResponseMeta meta{"id-fuzz", 0, "m", ep};
  OutputDelta all, delta;
  if (eos < 0) __builtin_trap();
  bool first = true;
  AnthropicEvents anthropic(ResponseMeta{"msg_fuzz", 0, "m", ep});
  ResponsesEvents responses(ResponseMeta{"resp_fuzz", 0, "m", ep}, &ctx, &req);
  const Usage none;
  (void)anthropic.Start(none);
  (void)responses.Start();
  for (int32_t id : generated) {
    const bool stop = out.Feed(id, &delta);
    Render(Chunk(meta, delta, first, "", req.include_usage));
    (void)anthropic.Delta(delta);
    (void)responses.Delta(delta);
    first = false;
    all.reasoning += delta.reasoning;
    all.content += delta.content;
    for (auto& call : delta.tool_calls) all.tool_calls.push_back(std::move(call));
    if (stop) break;
  }
  out.Finish(&delta);
  all.content += delta.content;
  Render(Chunk(meta, delta, first, out.FinishReason(), req.include_usage));
  const Usage usage{static_cast<int64_t>(ids.size()), out.completion_tokens(), 0,
                    out.reasoning_tokens()};
  Render(UsageChunk(meta, usage));
  Render(FullResponse(meta, all, out.FinishReason(), usage));
  const std::string stop_reason = AnthropicStopReason(out.FinishReason(), out.matched_stop());
  Render(AnthropicMessage(meta, all, stop_reason, out.matched_stop(), usage));
  (void)anthropic.Finish(stop_reason, out.matched_stop(), usage);
  (void)responses.Delta(delta);
  (void)responses.Finish("completed", usage);
  const auto items = ResponseOutputItems(meta, ctx, all);
  Render(ResponseObject(meta, ctx, req, "completed", items, &usage));
  if (api == 3 && ctx.store) {
    auto conversation = ctx.items;
    for (const auto& item : responses.output()) conversation.push_back(item);
    store.Put("resp_" + std::to_string(size % 8), std::move(conversation));
  }
  return 0;
}
