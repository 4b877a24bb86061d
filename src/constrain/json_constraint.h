// Constrained JSON decoding (docs/SERVER.md "JSON output"): a byte-level pushdown automaton for
// JSON, optionally narrowed by a compiled JSON Schema subset, and the per-step token mask it
// induces over a tokenizer's vocabulary, so that a sampled answer always parses (and validates).
//
// JsonSchema compiles the supported subset: type object/array/string/number/integer/boolean/null,
// properties, required, additionalProperties (false or true; with properties, only the listed
// properties are generated), enum, const, items, minItems/maxItems, minLength/maxLength, and the
// annotations title/description/$schema/default/examples/strict. Any other keyword (anyOf, $ref,
// pattern, minimum, type arrays, ...) is refused with its name, never ignored. Objects with
// properties are generated in the schema's property order (each optional one may be left out),
// which every validator accepts.
//
// JsonMatcher is the automaton: Feed() takes one byte or refuses it. So that generation always
// ends, runs of whitespace are at most kMaxWhitespace bytes, numbers have at most 15 integer and
// 15 fraction digits and 3 exponent digits, strings are valid UTF-8 without unpaired \u
// surrogates, and nothing (not even whitespace) may follow the complete top-level value.
//
// TokenTrie holds every ordinary token's bytes in a trie; JsonConstraint walks the trie and the
// automaton together, so a subtree whose prefix the automaton refuses is never visited. Special
// tokens are never allowed, except EOS once the value is complete. No allocation after the first
// mask (the walk's per-depth states reuse their capacity).
//
// Budget-aware ending (docs/SERVER.md "Budget-aware closing"): every schema node knows its
// shortest value text, so JsonMatcher::MinClose gives the shortest bytes that complete the value
// from any state, and TokenConstraint counts them in tokens (the greedy longest-match tokenization
// over the trie: a real tokenization the automaton accepts, hence a sound upper bound on the
// fewest tokens). The server keeps that count within the remaining budget and, when they meet,
// emits exactly that ending (TokenConstraint::BeginClosing).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::constrain {

inline constexpr int kMaxWhitespace = 4;

class JsonSchema {
 public:
  // json_object mode: any JSON object.
  static std::shared_ptr<const JsonSchema> AnyObject();
  // A json_schema: errors name the unsupported keyword (and where it is, as a JSON pointer).
  static Result<std::shared_ptr<const JsonSchema>> Compile(const nlohmann::ordered_json& schema);

  enum class Kind : uint8_t { kAny, kObject, kArray, kString, kNumber, kInteger, kLiterals };
  struct Node {
    Kind kind = Kind::kAny;
    // kObject: properties in order (keys as JSON text, quotes included) and whether required;
    // free: any keys with any values (no properties, additionalProperties not false).
    std::vector<std::string> keys;
    std::vector<int32_t> values;
    std::vector<bool> required;
    bool free = false;
    int32_t items = -1;                     // kArray: the items' node (-1: any value)
    int64_t min_count = 0, max_count = -1;  // items of an array / characters of a string
    std::vector<std::string> literals;      // kLiterals: the allowed values as JSON text
    std::string min_text;                   // the shortest valid value (budget-aware ending)
  };
  const Node& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  int32_t root() const { return root_; }
  // Fixed nodes every schema has: the literals true/false/null, and any value.
  static constexpr int32_t kTrue = 0, kFalse = 1, kNull = 2, kAnyValue = 3;

 private:
  JsonSchema();
  Result<int32_t> Add(const nlohmann::ordered_json& schema, const std::string& where);
  std::vector<Node> nodes_;
  int32_t root_ = kAnyValue;
};

class JsonMatcher {
 public:
  // `schema` must outlive the matcher (JsonConstraint owns it).
  explicit JsonMatcher(const JsonSchema* schema);
  JsonMatcher(const JsonMatcher&) = default;
  JsonMatcher& operator=(const JsonMatcher&) = default;  // reuses capacity: no allocation

  // Advances by one byte; false (and unchanged) when the byte cannot continue a valid value.
  bool Feed(uint8_t c);
  bool Feed(std::string_view bytes);  // all or nothing
  // The bytes so far are a complete value (the answer may end here).
  bool Accepting() const;
  // Complete and nothing can follow (EOS is the only choice).
  bool Finished() const { return stack_.size() == 1 && stack_[0].phase == kRootDone; }
  void Reset();
  // *out = the shortest bytes that complete the value from here ("" when Accepting()).
  void MinClose(std::string* out) const;

 private:
  enum Type : uint8_t { kRoot, kObject, kArray, kString, kNumber, kLiteral };
  enum : uint8_t {
    kRootStart = 0,
    kRootDone,
    // objects
    kObjOpen = 0,
    kObjKey,
    kObjColon,
    kObjValue,
    kObjAfter,
    kObjComma,
    // arrays
    kArrOpen = 0,
    kArrAfter,
    kArrComma,
    // strings
    kStrBody = 0,
    kStrEscape,
    kStrHex,
    kStrUtf8,
    // numbers
    kNumSign = 0,
    kNumZero,
    kNumInt,
    kNumDot,
    kNumFrac,
    kNumE,
    kNumESign,
    kNumExp,
  };
  struct Frame {
    Type type = kRoot;
    uint8_t phase = 0;
    uint8_t lo = 0, hi = 0;  // strings: the next continuation byte's range
    int32_t node = -1;
    int32_t aux = 0;    // objects: next property; strings: bytes left (hex/UTF-8)
    int32_t off = 0;    // objects' keys and literals: bytes matched
    int64_t count = 0;  // arrays: items; strings: characters; numbers: digits of the part
    uint64_t mask = 0;  // objects' keys and literals: candidates left
  };
  bool Step(uint8_t c);
  bool StartValue(int32_t node, uint8_t c);
  bool CanEnd(const Frame& f) const;
  void ValueDone();  // the top frame's value is complete: pop it, advance the parent
  bool Whitespace(uint8_t c);
  uint64_t KeyCandidates(const Frame& f) const;
  bool AllOptionalFrom(const JsonSchema::Node& n, int32_t i) const;

  const JsonSchema* schema_;
  std::vector<Frame> stack_;
  int ws_run_ = 0;
};

// The ordinary tokens' bytes as a trie (children as sorted edge lists).
class TokenTrie {
 public:
  // Tokens [0, vocab.num_ranks()); ids at or past it (specials) are never in the trie.
  explicit TokenTrie(const tokenizer::Vocab& vocab);
  struct Node {
    uint32_t first_child = 0, num_children = 0;
    int32_t token = -1;  // the token ending here, or -1
    uint8_t byte = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  // The longest token that is a prefix of `bytes`: its length (0: none) and id.
  size_t LongestPrefix(std::string_view bytes, int32_t* token) const;
  // Greedy longest-match tokenization of `bytes`: appends the ids to *out when not null and
  // returns their count, or -1 when some byte starts no token.
  int64_t Greedy(std::string_view bytes, std::vector<int32_t>* out) const;

 private:
  std::vector<Node> nodes_;  // nodes_[0] is the root
};

// What the server's decode loop asks of a constraint (JsonConstraint for response_format,
// ToolCallConstraint for tool calls). Mask/Accept narrow each draw; CloseCost is the length in
// tokens of the shortest valid ending from the current state (an upper bound: a real
// tokenization of it), so the loop can keep it within the remaining budget; BeginClosing switches
// to emitting exactly that ending.
class TokenConstraint {
 public:
  TokenConstraint() = default;
  TokenConstraint(const TokenConstraint&) = default;
  TokenConstraint& operator=(const TokenConstraint&) = default;
  virtual ~TokenConstraint() = default;
  // False while the output is free (auto tool choice before the model opens K3's tool section):
  // the draw is not masked and there is nothing to close, but Accept still follows every token.
  virtual bool Active() const { return true; }
  // The output is complete and generation must end here (a tool section was closed).
  virtual bool Ended() const { return false; }
  // allowed[id] = 1 iff token id may come next. Returns how many are allowed.
  int64_t Mask(std::span<uint8_t> allowed);
  // Advances by the chosen token (false: not allowed; the state is then unspecified).
  bool Accept(int32_t token);
  // Tokens of the shortest valid ending from here (0: the output may stop now).
  virtual int64_t CloseCost() = 0;
  // The same after `token`, without advancing; -1 when the token is not allowed.
  virtual int64_t CloseCostAfter(int32_t token) = 0;
  // From now on Mask allows only the next token of the shortest ending (CloseCost() tokens).
  void BeginClosing();
  bool closing() const { return closing_; }

 protected:
  virtual int64_t MaskNext(std::span<uint8_t> allowed) = 0;
  virtual bool AcceptNext(int32_t token) = 0;
  // Appends the shortest ending's tokens.
  virtual void AppendClosing(std::vector<int32_t>* out) = 0;

 private:
  bool closing_ = false;
  std::vector<int32_t> ending_;
  size_t ending_pos_ = 0;
};

class JsonConstraint : public TokenConstraint {
 public:
  // `vocab_size`: the model's logits width (may exceed the tokenizer's ids).
  // `vocab` (the token bytes) must outlive the constraint.
  JsonConstraint(std::shared_ptr<const JsonSchema> schema, std::shared_ptr<const TokenTrie> trie,
                 const tokenizer::Vocab* vocab, int64_t vocab_size, int32_t eos_token);
  bool Accepting() const { return matcher_.Accepting(); }
  bool Finished() const { return matcher_.Finished(); }
  const JsonSchema& schema() const { return *schema_; }
  void Reset() { matcher_.Reset(); }  // back to the start (another value of the same schema)
  // Appends the greedy tokens of the shortest ending (MinClose) without advancing.
  void ClosingTokens(std::vector<int32_t>* out) { AppendClosing(out); }
  int64_t CloseCost() override;
  int64_t CloseCostAfter(int32_t token) override;

 protected:
  int64_t MaskNext(std::span<uint8_t> allowed) override;
  // The token's bytes (false: a special other than EOS, or bytes the automaton refuses).
  bool AcceptNext(int32_t token) override;
  void AppendClosing(std::vector<int32_t>* out) override;

 private:
  bool TokenBytes(int32_t token, std::string_view* bytes) const;
  std::shared_ptr<const JsonSchema> schema_;
  std::shared_ptr<const TokenTrie> trie_;
  const tokenizer::Vocab* vocab_;
  int64_t vocab_size_;
  int32_t eos_;
  JsonMatcher matcher_;
  std::vector<JsonMatcher> depth_;  // depth_[d]: the state after the first d bytes of the walk
  std::vector<std::pair<uint32_t, uint32_t>> walk_;  // (trie node, depth)
  JsonMatcher scratch_;                              // CloseCostAfter's trial state
  std::string close_text_;                           // MinClose's output, reused
};

}  // namespace deltafin::constrain
