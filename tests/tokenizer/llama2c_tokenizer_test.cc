#include "tokenizer/llama2c_tokenizer.h"

#include <gtest/gtest.h>

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
