// Unit tests of constrained JSON decoding (src/constrain): the automaton accepts exactly the
// JSON texts it should (whole strings and every byte prefix), the schema compiler's subset and
// its refusals, and the token mask over the tiny model's vocabulary: greedy walks driven only by
// the mask always end in a value that nlohmann::json parses and an independent check validates.
// Budget-aware closing: from every state the shortest ending completes the value, and walks held
// to a token budget the way the server holds them always end parsing and validating within it.
// Tool calls (ToolCallConstraint): walks in every mode give K3 tool sections whose calls the chat
// parser reads back with arguments that parse and validate against the tool's schema.
#include "constrain/json_constraint.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "constrain/tool_constraint.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::constrain {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const JsonSchema> Schema(const char* text) {
  auto s = JsonSchema::Compile(ojson::parse(text));
  EXPECT_TRUE(s.ok()) << text << ": " << s.status().message();
  return s.ok() ? *s : nullptr;
}

// Feeds `text` byte by byte; true when every byte is taken and the end is accepting.
bool Accepts(const JsonSchema& schema, const std::string& text) {
  JsonMatcher m(&schema);
  for (char c : text) {
    if (!m.Feed(static_cast<uint8_t>(c))) return false;
  }
  return m.Accepting();
}

TEST(JsonMatcherTest, AnyObjectAcceptsObjectsOnly) {
  auto any = JsonSchema::AnyObject();
  for (const char* ok :
       {"{}", R"({"a":1})", R"({"a": [1, 2.5e-3, true, false, null, "x\n\u00e9"], "b": {}})",
        "{\n  \"k\" : -0.5 }", R"({"a":{"b":{"c":[[],[{}]]}}})",
        "{\"\xc3\xa9\":\"\xe2\x82\xac\"}"}) {
    EXPECT_TRUE(Accepts(*any, ok)) << ok;
    EXPECT_TRUE(ojson::accept(ok)) << ok;
  }
  for (const char* bad : {"[]",
                          "1",
                          "\"s\"",
                          "{",
                          R"({"a"})",
                          R"({"a":})",
                          R"({"a":1,})",
                          R"({,})",
                          "{} ",
                          R"({"a":01})",
                          R"({"a":1.})",
                          R"({"a":-})",
                          R"({"a":tru})",
                          R"({"a":"\x"})",
                          R"({"a":"\ud800"})",
                          "{\"a\":\"\x01\"}",
                          "{\"a\":\"\xc0\xaf\"}",
                          "{\"a\":\"\xed\xa0\x80\"}",
                          "{      }",
                          R"({"a":1e})",
                          R"({"a":1234567890123456})"}) {
    EXPECT_FALSE(Accepts(*any, bad)) << bad;
  }
}

TEST(JsonMatcherTest, RefusedBytesLeaveTheStateUnchanged) {
  auto any = JsonSchema::AnyObject();
  JsonMatcher m(any.get());
  ASSERT_TRUE(m.Feed(std::string_view(R"({"a":12)")));
  EXPECT_FALSE(m.Feed('x'));
  EXPECT_FALSE(m.Feed(std::string_view("3x")));  // all or nothing
  EXPECT_TRUE(m.Feed('3'));
  EXPECT_TRUE(m.Feed('}'));
  EXPECT_TRUE(m.Accepting());
  EXPECT_TRUE(m.Finished());
}

TEST(JsonMatcherTest, SchemaObjectsFollowPropertiesAndRequired) {
  auto s = Schema(R"({"type":"object","properties":{
      "name":{"type":"string","minLength":1,"maxLength":3},
      "age":{"type":"integer"},
      "tags":{"type":"array","items":{"enum":["a","b",1]},"minItems":1,"maxItems":2},
      "ok":{"type":"boolean"},
      "none":{"type":"null"},
      "score":{"type":"number"}},
    "required":["name","tags"],"additionalProperties":false})");
  ASSERT_NE(s, nullptr);
  for (const char* ok :
       {R"({"name":"abc","tags":["a"]})",
        R"({"name":"x","age":-3,"tags":["b",1],"ok":true,"none":null,"score":1.5e2})",
        R"({"name":"é","tags":[1],"score":0})",
        R"({ "name" : "ab" , "age" : 7 , "tags" : [ "a" ] })"}) {
    EXPECT_TRUE(Accepts(*s, ok)) << ok;
  }
  for (const char* bad : {
           R"({"tags":["a"]})",                       // name missing
           R"({"name":"abcd","tags":["a"]})",         // maxLength
           R"({"name":"","tags":["a"]})",             // minLength
           R"({"name":"a","tags":[]})",               // minItems
           R"({"name":"a","tags":["a","b","a"]})",    // maxItems
           R"({"name":"a","tags":["c"]})",            // enum
           R"({"name":"a","tags":[1.0]})",            // enum (1 only)
           R"({"name":"a","age":1.5,"tags":["a"]})",  // integer
           R"({"name":"a","tags":["a"],"x":1})",      // additionalProperties false
           R"({"name":"a","tags":["a"],"ok":1})",     // boolean
           R"({"name":"a","tags":["a"],"name":"b"})"  // repeated key
       }) {
    EXPECT_FALSE(Accepts(*s, bad)) << bad;
  }
}

TEST(JsonMatcherTest, ConstEnumLiteralsAndTopLevelScalars) {
  auto c = Schema(R"({"const":{"a":[1,2]}})");
  EXPECT_TRUE(Accepts(*c, R"({"a":[1,2]})"));
  EXPECT_FALSE(Accepts(*c, R"({"a":[1,3]})"));
  auto e = Schema(R"({"enum":[1,12,"x"]})");
  EXPECT_TRUE(Accepts(*e, "1"));
  EXPECT_TRUE(Accepts(*e, "12"));
  EXPECT_TRUE(Accepts(*e, "\"x\""));
  EXPECT_FALSE(Accepts(*e, "123"));
  EXPECT_FALSE(Accepts(*e, "2"));
  auto n = Schema(R"({"type":"number"})");
  EXPECT_TRUE(Accepts(*n, "-0.25E+10"));
  EXPECT_FALSE(Accepts(*n, "+1"));
  auto a = Schema(R"({"type":"array","maxItems":0})");
  EXPECT_TRUE(Accepts(*a, "[]"));
  EXPECT_FALSE(Accepts(*a, "[1]"));
}

TEST(JsonSchemaTest, UnsupportedKeywordsAreNamed) {
  for (const auto& [schema, keyword] : std::vector<std::pair<const char*, const char*>>{
           {R"({"type":"object","properties":{"a":{"anyOf":[{"type":"string"}]}}})", "anyOf"},
           {R"({"type":"string","pattern":"^a"})", "pattern"},
           {R"({"type":"integer","minimum":0})", "minimum"},
           {R"({"$ref":"#/x"})", "$ref"},
           {R"({"type":["string","null"]})", "type"},
           {R"({"type":"object","additionalProperties":{"type":"string"}})",
            "additionalProperties"}}) {
    auto s = JsonSchema::Compile(ojson::parse(schema));
    ASSERT_FALSE(s.ok()) << schema;
    EXPECT_NE(s.status().message().find(std::string("'") + keyword), std::string::npos)
        << s.status().message();
  }
  for (const char* invalid : {R"({"type":"strin"})", R"({"type":"object","required":["x"]})",
                              R"({"type":"string","minItems":1})", R"({"enum":[]})"}) {
    EXPECT_FALSE(JsonSchema::Compile(ojson::parse(invalid)).ok()) << invalid;
  }
}

// An independent validator of the same subset over nlohmann::json (not the automaton).
bool Validate(const ojson& schema, const ojson& v) {
  if (schema.contains("const")) return v == schema["const"];
  if (schema.contains("enum")) {
    for (const auto& e : schema["enum"]) {
      if (e == v && e.type() == v.type()) return true;
    }
    return false;
  }
  if (!schema.contains("type")) return true;
  const std::string t = schema["type"];
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "string") {
    if (!v.is_string()) return false;
    // Characters = code points of the UTF-8 text.
    int64_t n = 0;
    for (unsigned char c : v.get<std::string>()) n += (c & 0xC0) != 0x80;
    return n >= schema.value("minLength", int64_t{0}) &&
           (!schema.contains("maxLength") || n <= schema["maxLength"].get<int64_t>());
  }
  if (t == "array") {
    if (!v.is_array()) return false;
    const auto n = static_cast<int64_t>(v.size());
    if (n < schema.value("minItems", int64_t{0})) return false;
    if (schema.contains("maxItems") && n > schema["maxItems"].get<int64_t>()) return false;
    for (const auto& x : v) {
      if (schema.contains("items") && !Validate(schema["items"], x)) return false;
    }
    return true;
  }
  if (t == "object") {
    if (!v.is_object()) return false;
    const ojson props = schema.value("properties", ojson::object());
    for (const auto& r : schema.value("required", ojson::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    for (const auto& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (!Validate(props[k], x)) return false;
      } else if (!schema.value("additionalProperties", true)) {
        return false;
      }
    }
    return true;
  }
  return false;
}

class MaskTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tok = tokenizer::Tokenizer::LoadModelDir(DF_TEST_DATA_DIR "/golden/tiny-k3");
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    tok_ = std::move(tok).value().release();
    trie_ = std::make_shared<const TokenTrie>(tok_->vocab());
  }
  static void TearDownTestSuite() {
    trie_.reset();
    delete tok_;
    tok_ = nullptr;
  }
  static tokenizer::Tokenizer* tok_;
  static std::shared_ptr<const TokenTrie> trie_;
};
tokenizer::Tokenizer* MaskTest::tok_ = nullptr;
std::shared_ptr<const TokenTrie> MaskTest::trie_;

// Draws tokens uniformly among the allowed ones until EOS; returns the text.
std::string Walk(const std::shared_ptr<const JsonSchema>& schema,
                 const std::shared_ptr<const TokenTrie>& trie, const tokenizer::Tokenizer& tok,
                 uint64_t seed, int max_steps, bool* ended) {
  const int64_t vocab = tok.vocab().vocab_size();
  const int32_t eos = static_cast<int32_t>(vocab - 1);  // a special id: never a JSON byte
  JsonConstraint c(schema, trie, &tok.vocab(), vocab, eos);
  std::vector<uint8_t> allowed(static_cast<size_t>(vocab));
  std::mt19937_64 rng(seed);
  std::string text;
  *ended = false;
  for (int step = 0; step < max_steps; ++step) {
    const int64_t n = c.Mask(allowed);
    EXPECT_GT(n, 0) << "dead end after " << text;
    if (n == 0) break;
    // Mask agrees with the automaton: every allowed token is accepted by a copy.
    std::vector<int32_t> ids;
    for (size_t i = 0; i < allowed.size(); ++i) {
      if (allowed[i]) ids.push_back(static_cast<int32_t>(i));
    }
    // Favour closing bytes a little so walks end: prefer the EOS when allowed half the time.
    int32_t pick = ids[rng() % ids.size()];
    if (allowed[static_cast<size_t>(eos)] && rng() % 2 == 0) pick = eos;
    EXPECT_TRUE(c.Accept(pick));
    if (pick == eos) {
      *ended = true;
      break;
    }
    std::string_view bytes;
    tok.vocab().IdBytes(static_cast<uint32_t>(pick), &bytes);
    text += bytes;
  }
  return text;
}

TEST_F(MaskTest, MaskedWalksAlwaysParseAndValidate) {
  const char* schema_text = R"({"type":"object","properties":{
      "answer":{"type":"string","maxLength":8},
      "n":{"type":"integer"},
      "flags":{"type":"array","items":{"type":"boolean"},"maxItems":3},
      "kind":{"enum":["cat","dog"]}},
    "required":["answer","kind"],"additionalProperties":false})";
  const ojson schema_json = ojson::parse(schema_text);
  auto schema = Schema(schema_text);
  ASSERT_NE(schema, nullptr);
  int ended_count = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    bool ended = false;
    const std::string text = Walk(schema, trie_, *tok_, seed, 400, &ended);
    if (!ended) continue;  // a long walk (strings, numbers) is cut: nothing to check
    ++ended_count;
    ojson v;
    ASSERT_NO_THROW(v = ojson::parse(text)) << text;
    EXPECT_TRUE(Validate(schema_json, v)) << text;
  }
  EXPECT_GE(ended_count, 20);
}

TEST_F(MaskTest, SpecialTokensOnlyEosWhenComplete) {
  auto any = JsonSchema::AnyObject();
  const int64_t vocab = tok_->vocab().vocab_size();
  const auto eos = static_cast<int32_t>(tok_->vocab().num_ranks());  // the first special id
  JsonConstraint c(any, trie_, &tok_->vocab(), vocab, eos);
  std::vector<uint8_t> allowed(static_cast<size_t>(vocab));
  c.Mask(allowed);
  EXPECT_EQ(allowed[static_cast<size_t>(eos)], 0);
  for (uint32_t id = tok_->vocab().num_ranks(); id < vocab; ++id) EXPECT_EQ(allowed[id], 0);
  // '{' then '}' (as single-byte tokens): complete, and only EOS is left.
  for (const char* piece : {"{", "}"}) {
    const uint32_t id = tok_->vocab().ranks().Find(piece, 1);
    ASSERT_NE(id, tokenizer::kNoRank);
    ASSERT_TRUE(c.Accept(static_cast<int32_t>(id)));
  }
  EXPECT_EQ(c.Mask(allowed), 1);
  EXPECT_EQ(allowed[static_cast<size_t>(eos)], 1);
}

const char* kBudgetSchema = R"({"type":"object","properties":{
    "answer":{"type":"string","minLength":2,"maxLength":40},
    "n":{"type":"number"},
    "flags":{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":30},
    "inner":{"type":"object","properties":{"k":{"enum":["cat","dog","x"]},"z":{"type":"integer"}},
             "required":["k"]},
    "kind":{"enum":["cat","dogs",7,null]}},
  "required":["answer","flags","inner"],"additionalProperties":false})";

// One token the way the server draws under a budget (scheduler.cc ConstrainedDraw) but uniformly:
// close when the shortest ending takes the whole budget; else draw among the allowed tokens,
// refusing one whose shortest ending would not fit in the tokens after it.
int32_t BudgetDraw(TokenConstraint& c, std::vector<uint8_t>& allowed, int64_t budget,
                   std::mt19937_64& rng) {
  const int64_t cost = c.closing() ? -1 : c.CloseCost();
  EXPECT_LE(cost, budget);
  if (cost >= budget) c.BeginClosing();
  c.Mask(allowed);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (allowed[i]) ids.push_back(static_cast<int32_t>(i));
  }
  while (!ids.empty()) {
    const size_t k = rng() % ids.size();
    const int32_t t = ids[k];
    if (c.closing() || c.CloseCostAfter(t) <= budget - 1) return t;
    ids.erase(ids.begin() + static_cast<ptrdiff_t>(k));
  }
  c.BeginClosing();
  c.Mask(allowed);
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (allowed[i]) return static_cast<int32_t>(i);
  }
  return -1;
}

TEST_F(MaskTest, ShortestEndingCompletesFromEveryState) {
  const ojson schema_json = ojson::parse(kBudgetSchema);
  auto schema = Schema(kBudgetSchema);
  ASSERT_NE(schema, nullptr);
  const int64_t vocab = tok_->vocab().vocab_size();
  std::vector<uint8_t> allowed(static_cast<size_t>(vocab));
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    JsonConstraint c(schema, trie_, &tok_->vocab(), vocab, -1);
    std::mt19937_64 rng(seed);
    std::string text;
    for (int step = 0; step < 60 && !c.Finished(); ++step) {
      // From here, the ending's bytes complete a valid value and its token count is CloseCost.
      JsonConstraint end = c;
      std::vector<int32_t> ending;
      end.ClosingTokens(&ending);
      EXPECT_EQ(static_cast<int64_t>(ending.size()), c.CloseCost());
      std::string tail;
      for (int32_t t : ending) {
        ASSERT_TRUE(end.Accept(t)) << text << " + " << tail;
        std::string_view b;
        tok_->vocab().IdBytes(static_cast<uint32_t>(t), &b);
        tail += b;
      }
      ASSERT_TRUE(end.Accepting()) << text << " + " << tail;
      ojson v;
      ASSERT_NO_THROW(v = ojson::parse(text + tail)) << text + tail;
      EXPECT_TRUE(Validate(schema_json, v)) << text + tail;
      ASSERT_GT(c.Mask(allowed), 0);
      std::vector<int32_t> ids;
      for (size_t i = 0; i < allowed.size(); ++i) {
        if (allowed[i]) ids.push_back(static_cast<int32_t>(i));
      }
      const int32_t pick = ids[rng() % ids.size()];
      ASSERT_TRUE(c.Accept(pick));
      std::string_view b;
      tok_->vocab().IdBytes(static_cast<uint32_t>(pick), &b);
      text += b;
    }
  }
}

TEST_F(MaskTest, BudgetedWalksAlwaysEndValidWithinTheBudget) {
  const ojson schema_json = ojson::parse(kBudgetSchema);
  auto schema = Schema(kBudgetSchema);
  ASSERT_NE(schema, nullptr);
  const int64_t vocab = tok_->vocab().vocab_size();
  std::vector<uint8_t> allowed(static_cast<size_t>(vocab));
  int closed = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    JsonConstraint c(schema, trie_, &tok_->vocab(), vocab, -1);
    const int64_t budget = c.CloseCost() + static_cast<int64_t>(seed % 25);
    std::mt19937_64 rng(seed);
    std::string text;
    int64_t used = 0;
    while (used < budget && !c.Finished()) {
      const int32_t t = BudgetDraw(c, allowed, budget - used, rng);
      ASSERT_GE(t, 0) << text;
      ASSERT_TRUE(c.Accept(t)) << text;
      std::string_view b;
      tok_->vocab().IdBytes(static_cast<uint32_t>(t), &b);
      text += b;
      ++used;
    }
    closed += c.closing() ? 1 : 0;
    ASSERT_TRUE(c.Accepting()) << "seed " << seed << " budget " << budget << ": " << text;
    ojson v;
    ASSERT_NO_THROW(v = ojson::parse(text)) << text;
    EXPECT_TRUE(Validate(schema_json, v)) << text;
  }
  EXPECT_GE(closed, 10);  // most walks met their budget and were closed by the shortest ending
}

class ToolTest : public MaskTest {
 protected:
  // Walks `mode` under `budget` tokens from a fresh constraint; returns the tokens.
  std::vector<int32_t> ToolWalk(ToolCallConstraint::Mode mode, size_t named, uint64_t seed,
                                int64_t budget, bool* ended) {
    std::vector<ToolSchema> tools;
    tools.push_back({"get_weather", Schema(R"({"type":"object","properties":{
        "city":{"type":"string","maxLength":12},"days":{"type":"integer"}},"required":["city"]})")});
    tools.push_back({"now", JsonSchema::AnyObject()});
    auto c = ToolCallConstraint::Create(*tok_, trie_, tok_->vocab().vocab_size(), tools, mode,
                                        named, true);
    EXPECT_TRUE(c.ok()) << c.status().message();
    std::vector<uint8_t> allowed(static_cast<size_t>(tok_->vocab().vocab_size()));
    std::mt19937_64 rng(seed);
    std::vector<int32_t> out;
    const int32_t open = tok_->SpecialId("<|open|>");
    // kAuto: the free part writes a little text, then opens the tool section.
    if (mode == ToolCallConstraint::Mode::kAuto) {
      for (const char* piece : {"Let me check.", "<|close|>", "response", "<|sep|>"}) {
        const int32_t special = tok_->SpecialId(piece);
        std::vector<int32_t> ids;
        if (special >= 0) {
          ids = {special};
        } else {
          ids = *tok_->Encode(piece);
        }
        for (int32_t id : ids) {
          EXPECT_FALSE((*c)->Active());
          EXPECT_TRUE((*c)->Accept(id));
          out.push_back(id);
        }
      }
      EXPECT_TRUE((*c)->Accept(open));
      out.push_back(open);
      EXPECT_TRUE((*c)->Active());
    }
    while (static_cast<int64_t>(out.size()) < budget && !(*c)->Ended()) {
      const int32_t t = BudgetDraw(**c, allowed, budget - static_cast<int64_t>(out.size()), rng);
      EXPECT_GE(t, 0);
      if (t < 0) break;
      EXPECT_TRUE((*c)->Accept(t));
      out.push_back(t);
    }
    *ended = (*c)->Ended();
    return out;
  }
};

TEST_F(ToolTest, CallsParseAndValidateInEveryModeAndBudget) {
  const ojson weather = ojson::parse(R"({"type":"object","properties":{
      "city":{"type":"string","maxLength":12},"days":{"type":"integer"}},"required":["city"]})");
  using Mode = ToolCallConstraint::Mode;
  // The prompt's forced segments, as the server renders them (request.cc ForcedToolSegments).
  const std::vector<int32_t> section =
      *tokenizer::EncodeChat(*tok_, {{"<|open|>", true}, {"tools", false}, {"<|sep|>", true}});
  std::vector<int32_t> named_prefix = section;
  for (const auto& seg : std::vector<tokenizer::ChatSegment>{{"<|open|>", true},
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
                                                             {"json", false},
                                                             {" type", false},
                                                             {"=\"", false},
                                                             {"object", false},
                                                             {"\"", false},
                                                             {"<|sep|>", true}}) {
    const auto ids = *tokenizer::EncodeChat(*tok_, {seg});
    named_prefix.insert(named_prefix.end(), ids.begin(), ids.end());
  }
  int calls = 0;
  for (Mode mode : {Mode::kRequired, Mode::kNamed, Mode::kAuto}) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      bool ended = false;
      const int64_t budget = 40 + static_cast<int64_t>(seed * 3);
      std::vector<int32_t> ids = ToolWalk(mode, 0, seed, budget, &ended);
      EXPECT_LE(static_cast<int64_t>(ids.size()), budget);
      std::vector<int32_t> all = mode == Mode::kNamed      ? named_prefix
                                 : mode == Mode::kRequired ? section
                                                           : std::vector<int32_t>{};
      all.insert(all.end(), ids.begin(), ids.end());
      // As the server reads it: the parser, plus the open call flushed when the budget cut its
      // closing tags (forced modes).
      tokenizer::ChatOutputParser parser(*tok_, false);
      tokenizer::ChatDelta d;
      for (int32_t id : all) ASSERT_TRUE(parser.Feed(id, &d).ok());
      parser.Finish(&d);
      if (mode != Mode::kAuto) parser.FlushOpenCall(&d);
      if (mode != Mode::kAuto) {
        EXPECT_GE(d.tool_calls.size(), 1u) << "seed " << seed;
      }
      for (const auto& call : d.tool_calls) {
        ++calls;
        ojson v;
        ASSERT_NO_THROW(v = ojson::parse(call.arguments)) << call.arguments;
        if (call.name == "get_weather") {
          EXPECT_TRUE(Validate(weather, v)) << call.arguments;
        } else {
          EXPECT_EQ(call.name, "now");
          EXPECT_TRUE(v.is_object()) << call.arguments;
        }
      }
    }
  }
  EXPECT_GE(calls, 40);
}

TEST_F(ToolTest, UnsupportedOrNonObjectSchemasAreRefused) {
  std::vector<ToolSchema> tools = {{"f", Schema(R"({"type":"string"})")}};
  auto c = ToolCallConstraint::Create(*tok_, trie_, tok_->vocab().vocab_size(), tools,
                                      ToolCallConstraint::Mode::kRequired, 0, true);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("object"), std::string::npos);
}

}  // namespace
}  // namespace deltafin::constrain
