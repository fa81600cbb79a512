#pragma once
// Cooperative cancellation of long CPU work that runs outside the engine (tokenizing a prompt,
// rendering a chat template): a CancelToken is cancelled from any thread (a client went away) or
// runs past its deadline; the work polls it through check_cancelled() at points where stopping
// leaves nothing half done, and the check throws Cancelled. The token reaches the work through a
// CancelScope on the thread that runs it, so the layers in between (a tokenizer, a template
// engine) need no parameter for it; with no scope the check costs one thread-local load.

#include <atomic>
#include <chrono>

#include "core/error.h"

namespace tf {

class CancelToken {
 public:
  using Clock = std::chrono::steady_clock;

  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  // Moves the deadline earlier (never later); work checked after it throws Cancelled.
  void limit_deadline(Clock::time_point t);
  Clock::time_point deadline() const {
    return Clock::time_point(Clock::duration(deadline_.load(std::memory_order_relaxed)));
  }

 private:
  std::atomic<bool> cancelled_{false};
  std::atomic<Clock::rep> deadline_{Clock::time_point::max().time_since_epoch().count()};
};

// Thrown by check_cancelled(): kind kCancelled when the token was cancelled, kDeadlineExceeded
// when its deadline passed.
class Cancelled : public Error {
 public:
  using Error::Error;
};

// Makes token the current thread's token until destroyed (scopes nest; the innermost counts).
class CancelScope {
 public:
  explicit CancelScope(CancelToken* token);
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  CancelToken* previous_;
};

// The current thread's token, or nullptr (the work may tighten its deadline).
CancelToken* current_cancel_token();

// Throws Cancelled if the current token is cancelled or past its deadline. Reads the clock only
// every `every` calls, so loops may call it per item.
void check_cancelled();

}  // namespace tf
