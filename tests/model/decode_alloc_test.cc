// The decode loop must not touch the heap once its buffers have grown: a replaced global
// operator new counts allocations while a window is open.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <numeric>

#include "core/thread_pool.h"
#include "model/model.h"
#include "model/test_util.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace tf {
namespace {

TEST(DecodeLoop, AllocatesNothingPerToken) {
  auto model = load_model(testing::stories_bin());
  ThreadPool pool(2);
  KvCache kv(model->config(), 8, 16);
  std::vector<int32_t> table(8);
  std::iota(table.begin(), table.end(), 0);
  std::vector<float> logits(model->config().vocab_size);
  std::vector<int32_t> token = {1};
  auto step = [&](int64_t pos) {
    SequenceChunk c{token, pos, table, false};
    model->forward(std::span<const SequenceChunk>(&c, 1), kv, logits.data(), pool);
  };
  step(0);
  step(1);  // warm-up: buffers grow to their steady size
  g_allocations = 0;
  g_counting = true;
  for (int64_t pos = 2; pos < 64; ++pos) step(pos);
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0);
}

}  // namespace
}  // namespace tf
