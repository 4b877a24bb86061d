// Reverse of the chat template: generated ids → reasoning, content, tool calls (docs/MODEL.md §5.4,
// "Model output shape"). Structure is carried only by special ids, so the parser never has to
// guess whether some text is a marker; text is streamed through a UTF-8 decoder that holds back
// partial characters, which makes every delta safe to show as it arrives.
#include "tokenizer/chat.h"

namespace deltafin::tokenizer {

namespace {

std::string Unescape(const std::string& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v.compare(i, 5, "&amp;") == 0) {
      out += '&';
      i += 4;
    } else if (v.compare(i, 6, "&quot;") == 0) {
      out += '"';
      i += 5;
    } else {
      out += v[i];
    }
  }
  return out;
}

// `call tool="x" index="0"` → name "call", attrs. Malformed attributes are skipped: the model
// wrote them, and a bad attribute must not abort the whole response.
void ParseHeader(const std::string& h, std::string* name,
                 std::vector<std::pair<std::string, std::string>>* attrs) {
  size_t i = h.find(' ');
  *name = h.substr(0, i);
  while (i != std::string::npos && i < h.size()) {
    const size_t eq = h.find("=\"", i);
    if (eq == std::string::npos) break;
    const size_t close = h.find('"', eq + 2);
    if (close == std::string::npos) break;
    std::string key = h.substr(i + 1, eq - i - 1);
    attrs->push_back({key, Unescape(h.substr(eq + 2, close - eq - 2))});
    i = close + 1;
  }
}

std::string Attr(const std::vector<std::pair<std::string, std::string>>& attrs, const char* key) {
  for (const auto& [k, v] : attrs) {
    if (k == key) return v;
  }
  return "";
}

}  // namespace

ChatOutputParser::ChatOutputParser(const Tokenizer& tokenizer, bool thinking)
    : tok_(tokenizer),
      open_id_(tokenizer.SpecialId("<|open|>")),
      close_id_(tokenizer.SpecialId("<|close|>")),
      sep_id_(tokenizer.SpecialId("<|sep|>")),
      eom_id_(tokenizer.SpecialId("<|end_of_msg|>")),
      channel_(thinking ? Channel::kReasoning : Channel::kContent) {}

void ChatOutputParser::EmitText(const std::string& text, ChatDelta* delta) {
  switch (channel_) {
    case Channel::kReasoning:
      delta->reasoning += text;
      break;
    case Channel::kContent:
      delta->content += text;
      break;
    case Channel::kArgument:
      arg_text_ += text;
      break;
    case Channel::kJson:
      json_text_ += text;
      break;
    case Channel::kNone:
      break;  // text between tags (none expected) is dropped
  }
}

void ChatOutputParser::SetChannel(Channel c, ChatDelta* delta) {
  EmitText(decoder_.Flush(), delta);
  channel_ = c;
}

void ChatOutputParser::OnTag(bool open, const std::string& header, ChatDelta* delta) {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  ParseHeader(header, &name, &attrs);
  if (name == "think") {
    SetChannel(open ? Channel::kReasoning : Channel::kNone, delta);
  } else if (name == "response") {
    SetChannel(open ? Channel::kContent : Channel::kNone, delta);
  } else if (name == "call") {
    SetChannel(Channel::kNone, delta);
    if (open) {
      call_ = ToolCall{};
      call_.name = Attr(attrs, "tool");
      call_.index = std::atoi(Attr(attrs, "index").c_str());
      args_.clear();
      call_has_json_ = false;
      json_text_.clear();
      in_call_ = true;
    } else {
      EndCall(delta);
    }
  } else if (name == "argument") {
    if (open) {
      SetChannel(Channel::kArgument, delta);
      arg_key_ = Attr(attrs, "key");
      arg_type_ = Attr(attrs, "type");
      arg_text_.clear();
    } else {
      SetChannel(Channel::kNone, delta);
      // Strings are raw text; other types are JSON text already.
      args_.emplace_back(arg_key_,
                         arg_type_ == "string"
                             ? nlohmann::ordered_json(arg_text_).dump(
                                   -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
                             : arg_text_);
    }
  } else if (name == "json") {
    SetChannel(open ? Channel::kJson : Channel::kNone, delta);
    if (open) call_has_json_ = true;
  } else {
    SetChannel(Channel::kNone, delta);  // message, tools: structure only
  }
}

Status ChatOutputParser::Feed(int32_t id, ChatDelta* delta) {
  if (id == open_id_ || id == close_id_) {
    EmitText(decoder_.Flush(), delta);
    in_header_ = true;
    header_open_ = id == open_id_;
    header_.clear();
    return Status::Ok();
  }
  if (id == sep_id_) {
    if (in_header_) {
      in_header_ = false;
      OnTag(header_open_, header_, delta);
    }
    return Status::Ok();
  }
  if (id == eom_id_) {
    EmitText(decoder_.Flush(), delta);
    delta->done = true;
    return Status::Ok();
  }
  std::string_view bytes;
  if (id < 0 || !tok_.vocab().IdBytes(static_cast<uint32_t>(id), &bytes)) {
    return Status::Error("generated id " + std::to_string(id) + " is not in the vocabulary");
  }
  if (static_cast<uint32_t>(id) >= tok_.vocab().num_ranks()) return Status::Ok();  // other specials
  if (in_header_) {
    header_.append(bytes);
  } else {
    EmitText(decoder_.Feed(bytes), delta);
  }
  return Status::Ok();
}

void ChatOutputParser::Finish(ChatDelta* delta) { EmitText(decoder_.Flush(), delta); }

void ChatOutputParser::EndCall(ChatDelta* delta) {
  in_call_ = false;
  if (call_has_json_) {
    call_.arguments = json_text_;
  } else {
    nlohmann::ordered_json obj = nlohmann::ordered_json::object();
    for (auto& [k, v] : args_) {
      auto parsed = nlohmann::ordered_json::parse(v, nullptr, false);
      obj[k] = parsed.is_discarded() ? nlohmann::ordered_json(v) : parsed;
    }
    call_.arguments = obj.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  delta->tool_calls.push_back(call_);
}

bool ChatOutputParser::FlushOpenCall(ChatDelta* delta) {
  if (!in_call_) return false;
  decoder_.Flush();
  channel_ = Channel::kNone;
  EndCall(delta);
  return true;
}

Result<ChatOutput> ParseChatOutput(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                                   bool thinking) {
  ChatOutputParser parser(tokenizer, thinking);
  ChatOutput out;
  ChatDelta d;
  for (int32_t id : ids) {
    DF_RETURN_IF_ERROR(parser.Feed(id, &d));
    if (d.done) break;
  }
  parser.Finish(&d);
  out.reasoning = std::move(d.reasoning);
  out.content = std::move(d.content);
  out.tool_calls = std::move(d.tool_calls);
  out.done = d.done;
  return out;
}

}  // namespace deltafin::tokenizer
