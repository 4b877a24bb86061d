// ToolCallConstraint: K3's tool section as alternatives of token sequences around per-tool
// JsonConstraints (see tool_constraint.h for the grammar).
#include "constrain/tool_constraint.h"

#include <algorithm>

namespace deltafin::constrain {

namespace {

// The most calls one answer may make when parallel calls are allowed: the calls menu after this
// many offers only the section's end (a bound on the precomputed headers, far above what agents
// send in one turn).
constexpr size_t kMaxCalls = 16;

std::string EscapeAttr(const std::string& v) {
  std::string out;
  for (char c : v) {
    out += c == '&' ? std::string("&amp;") : c == '"' ? std::string("&quot;") : std::string(1, c);
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<ToolCallConstraint>> ToolCallConstraint::Create(
    const tokenizer::Tokenizer& tokenizer, std::shared_ptr<const TokenTrie> trie,
    int64_t vocab_size, std::vector<ToolSchema> tools, Mode mode, size_t named, bool parallel) {
  if (tools.empty()) return Status::Error("tool calls: no tools");
  if (mode == Mode::kNamed && named >= tools.size()) {
    return Status::Error("tool calls: the named tool is not declared");
  }
  std::unique_ptr<ToolCallConstraint> c(new ToolCallConstraint());
  c->trie_ = std::move(trie);
  c->vocab_size_ = vocab_size;
  const int32_t open = tokenizer.SpecialId("<|open|>");
  const int32_t close = tokenizer.SpecialId("<|close|>");
  const int32_t sep = tokenizer.SpecialId("<|sep|>");
  const int32_t eom = tokenizer.SpecialId("<|end_of_msg|>");
  if (open < 0 || close < 0 || sep < 0 || eom < 0) {
    return Status::Error("tool calls: the tokenizer lacks K3's structural tokens");
  }
  c->open_id_ = open;
  // Pieces encoded one by one, as the chat template renders them.
  Status error = Status::Ok();
  auto pieces = [&](std::initializer_list<std::string> texts, std::vector<int32_t>* out) {
    for (const std::string& t : texts) {
      if (t.empty()) continue;
      auto ids = tokenizer.Encode(t);
      if (!ids.ok()) {
        error = ids.status();
        return;
      }
      out->insert(out->end(), ids->begin(), ids->end());
    }
  };
  auto tag = [&](int32_t kind, const std::string& name, std::vector<int32_t>* out) {
    out->push_back(kind);
    pieces({name}, out);
    out->push_back(sep);
  };
  Alt json_open;  // <|open|>json type="object"<|sep|>
  json_open.tokens.push_back(open);
  pieces({"json", " type", "=\"", "object", "\""}, &json_open.tokens);
  json_open.tokens.push_back(sep);
  json_open.target = Target::kJson;
  Alt after;  // </json></call>
  tag(close, "json", &after.tokens);
  tag(close, "call", &after.tokens);
  after.target = Target::kCalls;
  after.optional = mode != Mode::kAuto;
  c->after_json_menu_ = {after};
  Alt end;  // </tools></message><|end_of_msg|>
  tag(close, "tools", &end.tokens);
  tag(close, "message", &end.tokens);
  end.tokens.push_back(eom);
  end.target = Target::kDone;
  end.optional = true;
  using Header = std::pair<const char*, Target>;
  for (const auto& [header, target] :
       {Header{"think", Target::kFree}, Header{"response", Target::kFree},
        Header{"tools", Target::kCalls}}) {
    Alt a;
    pieces({header}, &a.tokens);
    a.tokens.push_back(sep);
    a.target = target;
    c->header_menu_.push_back(std::move(a));
  }
  // The calls menus: [k] offers call k (one alternative per tool) and, unless a call is still
  // required, the section's end; the last offers only the end.
  const size_t max_calls = mode == Mode::kNamed || !parallel ? 1 : kMaxCalls;
  for (size_t k = 0; k <= max_calls; ++k) {
    Menu menu;
    if (k < max_calls) {
      if (mode == Mode::kNamed) {
        Alt a = json_open;
        a.tool = static_cast<int32_t>(named);
        menu.push_back(std::move(a));
      } else {
        for (size_t i = 0; i < tools.size(); ++i) {
          Alt a;
          a.tokens.push_back(open);
          pieces({"call", " tool", "=\"", EscapeAttr(tools[i].name), "\"", " index", "=\"",
                  std::to_string(k), "\""},
                 &a.tokens);
          a.tokens.push_back(sep);
          a.tokens.insert(a.tokens.end(), json_open.tokens.begin(), json_open.tokens.end());
          a.target = Target::kJson;
          a.tool = static_cast<int32_t>(i);
          // Two tools of the same name would be the same sequence: keep the first.
          bool seen = false;
          for (const Alt& b : menu) seen = seen || b.tokens == a.tokens;
          if (!seen) menu.push_back(std::move(a));
        }
      }
    }
    if (k == max_calls || (k > 0 && mode != Mode::kNamed) || mode == Mode::kAuto) {
      menu.push_back(end);
    }
    c->calls_menu_.push_back(std::move(menu));
  }
  if (!error.ok()) return error;
  const int32_t eos = -1;  // arguments end at their closing brace, never at EOS
  for (size_t i = 0; i < tools.size(); ++i) {
    const ToolSchema& t = tools[i];
    if (t.parameters == nullptr ||
        t.parameters->node(t.parameters->root()).kind != JsonSchema::Kind::kObject) {
      return Status::Error("tool '" + t.name + "': the parameters schema must be an object");
    }
    const int64_t start =
        c->trie_->Greedy(t.parameters->node(t.parameters->root()).min_text, nullptr);
    if (start < 0) return Status::Error("tool calls: the vocabulary cannot spell the arguments");
    c->json_start_.push_back(start);
    c->json_.push_back(std::make_unique<JsonConstraint>(t.parameters, c->trie_, &tokenizer.vocab(),
                                                        vocab_size, eos));
  }
  // The cheapest end from each calls menu, last first (a call's cost needs the next menu's).
  c->calls_cost_.assign(c->calls_menu_.size(), 0);
  for (size_t k = c->calls_menu_.size(); k-- > 0;) {
    const Menu& menu = c->calls_menu_[k];
    const Alt& best = menu[c->Best(menu, 0, k, nullptr)];
    c->calls_cost_[k] = best.Cost(0) + c->TargetCost(best, k);
  }
  c->alive_.reserve(tools.size() + 4);
  if (mode == Mode::kAuto) {
    c->state_ = State::kFree;
  } else if (mode == Mode::kNamed) {
    c->Enter(c->calls_menu_[0][0]);  // the prompt ends with the call's <json> opening
  } else {
    c->EnterMenu(&c->calls_menu_[0]);
  }
  return c;
}

int64_t ToolCallConstraint::TargetCost(const Alt& alt, size_t calls) const {
  switch (alt.target) {
    case Target::kFree:
    case Target::kDone:
      return 0;
    case Target::kCalls:
      return CallsCost(calls);
    case Target::kJson:
      return json_start_[static_cast<size_t>(alt.tool)] + after_json_menu_[0].Cost(0) +
             CallsCost(calls + 1);
  }
  return 0;
}

size_t ToolCallConstraint::Best(const Menu& menu, size_t pos, size_t calls,
                                const std::vector<uint8_t>* alive) const {
  size_t best = 0;
  int64_t best_cost = INT64_MAX;
  for (size_t i = 0; i < menu.size(); ++i) {
    if (alive != nullptr && !(*alive)[i]) continue;
    const int64_t cost = menu[i].Cost(pos) + TargetCost(menu[i], calls);
    if (cost < best_cost) {
      best = i;
      best_cost = cost;
    }
  }
  return best;
}

void ToolCallConstraint::EnterMenu(const Menu* menu) {
  state_ = State::kSeq;
  menu_ = menu;
  pos_ = 0;
  alive_.assign(menu->size(), 1);
}

void ToolCallConstraint::Enter(const Alt& alt) {
  const size_t next = NextCalls();
  switch (alt.target) {
    case Target::kFree:
      state_ = State::kFree;
      menu_ = nullptr;
      break;
    case Target::kDone:
      state_ = State::kDone;
      menu_ = nullptr;
      break;
    case Target::kCalls:
      calls_ = next;
      EnterMenu(&CallsMenu(calls_));
      break;
    case Target::kJson:
      calls_ = next;
      state_ = State::kJson;
      tool_ = alt.tool;
      json_[static_cast<size_t>(tool_)]->Reset();
      menu_ = nullptr;
      break;
  }
}

int64_t ToolCallConstraint::MaskNext(std::span<uint8_t> allowed) {
  std::fill(allowed.begin(), allowed.end(), uint8_t{0});
  switch (state_) {
    case State::kFree:
      std::fill(allowed.begin(), allowed.end(), uint8_t{1});
      return static_cast<int64_t>(allowed.size());
    case State::kDone:
      return 0;
    case State::kJson:
      return json_[static_cast<size_t>(tool_)]->Mask(allowed);
    case State::kSeq: {
      int64_t count = 0;
      for (size_t i = 0; i < menu_->size(); ++i) {
        if (!alive_[i]) continue;
        const int32_t t = (*menu_)[i].tokens[pos_];
        if (t >= 0 && static_cast<size_t>(t) < allowed.size() && !allowed[static_cast<size_t>(t)]) {
          allowed[static_cast<size_t>(t)] = 1;
          ++count;
        }
      }
      return count;
    }
  }
  return 0;
}

bool ToolCallConstraint::AcceptNext(int32_t token) {
  switch (state_) {
    case State::kFree:
      if (token == open_id_) EnterMenu(&header_menu_);
      return true;
    case State::kDone:
      return false;
    case State::kJson: {
      JsonConstraint& json = *json_[static_cast<size_t>(tool_)];
      if (!json.Accept(token)) return false;
      if (json.Finished()) EnterMenu(&after_json_menu_);
      return true;
    }
    case State::kSeq: {
      bool any = false;
      for (size_t i = 0; i < menu_->size(); ++i) {
        if (alive_[i] && (*menu_)[i].tokens[pos_] != token) alive_[i] = 0;
        any = any || alive_[i];
      }
      if (!any) return false;
      ++pos_;
      // Prefix-free alternatives: one that is complete is the only one left.
      for (size_t i = 0; i < menu_->size(); ++i) {
        if (alive_[i] && (*menu_)[i].tokens.size() == pos_) {
          Enter((*menu_)[i]);
          break;
        }
      }
      return true;
    }
  }
  return false;
}

int64_t ToolCallConstraint::CloseCost() {
  switch (state_) {
    case State::kFree:
    case State::kDone:
      return 0;
    case State::kJson: {
      const int64_t c = json_[static_cast<size_t>(tool_)]->CloseCost();
      if (c < 0) return -1;
      return c + after_json_menu_[0].Cost(0) + CallsCost(calls_ + 1);
    }
    case State::kSeq: {
      const Alt& a = (*menu_)[Best(*menu_, pos_, NextCalls(), &alive_)];
      return a.Cost(pos_) + TargetCost(a, NextCalls());
    }
  }
  return 0;
}

int64_t ToolCallConstraint::CloseCostAfter(int32_t token) {
  switch (state_) {
    case State::kFree:
      return 0;
    case State::kDone:
      return -1;
    case State::kJson: {
      const int64_t c = json_[static_cast<size_t>(tool_)]->CloseCostAfter(token);
      if (c < 0) return -1;
      return c + after_json_menu_[0].Cost(0) + CallsCost(calls_ + 1);
    }
    case State::kSeq: {
      int64_t best = -1;
      for (size_t i = 0; i < menu_->size(); ++i) {
        const Alt& a = (*menu_)[i];
        if (!alive_[i] || a.tokens[pos_] != token) continue;
        const int64_t cost = a.Cost(pos_ + 1) + TargetCost(a, NextCalls());
        if (best < 0 || cost < best) best = cost;
      }
      return best;
    }
  }
  return -1;
}

void ToolCallConstraint::AppendTarget(const Alt& alt, size_t calls,
                                      std::vector<int32_t>* out) const {
  switch (alt.target) {
    case Target::kFree:
    case Target::kDone:
      return;
    case Target::kCalls: {
      const Menu& menu = CallsMenu(calls);
      const Alt& best = menu[Best(menu, 0, calls, nullptr)];
      out->insert(out->end(), best.tokens.begin(), best.tokens.end());
      return AppendTarget(best, calls, out);
    }
    case Target::kJson: {
      const JsonSchema& schema = json_[static_cast<size_t>(alt.tool)]->schema();
      trie_->Greedy(schema.node(schema.root()).min_text, out);
      const Alt& after = after_json_menu_[0];
      out->insert(out->end(), after.tokens.begin(), after.tokens.end());
      return AppendTarget(after, calls + 1, out);
    }
  }
}

void ToolCallConstraint::AppendClosing(std::vector<int32_t>* out) {
  switch (state_) {
    case State::kFree:
    case State::kDone:
      return;
    case State::kJson: {
      json_[static_cast<size_t>(tool_)]->ClosingTokens(out);
      const Alt& after = after_json_menu_[0];
      out->insert(out->end(), after.tokens.begin(), after.tokens.end());
      return AppendTarget(after, calls_ + 1, out);
    }
    case State::kSeq: {
      const size_t next = NextCalls();
      const Alt& a = (*menu_)[Best(*menu_, pos_, next, &alive_)];
      out->insert(out->end(), a.tokens.begin() + static_cast<ptrdiff_t>(pos_), a.tokens.end());
      return AppendTarget(a, next, out);
    }
  }
}

}  // namespace deltafin::constrain
