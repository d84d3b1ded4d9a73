#include "tokenizer/decode_stream.h"

#include "lowbit/error.h"
#include "tokenizer/unicode.h"

namespace lowbit {

DecodeStream::DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens,
                           std::vector<int32_t> prompt_ids)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens), ids_(std::move(prompt_ids)) {}

std::string DecodeStream::step(int32_t id) {
  if (prefix_.empty() && !ids_.empty()) {
    std::string p = tokenizer_.decode_raw(ids_, skip_special_tokens_);
    if (!tokenizer::ends_with_replacement(p)) {
      prefix_ = std::move(p);
      prefix_index_ = ids_.size();
    }
  }
  ids_.push_back(id);
  const std::string text = tokenizer_.decode_raw(ids_, skip_special_tokens_);
  if (text.size() > prefix_.size() && !tokenizer::ends_with_replacement(text)) return emit(text);
  return "";
}

std::string DecodeStream::flush() {
  const std::string text = tokenizer_.decode_raw(ids_, skip_special_tokens_);
  if (text.size() > prefix_.size()) return emit(text);
  return "";
}

std::string DecodeStream::emit(const std::string& text) {
  if (text.compare(0, prefix_.size(), prefix_) != 0) {
    throw InvalidArgument("DecodeStream: decoding token id " + std::to_string(ids_.back()) +
                          " changed text already returned (\"" + prefix_ + "\" became \"" +
                          text + "\")");
  }
  std::string new_text = text.substr(prefix_.size());
  const size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = tokenizer_.decode_raw(ids_, skip_special_tokens_);
  prefix_index_ = new_prefix_index;
  return new_text;
}

}  // namespace lowbit
