#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace tf {
namespace {

using nlohmann::json;

class ByteLevelDec final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::string bytes;
      bool ok = true;
      for (size_t i = 0; i < t.size() && ok;) {
        const int b = unicode::unicode_to_byte(unicode::next_code_point(t, i));
        if (b < 0) ok = false;
        bytes += static_cast<char>(b);
      }
      // A token with characters outside the byte alphabet (an added token) stays as it is.
      if (ok) t = std::move(bytes);
    }
  }
};

// Every occurrence of `from` (not empty) in s replaced with `to`, left to right.
void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t last = 0;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, last)) {
    out.append(s, last, at - last);
    out += to;
    last = at + from.size();
  }
  out.append(s, last, std::string::npos);
  s = std::move(out);
}

class ReplaceDec final : public Decoder {
 public:
  ReplaceDec(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {
    if (from_.empty()) fail("tokenizer.json: Replace decoder with an empty pattern");
  }
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) replace_all(t, from_, to_);
  }

 private:
  std::string from_, to_;
};

int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

class ByteFallbackDec final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      const int b = byte_token_value(t);
      if (b >= 0) t = std::string(1, static_cast<char>(b));
    }
  }
};

class FuseDec final : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDec final : public Decoder {
 public:
  StripDec(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t b = 0, e = t.size();
      for (int i = 0; i < start_ && t.compare(b, content_.size(), content_) == 0 && b < e; ++i) {
        b += content_.size();
      }
      for (int i = 0; i < stop_ && e >= b + content_.size() &&
                      t.compare(e - content_.size(), content_.size(), content_) == 0;
           ++i) {
        e -= content_.size();
      }
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class MetaspaceDec final : public Decoder {
 public:
  MetaspaceDec(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && strip_first_)) out += ' ';  // as the reference: all of token 0's
          k += replacement_.size();
        } else {
          out += t[k++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

// WordPiece's decoder: a piece with the prefix joins the one before, any other is a new word;
// cleanup puts punctuation and English contractions back against their word.
class WordPieceDec final : public Decoder {
 public:
  WordPieceDec(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (!prefix_.empty() && t.compare(0, prefix_.size(), prefix_) == 0)
          t.erase(0, prefix_.size());
        else
          t.insert(t.begin(), ' ');
      }
      if (cleanup_) t = cleanup(t);
    }
  }
  static std::string cleanup(std::string s) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) replace_all(s, from, to);
    return s;
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class SequenceDec final : public Decoder {
 public:
  explicit SequenceDec(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

std::string pattern_string(const json& spec) {
  auto it = spec.find("pattern");
  if (it == spec.end() || !it->is_object() || !it->contains("String") ||
      !(*it)["String"].is_string()) {
    fail(ErrorKind::kUnsupported, "tokenizer.json: Replace decoder supports only String patterns");
  }
  return (*it)["String"].get<std::string>();
}

}  // namespace

std::unique_ptr<Decoder> make_byte_level_decoder() {
  return std::make_unique<ByteLevelDec>();
}

std::unique_ptr<Decoder> make_decoder(const json& spec) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    fail("tokenizer.json: decoder must be an object with a type");
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDec>();
  if (type == "Replace")
    return std::make_unique<ReplaceDec>(pattern_string(spec), spec.value("content", ""));
  if (type == "WordPiece")
    return std::make_unique<WordPieceDec>(spec.value("prefix", "##"), spec.value("cleanup", true));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDec>();
  if (type == "Fuse") return std::make_unique<FuseDec>();
  if (type == "Strip") {
    // How many characters to strip at each end: a small count (a float or 1e40 is refused,
    // never converted).
    auto count = [&](const char* key) {
      const json& v = spec.value(key, json(0));
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1024)
        fail("tokenizer.json: the Strip decoder's '{}' must be a count from 0 to 1024", key);
      return static_cast<int>(v.get<int64_t>());
    };
    return std::make_unique<StripDec>(spec.value("content", " "), count("start"), count("stop"));
  }
  if (type == "Metaspace") {
    const std::string scheme = metaspace_prepend_scheme(spec);
    return std::make_unique<MetaspaceDec>(metaspace_replacement(spec), scheme != "never");
  }
  if (type == "Sequence") {
    auto it = spec.find("decoders");
    if (it == spec.end() || !it->is_array())
      fail("tokenizer.json: Sequence decoder without a list");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& p : *it) {
      if (auto d = make_decoder(p)) parts.push_back(std::move(d));
    }
    return std::make_unique<SequenceDec>(std::move(parts));
  }
  fail(ErrorKind::kUnsupported, "tokenizer.json: decoder type '{}' is not supported", type);
}

}  // namespace tf
