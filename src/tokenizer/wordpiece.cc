#include "tokenizer/wordpiece.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tf {

WordPieceModel::WordPieceModel(TokenIdMap vocab, WordPieceOptions options,
                               const std::string& source)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab_) max_id = std::max(max_id, id);
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [tok, id] : vocab_) id_to_token_[static_cast<size_t>(id)] = tok;
  auto it = vocab_.find(options_.unk_token);
  if (it == vocab_.end())
    fail("{}: WordPiece's unk_token '{}' is not in the vocabulary", source, options_.unk_token);
  unk_id_ = it->second;
}

std::optional<int32_t> WordPieceModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string& WordPieceModel::id_to_token(int32_t id) const {
  static const std::string empty;
  if (id < 0 || id >= id_limit()) return empty;
  return id_to_token_[static_cast<size_t>(id)];
}

void WordPieceModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  // Character boundaries: a piece ends only where a character does.
  std::vector<size_t> ends;
  for (size_t i = 0; i < word.size();) {
    i += unicode::char_length(word, i);
    ends.push_back(std::min(i, word.size()));
  }
  if (ends.size() > options_.max_input_chars_per_word) {
    out.push_back(unk_id_);
    return;
  }
  const size_t mark = out.size();
  std::string candidate;
  size_t start = 0;
  while (start < word.size()) {
    // The longest vocabulary entry from `start`: try every character end, longest first.
    auto first_end = std::upper_bound(ends.begin(), ends.end(), start);
    int32_t found = -1;
    size_t found_end = 0;
    for (auto e = ends.end(); e != first_end;) {
      --e;
      candidate.assign(start > 0 ? options_.continuing_subword_prefix : std::string());
      candidate.append(word.substr(start, *e - start));
      auto it = vocab_.find(candidate);
      if (it != vocab_.end()) {
        found = it->second;
        found_end = *e;
        break;
      }
    }
    if (found < 0) {  // a part no entry covers: the whole word is unknown
      out.resize(mark);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(found);
    start = found_end;
  }
}

TokenIdMap read_wordpiece_vocab(std::string_view text, const std::string& source) {
  TokenIdMap vocab;
  int32_t id = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (id >= (1 << 24)) fail("{}: more than 2^24 tokens", source);
    // A token listed twice maps to its last line, as transformers' load_vocab has it.
    vocab[std::string(line)] = id;
    ++id;
    at = end + 1;
  }
  if (vocab.empty()) fail("{}: the vocabulary is empty", source);
  return vocab;
}

}  // namespace tf
