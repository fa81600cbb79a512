#include "tokenizer/unigram.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cancel.h"
#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {

constexpr double kUnknownPenalty = 10.0;  // SentencePiece's kUnkPenalty, HF's K_UNK_PENALTY

}  // namespace

UnigramModel::UnigramModel(std::vector<UnigramPiece> pieces, UnigramOptions options,
                           const std::string& source)
    : pieces_(std::move(pieces)), options_(options), source_(source) {
  if (pieces_.empty()) fail("{}: the Unigram vocabulary is empty", source);
  if (pieces_.size() >= (1u << 24))
    fail("{}: the Unigram vocabulary has {} pieces (at most 2^24)", source, pieces_.size());
  if (options_.unk_id && (*options_.unk_id < 0 || *options_.unk_id >= id_limit()))
    fail("{}: unk_id {} is outside the vocabulary of {}", source, *options_.unk_id, id_limit());
  auto in_lattice = [&](const UnigramPiece& p) {
    if (!options_.sentencepiece_lattice) return true;
    return p.type == PieceType::kNormal || p.type == PieceType::kUserDefined ||
           p.type == PieceType::kUnused;
  };
  double min_score = std::numeric_limits<double>::infinity();
  node_piece_.push_back(-1);
  ids_.reserve(pieces_.size());
  for (size_t id = 0; id < pieces_.size(); ++id) {
    const UnigramPiece& p = pieces_[id];
    if (!std::isfinite(p.score))
      fail("{}: piece {} ('{}') has a score that is not a finite number", source, id, p.text);
    ids_[p.text] = static_cast<int32_t>(id);  // a text listed twice: the later id, as HF does
    if (!options_.sentencepiece_lattice || p.type == PieceType::kNormal)
      min_score = std::min(min_score, p.score);
    if (p.text.empty() || !in_lattice(p)) continue;
    int32_t node = 0;
    for (unsigned char c : p.text) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | c;
      auto [it, added] = edges_.try_emplace(key, static_cast<int32_t>(node_piece_.size()));
      if (added) node_piece_.push_back(-1);
      node = it->second;
    }
    node_piece_[static_cast<size_t>(node)] = static_cast<int32_t>(id);
  }
  // Where two pieces share a text, the lattice holds the one the vocabulary maps it to.
  for (auto& id : node_piece_)
    if (id >= 0) id = ids_.find(pieces_[static_cast<size_t>(id)].text)->second;
  unk_score_ = (std::isfinite(min_score) ? min_score : 0.0) - kUnknownPenalty;
  if (options_.sentencepiece_lattice) unk_score_ = static_cast<float>(unk_score_);
  for (int b = 0; b < 256; ++b) {
    auto it = ids_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = it == ids_.end() ? -1 : it->second;
  }
}

int32_t UnigramModel::child(int32_t node, unsigned char byte) const {
  auto it = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == edges_.end() ? -1 : it->second;
}

std::optional<int32_t> UnigramModel::token_to_id(std::string_view token) const {
  auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string& UnigramModel::id_to_token(int32_t id) const {
  static const std::string empty;
  if (id < 0 || id >= id_limit()) return empty;
  return pieces_[static_cast<size_t>(id)].text;
}

void UnigramModel::emit_unknown(std::string_view text, std::vector<int32_t>& out) const {
  // Hugging Face looks the fused text up first (it may be a piece the lattice passed over).
  if (!options_.sentencepiece_lattice) {
    if (auto id = token_to_id(text)) {
      out.push_back(*id);
      return;
    }
  }
  if (options_.byte_fallback) {
    bool ok = true;
    for (unsigned char c : text) ok = ok && byte_ids_[c] >= 0;
    if (ok) {
      for (unsigned char c : text) out.push_back(byte_ids_[c]);
      return;
    }
  }
  if (!options_.unk_id)
    fail("{}: '{}' has no piece in the Unigram vocabulary, which has no unknown piece", source_,
         text);
  out.push_back(*options_.unk_id);
}

void UnigramModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  const size_t n = text.size();
  if (n == 0) return;
  // best[i]: the highest-scoring split of text[0, i): its score, where its last piece starts
  // (-1: not reached) and that piece (kUnknown: a character no piece covers).
  constexpr int32_t kUnknown = -2;
  struct Best {
    double score;
    int32_t start;
    int32_t id;
  };
  std::vector<Best> best(n + 1, Best{0.0, -1, -1});
  best[0].start = 0;
  const int32_t unk_marker = options_.unk_id ? *options_.unk_id : kUnknown;
  // Ties (a run of one letter split into pieces of equal total score) go the way each
  // reference's rounding sends them. Hugging Face sums in double. SentencePiece keeps each
  // position's best score as a float but adds a piece's score in double and compares that sum
  // unrounded (its score expression is a double); an unknown's sum is all float.
  const bool sp = options_.sentencepiece_lattice;
  auto keep = [sp](double v) { return sp ? static_cast<double>(static_cast<float>(v)) : v; };
  for (size_t pos = 0; pos < n;) {
    if ((pos & 4095) == 0) check_cancelled();
    const size_t mblen = std::min(unicode::char_length(text, pos), n - pos);
    const double base = best[pos].score;
    bool single = false;
    int32_t node = 0;
    for (size_t k = pos; k < n; ++k) {
      node = child(node, static_cast<unsigned char>(text[k]));
      if (node < 0) break;
      const int32_t id = node_piece_[static_cast<size_t>(node)];
      if (id < 0) continue;
      const UnigramPiece& p = pieces_[static_cast<size_t>(id)];
      // User-defined pieces score 0 in a SentencePiece lattice (llama.cpp's UGM), above every
      // learned piece: they are whole words the model was given.
      const double s = base + (sp && p.type == PieceType::kUserDefined ? 0.0 : p.score);
      Best& b = best[k + 1];
      if (b.start < 0 || s > b.score) b = {keep(s), static_cast<int32_t>(pos), id};
      if (k + 1 - pos == mblen) single = true;
    }
    if (!single) {
      const double s =
          sp ? static_cast<float>(static_cast<float>(base) + static_cast<float>(unk_score_))
             : base + unk_score_;
      Best& b = best[pos + mblen];
      if (b.start < 0 || s > b.score) b = {s, static_cast<int32_t>(pos), unk_marker};
    }
    pos += mblen;
  }
  // Back from the end; a run of unknowns (an unknown id, or a piece that is the unknown piece)
  // is one.
  std::vector<std::pair<int32_t, int32_t>> path;  // (start, id), last piece first
  for (size_t end = n; end > 0;) {
    const Best& b = best[end];
    path.emplace_back(b.start, b.id);
    end = static_cast<size_t>(b.start);
  }
  size_t end = n;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < path.size();) {
    if (path[i].second != unk_marker) {
      ids.push_back(path[i].second);
      end = static_cast<size_t>(path[i].first);
      ++i;
      continue;
    }
    size_t j = i;
    while (j < path.size() && path[j].second == unk_marker) ++j;
    const size_t start = static_cast<size_t>(path[j - 1].first);
    std::vector<int32_t> unknown;
    emit_unknown(text.substr(start, end - start), unknown);
    ids.insert(ids.end(), unknown.rbegin(), unknown.rend());
    end = start;
    i = j;
  }
  out.insert(out.end(), ids.rbegin(), ids.rend());
}

}  // namespace tf
