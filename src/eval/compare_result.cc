#include "eval/compare_result.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lowbit/error.h"

namespace lowbit::eval {
namespace {

using json = nlohmann::json;

// Where a value sits, for messages: the file and the JSON path ("schemes[2].layer_errors[0]").
struct Where {
  const std::string& source;
  std::string path;

  Where at(const std::string& key) const { return {source, path.empty() ? key : path + "." + key}; }
  Where index(size_t i) const { return {source, path + "[" + std::to_string(i) + "]"}; }
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument(source + ": " + (path.empty() ? "" : path + ": ") + what);
  }
};

// A short, printable rendering of a bad value for an error message.
std::string describe(const json& value) {
  std::string text = value.dump(-1, ' ', true, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(value.type_name()) + " " + text;
}

// The value under `key`, or null when the key is missing or its value is JSON null.
const json* find(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

const json& require(const json& object, const char* key, const Where& where) {
  const json* value = find(object, key);
  if (value == nullptr) {
    where.at(key).fail(object.contains(key) ? "is required and may not be null"
                                            : "is required but missing");
  }
  return *value;
}

void check_object(const json& value, const Where& where) {
  if (!value.is_object()) where.fail("expected an object, got " + describe(value));
}

std::string read_string(const json& value, const Where& where, bool allow_empty) {
  if (!value.is_string()) where.fail("expected a string, got " + describe(value));
  std::string text = value.get<std::string>();
  if (!allow_empty && text.empty()) where.fail("expected a non-empty string");
  return text;
}

std::string required_string(const json& object, const char* key, const Where& where) {
  return read_string(require(object, key, where), where.at(key), false);
}

std::string optional_string(const json& object, const char* key, const Where& where) {
  const json* value = find(object, key);
  return value ? read_string(*value, where.at(key), true) : std::string();
}

// What a number must satisfy; each names itself in the message.
enum class Range { ANY, POSITIVE, NON_NEGATIVE, UNIT };

double read_number(const json& value, const Where& where, Range range) {
  if (!value.is_number()) where.fail("expected a number, got " + describe(value));
  const double x = value.get<double>();
  if (!std::isfinite(x)) where.fail("expected a finite number");
  switch (range) {
    case Range::ANY:
      break;
    case Range::POSITIVE:
      if (!(x > 0)) where.fail("expected a positive number, got " + describe(value));
      break;
    case Range::NON_NEGATIVE:
      if (x < 0) where.fail("expected a number >= 0, got " + describe(value));
      break;
    case Range::UNIT:
      if (x < 0 || x > 1) where.fail("expected a fraction in [0, 1], got " + describe(value));
      break;
  }
  return x;
}

double required_number(const json& object, const char* key, const Where& where, Range range) {
  return read_number(require(object, key, where), where.at(key), range);
}

std::optional<double> optional_number(const json& object, const char* key, const Where& where,
                                      Range range) {
  const json* value = find(object, key);
  if (value == nullptr) return std::nullopt;
  return read_number(*value, where.at(key), range);
}

int64_t read_integer(const json& value, const Where& where, bool positive) {
  if (!value.is_number_integer()) where.fail("expected an integer, got " + describe(value));
  if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX)) {
    where.fail("integer out of range");
  }
  const int64_t n = value.get<int64_t>();
  if (positive ? n <= 0 : n < 0) {
    where.fail(std::string("expected an integer ") + (positive ? "> 0" : ">= 0") + ", got " +
               describe(value));
  }
  return n;
}

std::optional<int64_t> optional_integer(const json& object, const char* key, const Where& where,
                                        bool positive) {
  const json* value = find(object, key);
  if (value == nullptr) return std::nullopt;
  return read_integer(*value, where.at(key), positive);
}

// An optional array (missing or null: empty); each element read by `element`.
template <typename Element>
void read_array(const json& object, const char* key, const Where& where, Element element) {
  const json* value = find(object, key);
  if (value == nullptr) return;
  if (!value->is_array()) where.at(key).fail("expected an array, got " + describe(*value));
  for (size_t i = 0; i < value->size(); ++i) element((*value)[i], where.at(key).index(i));
}

void read_measurements(const json& object, const Where& where, CompareMeasurements& m) {
  m.dir = optional_string(object, "dir", where);
  m.size_bytes = read_integer(require(object, "size_bytes", where), where.at("size_bytes"), true);
  m.bits_per_weight = required_number(object, "bits_per_weight", where, Range::POSITIVE);
  if (m.bits_per_weight > 64) where.at("bits_per_weight").fail("expected at most 64 bits per weight");
  m.ppl = required_number(object, "ppl", where, Range::POSITIVE);
  m.task_acc = optional_number(object, "task_acc", where, Range::UNIT);
  m.task_acc_stderr = optional_number(object, "task_acc_stderr", where, Range::UNIT);
  m.decode_tok_s = optional_number(object, "decode_tok_s", where, Range::POSITIVE);
  m.prefill_tok_s = optional_number(object, "prefill_tok_s", where, Range::POSITIVE);
  m.peak_rss_bytes = optional_integer(object, "peak_rss_bytes", where, true);
}

CompareScheme read_scheme(const json& object, const Where& where, double baseline_ppl) {
  check_object(object, where);
  CompareScheme s;
  s.scheme = required_string(object, "scheme", where);
  s.algo = optional_string(object, "algo", where);
  s.kv_cache = optional_string(object, "kv_cache", where);
  read_measurements(object, where, s);
  s.delta_ppl = required_number(object, "delta_ppl", where, Range::ANY);
  // delta_ppl is a fraction of the baseline's perplexity; a producer writing percent (1.2 for
  // +1.2 %) or an absolute difference would make every chart wrong, so it must agree with the two
  // perplexities. 5e-4 leaves room for perplexities rounded to 4 decimals in the file.
  const double expected = s.ppl / baseline_ppl - 1;
  if (std::fabs(s.delta_ppl - expected) > 5e-4) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "%.6g disagrees with ppl / baseline.ppl - 1 = %.6g (a fraction: 0.012 = +1.2 %%)",
                  s.delta_ppl, expected);
    where.at("delta_ppl").fail(buf);
  }
  s.kld_mean = optional_number(object, "kld_mean", where, Range::NON_NEGATIVE);
  s.kld_p99 = optional_number(object, "kld_p99", where, Range::NON_NEGATIVE);
  s.top1_agreement = optional_number(object, "top1_agreement", where, Range::UNIT);
  read_array(object, "layer_errors", where, [&](const json& e, const Where& w) {
    check_object(e, w);
    s.layer_errors.push_back(
        {required_string(e, "name", w), required_number(e, "rel_error", w, Range::NON_NEGATIVE)});
  });
  read_array(object, "pitfalls", where, [&](const json& p, const Where& w) {
    check_object(p, w);
    s.pitfalls.push_back({required_string(p, "kind", w), required_string(p, "message", w)});
  });
  return s;
}

// Reads the recommendation and resolves it to a row: the row whose label() is the scheme, else
// the one row with that scheme (and algo, when given), else the baseline by name.
CompareRecommendation read_recommendation(const json& object, const Where& where,
                                          const CompareResult& result) {
  check_object(object, where);
  CompareRecommendation r;
  if (const json* scheme = find(object, "scheme")) r.scheme = read_string(*scheme, where.at("scheme"), false);
  r.algo = optional_string(object, "algo", where);
  read_array(object, "reasons", where, [&](const json& reason, const Where& w) {
    r.reasons.push_back(read_string(reason, w, false));
  });
  if (!r.scheme) return r;
  std::vector<size_t> matches;
  for (size_t i = 0; i < result.schemes.size(); ++i) {
    const CompareScheme& s = result.schemes[i];
    if (s.label() == *r.scheme && (r.algo.empty() || s.algo == r.algo)) matches.push_back(i);
  }
  if (matches.empty()) {
    for (size_t i = 0; i < result.schemes.size(); ++i) {
      const CompareScheme& s = result.schemes[i];
      if (s.scheme == *r.scheme && (r.algo.empty() || s.algo == r.algo)) matches.push_back(i);
    }
  }
  if (matches.size() == 1) {
    r.index = matches[0];
  } else if (matches.size() > 1) {
    where.at("scheme").fail("\"" + *r.scheme + "\" matches " + std::to_string(matches.size()) +
                            " rows of schemes[]; name the row by its label or add \"algo\"");
  } else if (*r.scheme == result.baseline.name && r.algo.empty()) {
    r.is_baseline = true;
  } else {
    where.at("scheme").fail("\"" + *r.scheme + "\" is neither a row of schemes[] nor the baseline");
  }
  return r;
}

void read_header(const json& root, const Where& where, CompareResult& result) {
  result.format = required_string(root, "format", where);
  if (result.format != kCompareFormat) {
    where.at("format").fail("\"" + result.format + "\" is not " + kCompareFormat +
                            ", the format this lowbit reads");
  }
  result.model = required_string(root, "model", where);
  result.created = required_string(root, "created", where);
  result.layer_error_metric = optional_string(root, "layer_error_metric", where);
  if (const json* machine = find(root, "machine")) {
    const Where w = where.at("machine");
    check_object(*machine, w);
    result.machine.cpu = optional_string(*machine, "cpu", w);
    result.machine.threads = optional_integer(*machine, "threads", w, true);
    result.machine.gpu = optional_string(*machine, "gpu", w);
  }
  const json& protocol = require(root, "protocol", where);
  const Where w = where.at("protocol");
  check_object(protocol, w);
  result.protocol.ppl_text = required_string(protocol, "ppl_text", w);
  result.protocol.ctx = read_integer(require(protocol, "ctx", w), w.at("ctx"), true);
  result.protocol.windows = optional_integer(protocol, "windows", w, true);
  if (const json* bos = find(protocol, "bos")) {
    if (!bos->is_boolean()) w.at("bos").fail("expected true or false, got " + describe(*bos));
    result.protocol.bos = bos->get<bool>();
  }
  read_array(protocol, "tasks", w, [&](const json& task, const Where& tw) {
    result.protocol.tasks.push_back(read_string(task, tw, false));
  });
}

json optional_json(const std::optional<double>& x) { return x ? json(*x) : json(nullptr); }
json optional_json(const std::optional<int64_t>& x) { return x ? json(*x) : json(nullptr); }
json optional_json(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

void write_measurements(const CompareMeasurements& m, json& out) {
  out["dir"] = optional_json(m.dir);
  out["size_bytes"] = m.size_bytes;
  out["bits_per_weight"] = m.bits_per_weight;
  out["ppl"] = m.ppl;
  out["task_acc"] = optional_json(m.task_acc);
  out["task_acc_stderr"] = optional_json(m.task_acc_stderr);
  out["decode_tok_s"] = optional_json(m.decode_tok_s);
  out["prefill_tok_s"] = optional_json(m.prefill_tok_s);
  out["peak_rss_bytes"] = optional_json(m.peak_rss_bytes);
}

}  // namespace

std::string CompareScheme::label() const {
  std::string text = scheme;
  if (!algo.empty() && algo != "rtn" && algo != "RTN") {
    std::string upper = algo;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    text += " " + upper;
  }
  if (!kv_cache.empty() && kv_cache != "auto" && kv_cache != "none") {
    std::string upper = kv_cache;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    text += " \xC2\xB7 KV " + upper;  // U+00B7 middle dot
  }
  return text;
}

CompareResult CompareResult::from_json(const json& root, const std::string& source) {
  const Where where{source, ""};
  check_object(root, where);
  CompareResult result;
  read_header(root, where, result);

  const json& baseline = require(root, "baseline", where);
  const Where bw = where.at("baseline");
  check_object(baseline, bw);
  result.baseline.name = required_string(baseline, "name", bw);
  read_measurements(baseline, bw, result.baseline);

  const json& schemes = require(root, "schemes", where);
  if (!schemes.is_array()) where.at("schemes").fail("expected an array, got " + describe(schemes));
  for (size_t i = 0; i < schemes.size(); ++i) {
    result.schemes.push_back(read_scheme(schemes[i], where.at("schemes").index(i), result.baseline.ppl));
  }
  if (const json* recommendation = find(root, "recommendation")) {
    result.recommendation = read_recommendation(*recommendation, where.at("recommendation"), result);
  }
  return result;
}

json CompareResult::to_json() const {
  json root;
  root["format"] = format;
  root["model"] = model;
  root["created"] = created;
  root["layer_error_metric"] = optional_json(layer_error_metric);
  root["machine"] = {{"cpu", optional_json(machine.cpu)},
                     {"threads", optional_json(machine.threads)},
                     {"gpu", optional_json(machine.gpu)}};
  root["protocol"] = {{"ppl_text", protocol.ppl_text}, {"ctx", protocol.ctx},
                      {"windows", optional_json(protocol.windows)}, {"bos", protocol.bos},
                      {"tasks", protocol.tasks}};
  json& base = root["baseline"];
  base["name"] = baseline.name;
  write_measurements(baseline, base);
  root["schemes"] = json::array();
  for (const CompareScheme& s : schemes) {
    json row = {{"scheme", s.scheme}, {"algo", optional_json(s.algo)},
                {"kv_cache", optional_json(s.kv_cache)}};
    write_measurements(s, row);
    row["delta_ppl"] = s.delta_ppl;
    row["kld_mean"] = optional_json(s.kld_mean);
    row["kld_p99"] = optional_json(s.kld_p99);
    row["top1_agreement"] = optional_json(s.top1_agreement);
    row["layer_errors"] = json::array();
    for (const LayerError& e : s.layer_errors) {
      row["layer_errors"].push_back({{"name", e.name}, {"rel_error", e.rel_error}});
    }
    row["pitfalls"] = json::array();
    for (const Pitfall& p : s.pitfalls) row["pitfalls"].push_back({{"kind", p.kind}, {"message", p.message}});
    root["schemes"].push_back(std::move(row));
  }
  root["recommendation"] = {{"scheme", recommendation.scheme ? json(*recommendation.scheme) : json(nullptr)},
                            {"algo", optional_json(recommendation.algo)},
                            {"reasons", recommendation.reasons}};
  return root;
}

CompareResult read_compare_result(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InvalidArgument(path + ": no such file; `lowbit compare MODEL --schemes ... -o DIR` writes "
                          "DIR/compare.json");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  json root;
  try {
    root = json::parse(text.str());
  } catch (const json::exception& e) {
    throw InvalidArgument(path + ": not valid JSON: " + e.what());
  }
  return CompareResult::from_json(root, path);
}

void write_compare_result(const CompareResult& result, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(tmp + ": cannot create the file");
    out << result.to_json().dump(2) << "\n";
    out.close();
    if (!out) throw IoError(tmp + ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw IoError(path + ": cannot rename " + tmp + " to it: " + ec.message());
}

}  // namespace lowbit::eval
