// Bounded JSON parsing: the nesting depth is measured outside strings, deep documents are
// refused with a message before any recursion, and ordinary ones parse as nlohmann would.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/json.h"

namespace tf {
namespace {

TEST(Json, NestingDepthSkipsStringsAndEscapes) {
  EXPECT_EQ(json_nesting_depth("1"), 0);
  EXPECT_EQ(json_nesting_depth("[]"), 1);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}], "c": {}})"), 4);
  EXPECT_EQ(json_nesting_depth(R"(["[[[[", "\"[[[", "\\", []])"), 2);
  EXPECT_EQ(json_nesting_depth("]]]][["), 2);                     // not JSON; never negative
  EXPECT_EQ(json_nesting_depth(std::string(1000, '['), 10), 11);  // stops past the limit
}

TEST(Json, DeepDocumentsAreRefusedWithoutRecursing) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  try {
    parse_json(deep, "request");
    FAIL() << "a million levels parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_STREQ(e.what(), "request: JSON nested deeper than 128 levels");
  }
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(parse_json(ok, "request").is_array());
  const std::string over = "[" + ok + "]";
  EXPECT_THROW(parse_json(over, "request"), Error);
  EXPECT_TRUE(parse_json("{\"a\": ", "x").is_discarded());
  EXPECT_EQ(parse_json(R"({"a": [1, 2]})", "x")["a"][1], 2);
}

}  // namespace
}  // namespace tf
