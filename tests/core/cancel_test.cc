#include "core/cancel.h"

#include <gtest/gtest.h>

#include <chrono>

namespace tf {
namespace {

using Clock = CancelToken::Clock;

// Calls check_cancelled() enough times for the clock to be read at least once.
void check_many() {
  for (int i = 0; i < 1024; ++i) check_cancelled();
}

TEST(Cancel, NoScopeNeverThrows) {
  EXPECT_EQ(current_cancel_token(), nullptr);
  EXPECT_NO_THROW(check_many());
}

TEST(Cancel, CancelledTokenThrowsAtTheNextCheck) {
  CancelToken token;
  CancelScope scope(&token);
  EXPECT_NO_THROW(check_many());
  token.cancel();
  try {
    check_cancelled();
    FAIL() << "no throw";
  } catch (const Cancelled& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCancelled);
  }
}

TEST(Cancel, PassedDeadlineThrowsDeadlineExceeded) {
  CancelToken token;
  token.limit_deadline(Clock::now() - std::chrono::milliseconds(1));
  CancelScope scope(&token);
  try {
    check_many();
    FAIL() << "no throw";
  } catch (const Cancelled& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDeadlineExceeded);
  }
}

TEST(Cancel, DeadlinesOnlyMoveEarlier) {
  CancelToken token;
  EXPECT_EQ(token.deadline(), Clock::time_point::max());
  const auto soon = Clock::now() + std::chrono::hours(1);
  token.limit_deadline(soon);
  token.limit_deadline(soon + std::chrono::hours(1));
  EXPECT_EQ(token.deadline(), soon);
  token.limit_deadline(soon - std::chrono::minutes(1));
  EXPECT_EQ(token.deadline(), soon - std::chrono::minutes(1));
}

TEST(Cancel, ScopesNestAndRestore) {
  CancelToken outer, inner;
  {
    CancelScope a(&outer);
    {
      CancelScope b(&inner);
      EXPECT_EQ(current_cancel_token(), &inner);
      outer.cancel();
      EXPECT_NO_THROW(check_cancelled());  // the innermost token counts
    }
    EXPECT_EQ(current_cancel_token(), &outer);
    EXPECT_THROW(check_cancelled(), Cancelled);
  }
  EXPECT_EQ(current_cancel_token(), nullptr);
}

}  // namespace
}  // namespace tf
