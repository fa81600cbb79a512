#include "tokenizer/pre_tokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace tf {

const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior parse_behavior(const std::string& s) {
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  fail(ErrorKind::kUnsupported, "tokenizer.json: split behavior '{}' is not supported", s);
}

// Splits one word at the given [begin, end) ranges ("matches") according to behavior.
void split_at(const Word& w, const std::vector<std::pair<size_t, size_t>>& matches,
              SplitBehavior behavior, std::vector<Word>& out) {
  struct Span {
    size_t b, e;
    bool match;
  };
  std::vector<Span> spans;
  size_t last = 0;
  for (auto [b, e] : matches) {
    if (b > last) spans.push_back({last, b, false});
    spans.push_back({b, e, true});
    last = e;
  }
  if (last < w.text.size()) spans.push_back({last, w.text.size(), false});
  // The same folds as the reference implementation, so edge cases (adjacent matches, a match
  // at either end) split identically.
  std::vector<std::pair<size_t, size_t>> parts;
  bool previous_match = false;
  for (const Span& s : spans) {
    switch (behavior) {
      case SplitBehavior::kRemoved:
        if (!s.match) parts.emplace_back(s.b, s.e);
        break;
      case SplitBehavior::kIsolated:
        parts.emplace_back(s.b, s.e);
        break;
      case SplitBehavior::kContiguous:
        if (!parts.empty() && s.match == previous_match) {
          parts.back().second = s.e;
        } else {
          parts.emplace_back(s.b, s.e);
        }
        break;
      case SplitBehavior::kMergedWithPrevious:
        if (s.match && !previous_match && !parts.empty()) {
          parts.back().second = s.e;
        } else {
          parts.emplace_back(s.b, s.e);
        }
        break;
      case SplitBehavior::kMergedWithNext:
        parts.emplace_back(s.b, s.e);  // merged below, scanning from the end
        break;
    }
    previous_match = s.match;
  }
  if (behavior == SplitBehavior::kMergedWithNext) {
    // The mirror image of MergedWithPrevious: a match joins the span after it unless that span
    // is a match too.
    parts.clear();
    bool next_match = false;
    for (size_t k = spans.size(); k-- > 0;) {
      const Span& s = spans[k];
      if (s.match && !next_match && !parts.empty()) {
        parts.back().first = s.b;
      } else {
        parts.emplace_back(s.b, s.e);
      }
      next_match = s.match;
    }
    std::reverse(parts.begin(), parts.end());
  }
  for (auto [b, e] : parts) {
    if (e > b) out.push_back({w.text.substr(b, e - b), w.at_input_start && b == 0});
  }
}

// Inverts matches: the spans between them become the matches.
std::vector<std::pair<size_t, size_t>> invert(const std::vector<std::pair<size_t, size_t>>& m,
                                              size_t n) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t last = 0;
  for (auto [b, e] : m) {
    if (b > last) out.emplace_back(last, b);
    last = e;
  }
  if (last < n) out.emplace_back(last, n);
  return out;
}

class SplitPre final : public PreTokenizer {
 public:
  SplitPre(const json& pattern, SplitBehavior behavior, bool invert)
      : behavior_(behavior), invert_(invert) {
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      regex_ = std::make_unique<Regex>(pattern["Regex"].get<std::string>());
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      literal_ = pattern["String"].get<std::string>();
    } else {
      fail("tokenizer.json: Split pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}");
    }
  }
  void split(std::vector<Word>& words) const override {
    std::vector<Word> out;
    for (const Word& w : words) {
      std::vector<std::pair<size_t, size_t>> m;
      if (regex_) {
        m = regex_->find_all(w.text);
      } else if (!literal_.empty()) {
        for (size_t at = w.text.find(literal_); at != std::string::npos;
             at = w.text.find(literal_, at + literal_.size())) {
          m.emplace_back(at, at + literal_.size());
        }
      }
      if (invert_) m = invert(m, w.text.size());
      split_at(w, m, behavior_, out);
    }
    words = std::move(out);
  }

  bool keeps_all_text() const override { return behavior_ != SplitBehavior::kRemoved; }

 private:
  std::unique_ptr<Regex> regex_;
  std::string literal_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPre final : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(kGpt2SplitPattern) : nullptr) {}
  void split(std::vector<Word>& words) const override {
    std::vector<Word> pieces;
    for (Word& w : words) {
      if (add_prefix_space_ && !w.text.empty() && w.text[0] != ' ') {
        std::string spaced(1, ' ');  // (not insert(0, " "): GCC 12 warns falsely on it)
        spaced += w.text;
        w.text = std::move(spaced);
      }
      if (regex_) {
        split_at(w, regex_->find_all(w.text), SplitBehavior::kIsolated, pieces);
      } else {
        pieces.push_back(std::move(w));
      }
    }
    const auto& alphabet = unicode::bytes_to_unicode();
    for (Word& p : pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char c : p.text) mapped += alphabet[c];
      p.text = std::move(mapped);
    }
    words = std::move(pieces);
  }

  bool keeps_all_text() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class MetaspacePre final : public PreTokenizer {
 public:
  MetaspacePre(std::string replacement, std::string prepend_scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(std::move(prepend_scheme)), split_(split) {}
  void split(std::vector<Word>& words) const override {
    std::vector<Word> out;
    for (Word& w : words) {
      std::string t;
      for (char c : w.text) {
        if (c == ' ') {
          t += replacement_;
        } else {
          t += c;
        }
      }
      const bool prepend = scheme_ == "always" || (scheme_ == "first" && w.at_input_start);
      // Hugging Face prepends nothing to an empty string (NormalizedString::prepend).
      if (prepend && !t.empty() && t.compare(0, replacement_.size(), replacement_) != 0)
        t.insert(0, replacement_);
      Word nw{std::move(t), w.at_input_start};
      if (!split_) {
        out.push_back(std::move(nw));
        continue;
      }
      std::vector<std::pair<size_t, size_t>> m;
      for (size_t at = nw.text.find(replacement_); at != std::string::npos;
           at = nw.text.find(replacement_, at + replacement_.size())) {
        m.emplace_back(at, at + replacement_.size());
      }
      split_at(nw, m, SplitBehavior::kMergedWithNext, out);
    }
    words = std::move(out);
  }

  bool keeps_all_text() const override { return true; }

 private:
  std::string replacement_;
  std::string scheme_;
  bool split_;
};

class DigitsPre final : public PreTokenizer {
 public:
  explicit DigitsPre(bool individual) : individual_(individual), regex_(R"(\p{N})") {}
  void split(std::vector<Word>& words) const override {
    std::vector<Word> out;
    for (const Word& w : words) {
      split_at(w, regex_.find_all(w.text),
               individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, out);
    }
    words = std::move(out);
  }

  bool keeps_all_text() const override { return true; }

 private:
  bool individual_;
  Regex regex_;
};

// Keeps the matches of a pattern as words (keep_matches) or splits at them and drops them.
class RegexWordsPre final : public PreTokenizer {
 public:
  RegexWordsPre(const char* pattern, bool keep_matches) : regex_(pattern), keep_(keep_matches) {}
  void split(std::vector<Word>& words) const override {
    std::vector<Word> out;
    for (const Word& w : words) {
      const auto m = regex_.find_all(w.text);
      if (!keep_) {
        split_at(w, m, SplitBehavior::kRemoved, out);
        continue;
      }
      for (auto [b, e] : m) out.push_back({w.text.substr(b, e - b), w.at_input_start && b == 0});
    }
    words = std::move(out);
  }

 private:
  Regex regex_;
  bool keep_;
};

class SequencePre final : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void split(std::vector<Word>& words) const override {
    for (const auto& p : parts_) p->split(words);
  }

  bool keeps_all_text() const override {
    for (const auto& p : parts_)
      if (!p->keeps_all_text()) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

// BERT's pre-tokenizer: words split at whitespace (removed), then every punctuation character
// (ASCII punctuation and Unicode's P* categories) a word of its own.
class BertPre final : public PreTokenizer {
 public:
  void split(std::vector<Word>& words) const override {
    std::vector<Word> out;
    for (const Word& w : words) {
      size_t start = 0;
      auto flush = [&](size_t end) {
        if (end > start)
          out.push_back({w.text.substr(start, end - start), w.at_input_start && start == 0});
      };
      for (size_t i = 0; i < w.text.size();) {
        const size_t at = i;
        const UChar32 c = static_cast<UChar32>(unicode::next_code_point(w.text, i));
        const bool space = u_isUWhiteSpace(c) || c == '\t' || c == '\n' || c == '\r';
        const bool punct = (c < 128 && std::ispunct(c)) || (U_GET_GC_MASK(c) & U_GC_P_MASK);
        if (space) {
          flush(at);
          start = i;
        } else if (punct) {
          flush(at);
          out.push_back({w.text.substr(at, i - at), w.at_input_start && at == 0});
          start = i;
        }
      }
      flush(w.text.size());
    }
    words = std::move(out);
  }
};

}  // namespace

std::unique_ptr<PreTokenizer> make_byte_level_pre_tokenizer(bool add_prefix_space) {
  return std::make_unique<ByteLevelPre>(add_prefix_space, true);
}

std::string metaspace_prepend_scheme(const json& spec) {
  std::string scheme = "always";
  if (spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string()) {
    scheme = spec["prepend_scheme"].get<std::string>();
  } else if (spec.contains("add_prefix_space") && spec["add_prefix_space"].is_boolean()) {
    scheme = spec["add_prefix_space"].get<bool>() ? "always" : "never";
  }
  if (scheme != "always" && scheme != "first" && scheme != "never") {
    fail("tokenizer.json: Metaspace prepend_scheme '{}' is not always, first or never", scheme);
  }
  return scheme;
}

std::string metaspace_replacement(const json& spec) {
  const json& r = spec.value("replacement", json("\xE2\x96\x81"));
  // Hugging Face's replacement is one char: an empty one would match everywhere.
  if (!r.is_string() || r.get<std::string>().empty() ||
      unicode::char_length(r.get<std::string>(), 0) != r.get<std::string>().size())
    fail("tokenizer.json: Metaspace replacement must be one character");
  return r.get<std::string>();
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& spec) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    fail("tokenizer.json: pre_tokenizer must be an object with a type");
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPre>(spec.value("add_prefix_space", true),
                                          spec.value("use_regex", true));
  }
  if (type == "Split") {
    if (!spec.contains("pattern")) fail("tokenizer.json: Split pre-tokenizer without a pattern");
    return std::make_unique<SplitPre>(spec["pattern"],
                                      parse_behavior(spec.value("behavior", "Isolated")),
                                      spec.value("invert", false));
  }
  if (type == "Metaspace") {
    const std::string scheme = metaspace_prepend_scheme(spec);
    return std::make_unique<MetaspacePre>(metaspace_replacement(spec), scheme,
                                          spec.value("split", true));
  }
  if (type == "BertPreTokenizer") return std::make_unique<BertPre>();
  if (type == "Digits") return std::make_unique<DigitsPre>(spec.value("individual_digits", false));
  if (type == "Whitespace") {
    return std::make_unique<RegexWordsPre>(R"(\w+|[^\w\s]+)", true);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<RegexWordsPre>(R"(\s+)", false);
  }
  if (type == "Sequence") {
    auto it = spec.find("pretokenizers");
    if (it == spec.end() || !it->is_array())
      fail("tokenizer.json: Sequence pre-tokenizer without a list");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : *it) {
      if (auto pt = make_pre_tokenizer(p)) parts.push_back(std::move(pt));
    }
    return std::make_unique<SequencePre>(std::move(parts));
  }
  fail(ErrorKind::kUnsupported, "tokenizer.json: pre_tokenizer type '{}' is not supported", type);
}

}  // namespace tf
