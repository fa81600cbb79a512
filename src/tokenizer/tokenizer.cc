#include "tokenizer/tokenizer.h"

namespace tf {

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  StreamDecoder stream;
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    out += stream.push(decode_token(prev, id));
    prev = id;
  }
  return out + stream.flush();
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

}  // namespace tf
