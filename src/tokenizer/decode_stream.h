// Incremental detokenization for generation: feed ids one at a time, get the new text. Follows HF
// tokenizers' DecodeStream (tokenizer/mod.rs::step_decode_stream): the text is re-decoded over a
// short window of context ids, so decoders that strip a leading space (Metaspace, Strip) behave
// as in a full decode, and nothing is emitted while the text ends in U+FFFD, i.e. in the middle of
// a UTF-8 character split over several byte tokens. Never returns half a character.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lowbit {

class DecodeStream {
 public:
  // prompt_ids are context only: their text is never returned.
  DecodeStream(const Tokenizer& tokenizer, bool skip_special_tokens,
               std::vector<int32_t> prompt_ids = {});

  // The text that `id` completes, possibly empty (held back until more ids arrive). Throws
  // InvalidArgument when the decoder rewrites text already returned (HF raises there too: a
  // ByteFallback run regrouped by later bytes).
  std::string step(int32_t id);

  // At the end of the stream: whatever is still held back (HF shows it as U+FFFD), or "".
  std::string flush();

 private:
  // Emits the part of decode(ids_) past prefix_ and moves the context window forward.
  std::string emit(const std::string& text);

  Tokenizer tokenizer_;  // a cheap copy sharing the loaded data
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;  // context ids, then the ids whose text is not all returned yet
  std::string prefix_;        // decode of the ids up to the last emission: returned already
  size_t prefix_index_ = 0;   // how many leading ids_ to drop at the next emission
};

}  // namespace lowbit
