#pragma once
// ThreadSanitizer and gRPC's callback API. Debian's gRPC is built without ThreadSanitizer, so
// the synchronization with which it hands a call from thread to thread (its own mutexes,
// atomics and completion queues) is invisible, while our code on both sides of each handoff
// is instrumented: a reactor written on the preparation pool before Finish() and deleted in
// OnDone() on a gRPC thread reads as a race. Under TSan (TF_TSAN) these annotations tell it
// what gRPC guarantees: everything done before control passes into gRPC (Start*, Finish, a
// handler or callback returning) happens before every callback gRPC runs afterwards. Elsewhere
// they are empty.
//
// They are coarse (one address orders every handoff), so they can hide a race only between two
// pieces of our code that both touch gRPC; everything else (the pools, the engine, the job
// outputs the reactors drain) is checked as before.

#if defined(TF_TSAN)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace tf {

#if defined(TF_TSAN)
inline char grpc_handoff_sync;
// Before control passes into gRPC.
inline void grpc_handoff_release() {
  __tsan_release(&grpc_handoff_sync);
}
// Where gRPC passes control to us.
inline void grpc_handoff_acquire() {
  __tsan_acquire(&grpc_handoff_sync);
}
#else
inline void grpc_handoff_release() {}
inline void grpc_handoff_acquire() {}
#endif

// For the length of a handler or callback that gRPC runs.
struct GrpcCallbackScope {
  GrpcCallbackScope() { grpc_handoff_acquire(); }
  ~GrpcCallbackScope() { grpc_handoff_release(); }
  GrpcCallbackScope(const GrpcCallbackScope&) = delete;
  GrpcCallbackScope& operator=(const GrpcCallbackScope&) = delete;
};

}  // namespace tf
