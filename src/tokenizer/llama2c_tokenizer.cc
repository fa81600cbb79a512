#include "tokenizer/llama2c_tokenizer.h"

#include <cmath>
#include <cstring>

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
  tok->byte_value_.resize(tok->pieces_.size());
  for (size_t id = 0; id < tok->pieces_.size(); ++id) {
    tok->byte_value_[id] = parse_byte_piece(tok->pieces_[id]);
    if (id <= 2 || tok->byte_value_[id] >= 0) continue;  // <unk>, BOS, EOS and byte pieces
    tok->ids_.emplace(tok->pieces_[id], static_cast<int32_t>(id));  // the first id of a piece wins
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
  if (add_special_tokens) out.push_back(bos_id());
  std::vector<int32_t> ids;
  auto lookup = [&](const std::string& s) {
    auto it = ids_.find(s);
    return it == ids_.end() ? -1 : it->second;
  };
  auto push_bytes = [&](std::string_view bytes) {
    for (unsigned char b : bytes) {
      // Byte fallback: <0x00> is id 3 in every llama2.c vocabulary.
      if (3 + b < static_cast<int>(pieces_.size())) ids.push_back(3 + b);
    }
  };
  if (!text.empty()) {
    // SentencePiece's add_dummy_prefix, as run.c does it: a separate " " token that merges later.
    const int32_t space = lookup(" ");
    if (space >= 0) ids.push_back(space);
  }
  std::string ch;
  for (size_t i = 0; i < text.size();) {
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
  std::string pair;
  for (;;) {
    float best_score = -1e10f;
    int32_t best_id = -1;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      pair = pieces_[ids[i]];
      pair += pieces_[ids[i + 1]];
      const int32_t id = lookup(pair);
      if (id >= 0 && scores_[id] > best_score) {
        best_score = scores_[id];
        best_id = id;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    ids[best_at] = best_id;
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
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
