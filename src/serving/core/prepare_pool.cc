#include "serving/core/prepare_pool.h"

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include <mutex>

#include "core/error.h"

namespace tf {

struct PreparePool::Impl {
  std::mutex mu;
  std::unique_ptr<boost::asio::thread_pool> pool;  // null: inline
};

PreparePool::PreparePool() : impl_(std::make_unique<Impl>()) {}

PreparePool::~PreparePool() {
  stop();
}

void PreparePool::start(int threads) {
  if (threads < 1) fail("the request preparation pool needs at least one thread");
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->pool) return;
  impl_->pool = std::make_unique<boost::asio::thread_pool>(static_cast<size_t>(threads));
  threads_ = threads;
}

void PreparePool::run(std::shared_ptr<CancelToken> token, std::function<void()> work) {
  in_progress_.fetch_add(1, std::memory_order_relaxed);
  auto task = [this, token = std::move(token), work = std::move(work)] {
    CancelScope scope(token.get());
    work();
    in_progress_.fetch_sub(1, std::memory_order_relaxed);
  };
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->pool) {
      boost::asio::post(*impl_->pool, std::move(task));
      return;
    }
  }
  task();
}

void PreparePool::stop() {
  std::unique_ptr<boost::asio::thread_pool> pool;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    pool = std::move(impl_->pool);
    threads_ = 0;
  }
  if (pool) pool->join();  // queued work still runs: each answers (or drops) its request
}

}  // namespace tf
