#include "quant/pipeline/calibration_data.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "lowbit/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::quant {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(path + ": cannot read the calibration data");
  std::ostringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  // Read like Python's text mode, which the reference tools use: CRLF → LF.
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    out.push_back(text[i]);
  }
  return out;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The BOS id the tokenizer's post-processor adds, if any.
std::optional<int32_t> added_bos(const Tokenizer& tok) {
  const std::vector<int32_t> plain = tok.encode("a", false);
  const std::vector<int32_t> with = tok.encode("a", true);
  if (with.size() > plain.size() && with.front() != plain.front()) return with.front();
  return std::nullopt;
}

CalibrationSet windows_of_text(const std::string& path, const std::string& text,
                               const Tokenizer& tok, int64_t seq_len) {
  const std::vector<int32_t> ids = tok.encode(text, false);
  const std::optional<int32_t> bos = added_bos(tok);
  const int64_t body = bos ? seq_len - 1 : seq_len;
  CalibrationSet out;
  for (int64_t start = 0; start + body <= static_cast<int64_t>(ids.size()); start += body) {
    std::vector<int32_t> sample;
    if (bos) sample.push_back(*bos);
    sample.insert(sample.end(), ids.begin() + start, ids.begin() + start + body);
    out.push_back(std::move(sample));
  }
  if (out.empty()) {
    throw InvalidArgument(path + ": the text has " + std::to_string(ids.size()) +
                          " tokens, fewer than one sample of --seq-len " + std::to_string(seq_len));
  }
  return out;
}

std::vector<int32_t> sample_of_row(const nlohmann::json& row, const std::string& where,
                                   const Tokenizer& tok, const std::optional<ChatTemplate>& chat,
                                   const nlohmann::json& specials, int64_t seq_len) {
  if (!row.is_object()) throw InvalidArgument(where + ": expected a JSON object");
  std::vector<int32_t> ids;
  if (row.contains("input_ids")) {
    ids = row.at("input_ids").get<std::vector<int32_t>>();
  } else if (row.contains("messages")) {
    if (!chat) {
      throw InvalidArgument(where + ": `messages` rows need a chat template and the model has none");
    }
    const nlohmann::ordered_json messages = row.at("messages");
    const std::string text = chat->render(messages, false, nlohmann::ordered_json(specials));
    ids = tok.encode(text, false);
  } else if (row.contains("text") && row.at("text").is_string()) {
    ids = tok.encode(row.at("text").get<std::string>(), true);
  } else {
    throw InvalidArgument(where + ": a row needs `text` (string), `messages` or `input_ids`");
  }
  if (static_cast<int64_t>(ids.size()) > seq_len) ids.resize(static_cast<size_t>(seq_len));
  return ids;
}

CalibrationSet rows_of_json(const std::string& path, const std::string& text, bool lines,
                            const Tokenizer& tok, const std::string& model_dir, int64_t seq_len) {
  const std::optional<ChatTemplate> chat = ChatTemplate::from_dir(model_dir);
  const nlohmann::json specials = special_tokens_map(model_dir);
  CalibrationSet out;
  auto add = [&](const nlohmann::json& row, const std::string& where) {
    std::vector<int32_t> ids = sample_of_row(row, where, tok, chat, specials, seq_len);
    if (!ids.empty()) out.push_back(std::move(ids));
  };
  try {
    if (lines) {
      std::istringstream in(text);
      std::string line;
      for (int64_t n = 1; std::getline(in, line); ++n) {
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        add(nlohmann::json::parse(line), path + ":" + std::to_string(n));
      }
    } else {
      const nlohmann::json all = nlohmann::json::parse(text);
      if (!all.is_array()) throw InvalidArgument(path + ": expected a JSON array of rows");
      for (size_t i = 0; i < all.size(); ++i) add(all[i], path + ": row " + std::to_string(i));
    }
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(path + ": not valid JSON: " + e.what());
  }
  return out;
}

CalibrationSet read_ids_file(const std::string& path, const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    return j.at("samples").get<CalibrationSet>();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(path + ": not a calibration ids file ({\"samples\": [[ids]]}): " +
                          e.what());
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<size_t> shuffled_indices(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  uint64_t state = seed;
  for (size_t i = n; i > 1; --i) {
    const size_t j = static_cast<size_t>(splitmix64(state) % i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

CalibrationSet load_calibration(const CalibrationOptions& o, const std::string& model_dir) {
  if (o.num_samples <= 0) throw InvalidArgument("--num-samples must be positive");
  if (o.seq_len < 2) throw InvalidArgument("--seq-len must be at least 2");
  const std::string text = read_file(o.path);
  CalibrationSet all;
  if (o.ids_file) {
    all = read_ids_file(o.path, text);
  } else {
    const Tokenizer tok = Tokenizer::from_dir(model_dir);
    if (ends_with(o.path, ".jsonl")) {
      all = rows_of_json(o.path, text, true, tok, model_dir, o.seq_len);
    } else if (ends_with(o.path, ".json")) {
      all = rows_of_json(o.path, text, false, tok, model_dir, o.seq_len);
    } else {
      all = windows_of_text(o.path, text, tok, o.seq_len);
    }
  }
  if (all.empty()) throw InvalidArgument(o.path + ": no calibration samples");
  CalibrationSet out;
  if (o.ids_file) {
    out = std::move(all);  // already the reference's chosen samples, in their order
    if (static_cast<int64_t>(out.size()) > o.num_samples) out.resize(static_cast<size_t>(o.num_samples));
  } else {
    for (size_t i : shuffled_indices(all.size(), o.seed)) {
      if (static_cast<int64_t>(out.size()) == o.num_samples) break;
      out.push_back(std::move(all[i]));
    }
  }
  if (static_cast<int64_t>(out.size()) < o.num_samples) {
    log_warn(o.path + ": only " + std::to_string(out.size()) + " calibration samples of the " +
             std::to_string(o.num_samples) + " asked for");
  }
  return out;
}

void save_calibration_ids(const CalibrationSet& set, int64_t seq_len, const std::string& path) {
  nlohmann::ordered_json j;
  j["seq_len"] = seq_len;
  j["num_samples"] = set.size();
  j["samples"] = set;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(tmp + ": cannot write");
    out << j.dump() << "\n";
    if (!out) throw IoError(tmp + ": write failed");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace lowbit::quant
