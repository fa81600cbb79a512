#pragma once
// A test suite fixture holding the real stories260K model and its tokenizer, loaded once per
// suite.

#include <gtest/gtest.h>

#include <memory>

#include "model/model.h"
#include "model/test_util.h"
#include "tokenizer/tokenizer_loader.h"

namespace tf::testing {

class StoriesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = load_model(stories_bin()).release();
    tok_ = load_tokenizer_for(stories_bin(), 512).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tok_;
    model_ = nullptr;
    tok_ = nullptr;
  }
  static inline Model* model_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
};

}  // namespace tf::testing
