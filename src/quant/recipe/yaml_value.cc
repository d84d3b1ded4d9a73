#include "quant/recipe/yaml_value.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <sstream>
#include <string_view>

#include "lowbit/error.h"

namespace lowbit::quant::detail {
namespace {

constexpr int kMaxDepth = 64;
constexpr int64_t kMaxValues = 100000;
constexpr std::string_view kCoreTag = "tag:yaml.org,2002:";

// Decodes the UTF-8 sequence at s[i] into `cp` and returns its length, or 0 if it is malformed.
size_t decode_utf8(const std::string& s, size_t i, uint32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  cp = n == 1 ? c : c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b >> 6) != 0x2) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  return cp >= least[n] ? n : 0;  // overlong encodings are malformed
}

bool printable(uint32_t cp) {
  return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0x7E) || cp == 0x85 ||
         (cp >= 0xA0 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
}

// A key or value (after escapes) lowbit can write back exactly: printable, and no line separator
// that YAML would fold (NEL, U+2028, U+2029).
bool writable(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t n = decode_utf8(s, i, cp);
    if (n == 0 || !printable(cp) || cp == 0x85 || cp == 0x2028 || cp == 0x2029) return false;
    i += n;
  }
  return true;
}

// PyYAML's reader accepts only printable characters: tab, newlines and the printable ranges of
// Unicode (no other C0/C1 controls, DEL, surrogates or U+FFFE/U+FFFF). Returns the 1-based line of
// the first offending byte, or 0 when the text is fine.
int first_unprintable_line(const std::string& s) {
  int line = 1;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t n = decode_utf8(s, i, cp);
    if (n == 0 || !printable(cp)) return line;
    if (cp == 0xA) ++line;
    i += n;
  }
  return 0;
}

// Builds YamlValues from yaml-cpp's parse events. (yaml-cpp's own Node tree is avoided: YAML::LoadAll
// loops forever on some malformed input, producing empty documents without end.)
class Builder : public YAML::EventHandler {
 public:
  explicit Builder(const std::string& where) : where_(where) {}

  YamlValue root_;
  int documents_ = 0;

  void OnDocumentStart(const YAML::Mark&) override { ++documents_; }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    YamlValue v;
    v.line_ = line(mark);
    count(mark, 1);
    add(std::move(v), anchor, 1, false, mark);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto it = anchors_.find(anchor);
    if (it == anchors_.end()) fail(mark, "an alias refers to a node that contains it");
    count(mark, it->second.size);
    YamlValue v = it->second.value;
    add(std::move(v), 0, it->second.size, false, mark);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    count(mark, 1);
    add(scalar(mark, tag, value), anchor, 1, tag == "?", mark);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    push(YamlValue::Kind::Seq, mark, tag, anchor);
  }

  void OnSequenceEnd() override {
    Frame f = pop();
    const std::string& tag = f.tag;
    if (tag != "?" && tag != "!" && tag != std::string(kCoreTag) + "seq" &&
        tag != std::string(kCoreTag) + "python/tuple") {
      const std::string apply = std::string(kCoreTag) + "python/object/apply:";
      if (tag.rfind(apply, 0) != 0) fail(f.mark, "unsupported YAML tag " + tag + " on a list");
      python_object(f.mark, tag.substr(apply.size()), f.value);
    }
    add(std::move(f.value), f.anchor, count_ - f.count_at_start, false, f.mark);
  }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    if (tag != "?" && tag != "!" && tag != std::string(kCoreTag) + "map")
      fail(mark, "unsupported YAML tag " + tag + " on a mapping");
    push(YamlValue::Kind::Map, mark, tag, anchor);
  }

  void OnMapEnd() override {
    Frame f = pop();
    // Merged entries come first and yield to the mapping's own keys, as in PyYAML.
    YamlValue& out = f.value;
    for (size_t i = f.merged.keys_.size(); i-- > 0;) {
      if (out.find(f.merged.keys_[i]) != nullptr) continue;
      out.keys_.insert(out.keys_.begin(), f.merged.keys_[i]);
      out.items_.insert(out.items_.begin(), f.merged.items_[i]);
    }
    add(std::move(out), f.anchor, count_ - f.count_at_start, false, f.mark);
  }

 private:
  struct Frame {
    YamlValue value;
    std::string tag;
    YAML::anchor_t anchor = 0;
    YAML::Mark mark;
    int64_t count_at_start = 0;
    bool have_key = false;  // maps: a key is waiting for its value
    bool key_plain = false;
    std::string key;
    int key_line = 0;
    YamlValue merged;  // entries of `<<: *anchor` merge keys (PyYAML supports them)
  };
  struct Anchored {
    YamlValue value;
    int64_t size;  // values in it, for the expansion budget
  };

  [[noreturn]] void fail(const YAML::Mark& mark, const std::string& what) const {
    throw InvalidArgument(where_ + ":" + std::to_string(line(mark)) + ": " + what);
  }
  static int line(const YAML::Mark& mark) { return mark.line >= 0 ? mark.line + 1 : 0; }

  void count(const YAML::Mark& mark, int64_t n) {
    count_ += n;
    if (count_ > kMaxValues)
      fail(mark, "more than " + std::to_string(kMaxValues) + " values (after expanding aliases)");
  }

  void push(YamlValue::Kind kind, const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor) {
    if (static_cast<int>(stack_.size()) >= kMaxDepth)
      fail(mark, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    count(mark, 1);
    Frame f;
    f.value.kind_ = kind;
    f.value.line_ = line(mark);
    f.tag = tag;
    f.anchor = anchor;
    f.mark = mark;
    f.count_at_start = count_ - 1;
    f.merged.kind_ = YamlValue::Kind::Map;
    stack_.push_back(std::move(f));
  }

  Frame pop() {
    if (stack_.empty()) throw Internal("yaml: unbalanced parse events");
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    return f;
  }

  void add(YamlValue v, YAML::anchor_t anchor, int64_t size, bool plain, const YAML::Mark& mark) {
    if (anchor != 0) anchors_[anchor] = {v, size};
    if (documents_ > 1) return;  // load_yaml refuses a second document
    if (stack_.empty()) {
      root_ = std::move(v);
      return;
    }
    Frame& f = stack_.back();
    if (f.value.kind_ == YamlValue::Kind::Seq) {
      f.value.items_.push_back(std::move(v));
    } else if (!f.have_key) {
      if (v.kind_ == YamlValue::Kind::Seq || v.kind_ == YamlValue::Kind::Map || v.kind_ == YamlValue::Kind::Null)
        fail(mark, "mapping keys must be plain strings");
      f.have_key = true;
      f.key = v.text_;
      f.key_plain = plain;
      f.key_line = v.line_;
    } else {
      f.have_key = false;
      if (f.key == "<<" && f.key_plain) return merge(v, f.merged, mark);
      if (f.value.find(f.key) != nullptr) fail(mark, "duplicate key `" + f.key + "`");
      // yaml-cpp marks an empty value (`key:`) at the next token; point at the key instead.
      if (v.kind_ == YamlValue::Kind::Null) v.line_ = f.key_line;
      f.value.keys_.push_back(f.key);
      f.value.items_.push_back(std::move(v));
    }
  }

  void merge(const YamlValue& source, YamlValue& merged, const YAML::Mark& mark) const {
    auto add_map = [&](const YamlValue& map) {
      if (map.kind_ != YamlValue::Kind::Map) fail(mark, "a merge key (<<) needs a mapping");
      for (size_t i = 0; i < map.keys_.size(); ++i) {
        if (merged.find(map.keys_[i]) != nullptr) continue;  // the first listed mapping wins
        merged.keys_.push_back(map.keys_[i]);
        merged.items_.push_back(map.items_[i]);
      }
    };
    if (source.kind_ == YamlValue::Kind::Seq) {
      for (const YamlValue& item : source.items_) add_map(item);
    } else {
      add_map(source);
    }
  }

  YamlValue scalar(const YAML::Mark& mark, const std::string& tag, const std::string& text) const {
    if (!writable(text)) fail(mark, "a value holds a control character (written as an escape)");
    YamlValue out;
    out.line_ = line(mark);
    out.text_ = text;
    if (tag == "?") {
      resolve_plain_scalar(text, out);
      return out;
    }
    if (tag == "!" || tag == std::string(kCoreTag) + "str") {
      out.kind_ = YamlValue::Kind::String;
      return out;
    }
    const std::string core = tag.rfind(kCoreTag, 0) == 0 ? tag.substr(kCoreTag.size()) : "";
    resolve_plain_scalar(text, out);
    using K = YamlValue::Kind;
    if ((core == "int" && out.kind_ == K::Int) || (core == "bool" && out.kind_ == K::Bool) ||
        (core == "null" && out.kind_ == K::Null))
      return out;
    if (core == "float" && (out.kind_ == K::Float || out.kind_ == K::Int)) {
      if (out.kind_ == K::Int) out.float_ = static_cast<double>(out.int_);
      out.kind_ = K::Float;
      return out;
    }
    fail(mark, "cannot read `" + text.substr(0, 80) + "` tagged " + tag + " (unsupported YAML tag or value)");
  }

  // llm-compressor's yaml.dump of model_dump() leaves enum members, its Sentinel and torch.device
  // as Python objects: `!!python/object/apply:<module>.<Class> [args]`. Read those back as the
  // value they stand for; refuse any other Python object.
  void python_object(const YAML::Mark& mark, const std::string& dotted, YamlValue& out) const {
    const std::string cls = dotted.substr(dotted.rfind('.') + 1);
    for (const YamlValue& arg : out.items_)
      if (!arg.is_scalar()) fail(mark, "unsupported Python object " + dotted);
    const size_t n = out.items_.size();
    const bool is_enum = cls == "QuantizationType" || cls == "QuantizationStrategy" ||
                         cls == "ActivationOrdering" || cls == "DynamicType" ||
                         cls == "CompressionFormat" || cls == "QuantizationStatus";
    std::string first = n > 0 ? out.items_[0].text_ : "";
    if (is_enum && n == 1) {
      out.kind_ = YamlValue::Kind::String;
    } else if (cls == "Sentinel" && dotted.rfind("llmcompressor.", 0) == 0 && n >= 1) {
      out.kind_ = YamlValue::Kind::Sentinel;
    } else if (dotted == "torch.device" && (n == 1 || n == 2)) {
      out.kind_ = YamlValue::Kind::String;
      if (n == 2) first += ":" + out.items_[1].text_;
    } else {
      fail(mark, "unsupported Python object " + dotted);
    }
    out.text_ = first;
    out.items_.clear();
  }

  const std::string& where_;
  std::vector<Frame> stack_;
  std::map<YAML::anchor_t, Anchored> anchors_;
  int64_t count_ = 0;
};

}  // namespace

const YamlValue* YamlValue::find(const std::string& key) const {
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i] == key) return &items_[i];
  return nullptr;
}

std::string YamlValue::describe() const {
  switch (kind_) {
    case Kind::Null: return "null";
    case Kind::Seq: return "a list";
    case Kind::Map: return "a mapping";
    case Kind::Sentinel: return "llm-compressor's `" + text_ + "` marker";
    case Kind::String: return "\"" + text_.substr(0, 80) + (text_.size() > 80 ? "...\"" : "\"");
    default: return text_.substr(0, 80);
  }
}

YamlValue load_yaml(const std::string& text, const std::string& where) {
  if (int line = first_unprintable_line(text))
    throw InvalidArgument(where + ":" + std::to_string(line) +
                          ": not UTF-8 text, or holds a control character YAML does not allow");
  std::istringstream stream(text);
  Builder builder(where);
  try {
    YAML::Parser parser(stream);
    if (!parser.HandleNextDocument(builder)) return YamlValue{};
    if (parser.HandleNextDocument(builder))
      throw InvalidArgument(where + ": holds several YAML documents; a recipe is one document");
  } catch (const YAML::Exception& e) {
    const int line = e.mark.line >= 0 ? e.mark.line + 1 : 0;
    throw InvalidArgument(where + ":" + std::to_string(line) + ": invalid YAML: " + e.msg);
  }
  return std::move(builder.root_);
}

nlohmann::ordered_json yaml_to_json(const YamlValue& v, const std::string& where) {
  using K = YamlValue::Kind;
  switch (v.kind_) {
    case K::Null: return nullptr;
    case K::Bool: return v.bool_;
    case K::Int: return v.int_;
    case K::Float: return v.float_;
    case K::String: return v.text_;
    case K::Sentinel:
      throw InvalidArgument(where + ":" + std::to_string(v.line_) + ": unexpected " + v.describe());
    case K::Seq: {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const YamlValue& item : v.items_) out.push_back(yaml_to_json(item, where));
      return out;
    }
    case K::Map: {
      nlohmann::ordered_json out = nlohmann::ordered_json::object();
      for (size_t i = 0; i < v.keys_.size(); ++i) out[v.keys_[i]] = yaml_to_json(v.items_[i], where);
      return out;
    }
  }
  return nullptr;
}

}  // namespace lowbit::quant::detail
