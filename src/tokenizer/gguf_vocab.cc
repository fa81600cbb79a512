#include "tokenizer/gguf_vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/gguf.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/llama2c_tokenizer.h"
#include "tokenizer/spm_normalizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unigram.h"
#include "tokenizer/wordpiece.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace tf {

namespace {

using json = nlohmann::json;

// The pre-tokenizer llama.cpp names in tokenizer.ggml.pre, as a tokenizer.json pre_tokenizer:
// a Split by the family's regex, then the byte-level mapping.
json pre_tokenizer_for(const std::string& pre, const std::string& path, bool& ignore_merges) {
  // Llama 3's (tiktoken cl100k's) pattern; Qwen2 splits digits one by one.
  static const char* kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const char* kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  // GPT-4o's (tiktoken o200k_base, gpt-oss's o200k_harmony): words split where an uppercase run
  // meets a lowercase one, contractions as the word's suffix, digits in threes, a punctuation run
  // taking the newlines and '/' after it.
  static const char* kGpt4o =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  auto split_then_bytes = [](const char* regex) {
    return json{{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Split"},
                   {"pattern", {{"Regex", regex}}},
                   {"behavior", "Isolated"},
                   {"invert", false}},
                  {{"type", "ByteLevel"},
                   {"add_prefix_space", false},
                   {"trim_offsets", true},
                   {"use_regex", false}}}}};
  };
  ignore_merges = false;
  if (pre.empty() || pre == "default" || pre == "gpt-2" || pre == "gpt2") {
    return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  }
  if (pre == "llama-bpe" || pre == "llama3") {
    ignore_merges = true;  // Llama 3 takes a whole word that is in the vocabulary as it is
    return split_then_bytes(kLlama3);
  }
  if (pre == "qwen2") return split_then_bytes(kQwen2);
  if (pre == "gpt-4o" || pre == "llama4") return split_then_bytes(kGpt4o);
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "codeshell") {
    // StarCoder's: every digit on its own, then GPT-2's byte-level split.
    return json{{"type", "Sequence"},
                {"pretokenizers",
                 {{{"type", "Digits"}, {"individual_digits", true}},
                  {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  }
  if (pre == "deepseek-llm" || pre == "deepseek-coder") {
    // DeepSeek's tokenizer.json: splits applied in turn (each isolating its matches), then the
    // byte-level mapping. deepseek-llm's letters are the cased letters (Lu, Ll, Lt: its
    // tokenizer spells them out as ranges), its punctuation ASCII's and the full-width forms'.
    std::vector<std::string> splits;
    if (pre == "deepseek-llm") {
      splits = {
          R"([\r\n])",
          R"(\s?\p{L&}+)",
          R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
          R"(\s+$)",
          R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)",
          R"(\p{N}+)"};
    } else {
      splits = {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
                R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)", R"(\p{N})"};
    }
    json seq = json::array();
    for (const std::string& r : splits) {
      seq.push_back({{"type", "Split"},
                     {"pattern", {{"Regex", r}}},
                     {"behavior", "Isolated"},
                     {"invert", false}});
    }
    seq.push_back({{"type", "ByteLevel"},
                   {"add_prefix_space", false},
                   {"trim_offsets", true},
                   {"use_regex", false}});
    return json{{"type", "Sequence"}, {"pretokenizers", seq}};
  }
  fail(ErrorKind::kUnsupported,
       "'{}': tokenizer.ggml.pre '{}' is not supported yet (default, gpt-2, llama-bpe, qwen2, "
       "gpt-4o, smollm, starcoder, deepseek-llm, deepseek-coder are)",
       path, pre);
}

// A byte-level BPE vocabulary (tokenizer.ggml.model "gpt2") as the tokenizer.json it stands
// for, run by the Hugging Face pipeline.
std::unique_ptr<Tokenizer> gpt2_tokenizer(const GgufFile& f, const std::string& path,
                                          const std::vector<std::string>& tokens, uint64_t bos,
                                          bool add_bos) {
  const std::vector<std::string> merges = f.get_strings("tokenizer.ggml.merges");
  std::vector<double> types;
  if (f.find("tokenizer.ggml.token_type")) types = f.get_numbers("tokenizer.ggml.token_type");
  if (!types.empty() && types.size() != tokens.size())
    fail("'{}': tokenizer.ggml.token_type has {} entries for {} tokens", path, types.size(),
         tokens.size());
  bool ignore_merges = false;
  const json pre = pre_tokenizer_for(f.get_string("tokenizer.ggml.pre", ""), path, ignore_merges);
  json vocab = json::object();
  json added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    // Byte-level tokens are text in GPT-2's byte alphabet (the file is read through JSON).
    if (unicode::sanitize_utf8(tokens[id]) != tokens[id])
      fail("'{}': token {} of the gpt2 vocabulary is not valid UTF-8", path, id);
    // llama.cpp's token types: 3 control, 4 user-defined: matched before the BPE, whole.
    const int type = types.empty() ? 1 : static_cast<int>(types[id]);
    if (type == 3 || type == 4) {
      added.push_back({{"id", id},
                       {"content", tokens[id]},
                       {"special", type == 3},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", type == 4}});
    }
    vocab[tokens[id]] = id;
  }
  json j = {{"model",
             {{"type", "BPE"},
              {"vocab", std::move(vocab)},
              {"merges", merges},
              {"ignore_merges", ignore_merges}}},
            {"pre_tokenizer", pre},
            {"decoder", {{"type", "ByteLevel"}}},
            {"added_tokens", std::move(added)}};
  if (add_bos) {
    const std::string& b = tokens.at(bos);
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single",
                            {{{"SpecialToken", {{"id", b}, {"type_id", 0}}}},
                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                           {"special_tokens", {{b, {{"id", b}, {"ids", {bos}}, {"tokens", {b}}}}}}};
  }
  return HfTokenizer::from_json(j.dump(), path);
}

// Every id that ends a generation, as llama.cpp collects them: EOS, the eot / eom ids where the
// file names them, and the chat families' turn ends found in the vocabulary by text (Llama 3's
// <|eot_id|> and <|eom_id|>, ChatML's <|im_end|> for Qwen, Phi's <|end|>, Gemma's <end_of_turn>,
// <|endoftext|>), where the file marks them as control tokens (or has no token types). A
// Qwen3 base GGUF whose EOS is <|endoftext|> then also stops at the end of a chat turn.
std::vector<int32_t> end_of_generation_ids(const GgufFile& f,
                                           const std::vector<std::string>& tokens,
                                           const std::vector<int32_t>& types, uint64_t eos) {
  std::vector<int32_t> ids = {static_cast<int32_t>(eos)};
  const auto add = [&](uint64_t id) {
    if (id < tokens.size() &&
        std::find(ids.begin(), ids.end(), static_cast<int32_t>(id)) == ids.end())
      ids.push_back(static_cast<int32_t>(id));
  };
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (f.find(key)) add(f.get_uint(key));
  static const char* kTurnEnds[] = {"<|eot_id|>",    "<|eom_id|>",    "<|im_end|>", "<|end|>",
                                    "<end_of_turn>", "<|endoftext|>", "<|return|>"};
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!types.empty() && types[i] != 3) continue;  // 3: control
    for (const char* t : kTurnEnds)
      if (tokens[i] == t) add(i);
  }
  return ids;
}

std::vector<int32_t> token_types(const GgufFile& f, size_t n, const std::string& path) {
  std::vector<int32_t> types;
  if (!f.find("tokenizer.ggml.token_type")) return types;
  for (double t : f.get_numbers("tokenizer.ggml.token_type"))
    types.push_back(static_cast<int32_t>(t));
  if (types.size() != n)
    fail("'{}': tokenizer.ggml.token_type has {} entries for {} tokens", path, types.size(), n);
  return types;
}

LoadedTokenizer gpt2_vocab(const GgufFile& f, const std::string& path) {
  const std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens");
  const uint64_t bos = f.get_uint("tokenizer.ggml.bos_token_id", 0);
  const uint64_t eos = f.get_uint("tokenizer.ggml.eos_token_id", 0);
  if (bos >= tokens.size() || eos >= tokens.size())
    fail("'{}': BOS {} or EOS {} is outside the vocabulary of {}", path, bos, eos, tokens.size());
  LoadedTokenizer out;
  out.tokenizer =
      gpt2_tokenizer(f, path, tokens, bos, f.get_bool("tokenizer.ggml.add_bos_token", false));
  out.tokenizer->set_bos_id(static_cast<int32_t>(bos));
  out.tokenizer->set_eos_id(static_cast<int32_t>(eos));
  out.bos_token = tokens[bos];
  out.eos_token = tokens[eos];
  out.source = path;
  out.chat_template = f.get_string("tokenizer.chat_template", "");
  out.stop_ids = end_of_generation_ids(f, tokens, token_types(f, tokens.size(), path), eos);
  return out;
}

// tokenizer.ggml.model "t5" (llama.cpp's UGM): a SentencePiece Unigram vocabulary with pieces,
// scores and types, the model's precompiled character map and its whitespace flags; no BOS, the
// EOS appended. Run as SentencePiece runs it: the normalizer over each text between special
// tokens, then Viterbi over the whole normalized text.
LoadedTokenizer t5_vocab(const GgufFile& f, const std::string& path) {
  const std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens");
  const std::vector<double> scores = f.get_numbers("tokenizer.ggml.scores");
  if (scores.size() != tokens.size())
    fail("'{}': tokenizer.ggml.scores has {} entries for {} tokens", path, scores.size(),
         tokens.size());
  const std::vector<int32_t> types = token_types(f, tokens.size(), path);
  const uint64_t eos = f.get_uint("tokenizer.ggml.eos_token_id", 1);
  const uint64_t unk = f.get_uint("tokenizer.ggml.unknown_token_id", 2);
  if (eos >= tokens.size() || unk >= tokens.size())
    fail("'{}': EOS {} or unknown {} is outside the vocabulary of {}", path, eos, unk,
         tokens.size());
  std::optional<uint64_t> bos;
  if (f.find("tokenizer.ggml.bos_token_id")) {
    bos = f.get_uint("tokenizer.ggml.bos_token_id");
    if (*bos >= tokens.size())
      fail("'{}': BOS {} is outside the vocabulary of {}", path, *bos, tokens.size());
  }
  std::string charsmap;
  if (const GgufValue* v = f.find("tokenizer.ggml.precompiled_charsmap")) {
    if (v->type != GgufType::kArray ||
        (v->item_type != GgufType::kUint8 && v->item_type != GgufType::kInt8))
      fail("'{}': tokenizer.ggml.precompiled_charsmap must be an array of bytes", path);
    charsmap.assign(v->raw.begin(), v->raw.end());
  }
  SentencePieceNormalizerSpec spec;
  spec.add_dummy_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", false);
  spec.remove_extra_whitespaces = f.get_bool("tokenizer.ggml.remove_extra_whitespaces", false);
  std::vector<UnigramPiece> pieces;
  std::vector<AddedToken> added;
  pieces.reserve(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int32_t type = types.empty() ? 1 : types[id];
    if (type < 1 || type > 6)
      fail("'{}': token {} has type {} (SentencePiece's are 1 to 6)", path, id, type);
    pieces.push_back({tokens[id], scores[id], static_cast<PieceType>(type)});
    // Control, unknown and user-defined pieces are matched whole in the text, before the
    // normalizer (llama.cpp's special-token pass; SentencePiece's user-defined matcher).
    if ((type == 2 || type == 3 || type == 4) && !tokens[id].empty())
      added.push_back({static_cast<int32_t>(id), tokens[id], type != 4, false, false, false});
  }
  // T5's sentinels: T5Tokenizer names the 100 ids after SentencePiece's <extra_id_99> ..
  // <extra_id_0>; llama.cpp's converter writes them as [PAD<id>] placeholders (unused pieces).
  if (f.get_string("general.architecture", "").rfind("t5", 0) == 0) {
    size_t first = tokens.size();
    while (first > 0 && tokens[first - 1] == fmt::format("[PAD{}]", first - 1)) --first;
    if (tokens.size() - first >= 100) {
      for (size_t k = 0; k < 100; ++k) {
        const size_t id = first + 99 - k;
        added.push_back(
            {static_cast<int32_t>(id), fmt::format("<extra_id_{}>", k), true, false, false, false});
      }
    }
  }
  UnigramOptions opts;
  opts.unk_id = static_cast<int32_t>(unk);
  opts.sentencepiece_lattice = true;
  opts.byte_fallback = std::any_of(types.begin(), types.end(), [](int32_t t) { return t == 6; });
  auto model = std::make_unique<UnigramModel>(std::move(pieces), opts, "'" + path + "'");
  std::vector<int32_t> prefix, suffix;
  if (f.get_bool("tokenizer.ggml.add_bos_token", false) && bos)
    prefix.push_back(static_cast<int32_t>(*bos));
  if (f.get_bool("tokenizer.ggml.add_eos_token", true)) suffix.push_back(static_cast<int32_t>(eos));
  const json decoder = {{"type", "Sequence"},
                        {"decoders",
                         {{{"type", "ByteFallback"}},
                          {{"type", "Metaspace"},
                           {"replacement", "\xE2\x96\x81"},
                           {"prepend_scheme", spec.add_dummy_prefix ? "always" : "never"}}}}};
  auto tok = HfTokenizer::from_parts(
      make_sentencepiece_normalizer(std::move(charsmap), spec, "'" + path + "'"), nullptr,
      std::move(model), make_decoder(decoder), std::move(added), std::move(prefix),
      std::move(suffix));
  if (bos) tok->set_bos_id(static_cast<int32_t>(*bos));
  tok->set_eos_id(static_cast<int32_t>(eos));
  LoadedTokenizer out;
  out.stop_ids = end_of_generation_ids(f, tokens, types, eos);
  if (bos) out.bos_token = tokens[*bos];
  out.eos_token = tokens[eos];
  out.tokenizer = std::move(tok);
  out.source = path;
  out.chat_template = f.get_string("tokenizer.chat_template", "");
  return out;
}

// tokenizer.ggml.model "bert" (llama.cpp's WPM): llama.cpp's converter writes a word's first
// piece with a leading U+2581 and a continuation without its "##" ("phantom space"); special
// tokens ([CLS], ...) as they are. Read back into BERT's vocabulary and run as BertTokenizer
// (uncased: llama.cpp lowercases every input).
LoadedTokenizer bert_vocab(const GgufFile& f, const std::string& path) {
  const std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens");
  static const std::string kSpace = "\xE2\x96\x81";
  TokenIdMap vocab;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& t = tokens[id];
    std::string word;
    if (t.size() >= 2 && t.front() == '[' && t.back() == ']')
      word = t;
    else if (t.rfind(kSpace, 0) == 0)
      word = t.substr(kSpace.size());
    else
      word = "##" + t;
    vocab[word] = static_cast<int32_t>(id);
  }
  BertTokenizerOptions o;
  auto name_of = [&](const char* key, std::string& out) {
    if (!f.find(key)) return;
    const uint64_t id = f.get_uint(key);
    if (id >= tokens.size())
      fail("'{}': {} {} is outside the vocabulary of {}", path, key, id, tokens.size());
    out = tokens[id];
  };
  name_of("tokenizer.ggml.unknown_token_id", o.unk);
  name_of("tokenizer.ggml.bos_token_id", o.cls);  // llama.cpp keeps [CLS] as BOS
  name_of("tokenizer.ggml.seperator_token_id", o.sep);
  name_of("tokenizer.ggml.padding_token_id", o.pad);
  name_of("tokenizer.ggml.mask_token_id", o.mask);
  LoadedTokenizer out;
  out.tokenizer = HfTokenizer::from_bert_vocab(vocab, o, "'" + path + "'");
  out.source = path;
  return out;
}

}  // namespace

LoadedTokenizer load_gguf_tokenizer(const GgufFile& f, const std::string& path) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model == "gpt2") return gpt2_vocab(f, path);
  if (model == "t5") return t5_vocab(f, path);
  if (model == "bert") return bert_vocab(f, path);
  if (model != "llama") {
    fail(ErrorKind::kUnsupported,
         "'{}': tokenizer.ggml.model '{}' is not supported yet (llama, gpt2, t5 and bert are)",
         path, model);
  }
  std::vector<std::string> pieces = f.get_strings("tokenizer.ggml.tokens");
  std::vector<double> scores = f.get_numbers("tokenizer.ggml.scores");
  if (scores.size() != pieces.size())
    fail("'{}': tokenizer.ggml.scores has {} entries for {} tokens", path, scores.size(),
         pieces.size());
  const uint64_t bos = f.get_uint("tokenizer.ggml.bos_token_id", 1);
  const uint64_t eos = f.get_uint("tokenizer.ggml.eos_token_id", 2);
  if (bos >= pieces.size() || eos >= pieces.size())
    fail("'{}': BOS {} or EOS {} is outside the vocabulary of {}", path, bos, eos, pieces.size());
  std::vector<int32_t> types = token_types(f, pieces.size(), path);
  LoadedTokenizer out;
  out.stop_ids = end_of_generation_ids(f, pieces, types, eos);
  out.bos_token = pieces[bos];
  out.eos_token = pieces[eos];
  // SentencePiece writes a space as U+2581; the llama2.c tokenizer holds plain spaces.
  static const std::string kSpace = "\xe2\x96\x81";
  for (std::string& p : pieces) {
    if (p.find(kSpace) == std::string::npos) continue;
    std::string plain;
    for (size_t i = 0; i < p.size();) {
      if (p.compare(i, kSpace.size(), kSpace) == 0) {
        plain += ' ';
        i += kSpace.size();
      } else {
        plain += p[i++];
      }
    }
    p = std::move(plain);
  }
  std::vector<float> fscores(scores.begin(), scores.end());
  auto tok = Llama2cTokenizer::from_pieces(std::move(pieces), std::move(fscores), path,
                                           types.empty() ? nullptr : &types);
  tok->set_bos_id(static_cast<int32_t>(bos));
  tok->set_eos_id(static_cast<int32_t>(eos));
  tok->set_add_bos(f.get_bool("tokenizer.ggml.add_bos_token", true));
  out.tokenizer = std::move(tok);
  out.source = path;
  out.chat_template = f.get_string("tokenizer.chat_template", "");
  return out;
}

LoadedTokenizer load_gguf_tokenizer(const std::string& path) {
  const MappedFile file = MappedFile::open(path);
  return load_gguf_tokenizer(parse_gguf(file.data(), file.size(), path), path);
}

}  // namespace tf
