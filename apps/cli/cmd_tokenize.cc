// lowbit tokenize DIR --text T / lowbit detokenize DIR --ids [...]: the tokenizer on its own.
#include <cstdio>

#include "command.h"
#include "options.h"
#include "tokenizer/tokenizer.h"

namespace lowbit::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool no_special_tokens = false;
  std::string ids;
  bool skip_special_tokens = false;
};

}  // namespace

void add_tokenize_commands(CLI::App& app, CommandList& commands) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* tokenize = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON list");
  tokenize->add_option("model", options->model, "Model or tokenizer directory")->required();
  tokenize->add_option("--text", options->text, "Text to encode")->required();
  tokenize->add_flag("--no-special-tokens", options->no_special_tokens,
                     "Do not add the post-processor's special tokens (BOS)");
  commands.push_back({tokenize, [options] {
                        Tokenizer tokenizer = Tokenizer::from_dir(options->model);
                        auto ids = tokenizer.encode(options->text, !options->no_special_tokens);
                        std::printf("%s\n", format_id_list(ids).c_str());
                        return 0;
                      }});

  CLI::App* detokenize = app.add_subcommand("detokenize", "Print the text of token ids");
  detokenize->add_option("model", options->model, "Model or tokenizer directory")->required();
  detokenize->add_option("--ids", options->ids, "Token ids, e.g. [1,2,3] or 1,2,3")->required();
  detokenize->add_flag("--skip-special-tokens", options->skip_special_tokens,
                       "Leave out special tokens");
  commands.push_back({detokenize, [options] {
                        Tokenizer tokenizer = Tokenizer::from_dir(options->model);
                        auto ids = parse_id_list(options->ids, "--ids");
                        std::string text = tokenizer.decode(ids, options->skip_special_tokens);
                        std::fwrite(text.data(), 1, text.size(), stdout);
                        std::fputc('\n', stdout);
                        return 0;
                      }});
}

}  // namespace lowbit::cli
