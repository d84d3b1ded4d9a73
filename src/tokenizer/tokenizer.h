// lowbit's reading of a Hugging Face tokenizer.json: encode text to ids and decode ids to text,
// id for id as HF tokenizers 0.23 does (BPE models; the normalizers, pre-tokenizers,
// post-processors and decoders that BPE files use). See docs TOKENIZERS.md for the rules.
//
// A Tokenizer is immutable once loaded and cheap to copy (copies share the loaded data); encode
// and decode may be called from several threads at once. Malformed files throw
// lowbit::InvalidArgument naming the file and the field; components lowbit does not implement throw
// lowbit::Unsupported. Streaming detokenization for generation is DecodeStream
// (tokenizer/decode_stream.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lowbit {

class Tokenizer {
 public:
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  // dir/tokenizer.json, plus from dir/tokenizer_config.json (when present): bos_token, eos_token
  // and clean_up_tokenization_spaces.
  static Tokenizer from_dir(const std::string& model_dir);
  // `name_for_errors` stands for the file in error messages.
  static Tokenizer from_json_string(const std::string& json, const std::string& name_for_errors);

  // Token ids of `text` (valid UTF-8, else InvalidArgument). add_special_tokens applies the
  // post-processor's special tokens (e.g. BOS). Added and special tokens written in the text
  // are recognised, as in HF. Truncation and padding settings in the file are ignored (as
  // transformers does by default).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // Text of `ids`. Unknown ids are skipped; skip_special_tokens drops special added tokens.
  // When tokenizer_config.json asked for clean_up_tokenization_spaces, transformers' cleanup is
  // applied afterwards, as tokenizer.decode does in transformers.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  // The decode of HF tokenizers itself, never cleaned up (what DecodeStream works on).
  std::string decode_raw(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

  // Model vocab plus added tokens that are not in it (HF get_vocab_size(with_added_tokens=True)).
  int32_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string of an id ("" for unknown ids).
  std::string id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;

  // From tokenizer_config.json when from_dir found one; empty otherwise.
  const std::string& bos_token() const;
  const std::string& eos_token() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace lowbit
