// The Unigram model and SentencePiece's normalization on vocabularies small enough that the
// best split follows by hand from the scores; the character map's parser on malformed and
// random blobs. (Real models against the SentencePiece library: test_tokenizers.py UnigramTest.)

#include "tokenizer/unigram.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/spm_normalizer.h"
#include "tokenizer/wordpiece.h"

namespace tf {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// 0 <unk>, 1 a, 2 b, 3 ab, 4 abc, 5 c, 6 ▁, 7 ▁a
json unigram_doc() {
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}}},
      {"decoder",
       {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}}},
      {"model",
       {{"type", "Unigram"},
        {"unk_id", 0},
        {"vocab", json::array({json::array({"<unk>", 0.0}), json::array({"a", -1.0}),
                               json::array({"b", -1.0}), json::array({"ab", -1.5}),
                               json::array({"abc", -4.0}), json::array({"c", -2.0}),
                               json::array({"\xE2\x96\x81", -1.0}),
                               json::array({"\xE2\x96\x81"
                                            "a",
                                            -3.0})})}}}};
}

std::unique_ptr<HfTokenizer> make(const json& doc) {
  return HfTokenizer::from_json(doc.dump(), "test.json");
}

TEST(Unigram, HighestScoringSplitWins) {
  auto tok = make(unigram_doc());
  // "▁abc": ▁+ab+c = -4.5 beats ▁+abc (-5), ▁+a+b+c (-5), ▁a+b+c (-6).
  EXPECT_EQ(tok->encode("abc", false), (Ids{6, 3, 5}));
  // "▁ab": ▁+ab (-2.5) beats ▁a+b (-4).
  EXPECT_EQ(tok->encode("ab", false), (Ids{6, 3}));
  EXPECT_EQ(tok->decode(tok->encode("abc ab", false)), "abc ab");
}

TEST(Unigram, UnknownRunsAreOneUnknownScoredBelowEveryPiece) {
  auto tok = make(unigram_doc());
  // x, y, é have no piece: each scores min (-4) - 10; a run of them is one <unk>.
  EXPECT_EQ(tok->encode("axyb", false), (Ids{6, 1, 0, 2}));
  EXPECT_EQ(tok->encode("a\xC3\xA9\xC3\xA9y", false), (Ids{6, 1, 0}));
  // Without an unknown piece, such a text is an error naming it.
  json doc = unigram_doc();
  doc["model"]["unk_id"] = nullptr;
  auto no_unk = make(doc);
  EXPECT_EQ(no_unk->encode("ab", false), (Ids{6, 3}));
  EXPECT_NE(error_of([&] { no_unk->encode("axb", false); }).find("'x' has no piece"),
            std::string::npos);
}

TEST(Unigram, ByteFallbackSpellsUnknownsInBytes) {
  json doc = unigram_doc();
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    doc["model"]["vocab"].push_back(json::array({name, -20.0}));
  }
  doc["model"]["byte_fallback"] = true;
  auto tok = make(doc);
  // é = C3 A9: the pieces 8 + 0xC3 and 8 + 0xA9, not <unk>.
  EXPECT_EQ(tok->encode("a\xC3\xA9", false), (Ids{6, 1, 8 + 0xC3, 8 + 0xA9}));
}

TEST(Unigram, SentencePieceLatticeSkipsControlAndUnknownPieces) {
  // In a SentencePiece vocabulary (GGUF "t5") control and unknown pieces are never matched in
  // text by the lattice, and the unknown's score comes from normal pieces only.
  std::vector<UnigramPiece> pieces = {{"<unk>", 0.0, PieceType::kUnknown},
                                      {"</s>", 0.0, PieceType::kControl},
                                      {"a", -1.0, PieceType::kNormal},
                                      {"s", -30.0, PieceType::kUnused},
                                      {"<", -1.0, PieceType::kNormal}};
  UnigramOptions opts;
  opts.unk_id = 0;
  opts.sentencepiece_lattice = true;
  UnigramModel m(pieces, opts, "test");
  Ids out;
  m.encode("</s>a", out);  // '<' piece, then "/" unknown; "s" (unused) is still matched
  EXPECT_EQ(out, (Ids{4, 0, 3, 0, 2}));
}

TEST(Unigram, MalformedVocabulariesAreErrors) {
  json doc = unigram_doc();
  doc["model"]["vocab"] = json::array();
  EXPECT_NE(error_of([&] { make(doc); }).find("the Unigram vocabulary is empty"),
            std::string::npos);
  doc = unigram_doc();
  doc["model"]["vocab"][2] = json::array({"b"});
  EXPECT_NE(error_of([&] { make(doc); }).find("Unigram vocab entry 2 is not [piece, score]"),
            std::string::npos);
  doc = unigram_doc();
  doc["model"]["unk_id"] = 99;
  EXPECT_NE(error_of([&] { make(doc); }).find("unk_id 99 is outside the vocabulary"),
            std::string::npos);
  doc = unigram_doc();
  doc["model"]["vocab"] = "a";
  EXPECT_NE(error_of([&] { make(doc); }).find("must be a list of [piece, score]"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              UnigramModel({{"a", std::nan(""), PieceType::kNormal}}, {}, "m");
            }).find("not a finite number"),
            std::string::npos);
}

TEST(SentencePieceNormalizer, WhitespaceRulesWithoutAMap) {
  SentencePieceNormalizerSpec spec;
  auto n = make_sentencepiece_normalizer("", spec, "test");
  std::string s = "  a  b  ";
  n->normalize(s);
  EXPECT_EQ(s,
            "\xE2\x96\x81"
            "a"
            "\xE2\x96\x81"
            "b");
  s = "   ";
  n->normalize(s);
  EXPECT_EQ(s, "");
  spec.remove_extra_whitespaces = false;
  n = make_sentencepiece_normalizer("", spec, "test");
  s = " a";
  n->normalize(s);
  EXPECT_EQ(s,
            "\xE2\x96\x81\xE2\x96\x81"
            "a");
  spec.add_dummy_prefix = false;
  spec.escape_whitespaces = false;
  n = make_sentencepiece_normalizer("", spec, "test");
  s = "a\xFF"
      "b";  // an invalid byte becomes U+FFFD
  n->normalize(s);
  EXPECT_EQ(s,
            "a\xEF\xBF\xBD"
            "b");
}

TEST(PrecompiledCharsMap, MalformedBlobsAreErrors) {
  EXPECT_NE(
      error_of([] { PrecompiledCharsMap(std::string("\x04\0\0", 3), "m"); }).find("too short"),
      std::string::npos);
  // The trie claims 400 bytes of a 12-byte blob; 6 bytes (not whole units).
  EXPECT_NE(error_of([] {
              PrecompiledCharsMap(std::string("\x90\x01\0\0abcdefgh", 12), "m");
            }).find("does not fit"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              PrecompiledCharsMap(std::string("\x06\0\0\0abcdefgh", 12), "m");
            }).find("does not fit"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_precompiled_normalizer("AAAA*", "m"); }).find("not base64"),
            std::string::npos);
  EXPECT_EQ(decode_base64("aGk=", "t"), "hi");
  EXPECT_EQ(decode_base64("aGVsbG8", "t"), "hello");
}

TEST(PrecompiledCharsMap, RandomTriesStayInsideTheirBlob) {
  // Any trie of the right size is walked with every index checked: random units and random
  // text never read outside the blob (ASan would say), and what comes out is some text.
  std::mt19937 rng(5);
  for (int round = 0; round < 2000; ++round) {
    const uint32_t units = 1 + rng() % 64;
    std::string blob(4, '\0');
    const uint32_t bytes = units * 4;
    for (int k = 0; k < 4; ++k) blob[k] = static_cast<char>((bytes >> (8 * k)) & 0xFF);
    for (uint32_t i = 0; i < units; ++i) {
      uint32_t u = rng();
      if (rng() % 2) u &= 0x3FF | (rng() % 8) << 10;  // small offsets: walks that go somewhere
      for (int k = 0; k < 4; ++k) blob += static_cast<char>((u >> (8 * k)) & 0xFF);
    }
    const int tail = 1 + static_cast<int>(rng() % 16);
    for (int k = 0; k < tail; ++k) blob += static_cast<char>(rng() % 4 == 0 ? 0 : 'a' + rng() % 26);
    PrecompiledCharsMap map(blob, "random");
    std::string text;
    for (int k = 0; k < 12; ++k) text += static_cast<char>(rng() % 256);
    const std::string out = map.apply(text);
    EXPECT_LE(out.size(), text.size() * 3 + tail * text.size());
  }
}

// [PAD] [UNK] [CLS] [SEP] un ##aff ##able a ##ff ##able aff , the
json bert_doc(const char* post_processor_type) {
  json vocab = json::object();
  const char* tokens[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able",
                          "a",     "##ff",  "##ab",  "aff",   ",",  "the"};
  for (int i = 0; i < 13; ++i) vocab[tokens[i]] = i;
  json doc = {{"normalizer", {{"type", "BertNormalizer"}, {"lowercase", true}}},
              {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
              {"decoder", {{"type", "WordPiece"}}},
              {"added_tokens", json::array({{{"id", 2}, {"content", "[CLS]"}, {"special", true}},
                                            {{"id", 3}, {"content", "[SEP]"}, {"special", true}}})},
              {"model",
               {{"type", "WordPiece"},
                {"unk_token", "[UNK]"},
                {"vocab", vocab},
                {"max_input_chars_per_word", 12}}}};
  if (std::string(post_processor_type) != "none")
    doc["post_processor"] = {
        {"type", post_processor_type}, {"cls", {"[CLS]", 2}}, {"sep", {"[SEP]", 3}}};
  return doc;
}

TEST(WordPiece, LongestPieceFirstAndUnknownWordsWhole) {
  auto tok = make(bert_doc("BertProcessing"));
  // "Unaffable": un ##aff ##able (longest from each start); "affx": no piece covers "x", so the
  // word is [UNK] whole; "," its own word; a 13-character word is [UNK] (max 12).
  EXPECT_EQ(tok->encode("Unaffable, AFFX the", true), (Ids{2, 4, 5, 6, 11, 1, 12, 3}));
  EXPECT_EQ(tok->encode("unaffableunaff", false), (Ids{1}));
  EXPECT_EQ(tok->decode(tok->encode("unaffable, the aff", true)), "unaffable, the aff");
}

TEST(WordPiece, PairsFollowThePostProcessor) {
  Ids ids, types;
  make(bert_doc("BertProcessing"))->encode_pair("the", "aff", ids, types);
  EXPECT_EQ(ids, (Ids{2, 12, 3, 10, 3}));
  EXPECT_EQ(types, (Ids{0, 0, 0, 1, 1}));
  make(bert_doc("RobertaProcessing"))->encode_pair("the", "aff", ids, types);
  EXPECT_EQ(ids, (Ids{2, 12, 3, 3, 10, 3}));
  EXPECT_EQ(types, (Ids{0, 0, 0, 0, 0, 0}));
  make(bert_doc("none"))->encode_pair("the", "aff", ids, types);
  EXPECT_EQ(ids, (Ids{12, 10}));
  EXPECT_EQ(types, (Ids{0, 1}));
  // A TemplateProcessing pair with its own type ids.
  json doc = bert_doc("none");
  doc["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
               {"Sequence": {"id": "B", "type_id": 1}}],
      "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                         "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}})");
  auto tok = make(doc);
  tok->encode_pair("the", "aff", ids, types);
  EXPECT_EQ(ids, (Ids{12, 3, 10}));
  EXPECT_EQ(types, (Ids{0, 0, 1}));
  EXPECT_EQ(tok->encode("the", true), (Ids{2, 12}));
  doc["post_processor"]["pair"][0]["Sequence"]["id"] = "C";
  EXPECT_NE(error_of([&] { make(doc); }).find("sequence 'C' is not A or B"), std::string::npos);
}

TEST(WordPiece, UnknownTokenMustBeInTheVocabulary) {
  json doc = bert_doc("none");
  doc["model"]["unk_token"] = "<unk>";
  EXPECT_NE(error_of([&] { make(doc); }).find("unk_token '<unk>' is not in the vocabulary"),
            std::string::npos);
}

TEST(WordPiece, VocabularyTokensNeedNotBeUtf8) {
  // A vocab.txt is bytes: a token that is not UTF-8 is a token (fuzzing found it thrown out of
  // the loader as a JSON library error when the pipeline was built through tokenizer.json text).
  TokenIdMap vocab = read_wordpiece_vocab("[PAD]\n[UNK]\n[CLS]\n[SEP]\n\xA4\nthe\n", "v");
  auto tok = HfTokenizer::from_bert_vocab(vocab, {}, "v");
  EXPECT_EQ(tok->encode("the", true), (Ids{2, 5, 3}));
  EXPECT_EQ(tok->id_to_piece(4), "\xA4");
}

TEST(BertNormalizer, CleansSpacesCjkStripsAccentsAndLowercases) {
  auto tok = make(bert_doc("none"));
  // NUL and U+200B (a format character) are dropped, a no-break space splits words, É loses
  // its accent and case, each CJK ideograph is a word of its own ([UNK] here).
  const char text[] =
      "TH\xC3\x89\0\xE2\x80\x8B"
      "\xC2\xA0"
      "aff\xE4\xBD\xA0\xE5\xA5\xBD";
  EXPECT_EQ(tok->encode(std::string(text, sizeof text - 1), false), (Ids{12, 10, 1, 1}));
}

}  // namespace
}  // namespace tf
