// ThreadSanitizer builds only (CMakeLists.txt: TOKENFLOW_TSAN): makes Abseil's Mutex and
// CondVar, on which Debian's (uninstrumented) gRPC builds its locks, visible to TSan. Each of
// their entry points is defined here, which the dynamic linker binds ahead of
// libabsl_synchronization's for the whole process (gRPC's calls included); each calls the
// library's own and tells TSan what it did: a lock acquires the mutex's address, an unlock
// releases it. gRPC's handoffs of a call between its threads then order our code on both sides
// as they really are (see grpc_sync.h for the handoffs that do not go through a mutex).
#include <absl/synchronization/mutex.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

template <typename Fn>
Fn real(const char* mangled) {
  void* p = dlsym(RTLD_NEXT, mangled);
  if (p == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found in Abseil (%s)\n", mangled, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(p);
}

// Abseil's symbols are in its inline namespace (Debian: debian3): the names below must match.
#define TF_ABSL_NS "7debian3"
#define TF_STR2(x) #x
#define TF_STR(x) TF_STR2(x)
constexpr bool same(const char* a, const char* b) {
  return *a == *b && (*a == 0 || same(a + 1, b + 1));
}
static_assert(same(TF_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME), TF_ABSL_NS + 1),
              "Abseil's inline namespace changed: update TF_ABSL_NS");

void acquire(const void* mu) {
  __tsan_acquire(const_cast<void*>(mu));
}
void release(const void* mu) {
  __tsan_release(const_cast<void*>(mu));
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

#define TF_REAL(type, name) static const auto fn = real<type>("_ZN4absl" TF_ABSL_NS name)

void Mutex::Lock() {
  TF_REAL(void (*)(Mutex*), "5Mutex4LockEv");
  fn(this);
  acquire(this);
}
void Mutex::Unlock() {
  TF_REAL(void (*)(Mutex*), "5Mutex6UnlockEv");
  release(this);
  fn(this);
}
bool Mutex::TryLock() {
  TF_REAL(bool (*)(Mutex*), "5Mutex7TryLockEv");
  const bool got = fn(this);
  if (got) acquire(this);
  return got;
}
void Mutex::ReaderLock() {
  TF_REAL(void (*)(Mutex*), "5Mutex10ReaderLockEv");
  fn(this);
  acquire(this);
}
void Mutex::ReaderUnlock() {
  TF_REAL(void (*)(Mutex*), "5Mutex12ReaderUnlockEv");
  release(this);
  fn(this);
}
bool Mutex::ReaderTryLock() {
  TF_REAL(bool (*)(Mutex*), "5Mutex13ReaderTryLockEv");
  const bool got = fn(this);
  if (got) acquire(this);
  return got;
}
void Mutex::LockWhen(const Condition& cond) {
  TF_REAL(void (*)(Mutex*, const Condition&), "5Mutex8LockWhenERKNS0_9ConditionE");
  fn(this, cond);
  acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) {
  TF_REAL(void (*)(Mutex*, const Condition&), "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  fn(this, cond);
  acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  TF_REAL(bool (*)(Mutex*, const Condition&, Duration),
          "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool r = fn(this, cond, timeout);
  acquire(this);  // held either way
  return r;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  TF_REAL(bool (*)(Mutex*, const Condition&, Time),
          "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool r = fn(this, cond, deadline);
  acquire(this);
  return r;
}
void Mutex::Await(const Condition& cond) {
  TF_REAL(void (*)(Mutex*, const Condition&), "5Mutex5AwaitERKNS0_9ConditionE");
  release(this);
  fn(this, cond);
  acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  TF_REAL(bool (*)(Mutex*, const Condition&, Duration),
          "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  release(this);
  const bool r = fn(this, cond, timeout);
  acquire(this);
  return r;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  TF_REAL(bool (*)(Mutex*, const Condition&, Time),
          "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  release(this);
  const bool r = fn(this, cond, deadline);
  acquire(this);
  return r;
}
void CondVar::Wait(Mutex* mu) {
  TF_REAL(void (*)(CondVar*, Mutex*), "7CondVar4WaitEPNS0_5MutexE");
  release(mu);
  fn(this, mu);
  acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  TF_REAL(bool (*)(CondVar*, Mutex*, Duration),
          "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  release(mu);
  const bool r = fn(this, mu, timeout);
  acquire(mu);
  return r;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  TF_REAL(bool (*)(CondVar*, Mutex*, Time), "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  release(mu);
  const bool r = fn(this, mu, deadline);
  acquire(mu);
  return r;
}

ABSL_NAMESPACE_END
}  // namespace absl
