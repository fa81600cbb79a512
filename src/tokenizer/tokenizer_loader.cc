#include "tokenizer/tokenizer_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "core/log.h"
#include "core/mapped_file.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/wordpiece.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_json_if_present(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return json();
  json j = parse_json(read_file(path.string()), path.string());
  if (j.is_discarded() || !j.is_object()) fail("'{}': not a valid JSON object", path.string());
  return j;
}

// "bos_token": "<s>" or {"content": "<s>", ...}
std::string token_text(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

std::vector<int32_t> token_ids(const json& cfg, const char* key) {
  std::vector<int32_t> ids;
  auto it = cfg.find(key);
  if (it == cfg.end()) return ids;
  auto add = [&](const json& v) {
    if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (1 << 24)) {
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
  };
  if (it->is_array()) {
    for (const auto& v : *it) add(v);
  } else {
    add(*it);
  }
  return ids;
}

std::string chat_template_of(const json& cfg, const std::string& source) {
  auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    for (const auto& t : *it) {
      if (t.value("name", "") == "default" && t.contains("template") && t["template"].is_string()) {
        return t["template"].get<std::string>();
      }
    }
  }
  fail("{}: chat_template must be a string or a list with a \"default\" entry", source);
}

// BERT's vocab.txt alone (BertTokenizer's files), with tokenizer_config.json's do_lower_case,
// strip_accents, tokenize_chinese_chars and special tokens.
std::unique_ptr<Tokenizer> bert_vocab_txt(const fs::path& file, const json& tcfg) {
  const std::string source = fmt::format("'{}'", file.string());
  const json cfg = tcfg.is_object() ? tcfg : json::object();
  BertTokenizerOptions o;
  o.lowercase = cfg.value("do_lower_case", true);
  if (cfg.contains("strip_accents") && cfg["strip_accents"].is_boolean())
    o.strip_accents = cfg["strip_accents"].get<bool>();
  o.chinese_chars = cfg.value("tokenize_chinese_chars", true);
  auto special = [&](const char* key, std::string& out) {
    const std::string t = token_text(cfg, key);
    if (!t.empty()) out = t;
  };
  special("unk_token", o.unk);
  special("cls_token", o.cls);
  special("sep_token", o.sep);
  special("pad_token", o.pad);
  special("mask_token", o.mask);
  return HfTokenizer::from_bert_vocab(read_wordpiece_vocab(read_file(file.string()), source), o,
                                      source);
}

std::unique_ptr<Tokenizer> load_file(const fs::path& file, int64_t model_vocab_size,
                                     const json& tcfg) {
  const std::string ext = file.extension().string();
  if (file.filename() == "vocab.txt") return bert_vocab_txt(file, tcfg);
  if (ext == ".json") {
    if (file.filename() == "vocab.json" || file.filename() == "encoder.json") {
      const fs::path dir = file.parent_path();
      const fs::path merges =
          fs::exists(dir / "merges.txt") ? dir / "merges.txt" : dir / "vocab.bpe";
      return HfTokenizer::from_gpt2_files(file.string(), merges.string());
    }
    return HfTokenizer::from_json(read_file(file.string()), fmt::format("'{}'", file.string()));
  }
  if (ext == ".model") return SentencePieceTokenizer::load(file.string());
  if (model_vocab_size <= 0) {
    fail("'{}': a llama2.c tokenizer needs the model's vocab size; load it with its model",
         file.string());
  }
  return Llama2cTokenizer::load(file.string(), model_vocab_size);
}

// The tokenizer file to use in a directory, or an empty path.
fs::path find_in_dir(const fs::path& dir) {
  std::error_code ec;
  // spiece.model first: T5's (and ALBERT's, Pegasus's) SentencePiece Unigram model, of which a
  // tokenizer.json beside it is a conversion (a Unigram one), read by the library itself.
  for (const char* name : {"spiece.model", "tokenizer.json", "tokenizer.model", "vocab.json",
                           "encoder.json", "vocab.txt", "tokenizer.bin"}) {
    if (fs::exists(dir / name, ec)) return dir / name;
  }
  std::vector<fs::path> candidates;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("tok", 0) == 0 && entry.path().extension() == ".bin")
      candidates.push_back(entry.path());
  }
  if (candidates.size() > 1)
    fail("several tokenizer files in '{}'; choose one with --tokenizer", dir.string());
  if (!candidates.empty()) return candidates[0];
  // A directory holding one GGUF file: its metadata carries the tokenizer.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".gguf") candidates.push_back(entry.path());
  }
  return candidates.size() == 1 ? candidates[0] : fs::path();
}

// tokenizer_config.json's added_tokens_decoder: {"32099": {"content": "<extra_id_0>",
// "special": true, "lstrip": false, ...}, ...}.
std::vector<AddedToken> added_tokens_decoder(const json& tcfg, const std::string& source) {
  std::vector<AddedToken> out;
  if (!tcfg.is_object() || !tcfg.contains("added_tokens_decoder")) return out;
  const json& d = tcfg["added_tokens_decoder"];
  if (!d.is_object()) fail("{}: added_tokens_decoder must be an object of id -> token", source);
  for (const auto& [key, t] : d.items()) {
    char* end = nullptr;
    const long id = std::strtol(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id >= (1 << 24))
      fail("{}: added_tokens_decoder key '{}' is not a token id", source, key);
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string())
      fail("{}: added_tokens_decoder entry {} has no content", source, key);
    out.push_back({static_cast<int32_t>(id), t["content"].get<std::string>(),
                   t.value("special", false), t.value("lstrip", false), t.value("rstrip", false),
                   t.value("single_word", false)});
  }
  return out;
}

// T5Tokenizer's sentinels: extra_ids (100 unless the config says otherwise) ids after the
// SentencePiece vocabulary, <extra_id_0> the last of them.
std::vector<AddedToken> t5_sentinels(const json& tcfg, const json& mcfg, int64_t pieces,
                                     const std::string& source) {
  std::vector<AddedToken> out;
  const std::string cls = tcfg.is_object() ? tcfg.value("tokenizer_class", "") : "";
  const std::string type = mcfg.is_object() ? mcfg.value("model_type", "") : "";
  const bool t5 = cls.rfind("T5Tokenizer", 0) == 0 || type == "t5" || type == "mt5" ||
                  type == "umt5" || type == "longt5";
  if (!t5) return out;
  int64_t extra = 100;
  if (tcfg.is_object() && tcfg.contains("extra_ids")) {
    const json& e = tcfg["extra_ids"];
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > 10000)
      fail("{}: extra_ids must be a count from 0 to 10000", source);
    extra = e.get<int64_t>();
  }
  for (int64_t k = 0; k < extra; ++k)
    out.push_back({static_cast<int32_t>(pieces + extra - 1 - k), fmt::format("<extra_id_{}>", k),
                   true, false, false, false});
  return out;
}

}  // namespace

LoadedTokenizer load_tokenizer(const std::string& path, int64_t model_vocab_size,
                               const std::string& explicit_path) {
  std::error_code ec;
  const fs::path base = explicit_path.empty() ? fs::path(path) : fs::path(explicit_path);
  if (!fs::exists(base, ec)) fail(ErrorKind::kNotFound, "'{}' does not exist", base.string());
  fs::path dir = fs::is_directory(base, ec) ? base : base.parent_path();
  if (dir.empty()) dir = ".";
  fs::path file;
  if (!fs::is_directory(base, ec) && (!explicit_path.empty() || base.extension() != ".bin" ||
                                      base.filename().string().rfind("tok", 0) == 0)) {
    file = base;  // a tokenizer file named directly
  } else {
    file = find_in_dir(dir);
  }
  LoadedTokenizer out;
  if (file.empty()) return out;
  if (file.extension() == ".gguf") return load_gguf_tokenizer(file.string());
  const json tcfg = read_json_if_present(dir / "tokenizer_config.json");
  out.tokenizer = load_file(file, model_vocab_size, tcfg);
  out.source = file.string();

  const json gcfg = read_json_if_present(dir / "generation_config.json");
  const json mcfg = read_json_if_present(dir / "config.json");
  Tokenizer& tok = *out.tokenizer;
  if (!tcfg.is_null()) {
    out.chat_template = chat_template_of(tcfg, (dir / "tokenizer_config.json").string());
    out.bos_token = token_text(tcfg, "bos_token");
    out.eos_token = token_text(tcfg, "eos_token");
    if (!out.bos_token.empty()) {
      if (auto id = tok.piece_to_id(out.bos_token)) tok.set_bos_id(*id);
    }
    if (!out.eos_token.empty()) {
      if (auto id = tok.piece_to_id(out.eos_token)) tok.set_eos_id(*id);
    }
  }
  // Ids in generation_config.json / config.json win: they are what generate() stops on.
  for (const json* cfg : {&mcfg, &gcfg}) {
    if (cfg->is_null()) continue;
    if (auto b = token_ids(*cfg, "bos_token_id"); !b.empty()) tok.set_bos_id(b[0]);
    if (auto e = token_ids(*cfg, "eos_token_id"); !e.empty()) {
      tok.set_eos_id(e[0]);
      out.stop_ids = e;
    }
  }
  if (out.stop_ids.empty() && tok.eos_id() >= 0) out.stop_ids.push_back(tok.eos_id());
  if (out.bos_token.empty() && tok.bos_id() >= 0) out.bos_token = tok.id_to_piece(tok.bos_id());
  if (out.eos_token.empty() && tok.eos_id() >= 0) out.eos_token = tok.id_to_piece(tok.eos_id());

  // LlamaTokenizerFast rebuilds its post-processor from add_bos_token / add_eos_token.
  const bool has_add_bos =
      tcfg.is_object() && tcfg.contains("add_bos_token") && tcfg["add_bos_token"].is_boolean();
  const bool has_add_eos =
      tcfg.is_object() && tcfg.contains("add_eos_token") && tcfg["add_eos_token"].is_boolean();
  if (auto* hf = dynamic_cast<HfTokenizer*>(out.tokenizer.get())) {
    if (hf->prefix_ids().empty() && hf->suffix_ids().empty() && !has_add_bos && !has_add_eos) {
      // Leave a tokenizer.json without post-processor as it is (GPT-2, Qwen2).
    } else if (has_add_bos || has_add_eos) {
      std::vector<int32_t> prefix = hf->prefix_ids(), suffix = hf->suffix_ids();
      if (has_add_bos) {
        prefix.clear();
        if (tcfg["add_bos_token"].get<bool>() && tok.bos_id() >= 0) prefix.push_back(tok.bos_id());
      }
      if (has_add_eos) {
        suffix.clear();
        if (tcfg["add_eos_token"].get<bool>() && tok.eos_id() >= 0) suffix.push_back(tok.eos_id());
      }
      hf->set_special_affixes(prefix, suffix);
    }
    if (tok.bos_id() < 0 && !hf->prefix_ids().empty()) tok.set_bos_id(hf->prefix_ids()[0]);
  } else if (auto* sp = dynamic_cast<SentencePieceTokenizer*>(out.tokenizer.get())) {
    if (file.filename() == "spiece.model") {
      // T5Tokenizer's file (T5, mT5, flan-t5): no BOS, and the EOS appended to every input.
      sp->set_add_bos(false);
      sp->set_add_eos(true);
    }
    const std::string tcfg_name = (dir / "tokenizer_config.json").string();
    std::vector<AddedToken> added = added_tokens_decoder(tcfg, tcfg_name);
    for (AddedToken& t : t5_sentinels(tcfg, mcfg, sp->vocab_size(), tcfg_name)) {
      const bool listed = std::any_of(added.begin(), added.end(),
                                      [&](const AddedToken& a) { return a.content == t.content; });
      if (!listed) added.push_back(std::move(t));
    }
    if (!added.empty()) sp->set_added_tokens(std::move(added), tcfg_name);
    if (has_add_bos) sp->set_add_bos(tcfg["add_bos_token"].get<bool>());
    if (has_add_eos) sp->set_add_eos(tcfg["add_eos_token"].get<bool>());
  }
  if (model_vocab_size > 0 && tok.vocab_size() > model_vocab_size) {
    // Harmless unless such an id is produced; the model rejects ids outside its vocabulary.
    log::warn("tokenizer '{}' has {} tokens but the model's vocabulary has {}", out.source,
              tok.vocab_size(), model_vocab_size);
  }
  return out;
}

std::unique_ptr<Tokenizer> load_tokenizer_for(const std::string& model_path, int64_t vocab_size,
                                              const std::string& explicit_path) {
  return load_tokenizer(model_path, vocab_size, explicit_path).tokenizer;
}

}  // namespace tf
