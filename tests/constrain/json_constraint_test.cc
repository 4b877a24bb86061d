// Unit tests of constrained JSON decoding (src/constrain): the automaton accepts exactly the
// JSON texts it should (whole strings and every byte prefix), the schema compiler's subset and
// its refusals, and the token mask over the tiny model's vocabulary: greedy walks driven only by
// the mask always end in a value that nlohmann::json parses and an independent check validates.
#include "constrain/json_constraint.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace deltafin::constrain
