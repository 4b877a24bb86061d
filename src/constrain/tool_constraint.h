// Tool calls bound to their schemas (docs/SERVER.md "Tool calls"): a token-level grammar of K3's
// tool section whose arguments are JsonConstraints over each tool's parameters schema, so every
// call the model emits parses and validates.
//
// K3 writes calls as XTML (spec §5.4):
//   <|open|>tools<|sep|>
//     <|open|>call tool="NAME" index="N"<|sep|> <|open|>json type="object"<|sep|> ARGS
//     <|close|>json<|sep|> <|close|>call<|sep|>   ... more calls ...
//   <|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>
// where every piece between the specials is encoded on its own, as the chat template renders them
// (tokenizer/chat_template.cc), and ARGS is the JSON arguments object (the template's `json` form
// of a call, which the chat parser reads back as the call's arguments verbatim).
//
// Modes: kAuto starts free (thinking and text are not masked); once the model emits <|open|>, the
// header is one of think / response / tools (the tags that can open there), and after `tools` the
// section above is enforced. kRequired starts inside the opened tools section (the prompt forced
// it) and needs at least one call; kNamed starts inside the named call's <json> (the prompt forced
// the call's header and the json opening), so only its arguments are generated, then it closes.
//
// What must fit in the budget: the arguments' JSON always; `</json></call>` only for kAuto (a
// forced call whose JSON is complete is reported even when the budget cuts its closing tags, see
// tokenizer::ChatOutputParser::FlushOpenCall); the section's end never (the calls before it are
// complete). Those optional tokens count 0 in CloseCost, and BeginClosing still emits them.
//
// The fixed pieces are alternatives of token sequences (prefix-free by construction: each ends in
// a special or a closing quote that names cannot contain); the JSON parts are JsonConstraints
// without EOS. CloseCost follows the cheapest path to the end of the message (closing the JSON,
// the call and the section), which is what BeginClosing emits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "constrain/json_constraint.h"
#include "tokenizer/tokenizer.h"

namespace deltafin::constrain {

struct ToolSchema {
  std::string name;
  std::shared_ptr<const JsonSchema> parameters;  // its root must be an object
};

class ToolCallConstraint : public TokenConstraint {
 public:
  enum class Mode { kAuto, kRequired, kNamed };
  // `named`: the tool's index in `tools` for kNamed. `parallel`: more than one call may follow
  // (kNamed always makes exactly one). `vocab_size` is the model's logits width.
  static Result<std::unique_ptr<ToolCallConstraint>> Create(const tokenizer::Tokenizer& tokenizer,
                                                            std::shared_ptr<const TokenTrie> trie,
                                                            int64_t vocab_size,
                                                            std::vector<ToolSchema> tools,
                                                            Mode mode, size_t named, bool parallel);

  bool Active() const override { return state_ != State::kFree; }
  bool Ended() const override { return state_ == State::kDone; }
  int64_t CloseCost() override;
  int64_t CloseCostAfter(int32_t token) override;

 protected:
  int64_t MaskNext(std::span<uint8_t> allowed) override;
  bool AcceptNext(int32_t token) override;
  void AppendClosing(std::vector<int32_t>* out) override;

 private:
  // kCalls: the calls menu for the current call count (after </call>, one more call).
  enum class Target : uint8_t { kFree, kCalls, kJson, kDone };
  struct Alt {
    std::vector<int32_t> tokens;
    Target target = Target::kDone;
    int32_t tool = -1;      // kJson: which tool's arguments follow
    bool optional = false;  // its tokens need not fit in the budget (CloseCost counts 0)
    int64_t Cost(size_t pos) const {
      return optional ? 0 : static_cast<int64_t>(tokens.size() - pos);
    }
  };
  using Menu = std::vector<Alt>;
  enum class State : uint8_t { kFree, kSeq, kJson, kDone };

  ToolCallConstraint() = default;
  // The cheapest end from the start of the alternative's target; `calls` is the index of the
  // call the target's menu or arguments belong to.
  int64_t TargetCost(const Alt& alt, size_t calls) const;
  int64_t CallsCost(size_t calls) const {
    return calls_cost_[std::min(calls, calls_cost_.size() - 1)];
  }
  const Menu& CallsMenu(size_t calls) const {
    return calls_menu_[std::min(calls, calls_menu_.size() - 1)];
  }
  // The call index an alternative of the current menu leads to.
  size_t NextCalls() const { return menu_ == &after_json_menu_ ? calls_ + 1 : calls_; }
  void Enter(const Alt& alt);  // the alternative is complete: go to its target
  void EnterMenu(const Menu* menu);
  // The cheapest alternative of `menu` from token `pos` on (alive: which may be chosen).
  size_t Best(const Menu& menu, size_t pos, size_t calls, const std::vector<uint8_t>* alive) const;
  void AppendTarget(const Alt& alt, size_t calls, std::vector<int32_t>* out) const;

  std::shared_ptr<const TokenTrie> trie_;
  int64_t vocab_size_ = 0;
  int32_t open_id_ = -1;
  std::vector<std::unique_ptr<JsonConstraint>> json_;  // per tool
  std::vector<int64_t> json_start_;                    // tokens of each tool's shortest arguments
  Menu header_menu_;                 // kAuto after <|open|>: think / response / tools
  std::vector<Menu> calls_menu_;     // [k]: what may follow k calls (a call, or the section's end)
  std::vector<int64_t> calls_cost_;  // [k]: the cheapest end from calls_menu_[k]
  Menu after_json_menu_;             // </json></call>
  State state_ = State::kFree;
  const Menu* menu_ = nullptr;  // kSeq: the alternatives being matched
  std::vector<uint8_t> alive_;  // kSeq: which alternatives still match
  size_t pos_ = 0;              // kSeq: tokens matched
  int32_t tool_ = -1;           // kJson: the tool whose arguments are being generated
  size_t calls_ = 0;            // calls started before the current one (its index)
};

}  // namespace deltafin::constrain
