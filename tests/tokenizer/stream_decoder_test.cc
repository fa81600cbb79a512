#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tf {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// push, then flush (in that order: the operands of + are unsequenced).
std::string push_and_flush(StreamDecoder& d, std::string_view bytes) {
  std::string out = d.push(bytes);
  out += d.flush();
  return out;
}

// Counts U+FFFD and checks that nothing else is in s.
int replacement_count(const std::string& s) {
  if (s.size() % 3 != 0) return -1;
  for (size_t i = 0; i < s.size(); i += 3) {
    if (s.compare(i, 3, kFffd) != 0) return -1;
  }
  return static_cast<int>(s.size() / 3);
}

std::string hex(std::string_view s) {
  static const char* kDigits = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (!out.empty()) out += ' ';
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

TEST(StreamDecoder, AsciiPassesThroughImmediately) {
  StreamDecoder d;
  EXPECT_EQ(d.push("H"), "H");
  EXPECT_EQ(d.push("ello, "), "ello, ");
  EXPECT_EQ(d.push(""), "");
  EXPECT_EQ(d.push("world\n"), "world\n");
  EXPECT_EQ(d.flush(), "");
}

TEST(StreamDecoder, NulAndControlBytesAreText) {
  StreamDecoder d;
  const std::string s("a\0b\x7f\t", 5);
  EXPECT_EQ(d.push(s), s);
}

TEST(StreamDecoder, MultiByteCharactersOneByteAtATime) {
  for (const std::string ch :
       {"\xC3\xA9" /* é */, "\xE2\x82\xAC" /* € */, "\xF0\x9F\x98\x80" /* 😀 */, "\xC2\x80",
        "\xDF\xBF", "\xE0\xA0\x80", "\xED\x9F\xBF", "\xEF\xBF\xBF", "\xF0\x90\x80\x80",
        "\xF4\x8F\xBF\xBF"}) {
    SCOPED_TRACE(hex(ch));
    StreamDecoder d;
    for (size_t i = 0; i + 1 < ch.size(); ++i) {
      EXPECT_EQ(d.push(ch.substr(i, 1)), "") << "emitted after byte " << i;
    }
    EXPECT_EQ(d.push(ch.substr(ch.size() - 1)), ch);
    EXPECT_EQ(d.flush(), "");
  }
}

TEST(StreamDecoder, NeverSplitsACharacterAcrossPushes) {
  // Mixed text pushed in every possible pair of pieces, and byte by byte: every piece of output
  // is valid on its own, and together they are the input.
  const std::string text = "a\xC3\xA9z \xE2\x82\xAC\xF0\x9F\x98\x80!\xE4\xB8\xAD";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    StreamDecoder d;
    const std::string first = d.push(text.substr(0, cut));
    const std::string second = d.push(text.substr(cut));
    const std::string rest = d.flush();
    EXPECT_EQ(rest, "") << "cut " << cut;
    EXPECT_EQ(first + second, text) << "cut " << cut;
    // The first piece ends at a character boundary: it is a prefix made of whole characters.
    StreamDecoder check;
    EXPECT_EQ(push_and_flush(check, first), first) << "cut " << cut << ": " << hex(first);
  }
  StreamDecoder d;
  std::string out;
  std::vector<std::string> pieces;
  for (char c : text) {
    std::string piece = d.push(std::string(1, c));
    if (!piece.empty()) pieces.push_back(piece);
    out += piece;
  }
  EXPECT_EQ(out, text);
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "\xC3\xA9", "z", " ", "\xE2\x82\xAC",
                                              "\xF0\x9F\x98\x80", "!", "\xE4\xB8\xAD"}));
}

TEST(StreamDecoder, CompleteCharacterFollowedByPartialOne) {
  StreamDecoder d;
  EXPECT_EQ(d.push("x\xE2\x82\xAC\xF0\x9F"), "x\xE2\x82\xAC");
  EXPECT_EQ(d.push("\x98"), "");
  EXPECT_EQ(d.push("\x80y"), "\xF0\x9F\x98\x80y");
}

struct InvalidCase {
  const char* name;
  std::string bytes;
};

TEST(StreamDecoder, InvalidBytesBecomeReplacementCharacters) {
  for (const InvalidCase& c :
       {InvalidCase{"0xFF", "\xFF"}, InvalidCase{"0xFE", "\xFE"},
        InvalidCase{"lone continuation", "\x80"}, InvalidCase{"lone continuation 0xBF", "\xBF"},
        InvalidCase{"overlong C0 80", "\xC0\x80"}, InvalidCase{"overlong C1 BF", "\xC1\xBF"},
        InvalidCase{"overlong E0 80 80", "\xE0\x80\x80"},
        InvalidCase{"overlong F0 80 80 80", "\xF0\x80\x80\x80"},
        InvalidCase{"surrogate ED A0 80", "\xED\xA0\x80"},
        InvalidCase{"surrogate ED BF BF", "\xED\xBF\xBF"},
        InvalidCase{"above U+10FFFF F4 90 80 80", "\xF4\x90\x80\x80"},
        InvalidCase{"F5", "\xF5\x80\x80\x80"}}) {
    SCOPED_TRACE(c.name);
    // All at once.
    {
      StreamDecoder d;
      const std::string out = push_and_flush(d, c.bytes);
      EXPECT_GE(replacement_count(out), 1) << hex(out);
    }
    // One byte at a time, followed by ASCII that must survive.
    {
      StreamDecoder d;
      std::string out;
      for (char b : c.bytes) out += d.push(std::string(1, b));
      out += d.push("ok");
      out += d.flush();
      ASSERT_GE(out.size(), 2u);
      EXPECT_EQ(out.substr(out.size() - 2), "ok") << hex(out);
      EXPECT_GE(replacement_count(out.substr(0, out.size() - 2)), 1) << hex(out);
    }
  }
}

TEST(StreamDecoder, InvalidBytesAreReplacedWithoutWaitingForFlush) {
  StreamDecoder d;
  EXPECT_EQ(d.push("\xFF"), kFffd);
  EXPECT_EQ(d.push("\x80"), kFffd);
  EXPECT_EQ(d.push("a\xC0"), "a" + kFffd);
  // The surrogate is known to be bad at its second byte.
  std::string out = d.push("\xED");
  EXPECT_EQ(out, "");
  out = d.push("\xA0");
  EXPECT_GE(replacement_count(out), 1) << hex(out);
}

TEST(StreamDecoder, ReplacementCountsFollowMaximalSubparts) {
  // Unicode's recommended practice (and what browsers and Python do): one U+FFFD per maximal
  // subpart of an ill-formed sequence.
  struct Case {
    std::string bytes;
    int fffd;
  };
  for (const Case& c : {Case{"\xFF", 1}, Case{"\x80", 1}, Case{"\xC0\x80", 2},
                        Case{"\xED\xA0\x80", 3}, Case{"\xE2\x82", 1}, Case{"\xE2\x82\x41", 1},
                        Case{"\xF0\x9F\x98\x41", 1}, Case{"\xF4\x90\x80\x80", 4}}) {
    SCOPED_TRACE(hex(c.bytes));
    StreamDecoder d;
    std::string out = push_and_flush(d, c.bytes);
    if (!c.bytes.empty() && c.bytes.back() == 'A') {
      ASSERT_EQ(out.back(), 'A');
      out.pop_back();
    }
    EXPECT_EQ(replacement_count(out), c.fffd) << hex(out);
  }
}

TEST(StreamDecoder, TruncatedSequenceDoesNotSwallowTheNextCharacter) {
  StreamDecoder d;
  EXPECT_EQ(d.push("\xE2\x82"), "");
  EXPECT_EQ(d.push("A"), kFffd + "A");
  EXPECT_EQ(d.push("\xC3"), "");
  EXPECT_EQ(d.push("\xE2\x82\xAC"), kFffd + "\xE2\x82\xAC");
}

TEST(StreamDecoder, FlushOfIncompleteCharacterEmitsReplacement) {
  for (const std::string partial :
       {"\xC3", "\xE2", "\xE2\x82", "\xF0", "\xF0\x9F", "\xF0\x9F\x98"}) {
    SCOPED_TRACE(hex(partial));
    StreamDecoder d;
    EXPECT_EQ(d.push("ab" + partial), "ab");
    EXPECT_EQ(d.flush(), kFffd);
    // Flushing leaves the decoder empty and reusable.
    EXPECT_EQ(d.flush(), "");
    EXPECT_EQ(d.push("\xC3\xA9"), "\xC3\xA9");
  }
}

TEST(StreamDecoder, FlushOfNothingIsEmpty) {
  StreamDecoder d;
  EXPECT_EQ(d.flush(), "");
}

}  // namespace
}  // namespace tf
