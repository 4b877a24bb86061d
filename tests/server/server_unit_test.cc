// Unit tests of the server's pure parts: request parsing and validation, the sampler, stop
// sequences held back while streaming, the token-stream -> reasoning/content/tool-call assembler
// (on synthetic K3 output built with the golden tiny tokenizer), the response JSON shapes and
// timings, the CORS policy, and log levels; tool_choice forcing, and the Anthropic Messages and
// OpenAI Responses parsers, event sequences and response store.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/log.h"
#include "deltafin/engine.h"
#include "deltafin/sampler.h"
#include "server/anthropic_api.h"
#include "server/cors.h"
#include "server/metrics.h"
#include "server/output.h"
#include "server/prefix_cache.h"
#include "server/request.h"
#include "server/response_json.h"
#include "server/responses_api.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"
#include "unit/test_files.h"

namespace deltafin::server {
namespace {

const char kModel[] = DF_TEST_DATA_DIR "/golden/tiny-k3";

std::optional<ApiError> Parse(const std::string& body, GenerationRequest* r,
                              Endpoint ep = Endpoint::kChat) {
  return ParseGenerationRequest(body, ep, RequestDefaults{}, r);
}

TEST(RequestTest, AcceptsAFullChatRequestAndIgnoresUnknownFields) {
  GenerationRequest r;
  auto err = Parse(R"({"model":"m","messages":[{"role":"developer","content":"be brief"},
    {"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},
    "max_tokens":50,"max_completion_tokens":20,"temperature":0.7,"top_p":0.9,"top_k":40,
    "seed":-1,"stop":"END","n":1,"logit_bias":{},"user":"x","store":false,"zzz":[1],
    "reasoning_effort":"medium","tool_choice":"auto"})",
                   &r);
  ASSERT_FALSE(err) << err->message;
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.max_tokens, 20);
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 0.7);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.sampling.seed, UINT64_MAX);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_TRUE(r.chat.thinking);
  EXPECT_EQ(r.chat.reasoning_effort, "medium");
  EXPECT_FALSE(r.max_tokens == std::nullopt);
}

TEST(RequestTest, RejectsWhatItCannotHonourNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"messages":[{"role":"user","content":"x"}],"n":3})", "n"},
      {R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"1":2}})", "logit_bias"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":1})", "logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":3})", "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})",
       "top_logprobs"},
      {R"({"messages":[{"role":"user","content":"x"}],"presence_penalty":2.5})",
       "presence_penalty"},
      {R"({"messages":[{"role":"user","content":"x"}],"frequency_penalty":"1"})",
       "frequency_penalty"},
      {R"({"messages":[{"role":"user","content":"x"}],"repeat_penalty":0})", "repetition_penalty"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":"1"})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"temperature":3})", "temperature"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":1.5})",
       "max_completion_tokens"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})", "stop"},
      {R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
      {R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})", "tool_choice"},
      {R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema",
        "json_schema":{"schema":{"type":"string","pattern":"a+"}}}})",
       "response_format.json_schema.schema"},
      {R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"sometimes"})", "tool_choice"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function",
        "function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})",
       "tool_choice"},
      {R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"huge"})",
       "reasoning_effort"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":"hi"})", "messages"},
      {R"({})", "messages"},
  };
  for (const auto& [body, param] : cases) {
    GenerationRequest r;
    auto err = Parse(body, &r);
    ASSERT_TRUE(err) << body;
    EXPECT_EQ(err->status, 400) << body;
    EXPECT_EQ(err->param, param) << body;
    EXPECT_EQ(err->Body()["error"]["type"], "invalid_request_error");
  }
  GenerationRequest r;
  for (const char* body : {"", "{", "[1,2]", "null", "\"x\"", "{\"messages\":[}"}) {
    auto err = Parse(body, &r);
    ASSERT_TRUE(err) << body;
    EXPECT_EQ(err->status, 400);
  }
}

TEST(RequestTest, CompletionPrompts) {
  GenerationRequest r;
  ASSERT_FALSE(Parse(R"({"prompt":"abc"})", &r, Endpoint::kCompletion));
  EXPECT_EQ(r.prompt_text, "abc");
  EXPECT_EQ(r.max_tokens, 256);  // the server default for completions
  ASSERT_FALSE(Parse(R"({"prompt":[1,2,3],"max_tokens":4})", &r, Endpoint::kCompletion));
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(Parse(R"({"prompt":["a","b"]})", &r, Endpoint::kCompletion));
  EXPECT_TRUE(Parse(R"({"prompt":""})", &r, Endpoint::kCompletion));
  ASSERT_FALSE(Parse(R"({"prompt":"x","logprobs":2,"echo":true})", &r, Endpoint::kCompletion));
  EXPECT_EQ(r.logprobs, 2);
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(Parse(R"({"prompt":"x","logprobs":6})", &r, Endpoint::kCompletion));
  EXPECT_TRUE(Parse(R"({"prompt":"x","suffix":"y"})", &r, Endpoint::kCompletion));
}

std::string Nested(int depth, const std::string& open, const std::string& inner,
                   const std::string& close) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  s += inner;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

TEST(RequestTest, RefusesJsonNestedTooDeep) {
  GenerationRequest r;
  // 128 levels in all (the body's object is level 1) are accepted; 129 are refused before parsing.
  const std::string ok = R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":)"
                         R"("function","function":{"name":"f","parameters":)" +
                         Nested(124, R"({"a":)", "1", "}") + "}}]}";
  auto err = Parse(ok, &r);
  ASSERT_FALSE(err) << err->message;
  const std::string deep = R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":)"
                           R"("function","function":{"name":"f","parameters":)" +
                           Nested(125, R"({"a":)", "1", "}") + "}}]}";
  err = Parse(deep, &r);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, "too_deep");
  // Brackets inside strings do not count.
  err =
      Parse(R"({"messages":[{"role":"user","content":")" + std::string(1000, '[') + R"("}]})", &r);
  EXPECT_FALSE(err) << err->message;
  // Tool-call arguments are JSON in a string: checked on their own.
  const std::string args = "\"" + Nested(129, "[", "", "]") + "\"";
  err = Parse(R"({"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c",)"
              R"("type":"function","function":{"name":"f","arguments":)" +
                  args + "}}]}]}",
              &r);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, "too_deep");
  EXPECT_EQ(err->param, "messages");
  err = Parse(Nested(100000, "[", "", "]"), &r, Endpoint::kCompletion);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, "too_deep");
}

TEST(RequestTest, BuildPromptRendersTheChatTemplateAndChecksIds) {
  auto tok = tokenizer::Tokenizer::LoadModelDir(kModel);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  GenerationRequest r;
  ASSERT_FALSE(
      Parse(R"({"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"none"})", &r));
  std::vector<int32_t> ids;
  ASSERT_FALSE(BuildPrompt(r, **tok, &ids));
  auto want = tokenizer::RenderChat(r.messages, nullptr, {.thinking = false});
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(ids, *tokenizer::EncodeChat(**tok, *want));
  ASSERT_FALSE(Parse(R"({"prompt":[1,99999]})", &r, Endpoint::kCompletion));
  auto err = BuildPrompt(r, **tok, &ids);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "prompt");
  // A tool message that answers no call is a template error -> 400.
  ASSERT_FALSE(Parse(R"({"messages":[{"role":"tool","tool_call_id":"x","content":"1"}]})", &r));
  EXPECT_TRUE(BuildPrompt(r, **tok, &ids));
}

TEST(SamplerTest, GreedyIsArgmaxAndSeedsReproduce) {
  std::vector<float> logits(500);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 7919) % 101) / 10;
  Sampler greedy(SamplingParams{});
  EXPECT_EQ(greedy.Sample(logits), ArgmaxToken(logits));
  Sampler top1(SamplingParams{.temperature = 1.5, .top_k = 1, .seed = 3});
  EXPECT_EQ(top1.Sample(logits), ArgmaxToken(logits));
  auto draw = [&](uint64_t seed, double top_p) {
    Sampler s(SamplingParams{.temperature = 2.0, .top_p = top_p, .seed = seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.Sample(logits));
    return out;
  };
  EXPECT_EQ(draw(1, 1), draw(1, 1));
  EXPECT_NE(draw(1, 1), draw(2, 1));
  // A tiny nucleus keeps only the best token (the best logit, 10.0, is shared: lowest id wins).
  for (int32_t id : draw(5, 1e-9)) EXPECT_EQ(id, ArgmaxToken(logits));
}

TEST(SamplerTest, PenaltiesFollowOpenAIAndLlamaServerSemantics) {
  // Repetition (llama-server / HF): a positive logit divided, a negative one multiplied, for the
  // tokens in the window (prompt included).
  SamplingParams rep;
  rep.repetition_penalty = 2;
  rep.repeat_last_n = 4;
  Sampler a(rep);
  a.SetPrompt(std::vector<int32_t>{0});
  const std::vector<float> pos = {2, 1.5, -1, 0};
  EXPECT_EQ(Sampler(SamplingParams{}).Sample(pos), 0);
  EXPECT_EQ(a.Peek(pos, {}), 1);  // 2 / 2 = 1 < 1.5
  Sampler b(rep);
  b.SetPrompt(std::vector<int32_t>{0});
  const std::vector<float> neg = {-1, -1.5};
  EXPECT_EQ(b.Peek(neg, {}), 1);  // -1 * 2 = -2 < -1.5
  // The window slides: with repeat_last_n 1, only the latest token is penalised.
  SamplingParams last1;
  last1.repetition_penalty = 100;
  last1.repeat_last_n = 1;
  Sampler w(last1);
  w.SetPrompt(std::vector<int32_t>{0, 1});
  EXPECT_EQ(w.Peek(std::vector<float>{2, 3, 1}, {}), 0);  // 3 / 100 < 2
  // Frequency and presence (OpenAI): logit - count * frequency - presence, over the tokens the
  // sampler produced (the prompt does not count).
  SamplingParams fp;
  fp.frequency_penalty = 1;
  fp.presence_penalty = 0.5;
  Sampler f(fp);
  f.SetPrompt(std::vector<int32_t>{1, 1, 1});
  const std::vector<float> l = {3, 2, 0};
  EXPECT_EQ(f.Sample(l), 0);  // nothing produced yet
  EXPECT_EQ(f.Sample(l), 1);  // 3 - 1 - 0.5 = 1.5 < 2
  EXPECT_EQ(f.Sample(l), 0);  // 1.5 > 2 - 1.5 = 0.5
  EXPECT_EQ(f.Sample(l), 0);  // 3 - 2 - 0.5 = 0.5 ties 2 - 1 - 0.5: the lower id
  EXPECT_EQ(f.Sample(l), 1);  // 3 - 3 - 0.5 = -0.5 < 0.5
  // Deterministic with a seed.
  auto draw = [&](uint64_t seed) {
    SamplingParams sp;
    sp.temperature = 1;
    sp.seed = seed;
    sp.frequency_penalty = 0.7;
    sp.repetition_penalty = 1.3;
    Sampler s(sp);
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) out.push_back(s.Sample(l));
    return out;
  };
  EXPECT_EQ(draw(9), draw(9));
}

TEST(StopMatcherTest, HoldsBackPartialMatchesAndCutsAtTheStop) {
  StopMatcher m({"STOP", "xyz"});
  bool stopped = false;
  EXPECT_EQ(m.Feed("hello S", &stopped), "hello ");  // "S" could start "STOP"
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.Feed("T", &stopped), "");
  EXPECT_EQ(m.Feed("ART x", &stopped), "START ");  // "STA" cannot match any more
  EXPECT_EQ(m.Feed("y", &stopped), "");
  EXPECT_EQ(m.Feed("z and more", &stopped), "");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(m.Feed("more", &stopped), "");
  EXPECT_EQ(m.Flush(), "");

  StopMatcher n({"ab"});
  EXPECT_EQ(n.Feed("xxa", &stopped), "xx");
  EXPECT_EQ(n.Flush(), "a");  // generation ended without the stop: release what was held
  StopMatcher none({});
  EXPECT_EQ(none.Feed("abc", &stopped), "abc");
}

class AssemblerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = tokenizer::Tokenizer::LoadModelDir(kModel);
    ASSERT_TRUE(t.ok());
    tok_ = std::move(*t);
    eos_ = tok_->SpecialId("<|end_of_msg|>");
  }
  std::vector<int32_t> Ids(const std::string& text) {
    tokenizer::EncodeOptions o;
    o.allow_all_special = true;
    return *tok_->Encode(text, o);
  }
  // Feeds ids one at a time; returns the concatenated deltas and whether the assembler ended.
  OutputDelta Run(OutputAssembler& a, const std::vector<int32_t>& ids, bool* ended,
                  std::vector<OutputDelta>* deltas = nullptr) {
    OutputDelta all, d;
    *ended = false;
    for (int32_t id : ids) {
      *ended = a.Feed(id, &d);
      if (deltas) deltas->push_back(d);
      all.reasoning += d.reasoning;
      all.content += d.content;
      for (auto& c : d.tool_calls) all.tool_calls.push_back(c);
      if (*ended) break;
    }
    if (!*ended) {
      a.Finish(&d);
      all.reasoning += d.reasoning;
      all.content += d.content;
    }
    return all;
  }
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  int32_t eos_ = -1;
};

TEST_F(AssemblerTest, ReasoningContentAndToolCalls) {
  GenerationRequest req;  // chat, thinking on
  OutputAssembler a(req, *tok_, eos_);
  const auto ids = Ids(
      "Let me think.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
      "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"0\"<|sep|>"
      "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>"
      "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>"
      "<|close|>call<|sep|><|open|>call tool=\"now\" index=\"1\"<|sep|><|close|>call<|sep|>"
      "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>");
  bool ended = false;
  std::vector<OutputDelta> deltas;
  OutputDelta all = Run(a, ids, &ended, &deltas);
  EXPECT_TRUE(ended);
  EXPECT_EQ(all.reasoning, "Let me think.");
  EXPECT_EQ(all.content, "Checking.");
  ASSERT_EQ(all.tool_calls.size(), 2u);
  EXPECT_EQ(all.tool_calls[0].name, "get_weather");
  EXPECT_EQ(all.tool_calls[0].arguments, R"({"city":"Paris","days":3})");
  EXPECT_EQ(all.tool_calls[1].index, 1);
  EXPECT_EQ(a.FinishReason(), "tool_calls");
  EXPECT_EQ(a.completion_tokens(), static_cast<int64_t>(ids.size()));
  EXPECT_GT(a.reasoning_tokens(), 0);
  // Streamed: each call arrives whole in one delta, with its index and an id.
  ResponseMeta meta{"chatcmpl-abc", 1, "m", Endpoint::kChat};
  int calls_seen = 0;
  for (const auto& d : deltas) {
    if (d.tool_calls.empty()) continue;
    auto chunk = Chunk(meta, d, false, "", false);
    const auto& tc = chunk["choices"][0]["delta"]["tool_calls"][0];
    EXPECT_EQ(tc["index"], calls_seen);
    EXPECT_EQ(tc["id"], "call_abc_" + std::to_string(calls_seen));
    EXPECT_EQ(tc["type"], "function");
    ++calls_seen;
  }
  EXPECT_EQ(calls_seen, 2);
  auto full = FullResponse(meta, all, a.FinishReason(), Usage{10, 5, 0, 2});
  EXPECT_EQ(full["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(full["choices"][0]["message"]["reasoning_content"], "Let me think.");
  EXPECT_FALSE(full["choices"][0]["message"]["tool_calls"][0].contains("index"));
  EXPECT_EQ(full["usage"]["total_tokens"], 15);
}

TEST_F(AssemblerTest, StopSequenceAcrossTokensEndsWithStop) {
  GenerationRequest req;
  req.chat.thinking = false;
  req.stop = {"world"};
  OutputAssembler a(req, *tok_, eos_);
  bool ended = false;
  std::vector<OutputDelta> deltas;
  OutputDelta all = Run(a,
                        Ids("hello wor"
                            "ld and beyond<|end_of_msg|>"),
                        &ended, &deltas);
  EXPECT_TRUE(ended);
  EXPECT_EQ(all.content, "hello ");
  EXPECT_EQ(a.FinishReason(), "stop");
  // Nothing of the stop text was ever emitted.
  for (const auto& d : deltas) EXPECT_EQ(d.content.find('w'), std::string::npos);
}

TEST_F(AssemblerTest, CompletionTextLengthAndEos) {
  GenerationRequest req;
  req.endpoint = Endpoint::kCompletion;
  OutputAssembler a(req, *tok_, eos_);
  bool ended = false;
  OutputDelta all = Run(a, Ids("plain text"), &ended);
  EXPECT_FALSE(ended);
  EXPECT_EQ(all.content, "plain text");
  EXPECT_EQ(a.FinishReason(), "length");
  OutputAssembler b(req, *tok_, eos_);
  all = Run(b, Ids("done<|end_of_msg|>ignored"), &ended);
  EXPECT_TRUE(ended);
  EXPECT_EQ(all.content, "done");
  EXPECT_EQ(b.FinishReason(), "stop");
}

TEST(ResponseJsonTest, ChunksAndUsage) {
  ResponseMeta meta{"cmpl-1", 7, "m", Endpoint::kCompletion};
  OutputDelta d;
  d.content = "x";
  auto c = Chunk(meta, d, true, "", true);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "x");
  EXPECT_TRUE(c["usage"].is_null());
  auto u = UsageChunk(meta, Usage{3, 4, 1, 0});
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
}

TEST(ResponseJsonTest, TimingsAsLlamaServerPlusTheIoSplit) {
  // A prefill of 10 new tokens (4 reused) in 0.5 s, then 3 decode steps of 0.2 s.
  std::vector<StepTiming> steps(4);
  steps[0] = {0.501, 0.1, 0.4, 1000, 20, 5, 10};
  for (size_t i = 1; i < 4; ++i) steps[i] = {0.2, 0.15, 0.04, 500, 8, 2, 1};
  const Timings t = SumTimings(14, 4, 0.5, 4, steps);
  auto j = TimingsJson(t);
  EXPECT_EQ(j["cache_n"], 4);
  EXPECT_EQ(j["prompt_n"], 10);
  EXPECT_DOUBLE_EQ(j["prompt_ms"].get<double>(), 500);
  EXPECT_DOUBLE_EQ(j["prompt_per_second"].get<double>(), 20);
  EXPECT_DOUBLE_EQ(j["prompt_per_token_ms"].get<double>(), 50);
  EXPECT_EQ(j["predicted_n"], 4);
  EXPECT_NEAR(j["predicted_ms"].get<double>(), 600, 1e-9);
  // The first token came from the prefill: 3 decode steps in 0.6 s.
  EXPECT_NEAR(j["predicted_per_second"].get<double>(), 5, 1e-9);
  EXPECT_NEAR(j["predicted_per_token_ms"].get<double>(), 200, 1e-9);
  EXPECT_NEAR(j["io_wait_ms"].get<double>(), 100 + 3 * 150, 1e-9);
  EXPECT_NEAR(j["compute_ms"].get<double>(), 400 + 3 * 40, 1e-9);
  EXPECT_EQ(j["expert_bytes_read"], 2500);
  // One token: no decode step, so no rate rather than a division by zero.
  auto one = TimingsJson(SumTimings(3, 0, 0.1, 1, std::span(steps).first(1)));
  EXPECT_EQ(one["predicted_per_second"], 0.0);
  EXPECT_EQ(one["predicted_ms"], 0.0);

  auto tt = TokenTimingsJson(std::span(steps).subspan(0, 2), 0);
  ASSERT_EQ(tt.size(), 2u);
  EXPECT_EQ(tt[0]["phase"], "prefill");
  EXPECT_EQ(tt[0]["positions"], 10);
  EXPECT_EQ(tt[1]["phase"], "decode");
  EXPECT_EQ(tt[1]["index"], 1);
  EXPECT_NEAR(tt[1]["other_ms"].get<double>(), 10, 1e-9);
  EXPECT_EQ(tt[1]["experts_in_ram"], 2);
  EXPECT_EQ(TokenTimingsJson(std::span(steps).subspan(3), 3)[0]["index"], 3);
}

TEST(CorsTest, OffUnlessOriginsAreGiven) {
  EXPECT_FALSE(CorsPolicy().enabled());
  EXPECT_FALSE(CorsPolicy().AllowOrigin("http://localhost:3000"));
  CorsPolicy some({"http://localhost:3000", "https://chat.example"});
  EXPECT_EQ(some.AllowOrigin("http://localhost:3000"), "http://localhost:3000");
  EXPECT_EQ(some.AllowOrigin("https://chat.example"), "https://chat.example");
  EXPECT_FALSE(some.AllowOrigin("http://localhost:3001"));
  EXPECT_FALSE(some.AllowOrigin("https://chat.example.evil"));
  EXPECT_FALSE(some.AllowOrigin(""));
  EXPECT_EQ(CorsPolicy({"*"}).AllowOrigin("http://anything:1"), "*");
  EXPECT_TRUE(CorsPolicy::AllowedMethod("POST"));
  EXPECT_FALSE(CorsPolicy::AllowedMethod("DELETE"));
}

TEST(CorsTest, ChecksOriginSpelling) {
  EXPECT_EQ(CheckCorsOrigin("*"), "");
  EXPECT_EQ(CheckCorsOrigin("http://localhost:3000"), "");
  EXPECT_EQ(CheckCorsOrigin("https://chat.example"), "");
  for (const char* bad : {"localhost:3000", "http://", "http://x/", "http://x/chat", "ftp://x",
                          "http://x:", "http://Chat.example"}) {
    EXPECT_NE(CheckCorsOrigin(bad), "") << bad;
  }
}

TEST(LogTest, LevelsParseAndFilter) {
  EXPECT_EQ(ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(ParseLogLevel("warn"), LogLevel::kWarn);
  EXPECT_EQ(ParseLogLevel("error"), LogLevel::kError);
  EXPECT_FALSE(ParseLogLevel("verbose"));
  SetLogLevel(LogLevel::kWarn);
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  SetLogLevel(LogLevel::kInfo);
  EXPECT_TRUE(LogEnabled(LogLevel::kInfo));
  EXPECT_FALSE(LogEnabled(LogLevel::kDebug));
}

TEST(MetricsTest, RendersTheOpFamilyBreakdownOnePerFamily) {
  Metrics metrics;
  SessionStats stats;
  stats.op_seconds[static_cast<size_t>(OpFamily::kKdaRecurrence)] = 0.25;
  stats.op_seconds[static_cast<size_t>(OpFamily::kExpertIoWait)] = 1.5;
  metrics.SetSessionStats(stats);
  const std::string text = metrics.Render(0);
  EXPECT_NE(text.find("deltafin_op_seconds_total{family=\"kda_recurrence\"} 0.25\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("deltafin_op_seconds_total{family=\"expert_io_wait\"} 1.5\n"),
            std::string::npos);
  size_t families = 0;
  for (size_t at = text.find("deltafin_op_seconds_total{"); at != std::string::npos;
       at = text.find("deltafin_op_seconds_total{", at + 1)) {
    ++families;
  }
  EXPECT_EQ(families, kOpFamilyCount);
}

const char kTools[] = R"("tools":[{"type":"function","function":{"name":"get_weather",
  "parameters":{"type":"object"}}}])";

TEST(ToolChoiceTest, ChatParsesNoneRequiredAndNamed) {
  const std::string msgs = R"({"messages":[{"role":"user","content":"x"}],)";
  GenerationRequest r;
  ASSERT_FALSE(Parse(msgs + kTools + R"(,"tool_choice":"none"})", &r));
  EXPECT_EQ(r.tool_choice, ToolChoice::kNone);
  ASSERT_FALSE(Parse(msgs + kTools + R"(,"tool_choice":"required"})", &r));
  EXPECT_EQ(r.tool_choice, ToolChoice::kRequired);
  ASSERT_FALSE(Parse(
      msgs + kTools + R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}}})",
      &r));
  EXPECT_EQ(r.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tool_choice_name, "get_weather");
}

TEST_F(AssemblerTest, ForcedToolCallsOpenTheCallInThePrompt) {
  GenerationRequest req;
  ASSERT_FALSE(Parse(R"({"messages":[{"role":"user","content":"x"}],)" + std::string(kTools) +
                         R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}}})",
                     &req));
  std::vector<int32_t> prompt, plain;
  ASSERT_FALSE(BuildPrompt(req, *tok_, &prompt));
  GenerationRequest auto_req = req;
  auto_req.tool_choice = ToolChoice::kAuto;
  ASSERT_FALSE(BuildPrompt(auto_req, *tok_, &plain));
  // The forced prompt is the plain one plus the closed think/response channels and the header.
  ASSERT_GT(prompt.size(), plain.size());
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), prompt.begin()));
  const std::vector<int32_t> suffix(prompt.begin() + static_cast<ptrdiff_t>(plain.size()),
                                    prompt.end());
  EXPECT_EQ(suffix, Ids("<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
                        "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"0\"<|sep|>"
                        "<|open|>json type=\"object\"<|sep|>"));
  // The model writes only the JSON arguments; the call carries the forced name.
  OutputAssembler a(req, *tok_, eos_);
  bool ended = false;
  OutputDelta all = Run(a,
                        Ids("{\"city\":\"Paris\"}<|close|>json<|sep|><|close|>call<|sep|>"
                            "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"),
                        &ended);
  EXPECT_TRUE(ended);
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].name, "get_weather");
  EXPECT_EQ(all.tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(all.reasoning, "");
  EXPECT_EQ(a.FinishReason(), "tool_calls");
  // Cut off by the token budget after the arguments (Finish): still reported (the tool
  // constraint closes the JSON within the budget; the closing tags may not fit).
  OutputAssembler cut(req, *tok_, eos_);
  OutputDelta d, rest;
  for (int32_t id : Ids("{\"city\":\"Paris\"}<|close|>js")) {
    EXPECT_FALSE(cut.Feed(id, &d));
    EXPECT_TRUE(d.tool_calls.empty());
  }
  cut.Finish(&rest);
  ASSERT_EQ(rest.tool_calls.size(), 1u);
  EXPECT_EQ(rest.tool_calls[0].name, "get_weather");
  EXPECT_EQ(rest.tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(cut.FinishReason(), "length");
}

TEST_F(AssemblerTest, ToolChoiceNoneDeclaresNoToolsAndDropsCalls) {
  GenerationRequest req;
  ASSERT_FALSE(Parse(R"({"messages":[{"role":"user","content":"x"}],)" + std::string(kTools) +
                         R"(,"tool_choice":"none","thinking":false})",
                     &req));
  std::vector<int32_t> none, with_tools;
  ASSERT_FALSE(BuildPrompt(req, *tok_, &none));
  req.tool_choice = ToolChoice::kAuto;
  ASSERT_FALSE(BuildPrompt(req, *tok_, &with_tools));
  EXPECT_LT(none.size(), with_tools.size());  // no tool-declare system message
  req.tool_choice = ToolChoice::kNone;
  OutputAssembler a(req, *tok_, eos_);
  bool ended = false;
  OutputDelta all = Run(a,
                        Ids("ok<|close|>response<|sep|><|open|>tools<|sep|><|open|>call "
                            "tool=\"f\" index=\"0\"<|sep|><|close|>call<|sep|><|end_of_msg|>"),
                        &ended);
  EXPECT_TRUE(all.tool_calls.empty());
  EXPECT_EQ(all.content, "ok");
  EXPECT_EQ(a.FinishReason(), "stop");
}

std::optional<ApiError> ParseAnthropic(const std::string& body, GenerationRequest* r,
                                       bool count = false) {
  return ParseAnthropicRequest(body, RequestDefaults{}, count, r);
}

TEST(AnthropicTest, ConvertsTurnsToolsAndThinking) {
  GenerationRequest r;
  auto err = ParseAnthropic(R"({"model":"claude","max_tokens":100,
    "system":[{"type":"text","text":"be "},{"type":"text","text":"brief"}],
    "messages":[{"role":"user","content":"weather?"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},
        {"type":"text","text":"checking"},
        {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},
        {"type":"text","text":"thanks"}]}],
    "tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object"}}],
    "tool_choice":{"type":"any"},"stop_sequences":["END"],"temperature":0.5,"top_k":5,
    "thinking":{"type":"enabled","budget_tokens":10000},"metadata":{"user_id":"u"}})",
                            &r);
  ASSERT_FALSE(err) << err->message;
  EXPECT_EQ(r.max_tokens, 100);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_TRUE(r.chat.thinking);
  EXPECT_EQ(r.chat.reasoning_effort, "high");
  EXPECT_EQ(r.tool_choice, ToolChoice::kRequired);
  EXPECT_EQ(r.tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["type"], "object");
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[0]["content"], "be brief");
  EXPECT_EQ(r.messages[2]["reasoning_content"], "hm");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(r.messages[3]["role"], "tool");
  EXPECT_EQ(r.messages[3]["tool_call_id"], "toolu_1");
  EXPECT_EQ(r.messages[4]["content"], "thanks");
  auto tok = tokenizer::Tokenizer::LoadModelDir(kModel);
  ASSERT_TRUE(tok.ok());
  std::vector<int32_t> ids;
  ASSERT_FALSE(BuildPrompt(r, **tok, &ids));
  EXPECT_GT(ids.size(), 20u);
  // No thinking field: thinking off (Anthropic's default); disabled: off.
  ASSERT_FALSE(
      ParseAnthropic(R"({"max_tokens":1,"messages":[{"role":"user","content":"x"}]})", &r));
  EXPECT_FALSE(r.chat.thinking);
  EXPECT_EQ(EffortForBudget(1024), "low");
  EXPECT_EQ(EffortForBudget(4096), "medium");
  EXPECT_EQ(EffortForBudget(32000), "max");
  // count_tokens needs no max_tokens.
  EXPECT_FALSE(ParseAnthropic(R"({"messages":[{"role":"user","content":"x"}]})", &r, true));
}

// One tool-declaration parser and one tool_choice parser read all three APIs' spellings into the
// same OpenAI-shaped tools (request.h ParseTools, ParseToolChoice).
TEST(ToolsTest, OneParserForTheThreeApisSpellings) {
  using ojson = nlohmann::ordered_json;
  const ojson want = ojson::parse(
      R"({"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}})");
  const std::string user = R"("messages":[{"role":"user","content":"x"}])";
  GenerationRequest chat, messages, responses;
  ResponseStore store;
  ResponsesContext ctx;
  ASSERT_FALSE(Parse("{" + user + R"(,"tools":[)" + want.dump() +
                         R"(],"tool_choice":{"type":"function","function":{"name":"f"}}})",
                     &chat));
  ASSERT_FALSE(
      ParseAnthropic(R"({"max_tokens":5,)" + user +
                         R"(,"tools":[{"name":"f","description":"d","input_schema":)"
                         R"({"type":"object"}}],"tool_choice":{"type":"tool","name":"f"}})",
                     &messages));
  ASSERT_FALSE(ParseResponsesRequest(
      R"({"input":"x","tools":[{"type":"function","name":"f","description":"d","parameters":)"
      R"({"type":"object"}}],"tool_choice":{"type":"function","name":"f"}})",
      {}, &store, &responses, &ctx));
  for (const GenerationRequest* r : {&chat, &messages, &responses}) {
    EXPECT_EQ(r->tools, ojson::array({want}));
    EXPECT_EQ(r->tool_choice, ToolChoice::kNamed);
    EXPECT_EQ(r->tool_choice_name, "f");
  }
  // Errors name the field by its path in the API's own spelling.
  const std::pair<std::string, const char*> chat_cases[] = {
      {R"([{"type":"function","function":{"description":"d"}}])", "tools[0].function.name"},
      {R"([{"type":"function","function":{"name":"f","parameters":"x"}}])",
       "tools[0].function.parameters"},
      {R"([{"type":"web_search"}])", "tools[0].type"},
      {R"([{"type":"function"}])", "tools[0].function"},
      {R"({"name":"f"})", "tools"},
  };
  for (const auto& [tools, param] : chat_cases) {
    GenerationRequest r;
    auto err = Parse("{" + user + R"(,"tools":)" + tools + "}", &r);
    ASSERT_TRUE(err) << tools;
    EXPECT_EQ(err->param, param) << tools;
  }
  GenerationRequest r;
  auto err =
      ParseResponsesRequest(R"({"input":"x","tools":[{"type":"function"}]})", {}, &store, &r, &ctx);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "tools[0].name");
  err = ParseAnthropic(R"({"max_tokens":5,)" + user + R"(,"tools":[{"name":"f"}]})", &r);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "tools[0].input_schema");
  // Each API's tool_choice spelling only: Anthropic's "any" is not a chat mode.
  err = Parse("{" + user + R"(,"tools":[)" + want.dump() + R"(],"tool_choice":"any"})", &r);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "tool_choice");
}

TEST(AnthropicTest, RejectsBadBodiesNamingTheField) {
  const std::string user = R"("messages":[{"role":"user","content":)";
  const std::pair<std::string, const char*> cases[] = {
      {R"({"messages":[{"role":"user","content":"x"}]})", "max_tokens"},
      {R"({"max_tokens":0,"messages":[{"role":"user","content":"x"}]})", "max_tokens"},
      {R"({"max_tokens":5,)" + user + R"([{"type":"video","url":"x"}]}]})",
       "messages[0].content[0].type"},
      {R"({"max_tokens":5,)" + user + R"([{"type":"image","source":{}}]}]})",
       "messages[0].content[0].type"},
      {R"({"max_tokens":5,)" + user +
           R"([{"type":"tool_result","tool_use_id":"nope","content":"r"}]}]})",
       "messages[0].content[0].tool_use_id"},
      {R"({"max_tokens":5,"messages":[{"role":"robot","content":"x"}]})", "messages[0].role"},
      {R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"type":
        "web_search_20250305","name":"web_search"}]})",
       "tools[0].type"},
      {R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"any"}})",
       "tool_choice"},
      {R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled"}})",
       "thinking.budget_tokens"},
      {R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}],"temperature":1.5})",
       "temperature"},
      {R"({"max_tokens":5,"system":[{"type":"image"}],"messages":[{"role":"user","content":"x"}]})",
       "system[0].type"},
  };
  for (const auto& [body, param] : cases) {
    GenerationRequest r;
    auto err = ParseAnthropic(body, &r);
    ASSERT_TRUE(err) << body;
    EXPECT_EQ(err->status, 400) << body;
    EXPECT_EQ(err->param, param) << body;
    EXPECT_NE(err->message.find(param), std::string::npos) << err->message;
    const auto shaped = AnthropicErrorBody(*err);
    EXPECT_EQ(shaped["type"], "error");
    EXPECT_EQ(shaped["error"]["type"], "invalid_request_error");
  }
  auto Status = [](int status) {
    ApiError e;
    e.status = status;
    return e;
  };
  EXPECT_EQ(AnthropicErrorBody(Status(401))["error"]["type"], "authentication_error");
  EXPECT_EQ(AnthropicErrorBody(Status(404))["error"]["type"], "not_found_error");
  EXPECT_EQ(AnthropicErrorBody(Status(503))["error"]["type"], "overloaded_error");
  EXPECT_EQ(AnthropicErrorBody(Status(500))["error"]["type"], "api_error");
}

// The types of the SSE events in `text`, in order.
std::vector<std::string> EventTypes(const std::string& text) {
  std::vector<std::string> types;
  for (size_t at = text.find("event: "); at != std::string::npos;
       at = text.find("event: ", at + 1)) {
    types.push_back(text.substr(at + 7, text.find('\n', at) - at - 7));
  }
  return types;
}

TEST(AnthropicTest, MessageAndStreamEvents) {
  const ResponseMeta meta{"msg_abc", 1, "kimi-k3", Endpoint::kChat};
  OutputDelta all;
  all.reasoning = "think";
  all.content = "hello";
  all.tool_calls.push_back({0, "get_weather", R"({"city":"Paris"})"});
  const Usage usage{30, 7, 10, 2};
  auto m = AnthropicMessage(meta, all, AnthropicStopReason("tool_calls", ""), "", usage);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][1]["text"], "hello");
  EXPECT_EQ(m["content"][2]["id"], "toolu_abc_0");
  EXPECT_EQ(m["content"][2]["input"]["city"], "Paris");
  EXPECT_EQ(m["usage"]["input_tokens"], 20);
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 10);
  EXPECT_EQ(AnthropicStopReason("stop", "END"), "stop_sequence");
  EXPECT_EQ(AnthropicStopReason("stop", ""), "end_turn");
  EXPECT_EQ(AnthropicStopReason("length", ""), "max_tokens");

  AnthropicEvents ev(meta);
  std::string s = ev.Start(usage);
  OutputDelta d1, d2, d3, d4;
  d1.reasoning = "thi";
  d2.reasoning = "nk";
  d3.content = "hello";
  d4.tool_calls = all.tool_calls;
  // One statement per call: the operands of + are evaluated in an unspecified order.
  s += ev.Delta(d1);
  s += ev.Delta(d2);
  s += ev.Delta(d3);
  s += AnthropicEvents::Ping();
  s += ev.Delta(d4);
  s += ev.Finish("tool_use", "", usage);
  const std::vector<std::string> want = {
      "message_start",      "content_block_start", "content_block_delta", "content_block_delta",
      "content_block_stop", "content_block_start", "content_block_delta", "ping",
      "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
      "message_delta",      "message_stop"};
  EXPECT_EQ(EventTypes(s), want);
  EXPECT_NE(s.find(R"("delta":{"type":"thinking_delta","thinking":"thi"})"), std::string::npos);
  EXPECT_NE(s.find(R"("type":"input_json_delta","partial_json":"{\"city\":\"Paris\"}")"),
            std::string::npos);
  EXPECT_NE(s.find(R"("index":2)"), std::string::npos);
}

TEST(ResponsesTest, ParsesItemsInstructionsAndToolChoice) {
  ResponseStore store;
  GenerationRequest r;
  ResponsesContext ctx;
  auto err = ParseResponsesRequest(R"({"model":"m","instructions":"be brief",
    "input":[{"role":"user","content":[{"type":"input_text","text":"weather?"}]},
      {"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"hm"}]},
      {"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"P\"}"},
      {"type":"function_call_output","call_id":"c1","output":"sunny"}],
    "tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],
    "tool_choice":{"type":"function","name":"get_weather"},"max_output_tokens":9,
    "reasoning":{"effort":"minimal"},"store":false})",
                                   RequestDefaults{}, &store, &r, &ctx);
  ASSERT_FALSE(err) << err->message;
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(r.chat.reasoning_effort, "low");
  EXPECT_EQ(r.tool_choice, ToolChoice::kNamed);
  EXPECT_FALSE(ctx.store);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0]["content"], "be brief");
  EXPECT_EQ(r.messages[2]["role"], "assistant");
  EXPECT_EQ(r.messages[2]["reasoning_content"], "hm");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(r.messages[3]["role"], "tool");
  EXPECT_EQ(ctx.items.size(), 4u);  // what a stored response would keep (no instructions)

  const std::pair<const char*, const char*> bad[] = {
      {R"({"model":"m"})", "input"},
      {R"({"input":[{"type":"function_call_output","call_id":"zz","output":"x"}]})",
       "input[0].call_id"},
      {R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]})",
       "input[0].content[0].type"},
      {R"({"input":[{"type":"mystery"}]})", "input[0].type"},
      {R"({"input":"x","previous_response_id":"resp_gone"})", "previous_response_id"},
      {R"({"input":"x","tools":[{"type":"web_search"}]})", "tools[0].type"},
      {R"({"input":"x","tool_choice":"required"})", "tool_choice"},
      {R"({"input":"x","reasoning":{"effort":"huge"}})", "reasoning.effort"},
      {R"({"input":"x","text":{"format":{"type":"xml"}}})", "text.format"},
      {R"({"input":"x","text":{"format":{"type":"json_schema","name":"n",
        "schema":{"type":"string","pattern":"a+"}}}})",
       "text.format.schema"},
      {R"({"input":"x","text":{"format":{"type":"json_schema","name":"n"}}})",
       "text.format.schema"},
  };
  for (const auto& [body, param] : bad) {
    auto e = ParseResponsesRequest(body, RequestDefaults{}, &store, &r, &ctx);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->param, param) << body;
  }
  // text.format json_object / json_schema: the chat completions' constrained decoder, thinking off.
  for (const char* body :
       {R"({"input":"x","text":{"format":{"type":"json_object"}}})",
        R"({"input":"x","reasoning":{"effort":"high"},"text":{"format":{"type":"json_schema",
          "name":"n","schema":{"type":"object","properties":{"a":{"type":"integer"}}}}}})"}) {
    GenerationRequest jr;
    ResponsesContext jctx;
    ASSERT_FALSE(ParseResponsesRequest(body, RequestDefaults{}, &store, &jr, &jctx)) << body;
    EXPECT_TRUE(jr.output_schema) << body;
    EXPECT_FALSE(jr.chat.thinking) << body;
  }
}

TEST(ResponsesTest, PreviousResponseContinuesTheStoredConversation) {
  ResponseStore store(2);
  GenerationRequest r;
  ResponsesContext ctx;
  ASSERT_FALSE(ParseResponsesRequest(R"({"input":"hi"})", RequestDefaults{}, &store, &r, &ctx));
  const ResponseMeta meta{"resp_abc", 1, "m", Endpoint::kChat};
  OutputDelta all;
  all.content = "hello";
  all.tool_calls.push_back({0, "f", "{}"});
  auto items = ctx.items;
  for (const auto& item : ResponseOutputItems(meta, ctx, all)) items.push_back(item);
  store.Put(meta.id, items);
  ASSERT_FALSE(ParseResponsesRequest(R"({"previous_response_id":"resp_abc","input":[
    {"type":"function_call_output","call_id":"call_abc_0","output":"42"}]})",
                                     RequestDefaults{}, &store, &r, &ctx));
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0]["content"], "hi");
  EXPECT_EQ(r.messages[1]["content"], "hello");
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(r.messages[2]["tool_call_id"], "call_abc_0");
  // LRU: a third entry evicts the least recently used one.
  store.Put("resp_2", items);
  ASSERT_TRUE(store.Get("resp_abc"));
  store.Put("resp_3", items);
  EXPECT_FALSE(store.Get("resp_2"));
  EXPECT_TRUE(store.Get("resp_abc"));
  EXPECT_EQ(store.size(), 2u);
}

TEST(ResponsesTest, StreamEventsAreNumberedAndOrdered) {
  ResponseStore store;
  GenerationRequest r;
  ResponsesContext ctx;
  ASSERT_FALSE(ParseResponsesRequest(R"({"input":"hi","stream":true})", RequestDefaults{}, &store,
                                     &r, &ctx));
  ResponsesEvents ev(ResponseMeta{"resp_abc", 1, "m", Endpoint::kChat}, &ctx, &r);
  OutputDelta d1, d2, d3;
  d1.reasoning = "hm";
  d2.content = "hel";
  d3.content = "lo";
  d3.tool_calls.push_back({0, "f", R"({"a":1})"});
  std::string s = ev.Start();
  s += ev.Delta(d1);
  s += ev.Delta(d2);
  s += ev.Delta(d3);
  s += ev.Finish("completed", Usage{5, 4, 2, 1});
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(EventTypes(s), want);
  // sequence_number counts from 0, one per event.
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NE(s.find("\"sequence_number\":" + std::to_string(i) + ","), std::string::npos) << i;
  }
  ASSERT_EQ(ev.output().size(), 3u);
  EXPECT_EQ(ev.output()[1]["content"][0]["text"], "hello");
  EXPECT_EQ(ev.output()[2]["call_id"], "call_abc_0");
  EXPECT_NE(s.find(R"("cached_tokens":2)"), std::string::npos);
}

}  // namespace
}  // namespace deltafin::server

namespace deltafin::server {
namespace {

TEST(ResponseFormatTest, ParsesJsonModesAndNamesUnsupportedKeywords) {
  GenerationRequest r;
  ASSERT_FALSE(Parse(R"({"messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"text"}})",
                     &r));
  EXPECT_EQ(r.output_schema, nullptr);
  ASSERT_FALSE(Parse(R"({"messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"json_object"}})",
                     &r));
  ASSERT_NE(r.output_schema, nullptr);
  EXPECT_FALSE(r.chat.thinking);  // JSON answers have no thinking part
  ASSERT_FALSE(Parse(R"({"messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,
      "schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],
      "additionalProperties":false}}}})",
                     &r));
  ASSERT_NE(r.output_schema, nullptr);
  auto err = Parse(R"({"messages":[{"role":"user","content":"x"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"p",
      "schema":{"type":"object","properties":{"a":{"type":"string","format":"date"}}}}}})",
                   &r);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 400);
  EXPECT_EQ(err->param, "response_format.json_schema.schema");
  EXPECT_NE(err->message.find("'format'"), std::string::npos) << err->message;
  EXPECT_NE(err->message.find("/properties/a"), std::string::npos) << err->message;
  for (const char* bad : {R"("json")", R"({"type":"xml"})", R"({"type":"json_schema"})",
                          R"({"type":"json_schema","json_schema":{"name":"x"}})"}) {
    err = Parse(std::string(R"({"messages":[{"role":"user","content":"x"}],"response_format":)") +
                    bad + "}",
                &r);
    ASSERT_TRUE(err) << bad;
    EXPECT_EQ(err->status, 400) << bad;
    EXPECT_NE(err->param.find("response_format"), std::string::npos) << bad;
  }
}

TEST(SamplerTest, MaskedSampleDrawsOnlyAllowedIds) {
  std::vector<float> logits = {5, 1, 3, 9, 2};
  std::vector<uint8_t> allowed = {0, 1, 1, 0, 1};
  Sampler greedy(SamplingParams{});
  EXPECT_EQ(greedy.Sample(logits, allowed), 2);
  SamplingParams p;
  p.temperature = 1;
  p.seed = 7;
  Sampler s(p);
  for (int i = 0; i < 200; ++i) {
    const int32_t id = s.Sample(logits, allowed);
    ASSERT_TRUE(id == 1 || id == 2 || id == 4) << id;
  }
  std::vector<uint8_t> none(5, 0);
  EXPECT_EQ(s.Sample(logits, none), -1);
}

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

TEST(PrefixCacheTest, LongestPrefixInRamAndAfterARestart) {
  testing::ScopedTempDir dir;
  PrefixCacheOptions o;
  o.dir = dir.Join("cache");
  o.model_identity = 42;
  const std::vector<int32_t> a = {1, 2, 3}, ab = {1, 2, 3, 4, 5}, prompt = {1, 2, 3, 4, 5, 6};
  {
    PrefixCache c(o);
    ASSERT_TRUE(c.disk_enabled());
    EXPECT_EQ(c.Lookup(prompt).tokens, 0u);
    c.Insert(a, Bytes(100, 1));
    c.Insert(ab, Bytes(200, 2));
    auto hit = c.Lookup(prompt);
    EXPECT_EQ(hit.tokens, 5u);
    ASSERT_NE(hit.state, nullptr);
    EXPECT_EQ(*hit.state, Bytes(200, 2));
    EXPECT_EQ(c.Lookup(std::vector<int32_t>{1, 2, 3, 9}).tokens, 3u);
    EXPECT_EQ(c.Lookup(std::vector<int32_t>{2, 3}).tokens, 0u);
    c.Flush();
    EXPECT_EQ(c.disk_entries(), 2u);
  }
  {
    PrefixCache c(o);  // a restart: only the files
    EXPECT_EQ(c.ram_bytes(), 0u);
    auto hit = c.Lookup(prompt);
    EXPECT_EQ(hit.tokens, 5u);
    ASSERT_NE(hit.state, nullptr);
    EXPECT_EQ(*hit.state, Bytes(200, 2));
  }
  {
    PrefixCacheOptions other = o;
    other.model_identity = 43;  // another model: the files are not used (nor deleted)
    PrefixCache c(other);
    EXPECT_EQ(c.Lookup(prompt).tokens, 0u);
  }
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(o.dir))
    files += e.path().extension() == ".dfpc";
  EXPECT_EQ(files, 2u);
}

TEST(PrefixCacheTest, CorruptAndTruncatedFilesAreDeletedAndIgnored) {
  testing::ScopedTempDir dir;
  PrefixCacheOptions o;
  o.dir = dir.Join("cache");
  o.model_identity = 7;
  const std::vector<int32_t> a = {5, 6}, ab = {5, 6, 7, 8};
  {
    PrefixCache c(o);
    c.Insert(a, Bytes(64, 3));
    c.Insert(ab, Bytes(4096, 4));
    c.Flush();
  }
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(o.dir)) paths.push_back(e.path());
  ASSERT_EQ(paths.size(), 2u);
  // Flip one byte in the middle of the bigger file (same size: only the checksum can tell).
  const auto big = std::filesystem::file_size(paths[0]) > std::filesystem::file_size(paths[1])
                       ? paths[0]
                       : paths[1];
  const auto small = big == paths[0] ? paths[1] : paths[0];
  {
    std::fstream f(big, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2000);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(2000);
    f.write(&c, 1);
  }
  {
    PrefixCache c(o);
    auto hit = c.Lookup(ab);  // the corrupt longer entry is dropped; the shorter one serves
    EXPECT_EQ(hit.tokens, 2u);
    ASSERT_NE(hit.state, nullptr);
    EXPECT_EQ(*hit.state, Bytes(64, 3));
  }
  EXPECT_FALSE(std::filesystem::exists(big));
  // Truncate the other: found at the scan, deleted.
  std::filesystem::resize_file(small, std::filesystem::file_size(small) - 3);
  {
    PrefixCache c(o);
    EXPECT_EQ(c.Lookup(ab).tokens, 0u);
  }
  EXPECT_FALSE(std::filesystem::exists(small));
}

TEST(PrefixCacheTest, DiskBudgetEvictsLeastRecentlyUsedAndUnwritableDirWarns) {
  testing::ScopedTempDir dir;
  PrefixCacheOptions o;
  o.dir = dir.Join("cache");
  o.disk_bytes = 3000;  // room for two 1000-byte states
  o.ram_bytes = 1500;   // room for one
  o.model_identity = 1;
  PrefixCache c(o);
  for (int32_t i = 0; i < 3; ++i) {
    c.Insert(std::vector<int32_t>{i}, Bytes(1000, static_cast<uint8_t>(i)));
    c.Flush();
  }
  EXPECT_LE(c.disk_bytes(), 3000u);
  EXPECT_EQ(c.disk_entries(), 2u);
  EXPECT_LE(c.ram_bytes(), 1500u);
  EXPECT_EQ(c.Lookup(std::vector<int32_t>{0}).tokens, 0u);  // the oldest went
  auto hit = c.Lookup(std::vector<int32_t>{1});             // from disk (not in RAM any more)
  EXPECT_EQ(hit.tokens, 1u);
  ASSERT_NE(hit.state, nullptr);
  EXPECT_EQ(*hit.state, Bytes(1000, 1));

  // A file where the directory should be: no disk cache, RAM still works.
  testing::WriteTextFile(dir.Join("file"), "x");
  PrefixCacheOptions bad = o;
  bad.dir = dir.Join("file");
  PrefixCache r(bad);
  EXPECT_FALSE(r.disk_enabled());
  r.Insert(std::vector<int32_t>{9}, Bytes(10, 9));
  EXPECT_EQ(r.Lookup(std::vector<int32_t>{9, 1}).tokens, 1u);
}

}  // namespace
}  // namespace deltafin::server
