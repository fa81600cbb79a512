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
#include "tokenizer/unicode.h"

namespace tf {
namespace {

using nlohmann::json;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool is_word_byte(unsigned char c) {
  return std::isalnum(c) || c == '_' || c >= 0x80;
}

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

// The ids a post-processor adds around a single sequence.
void parse_post_processor(const json& pp, const std::string& source, std::vector<int32_t>& prefix,
                          std::vector<int32_t>& suffix) {
  if (pp.is_null()) return;
  const std::string type = pp.value("type", "");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const auto& p : pp.value("processors", json::array()))
      parse_post_processor(p, source, prefix, suffix);
    return;
  }
  if (type == "TemplateProcessing") {
    const json& specials = pp.value("special_tokens", json::object());
    bool before = true;
    for (const auto& piece : pp.value("single", json::array())) {
      if (piece.contains("Sequence")) {
        before = false;
        continue;
      }
      if (!piece.contains("SpecialToken")) fail("{}: unknown TemplateProcessing piece", source);
      const std::string name = piece["SpecialToken"].value("id", "");
      auto it = specials.find(name);
      if (it == specials.end() || !it->contains("ids")) {
        fail("{}: TemplateProcessing names special token '{}' without ids", source, name);
      }
      for (const auto& id : (*it)["ids"])
        (before ? prefix : suffix).push_back(token_id(id, source, "a special token's ids"));
    }
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix.push_back(token_id(pp.at("cls").at(1), source, "post_processor.cls"));
    suffix.push_back(token_id(pp.at("sep").at(1), source, "post_processor.sep"));
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
  try {
    const json& model = j.value("model", json());
    if (!model.is_object()) fail("{}: missing model", source);
    const std::string type = model.value("type", model.contains("merges") ? "BPE" : "");
    if (type != "BPE") {
      fail(ErrorKind::kUnsupported, "{}: model type '{}' is not supported (BPE is)", source, type);
    }
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
    tok->model_ =
        std::make_unique<BpeModel>(parse_vocab(model.value("vocab", json()), source),
                                   parse_merges(model.value("merges", json()), source), opts);
    tok->normalizer_ = make_normalizer(j.value("normalizer", json()));
    tok->pre_tokenizer_ = make_pre_tokenizer(j.value("pre_tokenizer", json()));
    tok->decoder_ = make_decoder(j.value("decoder", json()));
    for (const auto& a : j.value("added_tokens", json::array())) {
      AddedToken t;
      t.id = token_id(a.at("id"), source, "added_tokens[].id");
      t.content = a.at("content").get<std::string>();
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.single_word = a.value("single_word", false);
      if (t.id < 0 || t.id >= (1 << 24))
        fail("{}: added token '{}' has an invalid id", source, t.content);
      if (t.content.empty()) fail("{}: added token {} is empty", source, t.id);
      tok->added_.push_back(std::move(t));
    }
    parse_post_processor(j.value("post_processor", json()), source, tok->prefix_ids_,
                         tok->suffix_ids_);
  } catch (const json::exception& e) {
    fail("{}: unexpected structure: {}", source, e.what());
  }
  tok->index_added_tokens();
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
  if (auto eot = tok->model_->token_to_id("<|endoftext|>")) {
    tok->added_.push_back({*eot, "<|endoftext|>", true, false, false, false});
    tok->bos_id_ = tok->eos_id_ = *eot;
  }
  tok->index_added_tokens();
  return tok;
}

void HfTokenizer::index_added_tokens() {
  vocab_size_ = model_->id_limit();
  added_by_first_byte_.assign(256, {});
  added_by_id_.clear();
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_id_[added_[i].id] = i;
    vocab_size_ = std::max<int64_t>(vocab_size_, added_[i].id + 1);
    added_by_first_byte_[static_cast<unsigned char>(added_[i].content[0])].push_back(i);
  }
  // The bound on bytes per id holds if nothing before the BPE model drops text: normalizers
  // that never shorten, pre-tokenizers that keep every byte, added tokens that strip nothing.
  max_bytes_per_token_ = model_->max_bytes_per_token();
  if ((normalizer_ && !normalizer_->never_shortens()) ||
      (pre_tokenizer_ && !pre_tokenizer_->keeps_all_text()))
    max_bytes_per_token_ = 0;
  for (const AddedToken& t : added_) {
    if (t.lstrip || t.rstrip) max_bytes_per_token_ = 0;
    if (max_bytes_per_token_ != 0)
      max_bytes_per_token_ = std::max(max_bytes_per_token_, t.content.size());
  }
  for (auto& list : added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
      return added_[a].content.size() > added_[b].content.size();
    });
  }
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
  // Split on added tokens (leftmost, then longest), honouring lstrip/rstrip/single_word.
  size_t seg_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    check_cancelled();
    const AddedToken* hit = nullptr;
    if (!added_.empty()) {
      for (size_t idx : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
        const AddedToken& t = added_[idx];
        if (text.compare(i, t.content.size(), t.content) != 0) continue;
        if (t.single_word) {
          const bool left_ok = i == 0 || !is_word_byte(static_cast<unsigned char>(text[i - 1]));
          const size_t e = i + t.content.size();
          const bool right_ok =
              e >= text.size() || !is_word_byte(static_cast<unsigned char>(text[e]));
          if (!left_ok || !right_ok) continue;
        }
        hit = &t;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t seg_end = i;
    if (hit->lstrip) {
      while (seg_end > seg_start && is_space(text[seg_end - 1])) --seg_end;
    }
    encode_text(text.substr(seg_start, seg_end - seg_start), seg_start == 0, out);
    out.push_back(hit->id);
    i += hit->content.size();
    if (hit->rstrip) {
      while (i < text.size() && is_space(text[i])) ++i;
    }
    seg_start = i;
  }
  encode_text(text.substr(seg_start), seg_start == 0, out);
  if (add_special_tokens) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
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
  if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return added_[it->second].content;
  return model_->id_to_token(id);
}

std::optional<int32_t> HfTokenizer::piece_to_id(std::string_view piece) const {
  for (const auto& t : added_) {
    if (t.content == piece) return t.id;
  }
  return model_->token_to_id(piece);
}

bool HfTokenizer::is_special(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && added_[it->second].special;
}

}  // namespace tf
