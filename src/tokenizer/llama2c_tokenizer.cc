#include "tokenizer/llama2c_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cancel.h"
#include "core/error.h"
#include "core/mapped_file.h"

namespace tf {
namespace {

constexpr uint32_t kMaxPieceBytes = 1 << 16;

int parse_byte_piece(const std::string& p) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(p[3]), lo = hex(p[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

}  // namespace

std::unique_ptr<Llama2cTokenizer> Llama2cTokenizer::parse(const uint8_t* data, size_t size,
                                                          int64_t vocab_size,
                                                          const std::string& path) {
  // Every llama2.c vocabulary starts with <unk>, BOS and EOS.
  if (vocab_size < 3 || vocab_size > (1 << 24)) {
    fail("'{}': vocab size {} is out of range (3..{})", path, vocab_size, 1 << 24);
  }
  if (size < 4) fail("'{}': too short for a llama2.c tokenizer ({} bytes)", path, size);
  auto tok = std::make_unique<Llama2cTokenizer>();
  size_t off = 4;  // max_token_length: informative only
  tok->pieces_.reserve(vocab_size);
  for (int64_t id = 0; id < vocab_size; ++id) {
    if (size - off < 8) {
      fail("'{}': ends after {} of {} tokens (the model's vocab_size)", path, id, vocab_size);
    }
    float score;
    int32_t len;
    std::memcpy(&score, data + off, 4);
    std::memcpy(&len, data + off + 4, 4);
    off += 8;
    if (len < 0 || static_cast<uint32_t>(len) > kMaxPieceBytes ||
        static_cast<size_t>(len) > size - off) {
      fail("'{}': token {} has an invalid length {}", path, id, len);
    }
    if (!std::isfinite(score)) fail("'{}': token {} has a non-finite score", path, id);
    tok->pieces_.emplace_back(reinterpret_cast<const char*>(data + off), static_cast<size_t>(len));
    tok->scores_.push_back(score);
    off += static_cast<size_t>(len);
  }
  if (off != size) {
    fail("'{}': {} bytes left after {} tokens; does the tokenizer belong to this model?", path,
         size - off, vocab_size);
  }
  return from_pieces(std::move(tok->pieces_), std::move(tok->scores_), path);
}

std::unique_ptr<Llama2cTokenizer> Llama2cTokenizer::from_pieces(std::vector<std::string> pieces,
                                                                std::vector<float> scores,
                                                                const std::string& source,
                                                                const std::vector<int32_t>* types) {
  if (types != nullptr && types->size() != pieces.size())
    fail("'{}': {} token types for {} pieces", source, types->size(), pieces.size());
  if (pieces.size() < 3 || pieces.size() > (1u << 24) || scores.size() != pieces.size())
    fail("'{}': a vocabulary of {} pieces and {} scores (3..{} pieces, a score each)", source,
         pieces.size(), scores.size(), 1 << 24);
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (pieces[id].size() > kMaxPieceBytes)
      fail("'{}': token {} is {} bytes long", source, id, pieces[id].size());
    if (!std::isfinite(scores[id])) fail("'{}': token {} has a non-finite score", source, id);
  }
  auto tok = std::make_unique<Llama2cTokenizer>();
  tok->pieces_ = std::move(pieces);
  tok->scores_ = std::move(scores);
  const size_t n = tok->pieces_.size();
  tok->byte_value_.resize(n);
  tok->special_.assign(n, 0);
  std::fill(std::begin(tok->byte_id_), std::end(tok->byte_id_), -1);
  for (size_t id = 0; id < n; ++id) {
    tok->byte_value_[id] = parse_byte_piece(tok->pieces_[id]);
    const int b = tok->byte_value_[id];
    if (b >= 0 && tok->byte_id_[b] < 0) tok->byte_id_[b] = static_cast<int32_t>(id);
    bool text = id > 2;  // llama2.c: <unk>, BOS and EOS
    if (types != nullptr) {
      const int32_t t = (*types)[id];
      text = t == 1 || t == 4;
      tok->special_[id] = t == 3 ? 1 : 0;
    } else {
      tok->special_[id] = id == 1 || id == 2 ? 1 : 0;
    }
    if (!text || b >= 0) continue;                                  // specials and byte pieces
    tok->ids_.emplace(tok->pieces_[id], static_cast<int32_t>(id));  // the first id of a piece wins
  }
  if (types == nullptr) {
    // run.c's byte fallback: byte b is id 3 + b, whatever piece is there.
    for (int b = 0; b < 256; ++b) tok->byte_id_[b] = 3 + b < static_cast<int>(n) ? 3 + b : -1;
  }
  // Every id is one piece of the text (a merge's piece is its parts' concatenation) or one byte;
  // the bound holds only if every byte has its <0xNN> piece (else bytes are dropped).
  if (std::find(std::begin(tok->byte_id_), std::end(tok->byte_id_), -1) ==
      std::end(tok->byte_id_)) {
    tok->max_bytes_per_token_ = 1;
    for (const std::string& p : tok->pieces_)
      tok->max_bytes_per_token_ = std::max(tok->max_bytes_per_token_, p.size());
  }
  return tok;
}

std::unique_ptr<Llama2cTokenizer> Llama2cTokenizer::load(const std::string& path,
                                                         int64_t vocab_size) {
  MappedFile file = MappedFile::open(path);
  return parse(file.data(), file.size(), vocab_size, path);
}

std::vector<int32_t> Llama2cTokenizer::encode(std::string_view text,
                                              bool add_special_tokens) const {
  std::vector<int32_t> out;
  if (add_special_tokens && add_bos_ && bos_id() >= 0) out.push_back(bos_id());
  std::vector<int32_t> ids;
  auto lookup = [&](const std::string& s) {
    auto it = ids_.find(s);
    return it == ids_.end() ? -1 : it->second;
  };
  auto push_bytes = [&](std::string_view bytes) {
    for (unsigned char b : bytes) {
      if (byte_id_[b] >= 0) ids.push_back(byte_id_[b]);  // byte fallback
    }
  };
  if (!text.empty()) {
    // SentencePiece's add_dummy_prefix, as run.c does it: a separate " " token that merges later.
    const int32_t space = lookup(" ");
    if (space >= 0) ids.push_back(space);
  }
  std::string ch;
  for (size_t i = 0; i < text.size();) {
    check_cancelled();
    size_t len = 1;
    while (len < 4 && i + len < text.size() &&
           (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80) {
      ++len;
    }
    ch.assign(text.substr(i, len));
    const int32_t id = lookup(ch);
    if (id >= 0) {
      ids.push_back(id);
    } else {
      push_bytes(ch);
    }
    i += len;
  }
  merge_pairs(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

// run.c's merge loop, in O(n log n) instead of O(n^2): run.c merges, again and again, the
// adjacent pair whose concatenation is in the vocabulary with the highest score (the leftmost of
// equal scores). Here the symbols are a linked list and every mergeable pair waits in a heap
// ordered by (score, leftmost); a popped pair whose symbols changed since it was pushed is stale
// and skipped. Merging only ever joins neighbours, so the order of the symbols' first positions
// is the order run.c sees, and the same pairs merge in the same order.
void Llama2cTokenizer::merge_pairs(std::vector<int32_t>& ids) const {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  struct Sym {
    int32_t id;
    int prev, next;
  };
  std::vector<Sym> sym(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  struct Pair {
    float score;
    int left, right;
    int32_t left_id, right_id, merged;
  };
  auto worse = [](const Pair& a, const Pair& b) {
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  };
  std::vector<Pair> heap;
  std::string joined;
  auto consider = [&](int l) {
    if (l < 0 || sym[l].next < 0) return;
    const int r = sym[l].next;
    joined = pieces_[sym[l].id];
    joined += pieces_[sym[r].id];
    auto it = ids_.find(joined);
    // run.c starts its search at -1e10: a piece scored that low never merges.
    if (it == ids_.end() || !(scores_[it->second] > -1e10f)) return;
    heap.push_back({scores_[it->second], l, r, sym[l].id, sym[r].id, it->second});
    std::push_heap(heap.begin(), heap.end(), worse);
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  std::vector<bool> dead(static_cast<size_t>(n), false);
  while (!heap.empty()) {
    check_cancelled();
    std::pop_heap(heap.begin(), heap.end(), worse);
    const Pair p = heap.back();
    heap.pop_back();
    if (dead[p.left] || dead[p.right] || sym[p.left].next != p.right ||
        sym[p.left].id != p.left_id || sym[p.right].id != p.right_id)
      continue;  // stale: one side merged since
    sym[p.left].id = p.merged;
    dead[p.right] = true;
    sym[p.left].next = sym[p.right].next;
    if (sym[p.right].next >= 0) sym[sym[p.right].next].prev = p.left;
    consider(sym[p.left].prev);
    consider(p.left);
  }
  ids.clear();
  for (int i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

std::string Llama2cTokenizer::decode_token(int32_t prev, int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(pieces_.size())) {
    fail("token id {} is outside the vocabulary (0..{})", id, pieces_.size() - 1);
  }
  if (is_special(id)) return "";
  if (byte_value_[id] >= 0) return std::string(1, static_cast<char>(byte_value_[id]));
  const std::string& p = pieces_[id];
  // SentencePiece drops the dummy-prefix space of the first piece after BOS.
  if (prev == bos_id() && !p.empty() && p[0] == ' ') return p.substr(1);
  return p;
}

}  // namespace tf

namespace tf {

std::string Llama2cTokenizer::decode_bytes(std::span<const int32_t> ids, bool) const {
  // BOS and EOS never print (run.c stops at them), so skip_special_tokens changes nothing.
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    out += decode_token(prev, id);
    prev = id;
  }
  return out;
}

std::string Llama2cTokenizer::id_to_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return pieces_[id];
}

std::optional<int32_t> Llama2cTokenizer::piece_to_id(std::string_view piece) const {
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (pieces_[i] == piece) return static_cast<int32_t>(i);
  }
  return std::nullopt;
}

}  // namespace tf
