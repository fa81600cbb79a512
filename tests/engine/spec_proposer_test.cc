#include "engine/spec_proposer.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace tf {
namespace {

using Ids = std::vector<int32_t>;

// The definition, written out the slow way: for n from max_n down, every earlier start, latest
// first; what follows the first match found.
Ids reference(const Ids& t, const NgramConfig& c) {
  const int64_t len = static_cast<int64_t>(t.size());
  for (int64_t n = c.max_n; n >= c.min_n; --n) {
    if (n >= len) continue;
    for (int64_t s = len - n - 1; s >= 0; --s) {
      if (c.max_window > 0 && s < len - c.max_window) break;
      bool same = true;
      for (int64_t i = 0; i < n; ++i) same = same && t[s + i] == t[len - n + i];
      if (!same) continue;
      Ids out;
      for (int64_t i = s + n; i < len && static_cast<int64_t>(out.size()) < c.num_tokens; ++i)
        out.push_back(t[i]);
      return out;
    }
  }
  return {};
}

TEST(NgramPropose, ProposesWhatFollowedTheLongestMostRecentMatch) {
  NgramConfig c;
  c.min_n = 1;
  c.max_n = 3;
  c.num_tokens = 3;
  // "5 6 7" recurs: what followed its latest earlier occurrence (8 9 1), not the first (8 2).
  EXPECT_EQ(ngram_propose(Ids{5, 6, 7, 8, 2, 5, 6, 7, 8, 9, 1, 4, 5, 6, 7}, c), (Ids{8, 9, 1}));
  // The longest suffix wins over a more recent shorter one: "1 2" -> 3 beats "2" -> 9.
  EXPECT_EQ(ngram_propose(Ids{1, 2, 3, 3, 2, 9, 1, 2}, c), (Ids{3, 3, 2}));
  // Fewer tokens than asked when the match is near the end.
  EXPECT_EQ(ngram_propose(Ids{4, 1, 4}, c), (Ids{1, 4}));
  // Nothing recurs, or the sequence is too short.
  EXPECT_TRUE(ngram_propose(Ids{1, 2, 3, 4}, c).empty());
  EXPECT_TRUE(ngram_propose(Ids{7}, c).empty());
  EXPECT_TRUE(ngram_propose(Ids{}, c).empty());
  c.min_n = 2;  // a one-token match no longer counts
  EXPECT_TRUE(ngram_propose(Ids{4, 1, 4}, c).empty());
  c.min_n = 0;
  EXPECT_THROW(ngram_propose(Ids{1, 1}, c), Error);
  c.min_n = 3;
  c.max_n = 2;
  EXPECT_THROW(ngram_propose(Ids{1, 1}, c), Error);
}

TEST(NgramPropose, EqualsTheDefinitionOnRandomSequences) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    NgramConfig c;
    c.min_n = 1 + static_cast<int32_t>(rng() % 3);
    c.max_n = c.min_n + static_cast<int32_t>(rng() % 4);
    c.num_tokens = 1 + static_cast<int32_t>(rng() % 6);
    c.max_window = rng() % 3 == 0 ? 0 : 4 + static_cast<int64_t>(rng() % 40);
    Ids t(rng() % 60);
    const int32_t vocab = 2 + static_cast<int32_t>(rng() % 6);  // small: matches are common
    for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
    ASSERT_EQ(ngram_propose(t, c), reference(t, c)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace tf
