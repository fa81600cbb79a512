#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/cancel.h"
#include "core/error.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unigram.h"
#include "tokenizer/wordpiece.h"

namespace tf {
namespace {

using nlohmann::json;

// A token id from the file: a JSON integer in 0..2^24-1 (a float such as 1e33, or a value out of
// that range, is an error, never a wrapped or undefined conversion).
int32_t token_id(const json& id, const std::string& source, const char* what) {
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24))
    fail("{}: {} must be a token id (an integer from 0 to 2^24 - 1), got {}", source, what,
         id.dump(-1, ' ', false, json::error_handler_t::replace));
  return static_cast<int32_t>(id.get<int64_t>());
}

TokenIdMap parse_vocab(const json& v, const std::string& source) {
  if (!v.is_object()) fail("{}: model.vocab must be an object of token -> id", source);
  TokenIdMap vocab;
  vocab.reserve(v.size());
  for (const auto& [tok, id] : v.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24)) {
      fail("{}: vocab entry '{}' has an invalid id", source, tok);
    }
    vocab.emplace(tok, static_cast<int32_t>(id.get<int64_t>()));
  }
  return vocab;
}

std::vector<std::pair<std::string, std::string>> parse_merges(const json& m,
                                                              const std::string& source) {
  std::vector<std::pair<std::string, std::string>> merges;
  if (m.is_null()) return merges;
  if (!m.is_array()) fail("{}: model.merges must be a list", source);
  merges.reserve(m.size());
  for (const auto& item : m) {
    if (item.is_string()) {  // "a b"
      const std::string s = item.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos || sp + 1 >= s.size())
        fail("{}: merge '{}' is not two tokens", source, s);
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (item.is_array() && item.size() == 2 && item[0].is_string() && item[1].is_string()) {
      merges.emplace_back(item[0].get<std::string>(), item[1].get<std::string>());
    } else {
      fail("{}: a merge must be \"a b\" or [\"a\", \"b\"]", source);
    }
  }
  return merges;
}

std::unique_ptr<SubwordModel> bpe_model(const json& model, const std::string& source) {
  if (!model.value("continuing_subword_prefix", json()).is_null() &&
      !model["continuing_subword_prefix"].get<std::string>().empty()) {
    fail(ErrorKind::kUnsupported, "{}: BPE continuing_subword_prefix is not supported", source);
  }
  if (!model.value("end_of_word_suffix", json()).is_null() &&
      !model["end_of_word_suffix"].get<std::string>().empty()) {
    fail(ErrorKind::kUnsupported, "{}: BPE end_of_word_suffix is not supported", source);
  }
  if (!model.value("dropout", json()).is_null() && model["dropout"].get<double>() > 0.0) {
    fail(ErrorKind::kUnsupported, "{}: BPE dropout is not supported at inference", source);
  }
  BpeOptions opts;
  opts.byte_fallback = model.value("byte_fallback", false);
  opts.ignore_merges = model.value("ignore_merges", false);
  opts.fuse_unk = model.value("fuse_unk", false);
  if (model.contains("unk_token") && model["unk_token"].is_string())
    opts.unk_token = model["unk_token"].get<std::string>();
  return std::make_unique<BpeModel>(parse_vocab(model.value("vocab", json()), source),
                                    parse_merges(model.value("merges", json()), source), opts);
}

// {"type": "Unigram", "unk_id": 2, "vocab": [["<pad>", 0.0], ["▁the", -3.1], ...],
//  "byte_fallback": false}: ids are the list's order.
std::unique_ptr<SubwordModel> unigram_model(const json& model, const std::string& source) {
  const json& vocab = model.value("vocab", json());
  if (!vocab.is_array())
    fail("{}: a Unigram model's vocab must be a list of [piece, score]", source);
  std::vector<UnigramPiece> pieces;
  pieces.reserve(vocab.size());
  for (const auto& entry : vocab) {
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number())
      fail("{}: Unigram vocab entry {} is not [piece, score]", source, pieces.size());
    pieces.push_back({entry[0].get<std::string>(), entry[1].get<double>(), PieceType::kNormal});
  }
  UnigramOptions opts;
  if (model.contains("unk_id") && !model["unk_id"].is_null())
    opts.unk_id = token_id(model["unk_id"], source, "model.unk_id");
  opts.byte_fallback = model.value("byte_fallback", false);
  return std::make_unique<UnigramModel>(std::move(pieces), opts, source);
}

// One template ("single" or "pair") of TemplateProcessing: special tokens by name, sequences
// "A" / "B", each with its type id.
std::vector<HfTokenizer::TemplatePiece> parse_template(const json& pieces, const json& specials,
                                                       const std::string& source) {
  std::vector<HfTokenizer::TemplatePiece> out;
  if (!pieces.is_array()) fail("{}: a TemplateProcessing template must be a list", source);
  for (const auto& piece : pieces) {
    HfTokenizer::TemplatePiece t;
    if (piece.contains("Sequence")) {
      const json& seq = piece["Sequence"];
      const std::string id = seq.value("id", "A");
      if (id != "A" && id != "B")
        fail("{}: TemplateProcessing sequence '{}' is not A or B", source, id);
      t.sequence = id == "A" ? 0 : 1;
      t.type_id = seq.value("type_id", 0);
    } else if (piece.contains("SpecialToken")) {
      const std::string name = piece["SpecialToken"].value("id", "");
      auto it = specials.find(name);
      if (it == specials.end() || !it->contains("ids"))
        fail("{}: TemplateProcessing names special token '{}' without ids", source, name);
      for (const auto& id : (*it)["ids"])
        t.ids.push_back(token_id(id, source, "a special token's ids"));
      t.type_id = piece["SpecialToken"].value("type_id", 0);
    } else {
      fail("{}: unknown TemplateProcessing piece", source);
    }
    if (t.type_id < 0 || t.type_id > 255) fail("{}: a type_id must be 0..255", source);
    out.push_back(std::move(t));
  }
  return out;
}

// BertProcessing's pair: [CLS] A [SEP] B [SEP], B's tokens of type 1.
std::vector<HfTokenizer::TemplatePiece> bert_pair_template(int32_t cls, int32_t sep) {
  using Piece = HfTokenizer::TemplatePiece;
  return {Piece{-1, {cls}, 0}, Piece{0, {}, 0}, Piece{-1, {sep}, 0}, Piece{1, {}, 1},
          Piece{-1, {sep}, 1}};
}

// The ids a post-processor adds around a single sequence, and its template for a pair.
void parse_post_processor(const json& pp, const std::string& source, std::vector<int32_t>& prefix,
                          std::vector<int32_t>& suffix,
                          std::vector<HfTokenizer::TemplatePiece>& pair) {
  if (pp.is_null()) return;
  const std::string type = pp.value("type", "");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const auto& p : pp.value("processors", json::array()))
      parse_post_processor(p, source, prefix, suffix, pair);
    return;
  }
  using Piece = HfTokenizer::TemplatePiece;
  if (type == "TemplateProcessing") {
    const json& specials = pp.value("special_tokens", json::object());
    bool before = true;
    for (const Piece& t : parse_template(pp.value("single", json::array()), specials, source)) {
      if (t.sequence >= 0) {
        before = false;
        continue;
      }
      for (int32_t id : t.ids) (before ? prefix : suffix).push_back(id);
    }
    if (pp.contains("pair")) pair = parse_template(pp["pair"], specials, source);
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const int32_t cls = token_id(pp.at("cls").at(1), source, "post_processor.cls");
    const int32_t sep = token_id(pp.at("sep").at(1), source, "post_processor.sep");
    prefix.push_back(cls);
    suffix.push_back(sep);
    // BERT: [CLS] A [SEP] B [SEP], B's type 1. RoBERTa: <s> A </s></s> B </s>, every type 0.
    if (type == "BertProcessing")
      pair = bert_pair_template(cls, sep);
    else
      pair = {Piece{-1, {cls}, 0}, Piece{0, {}, 0}, Piece{-1, {sep, sep}, 0}, Piece{1, {}, 0},
              Piece{-1, {sep}, 0}};
    return;
  }
  fail(ErrorKind::kUnsupported, "{}: post_processor type '{}' is not supported", source, type);
}

}  // namespace

std::unique_ptr<HfTokenizer> HfTokenizer::from_json(std::string_view json_text,
                                                    const std::string& source) {
  json j = parse_json(json_text, source);
  if (j.is_discarded()) fail("{}: not valid JSON", source);
  if (!j.is_object()) fail("{}: expected a JSON object", source);
  auto tok = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  std::vector<AddedToken> added;
  try {
    const json& model = j.value("model", json());
    if (!model.is_object()) fail("{}: missing model", source);
    const std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
    if (type == "BPE") {
      tok->model_ = bpe_model(model, source);
    } else if (type == "Unigram") {
      tok->model_ = unigram_model(model, source);
    } else if (type == "WordPiece") {
      WordPieceOptions opts;
      opts.unk_token = model.value("unk_token", "[UNK]");
      opts.continuing_subword_prefix = model.value("continuing_subword_prefix", "##");
      opts.max_input_chars_per_word = model.value("max_input_chars_per_word", size_t{100});
      tok->model_ = std::make_unique<WordPieceModel>(
          parse_vocab(model.value("vocab", json()), source), opts, source);
    } else {
      fail(ErrorKind::kUnsupported,
           "{}: model type '{}' is not supported (BPE, Unigram and WordPiece are)", source, type);
    }
    tok->normalizer_ = make_normalizer(j.value("normalizer", json()));
    tok->pre_tokenizer_ = make_pre_tokenizer(j.value("pre_tokenizer", json()));
    tok->decoder_ = make_decoder(j.value("decoder", json()));
    for (const auto& a : j.value("added_tokens", json::array())) {
      AddedToken t{};
      t.id = token_id(a.at("id"), source, "added_tokens[].id");
      t.content = a.at("content").get<std::string>();
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.single_word = a.value("single_word", false);
      added.push_back(std::move(t));
    }
    parse_post_processor(j.value("post_processor", json()), source, tok->prefix_ids_,
                         tok->suffix_ids_, tok->pair_template_);
  } catch (const json::exception& e) {
    fail("{}: unexpected structure: {}", source, e.what());
  }
  tok->index_added_tokens(std::move(added), source);
  for (int32_t id : tok->prefix_ids_) {
    if (id < 0 || id >= tok->vocab_size_)
      fail("{}: post_processor id {} is outside the vocab", source, id);
  }
  for (int32_t id : tok->suffix_ids_) {
    if (id < 0 || id >= tok->vocab_size_)
      fail("{}: post_processor id {} is outside the vocab", source, id);
  }
  return tok;
}

std::unique_ptr<HfTokenizer> HfTokenizer::from_parts(
    std::unique_ptr<Normalizer> normalizer, std::unique_ptr<PreTokenizer> pre_tokenizer,
    std::unique_ptr<SubwordModel> model, std::unique_ptr<Decoder> decoder,
    std::vector<AddedToken> added, std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
  auto tok = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  tok->normalizer_ = std::move(normalizer);
  tok->pre_tokenizer_ = std::move(pre_tokenizer);
  tok->model_ = std::move(model);
  tok->decoder_ = std::move(decoder);
  tok->prefix_ids_ = std::move(prefix);
  tok->suffix_ids_ = std::move(suffix);
  tok->index_added_tokens(std::move(added), "tokenizer");
  return tok;
}

std::unique_ptr<HfTokenizer> HfTokenizer::from_bert_vocab(const TokenIdMap& vocab,
                                                          const BertTokenizerOptions& o,
                                                          const std::string& source) {
  // Put together in code, not through tokenizer.json text: a vocabulary's tokens need not be
  // valid UTF-8 (a vocab.txt is bytes), which JSON cannot carry.
  auto id_of = [&](const std::string& t) {
    auto it = vocab.find(t);
    if (it == vocab.end()) fail("{}: the special token '{}' is not in the vocabulary", source, t);
    return it->second;
  };
  const int32_t cls = id_of(o.cls), sep = id_of(o.sep);
  std::vector<AddedToken> added;
  for (const std::string& t : {o.pad, o.unk, o.cls, o.sep, o.mask}) {
    auto it = vocab.find(t);
    if (it != vocab.end()) added.push_back({it->second, t, true, false, false, false});
  }
  WordPieceOptions wp;
  wp.unk_token = o.unk;
  const json normalizer = {{"type", "BertNormalizer"},
                           {"clean_text", true},
                           {"handle_chinese_chars", o.chinese_chars},
                           {"strip_accents", o.strip_accents ? json(*o.strip_accents) : json()},
                           {"lowercase", o.lowercase}};
  auto tok =
      from_parts(make_normalizer(normalizer), make_pre_tokenizer({{"type", "BertPreTokenizer"}}),
                 std::make_unique<WordPieceModel>(vocab, wp, source),
                 make_decoder({{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}),
                 std::move(added), {cls}, {sep});
  tok->pair_template_ = bert_pair_template(cls, sep);
  return tok;
}

std::unique_ptr<HfTokenizer> HfTokenizer::from_gpt2_files(const std::string& vocab_path,
                                                          const std::string& merges_path) {
  json v = parse_json(read_file(vocab_path), vocab_path);
  if (v.is_discarded()) fail("'{}': not valid JSON", vocab_path);
  std::vector<std::pair<std::string, std::string>> merges;
  std::istringstream lines(read_file(merges_path));
  std::string line;
  size_t line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= line.size()) {
      fail("'{}' line {}: a merge must be two tokens separated by a space", merges_path, line_no);
    }
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  auto tok = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  tok->model_ =
      std::make_unique<BpeModel>(parse_vocab(v, "'" + vocab_path + "'"), merges, BpeOptions{});
  tok->pre_tokenizer_ = make_byte_level_pre_tokenizer(false);
  tok->decoder_ = make_byte_level_decoder();
  std::vector<AddedToken> added;
  if (auto eot = tok->model_->token_to_id("<|endoftext|>")) {
    added.push_back({*eot, "<|endoftext|>", true, false, false, false});
    tok->bos_id_ = tok->eos_id_ = *eot;
  }
  tok->index_added_tokens(std::move(added), "'" + vocab_path + "'");
  return tok;
}

void HfTokenizer::index_added_tokens(std::vector<AddedToken> added, const std::string& source) {
  added_ = AddedTokens(std::move(added), source);
  vocab_size_ = std::max(model_->id_limit(), added_.id_limit());
  // The bound on bytes per id holds if nothing before the model drops text: normalizers that
  // never shorten, pre-tokenizers that keep every byte, added tokens that strip nothing.
  max_bytes_per_token_ = model_->max_bytes_per_token();
  if ((normalizer_ && !normalizer_->never_shortens()) ||
      (pre_tokenizer_ && !pre_tokenizer_->keeps_all_text()) || added_.strips())
    max_bytes_per_token_ = 0;
  if (max_bytes_per_token_ != 0)
    for (const AddedToken& t : added_.all())
      max_bytes_per_token_ = std::max(max_bytes_per_token_, t.content.size());
}

void HfTokenizer::encode_text(std::string_view text, bool at_input_start,
                              std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string normalized(text);
  if (normalizer_) normalizer_->normalize(normalized);
  std::vector<Word> words{{std::move(normalized), at_input_start}};
  if (pre_tokenizer_) pre_tokenizer_->split(words);
  for (const Word& w : words) {
    check_cancelled();
    model_->encode(w.text, out);
  }
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  if (add_special_tokens) out = prefix_ids_;
  added_.split(
      text, [&](std::string_view segment, bool at_start) { encode_text(segment, at_start, out); },
      out);
  if (add_special_tokens) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

void HfTokenizer::encode_pair(std::string_view a, std::string_view b, std::vector<int32_t>& ids,
                              std::vector<int32_t>& type_ids) const {
  ids.clear();
  type_ids.clear();
  if (pair_template_.empty()) {  // no post-processor: the two one after the other
    Tokenizer::encode_pair(a, b, ids, type_ids);
    return;
  }
  const std::vector<int32_t> seq[2] = {encode(a, false), encode(b, false)};
  for (const TemplatePiece& t : pair_template_) {
    const std::vector<int32_t>& part = t.sequence < 0 ? t.ids : seq[t.sequence];
    ids.insert(ids.end(), part.begin(), part.end());
    type_ids.insert(type_ids.end(), part.size(), t.type_id);
  }
}

std::string HfTokenizer::decode_bytes(std::span<const int32_t> ids,
                                      bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    std::string piece = id_to_piece(id);
    if (!piece.empty()) tokens.push_back(std::move(piece));
  }
  if (decoder_) decoder_->decode(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::string HfTokenizer::id_to_piece(int32_t id) const {
  if (const AddedToken* t = added_.by_id(id)) return t->content;
  return model_->id_to_token(id);
}

std::optional<int32_t> HfTokenizer::piece_to_id(std::string_view piece) const {
  if (auto id = added_.id_of(piece)) return id;
  return model_->token_to_id(piece);
}

bool HfTokenizer::is_special(int32_t id) const {
  const AddedToken* t = added_.by_id(id);
  return t != nullptr && t->special;
}

}  // namespace tf
