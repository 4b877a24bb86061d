// StreamDetokenizer (see detokenizer.h): ids → token bytes → the streaming UTF-8 decoder.
#include "tokenizer/detokenizer.h"

namespace deltafin::tokenizer {

Status StreamDetokenizer::Feed(int32_t id, std::string* text) {
  std::string_view bytes;
  if (id < 0 || !tok_.vocab().IdBytes(static_cast<uint32_t>(id), &bytes)) {
    return Status::Error("generated id " + std::to_string(id) + " is not in the vocabulary");
  }
  if (static_cast<uint32_t>(id) < tok_.vocab().num_ranks()) {
    text->append(utf8_.Feed(bytes));
    return Status::Ok();
  }
  text->append(utf8_.Flush());
  if (show_special_) text->append(bytes);
  return Status::Ok();
}

void StreamDetokenizer::Finish(std::string* text) { text->append(utf8_.Flush()); }

}  // namespace deltafin::tokenizer
