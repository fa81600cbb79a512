#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <cctype>

#include "core/cancel.h"
#include "core/error.h"

namespace tf {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool is_word_byte(unsigned char c) {
  return std::isalnum(c) || c == '_' || c >= 0x80;
}

}  // namespace

AddedTokens::AddedTokens(std::vector<AddedToken> tokens, const std::string& source)
    : tokens_(std::move(tokens)) {
  by_first_byte_.assign(256, {});
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.id < 0 || t.id >= (1 << 24))
      fail("{}: added token '{}' has an invalid id", source, t.content);
    if (t.content.empty()) fail("{}: added token {} is empty", source, t.id);
    by_id_[t.id] = i;
    id_limit_ = std::max<int64_t>(id_limit_, t.id + 1);
    by_first_byte_[static_cast<unsigned char>(t.content[0])].push_back(i);
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

const AddedToken* AddedTokens::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedTokens::id_of(std::string_view content) const {
  if (content.empty()) return std::nullopt;
  for (size_t idx : by_first_byte_[static_cast<unsigned char>(content[0])])
    if (tokens_[idx].content == content) return tokens_[idx].id;
  return std::nullopt;
}

bool AddedTokens::strips() const {
  return std::any_of(tokens_.begin(), tokens_.end(),
                     [](const AddedToken& t) { return t.lstrip || t.rstrip; });
}

void AddedTokens::split(std::string_view text, FunctionRef<void(std::string_view, bool)> segment,
                        std::vector<int32_t>& out) const {
  auto emit = [&](size_t from, size_t to) {
    if (to > from) segment(text.substr(from, to - from), from == 0);
  };
  if (tokens_.empty()) {
    emit(0, text.size());
    return;
  }
  size_t seg_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    if ((i & 4095) == 0) check_cancelled();
    const AddedToken* hit = nullptr;
    for (size_t idx : by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const AddedToken& t = tokens_[idx];
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
    if (hit == nullptr) {
      ++i;
      continue;
    }
    size_t seg_end = i;
    if (hit->lstrip)
      while (seg_end > seg_start && is_space(text[seg_end - 1])) --seg_end;
    emit(seg_start, seg_end);
    out.push_back(hit->id);
    i += hit->content.size();
    if (hit->rstrip)
      while (i < text.size() && is_space(text[i])) ++i;
    seg_start = i;
  }
  emit(seg_start, text.size());
}

}  // namespace tf
