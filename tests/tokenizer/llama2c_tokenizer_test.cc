#include "tokenizer/llama2c_tokenizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "model/test_util.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf {
namespace {

using Ids = std::vector<int32_t>;

std::unique_ptr<Llama2cTokenizer> stories() {
  return Llama2cTokenizer::load(testing::stories_tok(), 512);
}

TEST(Llama2cTokenizer, StoriesPiecesAndIdsFromTheReadme) {
  auto tok = stories();
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->piece(259), " t");
  EXPECT_EQ(tok->piece(403), " Once");
  EXPECT_EQ(tok->piece(407), " upon");
  EXPECT_EQ(tok->piece(1), "\n<s>\n");
  EXPECT_EQ(tok->encode("Once upon a time", true), (Ids{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok->encode("Once upon a time", false), (Ids{403, 407, 261, 378}));
  EXPECT_EQ(tok->encode("", true), (Ids{1}));
}

TEST(Llama2cTokenizer, ByteFallbackForCharactersOutsideTheVocab) {
  auto tok = stories();
  // U+00FC is not a piece of this 512-token vocab (U+00E9 is, as id 485): its UTF-8 bytes
  // C3 BC become <0xC3> <0xBC>.
  const Ids ids = tok->encode("\xC3\xBC", false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], 0xC3 + 3);
  EXPECT_EQ(ids[2], 0xBC + 3);
  EXPECT_EQ(tok->decode(ids), " \xC3\xBC");
  EXPECT_EQ(tok->encode("\xC3\xA9", false).back(), 485);
}

TEST(Llama2cTokenizer, DecodeDropsTheDummySpaceAfterBos) {
  auto tok = stories();
  EXPECT_EQ(tok->decode_token(1, 403), "Once");
  EXPECT_EQ(tok->decode_token(403, 407), " upon");
  EXPECT_EQ(tok->decode_token(-1, 1), "");
  EXPECT_EQ(tok->decode(tok->encode("Once upon a time, there was a dog.", true)),
            "Once upon a time, there was a dog.");
  EXPECT_THROW(tok->decode_token(0, 512), Error);
}

TEST(Llama2cTokenizer, Llama2VocabMatchesSentencePiece) {
  // Llama 2's well-known ids: "Hello world" -> <s> ▁Hello ▁world.
  auto tok =
      Llama2cTokenizer::load(testing::shared_dir() + "/tokenizers/llama2/tokenizer.bin", 32000);
  EXPECT_EQ(tok->encode("Hello world", true), (Ids{1, 15043, 3186}));
  const std::string text = "The quick brown fox, 1234 émigrés 😀!";
  EXPECT_EQ(tok->decode(tok->encode(text, true)), text);
}

// run.c's encoder as it is written there: rescan every adjacent pair, merge the best (leftmost of
// equal scores), repeat - O(n^2). The tokenizer merges with a heap; both must agree exactly.
Ids run_c_encode(const Llama2cTokenizer& tok, const std::string& text, const std::string& path) {
  // The scores, read from the file itself: [max_len:i32] then per token
  // [score:f32][len:i32][bytes].
  const std::string bytes = testing::read_bytes(path);
  std::vector<float> scores;
  std::unordered_map<std::string, int32_t> ids;
  size_t at = 4;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    float score;
    int32_t len;
    std::memcpy(&score, &bytes[at], 4);
    std::memcpy(&len, &bytes[at + 4], 4);
    const std::string piece = bytes.substr(at + 8, static_cast<size_t>(len));
    at += 8 + static_cast<size_t>(len);
    scores.push_back(score);
    const bool byte_piece = piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>';
    if (id > 2 && !byte_piece) ids.emplace(piece, id);
  }
  Ids out;
  if (!text.empty()) out.push_back(ids.at(" "));
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    while (len < 4 && i + len < text.size() &&
           (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80)
      ++len;
    auto it = ids.find(text.substr(i, len));
    if (it != ids.end()) {
      out.push_back(it->second);
    } else {
      for (size_t b = i; b < i + len; ++b) out.push_back(3 + static_cast<unsigned char>(text[b]));
    }
    i += len;
  }
  for (;;) {
    float best = -1e10f;
    int best_id = -1;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < out.size(); ++i) {
      auto it = ids.find(tok.piece(out[i]) + tok.piece(out[i + 1]));
      if (it != ids.end() && scores[it->second] > best) {
        best = scores[it->second];
        best_id = it->second;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    out[best_at] = best_id;
    out.erase(out.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
  return out;
}

TEST(Llama2cTokenizer, HeapMergingEqualsRunCsQuadraticLoop) {
  const std::string llama2 = testing::shared_dir() + "/tokenizers/llama2/tokenizer.bin";
  for (const auto& [path, vocab] :
       {std::pair<std::string, int64_t>{testing::stories_tok(), 512}, {llama2, 32000}}) {
    auto tok = Llama2cTokenizer::load(path, vocab);
    std::mt19937 rng(11);
    const std::vector<std::string> alphabet = {"a",    "b",   "e",  " ",        "  ",
                                               "the",  "The", "\n", "Once",     " upon",
                                               "ing",  ".",   ",",  "\xC3\xA9", "\xF0\x9F\x98\x80",
                                               "aaaa", "1",   "0"};
    for (int t = 0; t < 60; ++t) {
      std::string text;
      const int words = t < 50 ? 1 + static_cast<int>(rng() % 40) : 1500;
      for (int w = 0; w < words; ++w) text += alphabet[rng() % alphabet.size()];
      SCOPED_TRACE(path + ": " + text.substr(0, 80));
      Ids want = run_c_encode(*tok, text, path);
      EXPECT_EQ(tok->encode(text, false), want);
    }
    EXPECT_EQ(tok->encode(std::string(3000, 'a'), false),
              run_c_encode(*tok, std::string(3000, 'a'), path));
  }
}

TEST(Llama2cTokenizer, RejectsMalformedFiles) {
  const std::string good = testing::read_bytes(testing::stories_tok());
  auto error_of = [](const std::string& bytes, int64_t vocab) {
    try {
      Llama2cTokenizer::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), vocab,
                              "t.bin");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of(good, 512), "");
  EXPECT_NE(error_of(good.substr(0, 2), 512).find("too short"), std::string::npos);
  EXPECT_NE(error_of(good.substr(0, good.size() - 1), 512).find("invalid length"),
            std::string::npos);
  EXPECT_NE(error_of(good, 513).find("ends after 512"), std::string::npos);
  EXPECT_NE(error_of(good, 511).find("left after"), std::string::npos);
  std::string bad_len = good;
  bad_len[8] = '\xff';  // the length of token 0 becomes negative
  bad_len[9] = bad_len[10] = bad_len[11] = '\xff';
  EXPECT_NE(error_of(bad_len, 512).find("invalid length"), std::string::npos);
}

TEST(TokenizerLoader, FindsTheVocabBesideTheCheckpoint) {
  auto tok = load_tokenizer_for(testing::stories_bin(), 512);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 512);
  testing::TempDir empty;
  testing::write_bytes(empty.file("model.bin"), "");
  EXPECT_EQ(load_tokenizer_for(empty.file("model.bin"), 512), nullptr);
  EXPECT_THROW(load_tokenizer_for(empty.file("missing.bin"), 512), Error);
}

}  // namespace
}  // namespace tf
