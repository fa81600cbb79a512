#include "tokenizer/spm_normalizer.h"

#include <cstring>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// The next UTF-8 character of `text` as it is, or U+FFFD for one invalid byte.
std::pair<std::string_view, size_t> next_char(std::string_view text) {
  const size_t n = unicode::char_length(text, 0);
  if (n == 1 && static_cast<unsigned char>(text[0]) >= 0x80) return {kReplacementChar, 1};
  return {text.substr(0, n), n};
}

class SentencePieceNormalizer final : public Normalizer {
 public:
  SentencePieceNormalizer(std::unique_ptr<PrecompiledCharsMap> map,
                          SentencePieceNormalizerSpec spec)
      : map_(std::move(map)), spec_(spec) {}

  void normalize(std::string& text) const override {
    std::string_view in = text;
    auto step = [&](std::string_view s) { return map_ ? map_->next(s) : next_char(s); };
    if (spec_.remove_extra_whitespaces) {  // leading spaces
      while (!in.empty()) {
        const auto [piece, consumed] = step(in);
        if (piece != " ") break;
        in.remove_prefix(consumed);
      }
    }
    if (in.empty()) {
      text.clear();
      return;
    }
    const std::string_view space = spec_.escape_whitespaces ? kSpaceSymbol : " ";
    std::string out;
    out.reserve(in.size() + in.size() / 2 + space.size());
    if (spec_.add_dummy_prefix) out += space;
    bool prev_space = spec_.remove_extra_whitespaces;
    while (!in.empty()) {
      auto [piece, consumed] = step(in);
      if (prev_space)
        while (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
      if (!piece.empty()) {
        for (char c : piece) {
          if (c == ' ' && spec_.escape_whitespaces)
            out += kSpaceSymbol;
          else
            out += c;
        }
        prev_space = piece.back() == ' ';
      }
      in.remove_prefix(consumed);
      if (!spec_.remove_extra_whitespaces) prev_space = false;
    }
    if (spec_.remove_extra_whitespaces) {  // trailing spaces
      while (out.size() >= space.size() &&
             std::string_view(out).substr(out.size() - space.size()) == space)
        out.resize(out.size() - space.size());
    }
    text = std::move(out);
  }

 private:
  std::unique_ptr<PrecompiledCharsMap> map_;
  SentencePieceNormalizerSpec spec_;
};

class PrecompiledNormalizer final : public Normalizer {
 public:
  explicit PrecompiledNormalizer(std::unique_ptr<PrecompiledCharsMap> map) : map_(std::move(map)) {}
  void normalize(std::string& text) const override { text = map_->apply(text); }

 private:
  std::unique_ptr<PrecompiledCharsMap> map_;
};

}  // namespace

PrecompiledCharsMap::PrecompiledCharsMap(std::string blob, const std::string& source)
    : blob_(std::move(blob)) {
  if (blob_.size() <= 4)
    fail("{}: precompiled_charsmap of {} bytes is too short", source, blob_.size());
  const auto* b = reinterpret_cast<const unsigned char*>(blob_.data());
  const uint32_t trie_bytes = static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
                              (static_cast<uint32_t>(b[2]) << 16) |
                              (static_cast<uint32_t>(b[3]) << 24);
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes >= blob_.size() - 4)
    fail("{}: precompiled_charsmap's trie of {} bytes does not fit its {}-byte blob", source,
         trie_bytes, blob_.size());
  units_ = trie_bytes / 4;
  replacements_ = 4 + trie_bytes;
}

uint32_t PrecompiledCharsMap::unit(size_t index) const {
  const auto* b = reinterpret_cast<const unsigned char*>(blob_.data()) + 4 + index * 4;
  return static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
         (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24);
}

std::pair<std::string_view, size_t> PrecompiledCharsMap::longest_match(
    std::string_view text) const {
  // Darts-clone's double array: a unit holds a label (bits 0-7, and bit 31 for value units), a
  // has-leaf flag (bit 8) and an offset to its children (bits 10-31, scaled by bit 9); a child
  // for byte c lives at (index ^ offset ^ c) if its label is c; a node with a leaf holds its
  // value (bits 0-30) in the unit at (its index ^ its offset).
  auto offset_of = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
  size_t best_len = 0;
  uint32_t best_value = 0;
  size_t id = offset_of(unit(0));
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0) break;
    id ^= c;
    if (id >= units_) break;
    const uint32_t u = unit(id);
    if ((u & ((1u << 31) | 0xFFu)) != c) break;
    id ^= offset_of(u);
    if (id >= units_) break;
    if ((u >> 8) & 1) {
      best_len = i + 1;
      best_value = unit(id) & ((1u << 31) - 1);
    }
  }
  if (best_len == 0) return {{}, 0};
  const size_t at = replacements_ + best_value;
  if (at >= blob_.size()) return {{}, 0};  // a value past the replacements: treated as no match
  const char* start = blob_.data() + at;
  const void* nul = std::memchr(start, 0, blob_.size() - at);
  const size_t len = nul ? static_cast<const char*>(nul) - start : blob_.size() - at;
  return {std::string_view(start, len), best_len};
}

std::pair<std::string_view, size_t> PrecompiledCharsMap::next(std::string_view text) const {
  auto m = longest_match(text);
  if (m.second > 0) return m;
  return next_char(text);
}

std::string PrecompiledCharsMap::apply(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const auto [piece, consumed] = next(text);
    out += piece;
    text.remove_prefix(consumed);
  }
  return out;
}

std::unique_ptr<Normalizer> make_sentencepiece_normalizer(std::string charsmap_blob,
                                                          SentencePieceNormalizerSpec spec,
                                                          const std::string& source) {
  std::unique_ptr<PrecompiledCharsMap> map;
  if (!charsmap_blob.empty())
    map = std::make_unique<PrecompiledCharsMap>(std::move(charsmap_blob), source);
  return std::make_unique<SentencePieceNormalizer>(std::move(map), spec);
}

std::unique_ptr<Normalizer> make_precompiled_normalizer(std::string_view base64_charsmap,
                                                        const std::string& source) {
  std::string blob = decode_base64(base64_charsmap, source + ": precompiled_charsmap");
  return std::make_unique<PrecompiledNormalizer>(
      std::make_unique<PrecompiledCharsMap>(std::move(blob), source));
}

std::string decode_base64(std::string_view text, const std::string& what) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    const int v = value(c);
    if (v < 0 || padding)
      fail("{}: not base64 (byte 0x{:02X})", what,
           static_cast<unsigned>(static_cast<unsigned char>(c)));
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

}  // namespace tf
