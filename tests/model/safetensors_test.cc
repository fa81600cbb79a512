#include "model/safetensors.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/test_util.h"
#include "model/weight_store.h"

namespace tf {
namespace {

using testing::safetensors_bytes;

SafetensorsHeader parse(const std::string& bytes) {
  return parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                           "t.safetensors");
}

std::string error_of(const std::string& bytes) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, ParsesTensorsAndMetadata) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})";
  auto h = parse(safetensors_bytes(header, std::string(32, '\0')));
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.data_start, 8 + header.size());
  for (const auto& t : h.tensors) {
    if (t.name == "a") {
      EXPECT_EQ(t.dtype, DType::kF32);
      EXPECT_EQ(t.shape, (Shape{2, 3}));
      EXPECT_EQ(t.end, 24u);
    } else {
      EXPECT_EQ(t.name, "b");
      EXPECT_EQ(t.dtype, DType::kBF16);
      EXPECT_EQ(t.begin, 24u);
    }
  }
}

TEST(Safetensors, ScalarAndEmptyTensorsAreFine) {
  const std::string header =
      R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"F16","shape":[0,5],"data_offsets":[4,4]}})";
  EXPECT_EQ(parse(safetensors_bytes(header, std::string(4, '\0'))).tensors.size(), 2u);
}

struct BadCase {
  const char* name;
  std::string bytes;
  const char* expect;  // substring of the message
};

TEST(Safetensors, RejectsMalformedHeadersWithClearMessages) {
  const std::string ok_data(24, '\0');
  auto one = [](const std::string& entry) { return std::string(R"({"w":)") + entry + "}"; };
  std::vector<BadCase> cases = {
      {"too short", "abc", "too short"},
      {"header longer than file",
       [] {
         std::string s(8, '\0');
         s[0] = 100;
         return s + "{}";
       }(),
       "larger than the file"},
      {"huge header length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}",
       "exceeds the limit"},
      {"not json", safetensors_bytes("{not json", ok_data), "not valid JSON"},
      {"not an object", safetensors_bytes("[1,2]", ok_data), "not a JSON object"},
      {"entry not object", safetensors_bytes(one("3"), ok_data), "not an object"},
      {"unknown dtype",
       safetensors_bytes(one(R"({"dtype":"F33","shape":[6],"data_offsets":[0,24]})"), ok_data),
       "unknown dtype 'F33'"},
      {"missing dtype", safetensors_bytes(one(R"({"shape":[6],"data_offsets":[0,24]})"), ok_data),
       "missing dtype"},
      {"missing shape", safetensors_bytes(one(R"({"dtype":"F32","data_offsets":[0,24]})"), ok_data),
       "missing shape"},
      {"negative dim",
       safetensors_bytes(one(R"({"dtype":"F32","shape":[-6],"data_offsets":[0,24]})"), ok_data),
       "non-negative"},
      {"offsets past end",
       safetensors_bytes(one(R"({"dtype":"F32","shape":[6],"data_offsets":[0,2400]})"), ok_data),
       "outside"},
      {"offsets reversed",
       safetensors_bytes(one(R"({"dtype":"F32","shape":[6],"data_offsets":[24,0]})"), ok_data),
       "outside"},
      {"size mismatch",
       safetensors_bytes(one(R"({"dtype":"F32","shape":[5],"data_offsets":[0,24]})"), ok_data),
       "needs 20 bytes"},
      {"bad offsets",
       safetensors_bytes(one(R"({"dtype":"F32","shape":[6],"data_offsets":[0]})"), ok_data),
       "data_offsets"},
      {"overflowing shape",
       safetensors_bytes(
           one(R"({"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,24]})"),
           ok_data),
       "overflow"},
      {"rank too high",
       safetensors_bytes(one(R"({"dtype":"F32","shape":[1,1,1,1,6],"data_offsets":[0,24]})"),
                         ok_data),
       "rank"},
      {"overlap",
       safetensors_bytes(
           R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
           ok_data),
       "overlap"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_of(c.bytes);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": got '" << msg << "'";
    if (c.bytes.size() >= 8) {
      EXPECT_NE(msg.find("t.safetensors"), std::string::npos) << c.name;
    }
  }
}

TEST(Safetensors, ShardedIndexLoadsEveryShardAndChecksTheMap) {
  testing::TempDir dir;
  const std::string h1 = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string h2 = R"({"b":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  testing::write_bytes(dir.file("s1.safetensors"), safetensors_bytes(h1, std::string(8, '\0')));
  testing::write_bytes(dir.file("s2.safetensors"), safetensors_bytes(h2, std::string(4, '\0')));
  testing::write_bytes(dir.file("model.safetensors.index.json"),
                       R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  WeightStore store;
  load_safetensors_dir(dir.path(), store);
  EXPECT_TRUE(store.has("a"));
  EXPECT_TRUE(store.has("b"));
  EXPECT_EQ(store.get("b").dtype, DType::kF16);

  testing::write_bytes(dir.file("model.safetensors.index.json"),
                       R"({"weight_map":{"a":"s1.safetensors","c":"s2.safetensors"}})");
  WeightStore store2;
  EXPECT_THROW(load_safetensors_dir(dir.path(), store2), Error);

  testing::write_bytes(dir.file("model.safetensors.index.json"), R"({"weight_map":{"a":"../x"}})");
  WeightStore store3;
  EXPECT_THROW(load_safetensors_dir(dir.path(), store3), Error);
}

TEST(WeightStore, ConvertsAndChecksShapes) {
  testing::TempDir dir;
  // bf16 1.0 = 0x3f80, 2.0 = 0x4000 (little-endian bytes)
  const std::string header = R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})";
  testing::write_bytes(dir.file("model.safetensors"),
                       safetensors_bytes(header, std::string("\x80\x3f\x00\x40", 4)));
  WeightStore store;
  load_safetensors_file(dir.file("model.safetensors"), store);
  const float* w = store.f32("w", {2});
  EXPECT_EQ(w[0], 1.0f);
  EXPECT_EQ(w[1], 2.0f);
  EXPECT_EQ(store.f32("w", {2}), w) << "converted once";
  EXPECT_EQ(store.get("w").dtype, DType::kBF16) << "the stored dtype stays visible";
  try {
    store.f32("w", {1, 2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected [1, 2]"), std::string::npos) << e.what();
  }
  try {
    store.get("missing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("missing tensor 'missing'"), std::string::npos);
  }
}

}  // namespace
}  // namespace tf
