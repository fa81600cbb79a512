// tokenflow tokenize: text -> ids (first line: a JSON array; then one "id<TAB>piece" per token),
// or ids -> text with --decode.

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "model/llama2c.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string tokenizer;
  std::string text;
  std::string decode;
  bool no_special = false;
  bool skip_special = false;
};

// The model's vocabulary size when `path` is (or holds) a model, 0 otherwise: llama2.c
// tokenizers need it, and reading a header is enough.
int64_t model_vocab_size(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path cfg = fs::path(path) / "config.json";
    if (!fs::exists(cfg, ec)) return 0;
    return parse_hf_config(read_file(cfg.string()), cfg.string()).vocab_size;
  }
  const fs::path p(path);
  if (p.extension() == ".bin" && p.filename().string().rfind("tok", 0) != 0) {
    MappedFile f = MappedFile::open(path);
    return parse_llama2c(f.data(), f.size(), path).config.vocab_size;
  }
  return 0;
}

int run_tokenize(const TokenizeOptions& o) {
  LoadedTokenizer loaded = load_tokenizer(o.model, model_vocab_size(o.model), o.tokenizer);
  if (!loaded.tokenizer) fail("no tokenizer found in '{}'", o.model);
  const Tokenizer& tok = *loaded.tokenizer;
  if (!o.decode.empty()) {
    const std::vector<int32_t> ids = parse_id_list(o.decode, "--decode", /*allow_json=*/true);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok.vocab_size()) {
        fail("token id {} is outside the vocabulary (0..{})", id, tok.vocab_size() - 1);
      }
    }
    const std::string text = tok.decode(ids, o.skip_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
    return 0;
  }
  const std::vector<int32_t> ids = tok.encode(o.text, !o.no_special);
  std::printf("%s\n", nlohmann::json(ids).dump().c_str());
  for (int32_t id : ids) {
    std::printf("%d\t%s\n", id,
                nlohmann::json(tok.id_to_piece(id))
                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                    .c_str());
  }
  return 0;
}

}  // namespace

std::vector<int32_t> parse_id_list(const std::string& text, const char* what, bool allow_json) {
  std::vector<int32_t> ids;
  if (allow_json) {
    nlohmann::json j = parse_json(text, "--json input");
    if (!j.is_discarded() && j.is_array()) {
      for (const auto& v : j) {
        if (!v.is_number_integer()) fail("{}: '{}' is not a token id", what, v.dump());
        ids.push_back(v.get<int32_t>());
      }
      return ids;
    }
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      while (used < item.size() && item[used] == ' ') ++used;
      if (used != item.size() || v < INT32_MIN || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      fail("{}: '{}' is not a token id", what, item);
    }
  }
  return ids;
}

Action add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  app.add_option("--model,-m", o->model,
                 "model directory or file, or a directory holding only tokenizer files")
      ->required();
  app.add_option("--tokenizer", o->tokenizer, "tokenizer file (default: found with the model)");
  app.add_option("text", o->text, "text to tokenize");
  app.add_option("--decode", o->decode, "ids to turn back into text: 1,2,3 or [1,2,3]");
  app.add_flag("--no-special", o->no_special, "do not add BOS/EOS or other special tokens");
  app.add_flag("--skip-special", o->skip_special, "with --decode: leave special tokens out");
  return [o] { return run_tokenize(*o); };
}

}  // namespace tf::cli
