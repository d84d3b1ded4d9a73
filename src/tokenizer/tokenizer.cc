#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lowbit/error.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoders.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/unicode.h"

namespace lowbit {

using tokenizer::Json;
using tokenizer::JsonPath;
using tokenizer::Piece;

struct Tokenizer::Impl {
  std::unique_ptr<tokenizer::Normalizer> normalizer;
  std::unique_ptr<tokenizer::PreTokenizer> pre_tokenizer;
  std::unique_ptr<tokenizer::BpeModel> model;
  tokenizer::AddedVocabulary added;
  std::unique_ptr<tokenizer::PostProcessor> post_processor;
  std::unique_ptr<tokenizer::Decoder> decoder;
  // From tokenizer_config.json.
  std::string bos_token;
  std::string eos_token;
  bool clean_up_tokenization_spaces = false;
};

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError("cannot read " + path);
  return ss.str();
}

Json parse_json(const std::string& text, const std::string& name) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw InvalidArgument(name + ": invalid JSON: " + e.what());
  }
}

void load_components(Tokenizer::Impl& impl, const Json& doc, const JsonPath& root) {
  require_object(doc, root);
  if (const Json* v = tokenizer::find_field(doc, "version")) {
    const std::string version = tokenizer::as_string(*v, root / "version");
    if (version != "1.0") (root / "version").fail("unknown tokenizer.json version '" + version + "'");
  }
  if (const Json* n = tokenizer::find_field(doc, "normalizer")) {
    impl.normalizer = tokenizer::parse_normalizer(*n, root / "normalizer");
  }
  if (const Json* p = tokenizer::find_field(doc, "pre_tokenizer")) {
    impl.pre_tokenizer = tokenizer::parse_pre_tokenizer(*p, root / "pre_tokenizer");
  }
  impl.model = std::make_unique<tokenizer::BpeModel>(get_field(doc, "model", root), root / "model");
  if (const Json* p = tokenizer::find_field(doc, "post_processor")) {
    impl.post_processor = tokenizer::parse_post_processor(*p, root / "post_processor");
  }
  if (const Json* d = tokenizer::find_field(doc, "decoder")) {
    impl.decoder = tokenizer::parse_decoder(*d, root / "decoder");
  }
  if (const Json* a = tokenizer::find_field(doc, "added_tokens")) {
    impl.added.load(*a, root / "added_tokens", *impl.model, impl.normalizer.get());
  }
}

std::shared_ptr<Tokenizer::Impl> load(const std::string& json, const std::string& name) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  const Json doc = parse_json(json, name);
  try {
    load_components(*impl, doc, JsonPath(name));
  } catch (const Json::exception& e) {  // a type check we missed: still one clear message
    throw InvalidArgument(name + ": " + e.what());
  }
  return impl;
}

// bos_token and friends are a string, or an AddedToken object with "content", or null.
std::string config_token(const Json& config, const char* key, const JsonPath& at) {
  const Json* v = tokenizer::find_field(config, key);
  if (v == nullptr) return "";
  if (v->is_object()) return tokenizer::get_string(*v, "content", at / key);
  return tokenizer::as_string(*v, at / key);
}

}  // namespace

Tokenizer Tokenizer::from_json_string(const std::string& json, const std::string& name_for_errors) {
  return Tokenizer(load(json, name_for_errors));
}

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json_path) {
  return Tokenizer(load(read_file(tokenizer_json_path), tokenizer_json_path));
}

Tokenizer Tokenizer::from_dir(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  const std::string json_path = (dir / "tokenizer.json").string();
  auto impl = load(read_file(json_path), json_path);
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    const std::string name = config_path.string();
    const Json config = parse_json(read_file(name), name);
    const JsonPath at(name);
    require_object(config, at);
    impl->bos_token = config_token(config, "bos_token", at);
    impl->eos_token = config_token(config, "eos_token", at);
    impl->clean_up_tokenization_spaces =
        tokenizer::get_bool(config, "clean_up_tokenization_spaces", at, false);
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& impl = *impl_;
  const size_t bad = tokenizer::find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    throw InvalidArgument("tokenizer input is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  }
  std::vector<Piece> pieces;
  if (!text.empty()) {
    Piece whole;
    whole.text = std::string(text);
    whole.at_origin = true;
    whole.origin_span = tokenizer::utf8_len(static_cast<unsigned char>(text[0]));
    pieces.push_back(std::move(whole));
  }
  // Added tokens first (raw text), then the normalizer on each text piece separately, then the
  // normalized added tokens, then the pre-tokenizer and the model (tokenizers' encode order).
  impl.added.extract(pieces, /*normalized_pass=*/false);
  if (impl.normalizer) {
    for (Piece& p : pieces) {
      if (!p.is_token()) impl.normalizer->normalize(p);
    }
  }
  impl.added.extract(pieces, /*normalized_pass=*/true);
  if (impl.pre_tokenizer) impl.pre_tokenizer->pre_tokenize(pieces);

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const Piece& p : pieces) {
    if (p.is_token()) {
      ids.push_back(p.id);
    } else {
      impl.model->tokenize(p.text, ids);
    }
  }
  if (impl.post_processor) return impl.post_processor->process(std::move(ids), add_special_tokens);
  return ids;
}

std::string Tokenizer::decode_raw(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& impl = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* s = impl.added.id_to_token(id);
    if (s == nullptr) s = impl.model->id_to_token(id);
    if (s == nullptr) continue;  // unknown ids are skipped, as in HF
    if (skip_special_tokens && impl.added.is_special_content(*s)) continue;
    tokens.push_back(*s);
  }
  if (impl.decoder) {
    impl.decoder->decode_chain(tokens);
    std::string out;
    for (const std::string& t : tokens) out += t;
    return out;
  }
  std::string out;  // no decoder: tokens joined with spaces
  for (size_t k = 0; k < tokens.size(); ++k) {
    if (k > 0) out.push_back(' ');
    out += tokens[k];
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string text = decode_raw(ids, skip_special_tokens);
  if (impl_->clean_up_tokenization_spaces) tokenizer::cleanup_tokenization_spaces(text);
  return text;
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->model->vocab_size() + impl_->added.count_not_in(*impl_->model));
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.token_to_id(token)) return id;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* s = impl_->added.id_to_token(id);
  if (s == nullptr) s = impl_->model->id_to_token(id);
  return s == nullptr ? std::string() : *s;
}

bool Tokenizer::is_special(int32_t id) const { return impl_->added.is_special_id(id); }

const std::string& Tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& Tokenizer::eos_token() const { return impl_->eos_token; }

}  // namespace lowbit
