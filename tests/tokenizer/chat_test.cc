// Tests of K3's chat template and its reverse parser (src/tokenizer/chat.h). Expected strings are
// written from docs/MODEL.md §5.4 by hand; ids are checked structurally on the golden tiny
// vocabulary (the real K3 vocabulary, and with it the spec's 95-token count, is not available
// here).
#include "tokenizer/chat.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace deltafin::tokenizer {
namespace {

using ojson = nlohmann::ordered_json;

const Tokenizer& Tiny() {
  static const auto* tok = [] {
    auto t = Tokenizer::LoadModelDir(std::string(DF_TEST_DATA_DIR) + "/golden/tiny-k3");
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? std::move(t).value().release() : nullptr;
  }();
  return *tok;
}

const std::string kEffortMax =
    "<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>"
    "`thinking_effort` guides on how much to think in your thinking channel (not including the "
    "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
    "Now the system is invoked with `thinking_effort=max`."
    "<|close|>message<|sep|><|end_of_msg|>";

std::string Render(const ojson& messages, const ojson& tools = nullptr, ChatOptions o = {}) {
  auto r = RenderChat(messages, tools, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? ChatText(*r) : "";
}

std::string RenderError(const ojson& messages, ChatOptions o = {}) {
  auto r = RenderChat(messages, nullptr, o);
  return r.ok() ? "" : r.status().message();
}

TEST(ChatTemplateTest, SpecExampleRendersAndKeepsUserMarkersOrdinary) {
  const ojson msgs = ojson::parse(R"([{"role": "user", "content": "Hello <|open|> & goodbye"}])");
  EXPECT_EQ(Render(msgs),
            kEffortMax +
                "<|open|>message role=\"user\"<|sep|>Hello <|open|> & goodbye<|close|>message"
                "<|sep|><|end_of_msg|>"
                "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>");
  auto segs = RenderChat(msgs, nullptr, {});
  ASSERT_TRUE(segs.ok());
  auto ids = EncodeChat(Tiny(), *segs);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  // Exactly 4 × <|open|> (effort message, user message, assistant, think); the user's literal
  // "<|open|>" is ordinary BPE.
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 643), 4);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 642), 2);  // <|end_of_msg|>
  // Each segment is encoded on its own: the ids are the concatenation of per-segment encodes.
  std::vector<int32_t> expect;
  for (const auto& s : *segs) {
    if (s.special) {
      expect.push_back(Tiny().SpecialId(s.text));
    } else {
      auto part = Tiny().Encode(s.text);
      ASSERT_TRUE(part.ok());
      expect.insert(expect.end(), part->begin(), part->end());
    }
  }
  EXPECT_EQ(*ids, expect);
  // " role" and "=\"" are separate segments, so no merge crosses them.
  bool found = false;
  for (size_t i = 0; i + 1 < segs->size(); ++i) {
    found |= (*segs)[i].text == " role" && (*segs)[i + 1].text == "=\"";
  }
  EXPECT_TRUE(found);
}

TEST(ChatTemplateTest, ThinkingOffAndEfforts) {
  const ojson msgs = ojson::parse(R"([{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "Hi", "name": "a\"b&c"}])");
  ChatOptions off;
  off.thinking = false;
  EXPECT_EQ(Render(msgs, nullptr, off),
            "<|open|>message role=\"system\"<|sep|>Be brief.<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"user\" name=\"a&quot;b&amp;c\"<|sep|>Hi<|close|>message<|sep|>"
            "<|end_of_msg|><|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>");
  for (const char* e : {"low", "medium", "high", "max"}) {
    ChatOptions o;
    o.reasoning_effort = e;
    EXPECT_NE(Render(msgs, nullptr, o).find(std::string("`thinking_effort=") + e + "`."),
              std::string::npos);
  }
  ChatOptions none;
  none.reasoning_effort = "";
  EXPECT_EQ(Render(msgs, nullptr, none).find("thinking-effort"), std::string::npos);
  ChatOptions bad;
  bad.reasoning_effort = "extreme";
  EXPECT_NE(RenderError(msgs, bad).find("reasoning_effort 'extreme'"), std::string::npos);
  ChatOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  const std::string s = Render(msgs, nullptr, no_prompt);
  EXPECT_EQ(s.substr(s.size() - 14), "<|end_of_msg|>");
}

TEST(ChatTemplateTest, ToolDeclarationsAreDeepSortedCompactJson) {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "météo",
      "parameters": {"type": "object", "required": ["city"],
                     "properties": {"city": {"type": "string", "description": "Zürich, 東京"}}},
      "description": "Weather"}}])");
  const ojson msgs = ojson::parse(R"([{"role": "user", "content": "?"}])");
  ChatOptions o;
  o.thinking = false;
  o.add_generation_prompt = false;
  EXPECT_EQ(
      Render(msgs, tools, o),
      std::string("<|open|>message role=\"system\" type=\"tool-declare\"<|sep|># Tools\n"
                  "Here are the available tools, described in JSONSchema.\n\n```json\n") +
          R"([{"function":{"description":"Weather","name":"météo","parameters":{"properties":)"
          R"({"city":{"description":"Zürich, 東京","type":"string"}},"required":["city"],)"
          R"("type":"object"}},"type":"function"}])" +
          "\n```<|close|>message<|sep|><|end_of_msg|><|open|>message role=\"user\"<|sep|>?"
          "<|close|>message<|sep|><|end_of_msg|>");
}

TEST(ChatTemplateTest, AssistantHistoryWithReasoningAndToolCalls) {
  const ojson msgs = ojson::parse(R"([
    {"role": "user", "content": "go"},
    {"role": "assistant", "reasoning_content": "think \"hard\"", "content": "ok",
     "tool_calls": [
       {"id": "c1", "type": "function", "function": {"name": "f",
        "arguments": "{\"s\": \"x & y\", \"n\": 1.5, \"b\": true, \"z\": null, \"o\": {\"k\": [1, 2]}, \"a\": [\"é\"]}"}},
       {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "c2", "content": "G"},
    {"role": "tool", "tool_call_id": "c1", "content": "F"},
    {"role": "assistant", "reasoning_content": "  \n", "content": "done"}])");
  const std::string arg =
      "<|open|>argument key=\"s\" type=\"string\"<|sep|>x & y<|close|>argument<|sep|>"
      "<|open|>argument key=\"n\" type=\"number\"<|sep|>1.5<|close|>argument<|sep|>"
      "<|open|>argument key=\"b\" type=\"boolean\"<|sep|>true<|close|>argument<|sep|>"
      "<|open|>argument key=\"z\" type=\"null\"<|sep|>null<|close|>argument<|sep|>"
      "<|open|>argument key=\"o\" type=\"object\"<|sep|>{\"k\": [1, 2]}<|close|>argument<|sep|>"
      "<|open|>argument key=\"a\" type=\"array\"<|sep|>[\"é\"]<|close|>argument<|sep|>";
  EXPECT_EQ(
      Render(msgs),
      kEffortMax +
          "<|open|>message role=\"user\"<|sep|>go<|close|>message<|sep|><|end_of_msg|>"
          "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>think \"hard\""
          "<|close|>think<|sep|><|open|>response<|sep|>ok<|close|>response<|sep|>"
          "<|open|>tools<|sep|><|open|>call tool=\"f\" index=\"0\"<|sep|>" +
          arg +
          "<|close|>call<|sep|><|open|>call tool=\"g\" index=\"1\"<|sep|>"
          "<|open|>json type=\"object\"<|sep|>not json<|close|>json<|sep|><|close|>call<|sep|>"
          "<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>"
          // Tool results re-ordered to the calls' order (c1 first), index counting from 0.
          "<|open|>message role=\"tool\" tool=\"f\" index=\"0\"<|sep|>F<|close|>message<|sep|>"
          "<|end_of_msg|>"
          "<|open|>message role=\"tool\" tool=\"g\" index=\"1\"<|sep|>G<|close|>message<|sep|>"
          "<|end_of_msg|>"
          // Blank reasoning is omitted, the think block stays.
          "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|><|close|>think<|sep|>"
          "<|open|>response<|sep|>done<|close|>response<|sep|><|close|>message<|sep|>"
          "<|end_of_msg|>"
          "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>");
}

TEST(ChatTemplateTest, BadMessagesAreErrors) {
  EXPECT_EQ(RenderError(ojson::parse(R"([{"role": "user", "content": "a"}, {"role": "wizard"}])")),
            "messages[1]: unknown role 'wizard' (expected system, user, assistant or tool)");
  EXPECT_NE(RenderError(ojson::parse(R"([{"content": "a"}])")).find("missing string 'role'"),
            std::string::npos);
  EXPECT_NE(RenderError(ojson::parse(R"([{"role": "user", "content": [{"type": "image_url"}]}])"))
                .find("only text parts"),
            std::string::npos);
  EXPECT_NE(RenderError(ojson::parse(R"([{"role": "tool", "tool_call_id": "x", "content": "a"}])"))
                .find("matches no call"),
            std::string::npos);
  EXPECT_FALSE(RenderChat(ojson::object(), nullptr, {}).ok());
  ChatOptions o;
  EXPECT_FALSE(RenderChatRequest("{\"messages\": 5}", &o).ok());
  EXPECT_FALSE(RenderChatRequest("[", &o).ok());
  EXPECT_TRUE(RenderChatRequest(R"({"messages": [{"role": "user", "content": [{"type": "text",
      "text": "a"}]}], "thinking": false})",
                                &o)
                  .ok());
  EXPECT_FALSE(o.thinking);
}

// Ids a model would generate after the thinking generation prompt.
std::vector<int32_t> Generated(const std::vector<ChatSegment>& segs) {
  auto ids = EncodeChat(Tiny(), segs);
  EXPECT_TRUE(ids.ok());
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(ChatParserTest, SplitsReasoningContentAndToolCallsStreaming) {
  const std::vector<ChatSegment> out = {{"Let me think — 😀 about it.", false},
                                        {"<|close|>", true},
                                        {"think", false},
                                        {"<|sep|>", true},
                                        {"<|open|>", true},
                                        {"response", false},
                                        {"<|sep|>", true},
                                        {"The answer: 東京 & <|open|> text.", false},
                                        {"<|close|>", true},
                                        {"response", false},
                                        {"<|sep|>", true},
                                        {"<|open|>", true},
                                        {"tools", false},
                                        {"<|sep|>", true},
                                        {"<|open|>", true},
                                        {"call", false},
                                        {" tool", false},
                                        {"=\"", false},
                                        {"get_weather", false},
                                        {"\"", false},
                                        {" index", false},
                                        {"=\"", false},
                                        {"0", false},
                                        {"\"", false},
                                        {"<|sep|>", true},
                                        {"<|open|>", true},
                                        {"argument key=\"city\" type=\"string\"", false},
                                        {"<|sep|>", true},
                                        {"Zürich \"X\"", false},
                                        {"<|close|>", true},
                                        {"argument", false},
                                        {"<|sep|>", true},
                                        {"<|open|>", true},
                                        {"argument key=\"days\" type=\"number\"", false},
                                        {"<|sep|>", true},
                                        {"3", false},
                                        {"<|close|>", true},
                                        {"argument", false},
                                        {"<|sep|>", true},
                                        {"<|close|>", true},
                                        {"call", false},
                                        {"<|sep|>", true},
                                        {"<|open|>", true},
                                        {"call tool=\"raw\" index=\"1\"", false},
                                        {"<|sep|>", true},
                                        {"<|open|>", true},
                                        {"json type=\"object\"", false},
                                        {"<|sep|>", true},
                                        {"{bad json", false},
                                        {"<|close|>", true},
                                        {"json", false},
                                        {"<|sep|>", true},
                                        {"<|close|>", true},
                                        {"call", false},
                                        {"<|sep|>", true},
                                        {"<|close|>", true},
                                        {"tools", false},
                                        {"<|sep|>", true},
                                        {"<|close|>", true},
                                        {"message", false},
                                        {"<|sep|>", true},
                                        {"<|end_of_msg|>", true},
                                        {"ignored", false}};
  const auto ids = Generated(out);
  auto parsed = ParseChatOutput(Tiny(), ids, /*thinking=*/true);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->reasoning, "Let me think — 😀 about it.");
  EXPECT_EQ(parsed->content, "The answer: 東京 & <|open|> text.");
  EXPECT_TRUE(parsed->done);
  ASSERT_EQ(parsed->tool_calls.size(), 2u);
  EXPECT_EQ(parsed->tool_calls[0].name, "get_weather");
  EXPECT_EQ(parsed->tool_calls[0].index, 0);
  EXPECT_EQ(parsed->tool_calls[0].arguments, R"({"city":"Zürich \"X\"","days":3})");
  EXPECT_EQ(parsed->tool_calls[1].name, "raw");
  EXPECT_EQ(parsed->tool_calls[1].arguments, "{bad json");

  // Token by token: every delta is complete UTF-8 and the deltas add up to the whole.
  ChatOutputParser p(Tiny(), true);
  std::string reasoning, content;
  for (int32_t id : ids) {
    ChatDelta d;
    ASSERT_TRUE(p.Feed(id, &d).ok());
    EXPECT_TRUE(ValidateUtf8(d.reasoning).ok());
    EXPECT_TRUE(ValidateUtf8(d.content).ok());
    reasoning += d.reasoning;
    content += d.content;
    if (d.done) break;
  }
  EXPECT_EQ(reasoning, parsed->reasoning);
  EXPECT_EQ(content, parsed->content);

  // Non-thinking output starts in the response channel; unknown ids are errors.
  auto plain = ParseChatOutput(
      Tiny(),
      Generated({{"Hi", false}, {"<|close|>", true}, {"response", false}, {"<|sep|>", true}}),
      false);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->content, "Hi");
  EXPECT_FALSE(ParseChatOutput(Tiny(), {99999}, false).ok());
}

TEST(PyJsonTest, MatchesPythonJsonDumps) {
  const ojson v = ojson::parse(R"({"b": [1, 2.5, "x\n\u0001"], "a": {"é": true, "c": null}})");
  EXPECT_EQ(PyJsonDumps(v, ",", ":", true), R"({"a":{"c":null,"é":true},"b":[1,2.5,"x\n\u0001"]})");
  EXPECT_EQ(PyJsonDumps(v, ", ", ": ", false),
            R"({"b": [1, 2.5, "x\n\u0001"], "a": {"é": true, "c": null}})");
}

}  // namespace
}  // namespace deltafin::tokenizer
