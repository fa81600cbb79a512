#include "core/cancel.h"

namespace tf {
namespace {

thread_local CancelToken* t_token = nullptr;
thread_local unsigned t_calls = 0;

}  // namespace

void CancelToken::limit_deadline(Clock::time_point t) {
  const Clock::rep want = t.time_since_epoch().count();
  Clock::rep cur = deadline_.load(std::memory_order_relaxed);
  while (want < cur && !deadline_.compare_exchange_weak(cur, want, std::memory_order_relaxed)) {
  }
}

CancelScope::CancelScope(CancelToken* token) : previous_(t_token) {
  t_token = token;
}

CancelScope::~CancelScope() {
  t_token = previous_;
}

CancelToken* current_cancel_token() {
  return t_token;
}

void check_cancelled() {
  const CancelToken* t = t_token;
  if (!t) return;
  if (t->cancelled()) throw Cancelled(ErrorKind::kCancelled, "the request was cancelled");
  // The clock only every 256th call: a loop per byte stays cheap; 256 steps of tokenizing
  // are microseconds.
  if ((++t_calls & 255u) != 0) return;
  if (CancelToken::Clock::now() >= t->deadline())
    throw Cancelled(ErrorKind::kDeadlineExceeded,
                    "the request ran past its deadline while its prompt was being prepared");
}

}  // namespace tf
