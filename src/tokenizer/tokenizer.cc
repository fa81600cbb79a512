#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace tf {

void Tokenizer::encode_pair(std::string_view a, std::string_view b, std::vector<int32_t>& ids,
                            std::vector<int32_t>& type_ids) const {
  ids = encode(a, true);
  type_ids.assign(ids.size(), 0);
  const std::vector<int32_t> second = encode(b, false);
  ids.insert(ids.end(), second.begin(), second.end());
  type_ids.resize(ids.size(), 1);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return unicode::sanitize_utf8(decode_bytes(ids, skip_special_tokens));
}

std::vector<std::string> Tokenizer::vocabulary_bytes() const {
  // An anchor: a plain token that decodes to bytes of its own. A token decoded after it adds
  // exactly its mid-text bytes.
  int32_t anchor = -1;
  std::string anchor_bytes;
  for (const char* candidate : {"a",
                                "\xE2\x96\x81"
                                "a",
                                "\xC4\xA0"
                                "a",
                                "e", " a"}) {
    if (auto id = piece_to_id(candidate); id && !is_special(*id)) {
      const int32_t one[] = {*id};
      anchor_bytes = decode_bytes(one, true);
      if (!anchor_bytes.empty()) {
        anchor = *id;
        break;
      }
    }
  }
  std::vector<std::string> out(static_cast<size_t>(vocab_size()));
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (is_special(id)) continue;
    if (anchor < 0) {
      const int32_t one[] = {id};
      out[static_cast<size_t>(id)] = decode_bytes(one, true);
      continue;
    }
    const int32_t two[] = {anchor, id};
    std::string both = decode_bytes(two, true);
    if (both.compare(0, anchor_bytes.size(), anchor_bytes) == 0) both.erase(0, anchor_bytes.size());
    out[static_cast<size_t>(id)] = std::move(both);
  }
  return out;
}

namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";

// Length of the UTF-8 sequence a lead byte starts, or 0 if it cannot start one.
int utf8_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

bool valid_continuation(unsigned char lead, int index, unsigned char c) {
  if ((c & 0xC0) != 0x80) return false;
  if (index != 1) return true;
  // Exclude overlong forms, surrogates and code points above U+10FFFF.
  if (lead == 0xE0) return c >= 0xA0;
  if (lead == 0xED) return c <= 0x9F;
  if (lead == 0xF0) return c >= 0x90;
  if (lead == 0xF4) return c <= 0x8F;
  return true;
}

}  // namespace

std::string StreamDecoder::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const auto lead = static_cast<unsigned char>(pending_[i]);
    const int len = utf8_length(lead);
    if (len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    int have = 1;
    bool broken = false;
    while (have < len && i + have < pending_.size()) {
      if (!valid_continuation(lead, have, static_cast<unsigned char>(pending_[i + have]))) {
        broken = true;
        break;
      }
      ++have;
    }
    if (broken) {
      out += kReplacement;
      i += have;
      continue;
    }
    if (have < len) break;  // incomplete: wait for more bytes
    out.append(pending_, i, len);
    i += len;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = push("");
  if (!pending_.empty()) {
    out += kReplacement;
    pending_.clear();
  }
  return out;
}

// A window that starts a few tokens back is enough context for every decoder we support.
constexpr size_t kContextTokens = 5;

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               std::span<const int32_t> context,
                                               bool skip_special_tokens)
    : tokenizer_(tokenizer),
      skip_special_(skip_special_tokens),
      ids_(context.begin(), context.end()) {
  read_offset_ = ids_.size();
  prefix_offset_ = ids_.size() > kContextTokens ? ids_.size() - kContextTokens : 0;
}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::string prefix = tokenizer_.decode_bytes(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string full = tokenizer_.decode_bytes(all.subspan(prefix_offset_), skip_special_);
  if (full.size() <= prefix.size() || unicode::ends_with_incomplete_utf8(full)) return "";
  // The window's text only grows at its end, except when a decoder rewrites the window's start;
  // then fall back to the common prefix so nothing is emitted twice.
  size_t common = 0;
  while (common < prefix.size() && prefix[common] == full[common]) ++common;
  std::string fresh = full.substr(common);
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return unicode::sanitize_utf8(fresh);
}

std::string IncrementalDetokenizer::flush() {
  if (read_offset_ == ids_.size()) return "";
  const std::span<const int32_t> all(ids_);
  const std::string prefix = tokenizer_.decode_bytes(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string full = tokenizer_.decode_bytes(all.subspan(prefix_offset_), skip_special_);
  read_offset_ = ids_.size();
  if (full.size() <= prefix.size()) return "";
  return unicode::sanitize_utf8(full.substr(prefix.size()));
}

}  // namespace tf
