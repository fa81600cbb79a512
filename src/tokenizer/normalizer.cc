#include "tokenizer/normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/spm_normalizer.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {

using nlohmann::json;

std::string get_string(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string())
    fail("tokenizer.json: normalizer field '{}' must be a string", key);
  return it->get<std::string>();
}

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(const std::string& form) {
    UErrorCode status = U_ZERO_ERROR;
    if (form == "NFC")
      impl_ = icu::Normalizer2::getNFCInstance(status);
    else if (form == "NFD")
      impl_ = icu::Normalizer2::getNFDInstance(status);
    else if (form == "NFKC")
      impl_ = icu::Normalizer2::getNFKCInstance(status);
    else
      impl_ = icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status)) fail(ErrorKind::kInternal, "ICU {} normalizer unavailable", form);
  }
  void normalize(std::string& text) const override {
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString in = icu::UnicodeString::fromUTF8(text);
    if (impl_->isNormalized(in, status) && U_SUCCESS(status)) return;
    status = U_ZERO_ERROR;
    const icu::UnicodeString out = impl_->normalize(in, status);
    if (U_FAILURE(status)) return;  // leave the text as it is rather than lose it
    text.clear();
    out.toUTF8String(text);
  }

 private:
  const icu::Normalizer2* impl_ = nullptr;
};

// BERT's normalizer (Hugging Face's BertNormalizer): control characters dropped and whitespace
// made ' ' (clean_text), spaces around CJK ideographs (handle_chinese_chars), accents removed
// (NFD, then nonspacing marks dropped; strip_accents, by default as lowercase), then lowercase,
// a code point at a time (Rust's char::to_lowercase: İ becomes i + U+0307, Σ is always σ).
class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_(chinese), strip_(strip_accents), lower_(lowercase) {
    UErrorCode status = U_ZERO_ERROR;
    nfd_ = icu::Normalizer2::getNFDInstance(status);
    if (U_FAILURE(status)) fail(ErrorKind::kInternal, "ICU NFD normalizer unavailable");
  }
  static bool is_cjk(UChar32 c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
  }
  void normalize(std::string& text) const override {
    std::u32string cps;
    cps.reserve(text.size());
    for (size_t i = 0; i < text.size();) cps.push_back(unicode::next_code_point(text, i));
    std::u32string a;
    a.reserve(cps.size());
    for (char32_t c : cps) {
      if (clean_text_) {
        if (c == 0 || c == 0xFFFD) continue;
        if (c == '\t' || c == '\n' || c == '\r') {
          a.push_back(' ');
          continue;
        }
        if (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_C_MASK) continue;  // control
        if (u_isUWhiteSpace(static_cast<UChar32>(c))) c = ' ';
      }
      if (chinese_ && is_cjk(static_cast<UChar32>(c))) {
        a.push_back(' ');
        a.push_back(c);
        a.push_back(' ');
        continue;
      }
      a.push_back(c);
    }
    if (strip_) {
      icu::UnicodeString u;
      for (char32_t c : a) u.append(static_cast<UChar32>(c));
      UErrorCode status = U_ZERO_ERROR;
      const icu::UnicodeString d = nfd_->normalize(u, status);
      if (U_SUCCESS(status)) {
        a.clear();
        for (int32_t i = 0; i < d.length();) {
          const UChar32 c = d.char32At(i);
          i += U16_LENGTH(c);
          if (u_charType(c) != U_NON_SPACING_MARK) a.push_back(static_cast<char32_t>(c));
        }
      }
    }
    text.clear();
    for (char32_t c : a) {
      if (lower_) {
        if (c == 0x130) {  // İ: its full lowercase is two code points
          text += "i\xCC\x87";
          continue;
        }
        c = static_cast<char32_t>(u_tolower(static_cast<UChar32>(c)));
      }
      unicode::append_utf8(text, c);
    }
  }

 private:
  bool clean_text_, chinese_, strip_, lower_;
  const icu::Normalizer2* nfd_ = nullptr;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    icu::UnicodeString s = icu::UnicodeString::fromUTF8(text);
    s.toLower();
    text.clear();
    s.toUTF8String(text);
  }
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string p) : prefix_(std::move(p)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }
  bool never_shortens() const override { return true; }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(const json& pattern, std::string content) : content_(std::move(content)) {
    if (pattern.contains("String") && pattern["String"].is_string()) {
      literal_ = pattern["String"].get<std::string>();
      if (literal_.empty()) fail("tokenizer.json: Replace with an empty pattern");
    } else if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      regex_ = std::make_unique<Regex>(pattern["Regex"].get<std::string>());
    } else {
      fail("tokenizer.json: Replace pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}");
    }
  }
  void normalize(std::string& text) const override {
    std::string out;
    size_t last = 0;
    if (regex_) {
      for (auto [b, e] : regex_->find_all(text)) {
        out.append(text, last, b - last);
        out += content_;
        last = e;
      }
    } else {
      for (size_t at = text.find(literal_); at != std::string::npos;
           at = text.find(literal_, last)) {
        out.append(text, last, at - last);
        out += content_;
        last = at + literal_.size();
      }
    }
    out.append(text, last, std::string::npos);
    text = std::move(out);
  }
  bool never_shortens() const override { return !regex_ && content_.size() >= literal_.size(); }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    auto is_space = [](char c) {
      return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
    };
    size_t b = 0, e = text.size();
    if (left_)
      while (b < e && is_space(text[b])) ++b;
    if (right_)
      while (e > b && is_space(text[e - 1])) --e;
    text = text.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }
  bool never_shortens() const override {
    for (const auto& p : parts_)
      if (!p->never_shortens()) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& spec) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object()) fail("tokenizer.json: normalizer must be an object or null");
  const std::string type = get_string(spec, "type");
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    return std::make_unique<UnicodeNormalizer>(type);
  }
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "BertNormalizer") {
    const bool lowercase = spec.value("lowercase", true);
    const json& strip = spec.value("strip_accents", json());
    return std::make_unique<BertNormalizer>(
        spec.value("clean_text", true), spec.value("handle_chinese_chars", true),
        strip.is_boolean() ? strip.get<bool>() : lowercase, lowercase);
  }
  if (type == "Precompiled") {
    // SentencePiece's character map, base64; an empty one maps nothing.
    const std::string charsmap = get_string(spec, "precompiled_charsmap");
    if (charsmap.empty()) return nullptr;
    return make_precompiled_normalizer(charsmap, "tokenizer.json");
  }
  if (type == "Prepend") return std::make_unique<Prepend>(get_string(spec, "prepend"));
  if (type == "Replace") {
    if (!spec.contains("pattern")) fail("tokenizer.json: Replace normalizer without a pattern");
    return std::make_unique<Replace>(spec["pattern"], get_string(spec, "content"));
  }
  if (type == "Strip") {
    return std::make_unique<Strip>(spec.value("strip_left", true), spec.value("strip_right", true));
  }
  if (type == "Sequence") {
    auto it = spec.find("normalizers");
    if (it == spec.end() || !it->is_array())
      fail("tokenizer.json: Sequence normalizer without a list");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& p : *it) {
      if (auto n = make_normalizer(p)) parts.push_back(std::move(n));
    }
    return std::make_unique<Sequence>(std::move(parts));
  }
  fail(ErrorKind::kUnsupported, "tokenizer.json: normalizer type '{}' is not supported", type);
}

}  // namespace tf
