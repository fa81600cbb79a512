#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <queue>

#include "core/cancel.h"
#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tf {

BpeModel::BpeModel(TokenIdMap vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab_) {
    if (id < 0) fail("vocab entry '{}' has a negative id {}", tok, id);
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<size_t>(max_id) + 1);
  for (const auto& [tok, id] : vocab_) id_to_token_[id] = tok;
  merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab_.find(a);
    auto ib = vocab_.find(b);
    if (ia == vocab_.end() || ib == vocab_.end()) {
      fail("merge {} '{} {}' uses a token that is not in the vocab", rank, a, b);
    }
    joined = a + b;
    auto ij = vocab_.find(joined);
    if (ij == vocab_.end())
      fail("merge {} '{} {}' makes '{}', which is not in the vocab", rank, a, b, joined);
    // The first (lowest-ranked) occurrence of a pair wins, as in the reference implementation.
    merges_.emplace(pair_key(ia->second, ib->second),
                    Merge{static_cast<int32_t>(rank), ij->second});
  }
  if (options_.unk_token) {
    auto it = vocab_.find(*options_.unk_token);
    if (it == vocab_.end()) fail("unk_token '{}' is not in the vocab", *options_.unk_token);
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeModel::id_to_token(int32_t id) const {
  static const std::string empty;
  if (id < 0 || id >= id_limit()) return empty;
  return id_to_token_[id];
}

void BpeModel::push_unknown(std::string_view ch, std::vector<int32_t>& syms,
                            bool& last_was_unk) const {
  if (options_.byte_fallback) {
    bool all = true;
    for (unsigned char b : ch) all = all && byte_ids_[b] >= 0;
    if (all) {
      for (unsigned char b : ch) syms.push_back(byte_ids_[b]);
      last_was_unk = false;
      return;
    }
  }
  if (!unk_id_) {
    fail(
        "the text has a character (bytes {}) that the vocabulary cannot represent and the "
        "tokenizer has no unk token",
        ch.size());
  }
  if (!(options_.fuse_unk && last_was_unk)) syms.push_back(*unk_id_);
  last_was_unk = true;
}

size_t BpeModel::max_bytes_per_token() const {
  if (unk_id_ && options_.fuse_unk) return 0;
  size_t longest = unk_id_ || options_.byte_fallback ? 4 : 1;
  for (const std::string& t : id_to_token_) longest = std::max(longest, t.size());
  return longest;
}

void BpeModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > kCacheMaxWordBytes) {
    merge_word(word, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  merge_word(word, out);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kCacheEntries) cache_.clear();
  cache_.emplace(std::string(word), std::vector<int32_t>(out.begin() + before, out.end()));
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // Initial symbols: one per character (or per byte of an unknown character).
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  bool last_was_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t len = unicode::char_length(word, i);
    const std::string_view ch = word.substr(i, len);
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      ids.push_back(it->second);
      last_was_unk = false;
    } else {
      push_unknown(ch, ids, last_was_unk);
    }
    i += len;
  }
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n == 1) {
    out.push_back(ids[0]);
    return;
  }
  // Doubly linked symbols; `alive` marks those not merged into their left neighbour.
  std::vector<int32_t> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int32_t pos;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(pair_key(ids[pos], ids[next[pos]]));
    if (it != merges_.end()) heap.push({it->second.rank, pos});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    check_cancelled();  // one word can be a whole 8 MiB body
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    auto it = merges_.find(pair_key(ids[c.pos], ids[next[c.pos]]));
    if (it == merges_.end() || it->second.rank != c.rank) continue;  // stale
    const int32_t right = next[c.pos];
    ids[c.pos] = it->second.result;
    alive[right] = 0;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    consider(prev[c.pos]);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
}

}  // namespace tf
