#include "tokenizer/post_processor.h"

#include <map>
#include <string>

namespace lowbit::tokenizer {
namespace {

class TemplateProcessor : public PostProcessor {
 public:
  // Each entry of the single-sequence template: the special ids to emit, or the sequence itself.
  struct Item {
    bool is_sequence = false;
    std::vector<int32_t> ids;
  };
  explicit TemplateProcessor(std::vector<Item> single) : single_(std::move(single)) {}

  std::vector<int32_t> process(std::vector<int32_t> ids, bool add_special) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const Item& item : single_) {
      if (item.is_sequence) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else if (add_special) {
        out.insert(out.end(), item.ids.begin(), item.ids.end());
      }
    }
    return out;
  }

 private:
  std::vector<Item> single_;
};

// RobertaProcessing and BertProcessing: cls A sep for a single sequence.
class ClsSepProcessor : public PostProcessor {
 public:
  ClsSepProcessor(int32_t cls, int32_t sep) : cls_(cls), sep_(sep) {}
  std::vector<int32_t> process(std::vector<int32_t> ids, bool add_special) const override {
    if (!add_special) return ids;
    ids.insert(ids.begin(), cls_);
    ids.push_back(sep_);
    return ids;
  }

 private:
  int32_t cls_, sep_;
};

class IdentityProcessor : public PostProcessor {
 public:
  std::vector<int32_t> process(std::vector<int32_t> ids, bool) const override { return ids; }
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> items)
      : items_(std::move(items)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids, bool add_special) const override {
    for (const auto& p : items_) ids = p->process(std::move(ids), add_special);
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> items_;
};

std::map<std::string, std::vector<int32_t>> parse_special_tokens(const Json& j,
                                                                 const JsonPath& at) {
  std::map<std::string, std::vector<int32_t>> out;
  const Json* specials = find_field(j, "special_tokens");
  if (specials == nullptr) return out;
  require_object(*specials, at / "special_tokens");
  for (auto it = specials->begin(); it != specials->end(); ++it) {
    const JsonPath sat = (at / "special_tokens").quoted(it.key());
    require_object(*it, sat);
    const Json& ids = require_array(get_field(*it, "ids", sat), sat / "ids");
    const Json& tokens = require_array(get_field(*it, "tokens", sat), sat / "tokens");
    if (ids.size() != tokens.size()) sat.fail("ids and tokens must have the same length");
    std::vector<int32_t> v;
    for (size_t k = 0; k < ids.size(); ++k) {
      v.push_back(static_cast<int32_t>(as_int(ids[k], (sat / "ids")[k], 0, INT32_MAX)));
    }
    out[it.key()] = std::move(v);
  }
  return out;
}

std::unique_ptr<PostProcessor> parse_template(const Json& j, const JsonPath& at) {
  const auto specials = parse_special_tokens(j, at);
  const JsonPath sat = at / "single";
  const Json& single = require_array(get_field(j, "single", at), sat);
  std::vector<TemplateProcessor::Item> items;
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonPath pat = sat[i];
    const Json& piece = require_object(single[i], pat);
    if (piece.size() != 1) pat.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    const Json& body = require_object(piece.begin().value(), pat / piece.begin().key());
    const std::string id = get_string(body, "id", pat / piece.begin().key());
    TemplateProcessor::Item item;
    if (piece.begin().key() == "Sequence") {
      // A single sequence is "A"; "B" only exists in the pair template.
      if (id != "A") (pat / "Sequence" / "id").fail("a single-sequence template can only use A");
      item.is_sequence = true;
    } else if (piece.begin().key() == "SpecialToken") {
      auto it = specials.find(id);
      if (it == specials.end()) {
        (pat / "SpecialToken" / "id").fail("'" + id + "' is not in special_tokens");
      }
      item.ids = it->second;
    } else {
      pat.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
    items.push_back(std::move(item));
  }
  return std::make_unique<TemplateProcessor>(std::move(items));
}

// The [token, id] pairs of RobertaProcessing / BertProcessing.
int32_t parse_token_pair(const Json& j, const char* key, const JsonPath& at) {
  const JsonPath kat = at / key;
  const Json& pair = require_array(get_field(j, key, at), kat);
  if (pair.size() != 2) kat.fail("expected [token, id]");
  as_string(pair[0], kat[0]);
  return static_cast<int32_t>(as_int(pair[1], kat[1], 0, INT32_MAX));
}

}  // namespace

std::unique_ptr<PostProcessor> parse_post_processor(const Json& j, const JsonPath& at) {
  at.check_depth();
  const std::string type = get_type(j, at);
  if (type == "TemplateProcessing") return parse_template(j, at);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    return std::make_unique<ClsSepProcessor>(parse_token_pair(j, "cls", at),
                                             parse_token_pair(j, "sep", at));
  }
  if (type == "ByteLevel") return std::make_unique<IdentityProcessor>();
  if (type == "Sequence") {
    const Json& list = require_array(get_field(j, "processors", at), at / "processors");
    std::vector<std::unique_ptr<PostProcessor>> items;
    for (size_t i = 0; i < list.size(); ++i) {
      items.push_back(parse_post_processor(list[i], (at / "processors")[i]));
    }
    return std::make_unique<SequenceProcessor>(std::move(items));
  }
  (at / "type").unsupported("post_processor type '" + type + "' is not supported");
}

}  // namespace lowbit::tokenizer
