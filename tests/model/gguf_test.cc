// The GGUF reader on the shared files (llama.cpp's own conversion of stories260K, its quantized
// copies, the kquant256 mixes) against facts from their READMEs and the llama2.c checkpoint's
// bytes, and on hostile files built byte by byte here: each refused with an Error naming what is
// wrong, none allocating for a count the file cannot hold.
#include "model/gguf.h"

#include <cmath>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "model/ggml_quants.h"
#include "model/gguf_writer.h"
#include "tokenizer/gguf_vocab.h"

namespace tf {
namespace {

const std::string kStories = std::string(TF_SHARED_DIR) + "/models/stories260K/";
const std::string kKquant = std::string(TF_SHARED_DIR) + "/models/kquant256/";

GgufFile parse_file(const MappedFile& m) {
  return parse_gguf(m.data(), m.size(), m.path());
}

TEST(Gguf, ReadsLlamaCppsConversionOfStories260K) {
  const MappedFile m = MappedFile::open(kStories + "stories260K.gguf");
  const GgufFile f = parse_file(m);
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.alignment, 32u);
  EXPECT_EQ(f.data_offset % 32, 0u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("llama.embedding_length"), 64u);
  EXPECT_EQ(f.get_uint("llama.block_count"), 5u);
  EXPECT_EQ(f.get_uint("llama.feed_forward_length"), 172u);
  EXPECT_EQ(f.get_uint("llama.attention.head_count"), 8u);
  EXPECT_EQ(f.get_uint("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f.get_uint("llama.context_length"), 2048u);  // the converter's default (README)
  EXPECT_NEAR(f.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  const auto tokens = f.get_strings("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[403], "\xe2\x96\x81Once");  // "▁Once"
  EXPECT_EQ(tokens[407], "\xe2\x96\x81upon");
  // Token types (llama.cpp: 1 normal, 2 unknown, 3 control, 6 byte): 253 normal, one unknown,
  // BOS and EOS control, 256 bytes.
  std::map<int, int> types;
  for (double t : f.get_numbers("tokenizer.ggml.token_type")) ++types[static_cast<int>(t)];
  EXPECT_EQ(types, (std::map<int, int>{{1, 253}, {2, 1}, {3, 2}, {6, 256}}));
  const auto scores = f.get_numbers("tokenizer.ggml.scores");
  ASSERT_EQ(scores.size(), 512u);
  EXPECT_EQ(scores[260], -1.0);  // 259 " t" is 0 (-0.0), the merges count down from there
  EXPECT_EQ(f.get_uint("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(f.get_uint("tokenizer.ggml.eos_token_id"), 2u);

  // 2 + 9 per layer tensors, F32, ne innermost first.
  EXPECT_EQ(f.tensors.size(), 2u + 5 * 9 + 1);
  const GgufTensorInfo* emb = f.tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::kF32);
  EXPECT_EQ(emb->ne, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb->bytes, 64u * 512 * 4);
  const GgufTensorInfo* down = f.tensor("blk.4.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->ne, (std::vector<int64_t>{172, 64}));
  // The same bytes as the llama2.c checkpoint's embedding (after its 28-byte header), and the
  // classifier is a copy of the embedding.
  const MappedFile bin = MappedFile::open(kStories + "stories260K.bin");
  const uint8_t* emb_bytes = m.data() + f.data_offset + emb->offset;
  EXPECT_EQ(std::memcmp(emb_bytes, bin.data() + 28, emb->bytes), 0);
  const GgufTensorInfo* out = f.tensor("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(std::memcmp(emb_bytes, m.data() + f.data_offset + out->offset, out->bytes), 0);
  EXPECT_EQ(f.tensor("no.such.tensor"), nullptr);
}

std::map<std::string, int> type_counts(const GgufFile& f) {
  std::map<std::string, int> n;
  for (const auto& t : f.tensors) ++n[ggml_type_info(static_cast<uint32_t>(t.type))->name];
  return n;
}

TEST(Gguf, ReadsTheQuantizedCopies) {
  // stories260K's copies (README): ffn_down F16 (rows of 172 fit no block), norms F32.
  const std::map<std::string, std::map<std::string, int>> stories = {
      {"stories260K-Q8_0.gguf", {{"F16", 5}, {"F32", 11}, {"Q8_0", 32}}},
      {"stories260K-Q6_K.gguf", {{"F16", 5}, {"F32", 11}, {"Q8_0", 32}}},
  };
  for (const auto& [name, want] : stories) {
    const MappedFile m = MappedFile::open(kStories + name);
    EXPECT_EQ(type_counts(parse_file(m)), want) << name;
  }
  for (const char* name : {"stories260K-Q4_0.gguf", "stories260K-Q4_K_M.gguf"}) {
    const MappedFile m = MappedFile::open(kStories + name);
    const GgufFile f = parse_file(m);
    EXPECT_EQ(f.tensor("output.weight")->type, GgmlType::kQ8_0) << name;
    EXPECT_EQ(f.tensor("blk.0.ffn_down.weight")->type, GgmlType::kF16) << name;
    EXPECT_EQ(f.tensor("blk.0.attn_norm.weight")->type, GgmlType::kF32) << name;
  }
  // kquant256: every 2-D matrix quantized, 1-D tensors F32; Q4_K_M mixes in Q6_K.
  const MappedFile f32m = MappedFile::open(kKquant + "kquant-F32.gguf");
  const GgufFile f32 = parse_file(f32m);
  EXPECT_EQ(f32.get_uint("llama.embedding_length"), 256u);
  EXPECT_EQ(f32.get_uint("llama.block_count"), 2u);
  EXPECT_EQ(f32.get_uint("llama.attention.head_count"), 4u);
  EXPECT_EQ(f32.get_uint("llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(f32.get_uint("llama.feed_forward_length"), 512u);
  EXPECT_EQ(f32.get_uint("llama.context_length"), 512u);
  EXPECT_EQ(f32.get_strings("tokenizer.ggml.tokens").size(), 2048u);
  for (const char* name : {"kquant-Q4_K_M.gguf", "kquant-Q5_K_M.gguf", "kquant-Q6_K.gguf"}) {
    const MappedFile m = MappedFile::open(kKquant + name);
    const GgufFile f = parse_file(m);
    ASSERT_EQ(f.tensors.size(), f32.tensors.size()) << name;
    for (const auto& t : f.tensors) {
      const GgufTensorInfo* src = f32.tensor(t.name);
      ASSERT_NE(src, nullptr) << t.name;
      EXPECT_EQ(t.ne, src->ne) << t.name;
      if (t.ne.size() == 1) {
        EXPECT_EQ(t.type, GgmlType::kF32) << name << " " << t.name;
      }
    }
    const auto n = type_counts(f);
    if (std::string(name) == "kquant-Q6_K.gguf") {
      EXPECT_EQ(n.count("Q4_K") + n.count("Q5_K"), 0u);
      EXPECT_GT(n.at("Q6_K"), 0);
    } else {
      EXPECT_GT(n.at(std::string(name) == "kquant-Q4_K_M.gguf" ? "Q4_K" : "Q5_K"), 0) << name;
      EXPECT_EQ(f.tensor("output.weight")->type, GgmlType::kQ6_K) << name;
    }
  }
}

// A GGUF file byte by byte.
struct Builder {
  std::string b;
  Builder& u32(uint32_t v) { return raw(&v, 4); }
  Builder& u64(uint64_t v) { return raw(&v, 8); }
  Builder& str(const std::string& s) {
    u64(s.size());
    b += s;
    return *this;
  }
  Builder& raw(const void* p, size_t n) {
    b.append(static_cast<const char*>(p), n);
    return *this;
  }
  Builder& header(uint64_t tensors, uint64_t kv, uint32_t version = 3) {
    b += "GGUF";
    return u32(version).u64(tensors).u64(kv);
  }
  Builder& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  // A tensor info: name, dims, type, offset.
  Builder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                  uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  // Pads to the alignment and appends n data bytes.
  Builder& data(size_t n, size_t alignment = 32) {
    b.append((alignment - b.size() % alignment) % alignment, '\0');
    b.append(n, '\x11');
    return *this;
  }
};

std::string error_of(const std::string& bytes) {
  try {
    parse_gguf(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Gguf, AcceptsAWellFormedFileBuiltHere) {
  Builder b;
  b.header(2, 3).kv_u32("general.alignment", 64);
  b.str("a.list").u32(9).u32(9).u64(2);  // an array of arrays of int32: [[7], []]
  b.u32(5).u64(1).u32(7).u32(5).u64(0);
  b.str("flag").u32(7).b += '\x01';
  b.tensor("t0", {32, 2}, 8, 0).tensor("t1", {4}, 0, 128).data(128 + 16, 64);
  const GgufFile f =
      parse_gguf(reinterpret_cast<const uint8_t*>(b.b.data()), b.b.size(), "built.gguf");
  EXPECT_EQ(f.alignment, 64u);
  EXPECT_EQ(f.data_offset % 64, 0u);
  EXPECT_EQ(f.tensor("t0")->bytes, 2u * 34);  // two Q8_0 blocks
  EXPECT_EQ(f.tensor("t1")->offset, 128u);
  const GgufValue* list = f.find("a.list");
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(list->to_string(), "[[7], []]");
  EXPECT_TRUE(f.get_bool("flag", false));
  EXPECT_THROW(f.get_string("flag"), Error);
  EXPECT_THROW(f.get_uint("missing"), Error);
  EXPECT_EQ(f.get_uint("missing", 7), 7u);
}

TEST(Gguf, RefusesHostileFilesByName) {
  auto expect = [](const Builder& b, const char* words) {
    const std::string e = error_of(b.b);
    EXPECT_NE(e.find(words), std::string::npos) << "expected '" << words << "' in: " << e;
  };
  expect(Builder().u32(0x12345678), "not a GGUF file");
  expect(Builder().header(0, 0, 1), "version 1");
  expect(Builder().header(0, 0, 4), "version 4");
  expect(Builder().header(0, uint64_t{1} << 60), "metadata count");
  expect(Builder().header(uint64_t{1} << 60, 0), "tensor count");
  expect(Builder().header(0, 1).str("k").u32(8).u64(uint64_t{1} << 40), "past the end");
  expect(Builder().header(0, 1).u64(uint64_t{1} << 40).u64(0).u64(0), "past the end");
  expect(Builder().header(0, 1).str(std::string(2000, 'k')).u32(4).u32(1), "bytes long");
  expect(Builder().header(0, 1).str("k").u32(99), "unknown value type 99");
  expect(Builder().header(0, 1).str("k").u32(9).u32(4).u64(uint64_t{1} << 40), "array length");
  expect(Builder().header(0, 1).str("k").u32(9).u32(99).u64(0), "unknown value type 99");
  {
    Builder deep;
    deep.header(0, 1).str("k").u32(9);
    for (int i = 0; i < 6; ++i) deep.u32(9).u64(1);
    deep.u32(4).u64(0);
    expect(deep, "nests arrays");
  }
  expect(Builder().header(0, 2).kv_u32("k", 1).kv_u32("k", 2), "appears twice");
  expect(Builder().header(0, 1).kv_u32("general.alignment", 48), "not a power of two");
  expect(Builder().header(0, 1).str("general.alignment").u32(10).u64(32), "not a uint32");
  {
    Builder b;
    b.header(0, 1).str("b").u32(7).b += '\x02';
    expect(b, "bool that is 2");
  }
  expect(Builder().header(1, 0).tensor("t", {}, 0, 0).data(0), "0 dimensions");
  expect(Builder().header(1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0).data(4), "5 dimensions");
  expect(Builder().header(1, 0).tensor("t", {4}, 31, 0).data(16), "unknown ggml type 31");
  expect(Builder().header(1, 0).tensor("t", {33}, 8, 0).data(64), "not a multiple of its block");
  expect(Builder().header(1, 0).tensor("t", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0),
         "too large");
  expect(Builder().header(1, 0).tensor("t", {4}, 0, 8).data(64), "not a multiple of the alignment");
  expect(Builder().header(1, 0).tensor("t", {64}, 0, 0).data(16), "past the end of the file");
  expect(Builder().header(1, 0).tensor("t", {4}, 0, uint64_t{1} << 62).data(16),
         "past the end of the file");
  expect(Builder().header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {4}, 0, 32).data(64),
         "overlap");
  expect(Builder().header(2, 0).tensor("a", {4}, 0, 0).tensor("a", {4}, 0, 32).data(64),
         "appears twice");
}

TEST(Gguf, EveryTruncationIsAnErrorNotACrash) {
  const MappedFile m =
      MappedFile::open(std::string(TF_SOURCE_DIR) + "/tests/fuzz/corpus/gguf/tiny.gguf");
  const std::string whole(reinterpret_cast<const char*>(m.data()), m.size());
  EXPECT_EQ(error_of(whole), "(accepted)");
  // Past the last tensor's data the writer only pads: a cut there loses nothing.
  const GgufFile f = parse_gguf(m.data(), m.size(), m.path());
  uint64_t end = 0;
  for (const auto& t : f.tensors) end = std::max(end, f.data_offset + t.offset + t.bytes);
  ASSERT_GT(end, f.data_offset);
  EXPECT_EQ(error_of(whole.substr(0, end)), "(accepted)");
  for (size_t n = 0; n < end; ++n) {
    const std::string e = error_of(whole.substr(0, n));
    EXPECT_NE(e, "(accepted)") << "a file cut at " << n << " bytes was accepted";
  }
}

TEST(GgmlTypes, BlockLayoutsAreLlamaCpps) {
  // Bytes per block from the block structs of ggml-common.h (a scale or two, then the values).
  EXPECT_EQ(ggml_type_info(8)->type_size, 2 + 32);                  // Q8_0: d, qs[32]
  EXPECT_EQ(ggml_type_info(2)->type_size, 2 + 16);                  // Q4_0: d, qs[16]
  EXPECT_EQ(ggml_type_info(3)->type_size, 2 + 2 + 16);              // Q4_1: d, m, qs[16]
  EXPECT_EQ(ggml_type_info(6)->type_size, 2 + 4 + 16);              // Q5_0: d, qh[4], qs[16]
  EXPECT_EQ(ggml_type_info(7)->type_size, 2 + 2 + 4 + 16);          // Q5_1
  EXPECT_EQ(ggml_type_info(10)->type_size, 16 + 64 + 2 + 2);        // Q2_K: scales, qs, d, dmin
  EXPECT_EQ(ggml_type_info(11)->type_size, 32 + 64 + 12 + 2);       // Q3_K: hmask, qs, scales, d
  EXPECT_EQ(ggml_type_info(12)->type_size, 2 + 2 + 12 + 128);       // Q4_K: d, dmin, scales, qs
  EXPECT_EQ(ggml_type_info(13)->type_size, 2 + 2 + 12 + 32 + 128);  // Q5_K: + qh
  EXPECT_EQ(ggml_type_info(14)->type_size, 128 + 64 + 16 + 2);      // Q6_K: ql, qh, scales, d
  EXPECT_EQ(ggml_type_info(20)->type_size, 2 + 16);                 // IQ4_NL
  EXPECT_EQ(ggml_type_info(23)->type_size, 2 + 2 + 4 + 128);        // IQ4_XS
  EXPECT_EQ(ggml_type_info(30)->type_size, 2);                      // BF16
  for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u})
    EXPECT_FALSE(ggml_type_info(removed).has_value()) << removed;
}

// Every tensor of llama.cpp's K-quant mixes dequantizes to within its format's error of the F32
// file's tensor (relative RMS error; a wrong bit layout is off by far more: ~100 %).
TEST(GgmlQuants, KQuantMixesDequantizeCloseToTheF32Weights) {
  const MappedFile src = MappedFile::open(kKquant + "kquant-F32.gguf");
  const GgufFile f32 = parse_file(src);
  // Bounds a little above what each format's bits give on Gaussian weights.
  const std::map<GgmlType, double> bound = {{GgmlType::kQ4_K, 0.12},
                                            {GgmlType::kQ5_K, 0.06},
                                            {GgmlType::kQ6_K, 0.03},
                                            {GgmlType::kQ8_0, 0.01},
                                            {GgmlType::kF32, 0.0}};
  std::map<GgmlType, int> seen;
  for (const char* name : {"kquant-Q4_K_M.gguf", "kquant-Q5_K_M.gguf", "kquant-Q6_K.gguf"}) {
    const MappedFile m = MappedFile::open(kKquant + name);
    const GgufFile f = parse_file(m);
    for (const auto& t : f.tensors) {
      const GgufTensorInfo* ref = f32.tensor(t.name);
      ASSERT_NE(ref, nullptr);
      std::vector<float> got(static_cast<size_t>(t.numel()));
      dequantize_ggml(t.type, m.data() + f.data_offset + t.offset, t.numel(), got.data());
      const auto* want = reinterpret_cast<const float*>(src.data() + f32.data_offset + ref->offset);
      double err = 0, norm = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        err += (got[i] - want[i]) * double(got[i] - want[i]);
        norm += double(want[i]) * want[i];
      }
      const double rel = std::sqrt(err / norm);
      ASSERT_TRUE(bound.count(t.type)) << t.name << " has an unexpected type";
      EXPECT_LE(rel, bound.at(t.type)) << name << " " << t.name;
      if (t.type != GgmlType::kF32) {
        EXPECT_GT(rel, 0.0) << name << " " << t.name;
      }
      ++seen[t.type];
    }
  }
  EXPECT_GT(seen[GgmlType::kQ4_K], 0);
  EXPECT_GT(seen[GgmlType::kQ5_K], 0);
  EXPECT_GT(seen[GgmlType::kQ6_K], 0);
}

// Every id that ends a generation, as llama.cpp gathers them: EOS, the eot / eom keys, and the
// chat families' turn ends found by text where the file marks them as control tokens.
TEST(GgufVocab, StopsAtEosEotAndTheControlTurnEnds) {
  const auto build = [](bool eot_key, const std::string& path) {
    GgufWriter g;
    g.set_string("general.architecture", "llama");
    g.set_string("tokenizer.ggml.model", "llama");
    g.set_strings("tokenizer.ggml.tokens",
                  {"<unk>", "<s>", "</s>", "<|im_end|>", "<end_of_turn>", "<|eot_id|>", "a"});
    g.set_f32s("tokenizer.ggml.scores", {0, 0, 0, 0, 0, 0, -1});
    // <|im_end|> and <|eot_id|> control (3), <end_of_turn> an ordinary token here (1).
    g.set_i32s("tokenizer.ggml.token_type", {2, 3, 3, 3, 1, 3, 1});
    g.set_u32("tokenizer.ggml.bos_token_id", 1);
    g.set_u32("tokenizer.ggml.eos_token_id", 2);
    if (eot_key) g.set_u32("tokenizer.ggml.eot_token_id", 4);
    g.write(path);
  };
  const std::string dir = ::testing::TempDir();
  build(false, dir + "/eog_a.gguf");
  EXPECT_EQ(load_gguf_tokenizer(dir + "/eog_a.gguf").stop_ids, (std::vector<int32_t>{2, 3, 5}));
  // A file's eot id counts whatever its type.
  build(true, dir + "/eog_b.gguf");
  EXPECT_EQ(load_gguf_tokenizer(dir + "/eog_b.gguf").stop_ids, (std::vector<int32_t>{2, 4, 3, 5}));
}

}  // namespace
}  // namespace tf
