// JsonSchema compiler, the JSON pushdown automaton, the token trie and the mask walk.
#include "constrain/json_constraint.h"

#include <algorithm>
#include <set>

namespace deltafin::constrain {

namespace {

using json = nlohmann::ordered_json;

bool IsWs(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

constexpr int64_t kMaxIntDigits = 15, kMaxFracDigits = 15, kMaxExpDigits = 3;
constexpr size_t kMaxCandidates = 64;  // enum values / properties of one object (a 64-bit mask)

Status Unsupported(const std::string& keyword, const std::string& where) {
  return Status::Error("response_format: the JSON schema keyword '" + keyword + "' at " +
                       (where.empty() ? "/" : where) +
                       " is not supported by the constrained decoder (docs/SERVER.md lists the "
                       "supported subset)");
}
Status Invalid(const std::string& what, const std::string& where) {
  return Status::Error("response_format: invalid JSON schema at " + (where.empty() ? "/" : where) +
                       ": " + what);
}

Result<int64_t> Count(const json& s, const char* key, const std::string& where) {
  const json& v = s[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0) {
    return Invalid(std::string("'") + key + "' must be a non-negative integer", where);
  }
  return v.get<int64_t>();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Schema compiler

namespace {

// The shortest text of a value of node `n` (its children's are computed first): the budget-aware
// ending (JsonMatcher::MinClose) appends these.
std::string ShortestText(const JsonSchema& schema, const JsonSchema::Node& n) {
  using K = JsonSchema::Kind;
  switch (n.kind) {
    case K::kAny:
    case K::kNumber:
    case K::kInteger:
      return "0";
    case K::kString:
      return "\"" + std::string(static_cast<size_t>(n.min_count), 'a') + "\"";
    case K::kLiterals: {
      std::string best = n.literals.empty() ? "null" : n.literals[0];
      for (const auto& l : n.literals) {
        if (l.size() < best.size()) best = l;
      }
      return best;
    }
    case K::kArray: {
      std::string out = "[";
      for (int64_t i = 0; i < n.min_count; ++i) {
        if (i > 0) out += ',';
        out += schema.node(n.items).min_text;
      }
      return out + "]";
    }
    case K::kObject: {
      std::string out = "{";
      for (size_t j = 0; j < n.keys.size(); ++j) {
        if (!n.required[j]) continue;
        if (out.size() > 1) out += ',';
        out += n.keys[j] + ":" + schema.node(n.values[j]).min_text;
      }
      return out + "}";
    }
  }
  return "0";
}

}  // namespace

JsonSchema::JsonSchema() {
  nodes_.resize(4);
  nodes_[kTrue].kind = Kind::kLiterals;
  nodes_[kTrue].literals = {"true"};
  nodes_[kFalse].kind = Kind::kLiterals;
  nodes_[kFalse].literals = {"false"};
  nodes_[kNull].kind = Kind::kLiterals;
  nodes_[kNull].literals = {"null"};
  nodes_[kAnyValue].kind = Kind::kAny;
  for (auto& n : nodes_) n.min_text = ShortestText(*this, n);
}

std::shared_ptr<const JsonSchema> JsonSchema::AnyObject() {
  auto s = std::shared_ptr<JsonSchema>(new JsonSchema());
  JsonSchema::Node n;
  n.kind = Kind::kObject;
  n.free = true;
  n.min_text = "{}";
  s->nodes_.push_back(std::move(n));
  s->root_ = static_cast<int32_t>(s->nodes_.size() - 1);
  return s;
}

Result<std::shared_ptr<const JsonSchema>> JsonSchema::Compile(
    const nlohmann::ordered_json& schema) {
  auto s = std::shared_ptr<JsonSchema>(new JsonSchema());
  DF_ASSIGN_OR_RETURN(s->root_, s->Add(schema, ""));
  return std::shared_ptr<const JsonSchema>(std::move(s));
}

Result<int32_t> JsonSchema::Add(const json& s, const std::string& where) {
  if (s.is_boolean() && s.get<bool>()) return kAnyValue;
  if (!s.is_object()) return Invalid("a schema must be an object", where);
  static const std::set<std::string> kAnnotations = {
      "title", "description", "$schema", "default", "examples", "strict", "$comment", "$id"};
  static const std::set<std::string> kKnown = {
      "type",     "properties", "required", "additionalProperties",
      "enum",     "const",      "items",    "minItems",
      "maxItems", "minLength",  "maxLength"};
  for (const auto& [key, _] : s.items()) {
    if (!kKnown.count(key) && !kAnnotations.count(key)) return Unsupported(key, where);
  }
  Node n;
  if (s.contains("const") || s.contains("enum")) {
    n.kind = Kind::kLiterals;
    if (s.contains("const")) {
      n.literals.push_back(s["const"].dump());
    } else {
      if (!s["enum"].is_array() || s["enum"].empty()) {
        return Invalid("'enum' must be a non-empty array", where);
      }
      for (const auto& v : s["enum"]) n.literals.push_back(v.dump());
      std::sort(n.literals.begin(), n.literals.end());
      n.literals.erase(std::unique(n.literals.begin(), n.literals.end()), n.literals.end());
    }
    if (n.literals.size() > kMaxCandidates) {
      return Unsupported("enum (more than 64 values)", where);
    }
    // A type next to enum/const must hold for every value (then it adds nothing).
    if (s.contains("type")) {
      const std::string t = s["type"].is_string() ? s["type"].get<std::string>() : "";
      for (const auto& lit : n.literals) {
        const json v = json::parse(lit);
        const bool ok = (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
                        (t == "integer" && v.is_number_integer()) ||
                        (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
                        (t == "object" && v.is_object()) || (t == "array" && v.is_array());
        if (!ok)
          return Invalid("the enum/const value " + lit + " is not of type '" + t + "'", where);
      }
    }
    n.min_text = ShortestText(*this, n);
    nodes_.push_back(std::move(n));
    return static_cast<int32_t>(nodes_.size() - 1);
  }
  if (!s.contains("type")) {
    for (const char* k : {"properties", "required", "additionalProperties", "items", "minItems",
                          "maxItems", "minLength", "maxLength"}) {
      if (s.contains(k)) return Invalid(std::string("'") + k + "' needs a 'type'", where);
    }
    return kAnyValue;
  }
  if (s["type"].is_array()) return Unsupported("type (a list of types)", where);
  if (!s["type"].is_string()) return Invalid("'type' must be a string", where);
  const std::string type = s["type"].get<std::string>();
  auto only = [&](std::initializer_list<const char*> allowed) -> Status {
    for (const char* k : {"properties", "required", "additionalProperties", "items", "minItems",
                          "maxItems", "minLength", "maxLength"}) {
      if (!s.contains(k)) continue;
      if (std::find_if(allowed.begin(), allowed.end(),
                       [&](const char* a) { return std::string(a) == k; }) == allowed.end()) {
        return Invalid(std::string("'") + k + "' does not apply to type '" + type + "'", where);
      }
    }
    return Status::Ok();
  };
  if (type == "object") {
    DF_RETURN_IF_ERROR(only({"properties", "required", "additionalProperties"}));
    n.kind = Kind::kObject;
    bool additional = true;
    if (s.contains("additionalProperties")) {
      if (!s["additionalProperties"].is_boolean()) {
        return Unsupported("additionalProperties (a schema)", where);
      }
      additional = s["additionalProperties"].get<bool>();
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Invalid("'required' must be an array", where);
      for (const auto& r : s["required"]) {
        if (!r.is_string()) return Invalid("'required' must list strings", where);
        required.insert(r.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return Invalid("'properties' must be an object", where);
      if (s["properties"].size() > kMaxCandidates) {
        return Unsupported("properties (more than 64)", where);
      }
      for (const auto& [key, sub] : s["properties"].items()) {
        DF_ASSIGN_OR_RETURN(const int32_t child, Add(sub, where + "/properties/" + key));
        n.keys.push_back(json(key).dump());
        n.values.push_back(child);
        n.required.push_back(required.count(key) > 0);
        required.erase(key);
      }
    }
    if (!required.empty()) {
      return Invalid("'required' names '" + *required.begin() + "', which is not in 'properties'",
                     where);
    }
    n.free = n.keys.empty() && additional;
  } else if (type == "array") {
    DF_RETURN_IF_ERROR(only({"items", "minItems", "maxItems"}));
    n.kind = Kind::kArray;
    n.items = kAnyValue;
    if (s.contains("items")) {
      if (s["items"].is_array()) return Unsupported("items (a list of schemas)", where);
      DF_ASSIGN_OR_RETURN(n.items, Add(s["items"], where + "/items"));
    }
    if (s.contains("minItems")) {
      DF_ASSIGN_OR_RETURN(n.min_count, Count(s, "minItems", where));
    }
    if (s.contains("maxItems")) {
      DF_ASSIGN_OR_RETURN(n.max_count, Count(s, "maxItems", where));
    }
  } else if (type == "string") {
    DF_RETURN_IF_ERROR(only({"minLength", "maxLength"}));
    n.kind = Kind::kString;
    if (s.contains("minLength")) {
      DF_ASSIGN_OR_RETURN(n.min_count, Count(s, "minLength", where));
    }
    if (s.contains("maxLength")) {
      DF_ASSIGN_OR_RETURN(n.max_count, Count(s, "maxLength", where));
    }
  } else if (type == "number" || type == "integer") {
    DF_RETURN_IF_ERROR(only({}));
    n.kind = type == "number" ? Kind::kNumber : Kind::kInteger;
  } else if (type == "boolean") {
    DF_RETURN_IF_ERROR(only({}));
    n.kind = Kind::kLiterals;
    n.literals = {"false", "true"};
  } else if (type == "null") {
    DF_RETURN_IF_ERROR(only({}));
    return kNull;
  } else {
    return Invalid("unknown type '" + type + "'", where);
  }
  if (n.max_count >= 0 && n.min_count > n.max_count) {
    return Invalid("the minimum count exceeds the maximum", where);
  }
  n.min_text = ShortestText(*this, n);
  nodes_.push_back(std::move(n));
  return static_cast<int32_t>(nodes_.size() - 1);
}

// ---------------------------------------------------------------------------------------------
// The automaton

JsonMatcher::JsonMatcher(const JsonSchema* schema) : schema_(schema) {
  stack_.reserve(64);
  Reset();
}

void JsonMatcher::Reset() {
  stack_.clear();
  Frame root;
  root.type = kRoot;
  root.phase = kRootStart;
  root.node = schema_->root();
  stack_.push_back(root);
  ws_run_ = 0;
}

bool JsonMatcher::Feed(std::string_view bytes) {
  JsonMatcher copy = *this;
  for (char ch : bytes) {
    if (!Feed(static_cast<uint8_t>(ch))) {
      *this = copy;
      return false;
    }
  }
  return true;
}

bool JsonMatcher::Feed(uint8_t c) {
  if (Step(c)) return true;
  // A frame that may end here (a number, a literal that is a prefix of another) and cannot take
  // the byte ends and hands the byte to its parent. Only numbers and literals can end that way
  // and their parents (objects, arrays, the root) cannot, so at most one frame is popped; on
  // failure the two frames are put back (no copy of the stack, so the mask walk does not allocate).
  if (stack_.size() < 2 || !CanEnd(stack_.back())) return false;
  const Frame top = stack_.back();
  const Frame parent = stack_[stack_.size() - 2];
  ValueDone();
  if (Step(c)) return true;
  stack_.back() = parent;
  stack_.push_back(top);
  return false;
}

bool JsonMatcher::CanEnd(const Frame& f) const {
  if (f.type == kNumber) {
    return f.phase == kNumZero || f.phase == kNumInt || f.phase == kNumFrac || f.phase == kNumExp;
  }
  if (f.type == kLiteral) {
    const auto& lits = schema_->node(f.node).literals;
    for (size_t i = 0; i < lits.size(); ++i) {
      if ((f.mask >> i & 1) && lits[i].size() == static_cast<size_t>(f.off)) return true;
    }
  }
  return false;
}

bool JsonMatcher::Accepting() const {
  if (stack_.size() == 1) return stack_[0].phase == kRootDone;
  return stack_.size() == 2 && CanEnd(stack_[1]);
}

// Frame by frame from the top: what the frame needs to end, then (for its parent) what the parent
// needs after it. A frame below the top has a child open, and its phase is already the one the
// child's end leaves it in (kObjAfter / kObjKey for a free object's key, kArrAfter before the
// count is incremented, kRootStart).
void JsonMatcher::MinClose(std::string* out) const {
  out->clear();
  auto value_text = [&](int32_t node) -> const std::string& {
    return schema_->node(node).min_text;
  };
  // The required properties from index `from` on, each preceded by a comma when `comma`.
  auto rest_required = [&](const JsonSchema::Node& n, size_t from, bool comma) {
    for (size_t j = from; j < n.keys.size(); ++j) {
      if (!n.required[j]) continue;
      if (comma) *out += ',';
      comma = true;
      *out += n.keys[j];
      *out += ':';
      *out += value_text(n.values[j]);
    }
  };
  for (size_t i = stack_.size(); i-- > 0;) {
    const Frame& f = stack_[i];
    const bool top = i + 1 == stack_.size();
    const JsonSchema::Node* n = f.node >= 0 ? &schema_->node(f.node) : nullptr;
    switch (f.type) {
      case kRoot:
        if (top && f.phase == kRootStart) *out += value_text(f.node);
        break;
      case kObject:
        if (n == nullptr) {  // free object
          if (f.phase == kObjKey || f.phase == kObjColon) *out += ":0";
          if (f.phase == kObjValue) *out += '0';
          if (f.phase == kObjComma) *out += "\"\":0";
          *out += '}';
          break;
        }
        switch (f.phase) {
          case kObjOpen:
            rest_required(*n, static_cast<size_t>(f.aux), false);
            break;
          case kObjKey: {
            // The candidate whose key, value and later required properties are shortest.
            size_t best = 0, best_len = SIZE_MAX;
            for (size_t j = 0; j < n->keys.size(); ++j) {
              if (!(f.mask >> j & 1)) continue;
              size_t len = n->keys[j].size() - static_cast<size_t>(f.off) + 1 +
                           value_text(n->values[j]).size();
              for (size_t k = j + 1; k < n->keys.size(); ++k) {
                if (n->required[k]) len += n->keys[k].size() + 2 + value_text(n->values[k]).size();
              }
              if (len < best_len) {
                best = j;
                best_len = len;
              }
            }
            *out += n->keys[best].substr(static_cast<size_t>(f.off));
            *out += ':';
            *out += value_text(n->values[best]);
            rest_required(*n, best + 1, true);
            break;
          }
          case kObjColon:
          case kObjValue:
            if (f.phase == kObjColon) *out += ':';
            *out += value_text(n->values[static_cast<size_t>(f.count)]);
            rest_required(*n, static_cast<size_t>(f.aux), true);
            break;
          case kObjAfter:
            rest_required(*n, static_cast<size_t>(f.aux), true);
            break;
          case kObjComma: {
            if (!AllOptionalFrom(*n, f.aux)) {
              rest_required(*n, static_cast<size_t>(f.aux), false);
              break;
            }
            // Only optional properties are left and a comma promised one: the shortest.
            size_t best = static_cast<size_t>(f.aux);
            for (size_t j = best; j < n->keys.size(); ++j) {
              if (n->keys[j].size() + value_text(n->values[j]).size() <
                  n->keys[best].size() + value_text(n->values[best]).size()) {
                best = j;
              }
            }
            *out += n->keys[best];
            *out += ':';
            *out += value_text(n->values[best]);
            break;
          }
          default:
            break;
        }
        *out += '}';
        break;
      case kArray: {
        const int32_t items = n == nullptr ? JsonSchema::kAnyValue : n->items;
        const int64_t min = n == nullptr ? 0 : n->min_count;
        // Items that exist once the open child (if any) ends.
        int64_t count = f.count + (top ? 0 : 1);
        if (f.phase == kArrComma || (f.phase == kArrOpen && min > 0)) {
          *out += value_text(items);
          ++count;
        }
        for (; count < min; ++count) {
          *out += ',';
          *out += value_text(items);
        }
        *out += ']';
        break;
      }
      case kString: {
        const int64_t min = n == nullptr ? 0 : n->min_count;
        int64_t count = f.count;
        if (f.phase == kStrEscape) {
          *out += 'n';
          ++count;
        } else if (f.phase == kStrHex) {
          out->append(static_cast<size_t>(f.aux), '0');
          ++count;
        } else if (f.phase == kStrUtf8) {
          out->push_back(static_cast<char>(f.lo));
          out->append(static_cast<size_t>(f.aux - 1), static_cast<char>(0x80));
        }
        for (; count < min; ++count) *out += 'a';
        *out += '"';
        break;
      }
      case kNumber:
        if (f.phase == kNumSign || f.phase == kNumDot || f.phase == kNumE || f.phase == kNumESign) {
          *out += '0';
        }
        break;
      case kLiteral: {
        const auto& lits = schema_->node(f.node).literals;
        size_t best = SIZE_MAX;
        for (size_t j = 0; j < lits.size(); ++j) {
          if ((f.mask >> j & 1) && lits[j].size() >= static_cast<size_t>(f.off) &&
              (best == SIZE_MAX || lits[j].size() < lits[best].size())) {
            best = j;
          }
        }
        if (best != SIZE_MAX) *out += lits[best].substr(static_cast<size_t>(f.off));
        break;
      }
    }
  }
}

bool JsonMatcher::Whitespace(uint8_t c) {
  if (!IsWs(c) || ws_run_ >= kMaxWhitespace) return false;
  ++ws_run_;
  return true;
}

bool JsonMatcher::AllOptionalFrom(const JsonSchema::Node& n, int32_t i) const {
  for (size_t j = static_cast<size_t>(i); j < n.required.size(); ++j) {
    if (n.required[j]) return false;
  }
  return true;
}

// Properties that may come next: from the next one up to and including the first required one.
uint64_t JsonMatcher::KeyCandidates(const Frame& f) const {
  const auto& n = schema_->node(f.node);
  uint64_t m = 0;
  for (size_t j = static_cast<size_t>(f.aux); j < n.keys.size(); ++j) {
    m |= uint64_t{1} << j;
    if (n.required[j]) break;
  }
  return m;
}

void JsonMatcher::ValueDone() {
  stack_.pop_back();
  Frame& p = stack_.back();
  switch (p.type) {
    case kRoot:
      p.phase = kRootDone;
      break;
    case kObject:
      p.phase = p.phase == kObjKey ? kObjColon : kObjAfter;  // a free object's key string
      break;
    case kArray:
      p.phase = kArrAfter;
      ++p.count;
      break;
    default:
      break;
  }
}

bool JsonMatcher::StartValue(int32_t node_index, uint8_t c) {
  const JsonSchema::Node& n = schema_->node(node_index);
  Frame f;
  f.node = node_index;
  using K = JsonSchema::Kind;
  K kind = n.kind;
  if (kind == K::kAny) {
    if (c == '{') {
      f.type = kObject;
      f.node = -1;  // free
    } else if (c == '[') {
      f.type = kArray;
      f.node = -1;
    } else if (c == '"') {
      f.type = kString;
      f.node = -1;
    } else if (c == '-' || IsDigit(c)) {
      kind = K::kNumber;
    } else if (c == 't' || c == 'f' || c == 'n') {
      f.node = c == 't' ? JsonSchema::kTrue : c == 'f' ? JsonSchema::kFalse : JsonSchema::kNull;
      kind = K::kLiterals;
    } else {
      return false;
    }
    if (kind == K::kAny) {
      stack_.push_back(f);
      return true;
    }
  }
  switch (kind) {
    case K::kObject:
      if (c != '{') return false;
      f.type = kObject;
      if (n.free) f.node = -1;
      break;
    case K::kArray:
      if (c != '[') return false;
      f.type = kArray;
      break;
    case K::kString:
      if (c != '"') return false;
      f.type = kString;
      break;
    case K::kNumber:
    case K::kInteger:
      f.type = kNumber;
      f.aux = kind == K::kInteger;
      if (c == '-') {
        f.phase = kNumSign;
      } else if (c == '0') {
        f.phase = kNumZero;
      } else if (IsDigit(c)) {
        f.phase = kNumInt;
        f.count = 1;
      } else {
        return false;
      }
      break;
    case K::kLiterals: {
      const auto& lits = schema_->node(f.node).literals;
      uint64_t m = 0;
      for (size_t i = 0; i < lits.size(); ++i) {
        if (!lits[i].empty() && static_cast<uint8_t>(lits[i][0]) == c) m |= uint64_t{1} << i;
      }
      if (m == 0) return false;
      f.type = kLiteral;
      f.mask = m;
      f.off = 1;
      break;
    }
    case K::kAny:
      return false;
  }
  stack_.push_back(f);
  if (f.type == kLiteral) {
    // A literal that is complete and is a prefix of no other can take nothing more: close it.
    const auto& lits = schema_->node(f.node).literals;
    bool longer = false;
    for (size_t i = 0; i < lits.size(); ++i) {
      if ((f.mask >> i & 1) && lits[i].size() > 1) longer = true;
    }
    if (!longer) ValueDone();
  }
  return true;
}

bool JsonMatcher::Step(uint8_t c) {
  Frame& f = stack_.back();
  const bool ws = IsWs(c);
  // Whitespace only between tokens; a non-space resets the run (inside strings and numbers the
  // run is never counted).
  auto structural_ws = [&]() { return Whitespace(c); };
  switch (f.type) {
    case kRoot: {
      if (f.phase == kRootDone) return false;
      if (ws) return structural_ws();
      ws_run_ = 0;
      return StartValue(f.node, c);
    }
    case kObject: {
      const JsonSchema::Node* n = f.node >= 0 ? &schema_->node(f.node) : nullptr;
      switch (f.phase) {
        case kObjOpen:
        case kObjComma: {
          if (ws) return structural_ws();
          if (c == '}' && f.phase == kObjOpen) {
            if (n != nullptr && !AllOptionalFrom(*n, f.aux)) return false;
            ws_run_ = 0;
            ValueDone();
            return true;
          }
          if (c != '"') return false;
          if (n == nullptr) {  // free object: the key is any string
            ws_run_ = 0;
            f.phase = kObjKey;
            Frame k;
            k.type = kString;
            stack_.push_back(k);
            return true;
          }
          const uint64_t m = KeyCandidates(f);
          if (m == 0) return false;
          ws_run_ = 0;
          f.phase = kObjKey;
          f.mask = m;
          f.off = 1;
          return true;
        }
        case kObjKey: {  // schema'd object: matching one of the candidate keys
          uint64_t m = 0;
          int32_t done = -1;
          for (size_t j = 0; j < n->keys.size(); ++j) {
            if (!(f.mask >> j & 1)) continue;
            const std::string& k = n->keys[j];
            if (k.size() > static_cast<size_t>(f.off) &&
                static_cast<uint8_t>(k[static_cast<size_t>(f.off)]) == c) {
              m |= uint64_t{1} << j;
              if (k.size() == static_cast<size_t>(f.off) + 1) done = static_cast<int32_t>(j);
            }
          }
          if (m == 0) return false;
          f.mask = m;
          ++f.off;
          if (done >= 0) {  // keys end with '"': the match is unique
            f.phase = kObjColon;
            f.aux = done + 1;
            f.count = done;  // the property whose value follows
          }
          return true;
        }
        case kObjColon:
          if (ws) return structural_ws();
          if (c != ':') return false;
          ws_run_ = 0;
          f.phase = kObjValue;
          return true;
        case kObjValue: {
          if (ws) return structural_ws();
          ws_run_ = 0;
          const int32_t child =
              n == nullptr ? JsonSchema::kAnyValue : n->values[static_cast<size_t>(f.count)];
          f.phase = kObjAfter;  // what ValueDone leaves it in, should the value close at once
          const size_t depth = stack_.size();
          if (!StartValue(child, c)) {
            stack_[depth - 1].phase = kObjValue;
            return false;
          }
          return true;
        }
        case kObjAfter:
          if (ws) return structural_ws();
          if (c == '}') {
            if (n != nullptr && !AllOptionalFrom(*n, f.aux)) return false;
            ws_run_ = 0;
            ValueDone();
            return true;
          }
          if (c == ',') {
            if (n != nullptr && KeyCandidates(f) == 0) return false;
            ws_run_ = 0;
            f.phase = kObjComma;
            return true;
          }
          return false;
        default:
          return false;
      }
    }
    case kArray: {
      const JsonSchema::Node* n = f.node >= 0 ? &schema_->node(f.node) : nullptr;
      const int32_t items = n == nullptr ? JsonSchema::kAnyValue : n->items;
      const int64_t min = n == nullptr ? 0 : n->min_count;
      const int64_t max = n == nullptr ? -1 : n->max_count;
      if (ws) return structural_ws();
      if (f.phase == kArrAfter) {
        if (c == ']' && f.count >= min) {
          ws_run_ = 0;
          ValueDone();
          return true;
        }
        if (c == ',' && (max < 0 || f.count < max)) {
          ws_run_ = 0;
          f.phase = kArrComma;
          return true;
        }
        return false;
      }
      if (f.phase == kArrOpen && c == ']') {
        if (min > 0) return false;
        ws_run_ = 0;
        ValueDone();
        return true;
      }
      if (max >= 0 && f.count >= max) return false;
      ws_run_ = 0;
      const uint8_t phase = f.phase;
      f.phase = kArrAfter;
      const size_t depth = stack_.size();
      if (!StartValue(items, c)) {
        stack_[depth - 1].phase = phase;
        return false;
      }
      // StartValue may have closed a literal at once (ValueDone counted it).
      return true;
    }
    case kString: {
      const JsonSchema::Node* n = f.node >= 0 ? &schema_->node(f.node) : nullptr;
      const int64_t min = n == nullptr ? 0 : n->min_count;
      const int64_t max = n == nullptr ? -1 : n->max_count;
      switch (f.phase) {
        case kStrBody:
          if (c == '"') {
            if (f.count < min) return false;
            ValueDone();
            return true;
          }
          if (c < 0x20 || c == 0x7F) return false;  // control characters must be escaped
          if (max >= 0 && f.count >= max) return false;
          if (c == '\\') {
            f.phase = kStrEscape;
            return true;
          }
          if (c < 0x80) {
            ++f.count;
            return true;
          }
          // UTF-8 lead byte: how many continuation bytes, and the range of the first.
          if (c >= 0xC2 && c <= 0xDF) {
            f.aux = 1, f.lo = 0x80, f.hi = 0xBF;
          } else if (c >= 0xE0 && c <= 0xEF) {
            f.aux = 2;
            f.lo = c == 0xE0 ? 0xA0 : 0x80;
            f.hi = c == 0xED ? 0x9F : 0xBF;
          } else if (c >= 0xF0 && c <= 0xF4) {
            f.aux = 3;
            f.lo = c == 0xF0 ? 0x90 : 0x80;
            f.hi = c == 0xF4 ? 0x8F : 0xBF;
          } else {
            return false;
          }
          f.phase = kStrUtf8;
          ++f.count;
          return true;
        case kStrUtf8:
          if (c < f.lo || c > f.hi) return false;
          f.lo = 0x80, f.hi = 0xBF;
          if (--f.aux == 0) f.phase = kStrBody;
          return true;
        case kStrEscape:
          if (c == 'u') {
            f.phase = kStrHex;
            f.aux = 4;
            f.off = 0;
            return true;
          }
          if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
              c == 't') {
            f.phase = kStrBody;
            ++f.count;
            return true;
          }
          return false;
        case kStrHex: {
          if (!IsHex(c)) return false;
          // No surrogates (\uD800-\uDFFF): alone they are not text, and strict parsers refuse them.
          const int v = IsDigit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
          if (f.aux == 4) f.off = v;
          if (f.aux == 3 && f.off == 0xD && v >= 8) return false;
          if (--f.aux == 0) {
            f.phase = kStrBody;
            ++f.count;
          }
          return true;
        }
        default:
          return false;
      }
    }
    case kNumber: {
      const bool integer = f.aux != 0;
      switch (f.phase) {
        case kNumSign:
          if (c == '0') {
            f.phase = kNumZero;
            return true;
          }
          if (IsDigit(c)) {
            f.phase = kNumInt;
            f.count = 1;
            return true;
          }
          return false;
        case kNumZero:
        case kNumInt:
          if (IsDigit(c) && f.phase == kNumInt && f.count < kMaxIntDigits) {
            ++f.count;
            return true;
          }
          if (integer) return false;
          if (c == '.') {
            f.phase = kNumDot;
            return true;
          }
          if (c == 'e' || c == 'E') {
            f.phase = kNumE;
            return true;
          }
          return false;
        case kNumDot:
          if (!IsDigit(c)) return false;
          f.phase = kNumFrac;
          f.count = 1;
          return true;
        case kNumFrac:
          if (IsDigit(c) && f.count < kMaxFracDigits) {
            ++f.count;
            return true;
          }
          if (c == 'e' || c == 'E') {
            f.phase = kNumE;
            return true;
          }
          return false;
        case kNumE:
          if (c == '+' || c == '-') {
            f.phase = kNumESign;
            return true;
          }
          [[fallthrough]];
        case kNumESign:
          if (!IsDigit(c)) return false;
          f.phase = kNumExp;
          f.count = 1;
          return true;
        case kNumExp:
          if (IsDigit(c) && f.count < kMaxExpDigits) {
            ++f.count;
            return true;
          }
          return false;
        default:
          return false;
      }
    }
    case kLiteral: {
      const auto& lits = schema_->node(f.node).literals;
      uint64_t m = 0;
      bool longer = false;
      for (size_t i = 0; i < lits.size(); ++i) {
        if (!(f.mask >> i & 1)) continue;
        const std::string& l = lits[i];
        if (l.size() > static_cast<size_t>(f.off) &&
            static_cast<uint8_t>(l[static_cast<size_t>(f.off)]) == c) {
          m |= uint64_t{1} << i;
          if (l.size() > static_cast<size_t>(f.off) + 1) longer = true;
        }
      }
      if (m == 0) return false;
      f.mask = m;
      ++f.off;
      if (!longer) ValueDone();  // every candidate left is complete: nothing more can follow
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Token trie and mask

TokenTrie::TokenTrie(const tokenizer::Vocab& vocab) {
  // Sort the tokens by bytes, then build the trie level by level from the sorted list, so each
  // node's children are contiguous.
  const uint32_t n = vocab.num_ranks();
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return vocab.TokenBytes(a) < vocab.TokenBytes(b); });
  nodes_.push_back(Node{});
  // (node, range of `order`, depth): the tokens in the range all share the node's prefix.
  struct Pending {
    uint32_t node, begin, end, depth;
  };
  std::vector<Pending> queue = {{0, 0, n, 0}};
  for (size_t q = 0; q < queue.size(); ++q) {
    const Pending p = queue[q];
    uint32_t i = p.begin;
    // A token equal to the prefix sorts first.
    while (i < p.end && vocab.TokenBytes(order[i]).size() == p.depth) {
      nodes_[p.node].token = static_cast<int32_t>(order[i]);
      ++i;
    }
    nodes_[p.node].first_child = static_cast<uint32_t>(nodes_.size());
    while (i < p.end) {
      const auto b = static_cast<uint8_t>(vocab.TokenBytes(order[i])[p.depth]);
      uint32_t j = i;
      while (j < p.end && static_cast<uint8_t>(vocab.TokenBytes(order[j])[p.depth]) == b) ++j;
      Node child;
      child.byte = b;
      nodes_.push_back(child);
      ++nodes_[p.node].num_children;
      queue.push_back({static_cast<uint32_t>(nodes_.size() - 1), i, j, p.depth + 1});
      i = j;
    }
  }
}

size_t TokenTrie::LongestPrefix(std::string_view bytes, int32_t* token) const {
  size_t best = 0;
  uint32_t node = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const Node& n = nodes_[node];
    const auto b = static_cast<uint8_t>(bytes[i]);
    // Children are sorted by byte.
    const auto first = nodes_.begin() + n.first_child;
    const auto last = first + n.num_children;
    const auto it =
        std::lower_bound(first, last, b, [](const Node& c, uint8_t v) { return c.byte < v; });
    if (it == last || it->byte != b) break;
    node = static_cast<uint32_t>(it - nodes_.begin());
    if (it->token >= 0) {
      best = i + 1;
      *token = it->token;
    }
  }
  return best;
}

int64_t TokenTrie::Greedy(std::string_view bytes, std::vector<int32_t>* out) const {
  int64_t count = 0;
  while (!bytes.empty()) {
    int32_t token = -1;
    const size_t n = LongestPrefix(bytes, &token);
    if (n == 0) return -1;
    if (out != nullptr) out->push_back(token);
    ++count;
    bytes.remove_prefix(n);
  }
  return count;
}

int64_t TokenConstraint::Mask(std::span<uint8_t> allowed) {
  if (!closing_ || ending_pos_ >= ending_.size()) return MaskNext(allowed);
  std::fill(allowed.begin(), allowed.end(), uint8_t{0});
  const int32_t next = ending_[ending_pos_];
  if (next < 0 || static_cast<size_t>(next) >= allowed.size()) return 0;
  allowed[static_cast<size_t>(next)] = 1;
  return 1;
}

bool TokenConstraint::Accept(int32_t token) {
  if (closing_ && ending_pos_ < ending_.size()) {
    if (token != ending_[ending_pos_]) return false;
    ++ending_pos_;
  }
  return AcceptNext(token);
}

void TokenConstraint::BeginClosing() {
  closing_ = true;
  ending_.clear();
  ending_pos_ = 0;
  AppendClosing(&ending_);
}

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonSchema> schema,
                               std::shared_ptr<const TokenTrie> trie, const tokenizer::Vocab* vocab,
                               int64_t vocab_size, int32_t eos_token)
    : schema_(std::move(schema)),
      trie_(std::move(trie)),
      vocab_(vocab),
      vocab_size_(vocab_size),
      eos_(eos_token),
      matcher_(schema_.get()),
      scratch_(schema_.get()) {}

int64_t JsonConstraint::MaskNext(std::span<uint8_t> allowed) {
  std::fill(allowed.begin(), allowed.end(), uint8_t{0});
  int64_t count = 0;
  if (matcher_.Accepting() && eos_ >= 0 && eos_ < static_cast<int64_t>(allowed.size())) {
    allowed[static_cast<size_t>(eos_)] = 1;
    ++count;
  }
  if (matcher_.Finished()) return count;
  const auto& nodes = trie_->nodes();
  if (depth_.empty()) depth_.push_back(matcher_);
  depth_[0] = matcher_;
  walk_.clear();
  // Depth-first over the trie; depth_[d] is the automaton after the node's d bytes.
  const TokenTrie::Node& root = nodes[0];
  for (uint32_t c = 0; c < root.num_children; ++c) walk_.emplace_back(root.first_child + c, 1);
  while (!walk_.empty()) {
    const auto [index, d] = walk_.back();
    walk_.pop_back();
    const TokenTrie::Node& node = nodes[index];
    if (depth_.size() <= d) depth_.push_back(matcher_);
    depth_[d] = depth_[d - 1];
    if (!depth_[d].Feed(node.byte)) continue;
    if (node.token >= 0 && node.token < static_cast<int64_t>(allowed.size())) {
      allowed[static_cast<size_t>(node.token)] = 1;
      ++count;
    }
    for (uint32_t c = 0; c < node.num_children; ++c)
      walk_.emplace_back(node.first_child + c, d + 1);
  }
  return count;
}

bool JsonConstraint::TokenBytes(int32_t token, std::string_view* bytes) const {
  // Specials (and ids past the tokenizer) are never part of the JSON.
  return token >= 0 && static_cast<uint32_t>(token) < vocab_->num_ranks() && token < vocab_size_ &&
         vocab_->IdBytes(static_cast<uint32_t>(token), bytes) && !bytes->empty();
}

bool JsonConstraint::AcceptNext(int32_t token) {
  if (token == eos_) return matcher_.Accepting();
  std::string_view bytes;
  if (!TokenBytes(token, &bytes)) return false;
  // The token came from Mask(), so every byte is taken (no copy for an undo).
  for (char ch : bytes) {
    if (!matcher_.Feed(static_cast<uint8_t>(ch))) return false;
  }
  return true;
}

int64_t JsonConstraint::CloseCost() {
  matcher_.MinClose(&close_text_);
  return trie_->Greedy(close_text_, nullptr);
}

int64_t JsonConstraint::CloseCostAfter(int32_t token) {
  if (token == eos_) return matcher_.Accepting() ? 0 : -1;
  std::string_view bytes;
  if (!TokenBytes(token, &bytes)) return -1;
  scratch_ = matcher_;  // reuses the scratch state's capacity: no allocation
  for (char ch : bytes) {
    if (!scratch_.Feed(static_cast<uint8_t>(ch))) return -1;
  }
  scratch_.MinClose(&close_text_);
  return trie_->Greedy(close_text_, nullptr);
}

void JsonConstraint::AppendClosing(std::vector<int32_t>* out) {
  matcher_.MinClose(&close_text_);
  trie_->Greedy(close_text_, out);
}

}  // namespace deltafin::constrain
