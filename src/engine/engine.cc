#include "engine/engine.h"

#include "model/bert.h"

#include <algorithm>
#include <new>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"

namespace tf {

// ---- RequestStream ---------------------------------------------------------------------------

void RequestStream::push(RequestOutput out) {
  std::function<void()> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (out.request_done) done_ = true;
    queue_.push_back(std::move(out));
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) listener();
}

bool RequestStream::try_next(RequestOutput& out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return false;
  out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

bool RequestStream::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && queue_.empty();
}

void RequestStream::set_listener(std::function<void()> listener) {
  bool pending = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    listener_ = listener;
    pending = !queue_.empty();
  }
  if (pending && listener) listener();
}

bool RequestStream::next(RequestOutput& out) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || done_; });
  if (queue_.empty()) return false;
  out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

bool RequestStream::next_for(RequestOutput& out, std::chrono::milliseconds timeout,
                             bool& timed_out) {
  std::unique_lock<std::mutex> lock(mu_);
  timed_out = !cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || done_; });
  if (timed_out || queue_.empty()) return false;
  out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

RequestTimings RequestStream::timings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timings_;
}

void RequestStream::set_timings(const RequestTimings& t) {
  std::lock_guard<std::mutex> lock(mu_);
  timings_ = t;
}

// ---- Engine ----------------------------------------------------------------------------------

namespace {
int64_t blocks_for_budget(const ModelConfig& c, const CacheLayout& layout, const EngineConfig& e) {
  const int64_t per_block = KvCache::bytes_per_block(c, layout, e.block_size, e.kv_type);
  const int64_t n = e.kv_cache_bytes / per_block;
  if (n < 1) {
    fail(ErrorKind::kResourceExhausted,
         "a KV cache budget of {} bytes holds no block ({} bytes each)", e.kv_cache_bytes,
         per_block);
  }
  return n;
}

// The engine's configuration with the block size its model's cache layout takes (a hybrid's
// attention blocks sized to its recurrent states: KvCache::block_size_for).
EngineConfig with_block_size(const ModelConfig& c, EngineConfig e) {
  if (!c.encoder_only())
    e.block_size = KvCache::block_size_for(c, CacheLayout::for_model(c, e.hybrid_kv_cache),
                                           e.block_size, e.kv_type);
  return e;
}

// The model's KV cache in its layout, as many blocks as the budget holds.
KvCache make_kv_cache(const ModelConfig& c, const EngineConfig& e) {
  // An encoder keeps no context between steps: one block of a plain layout, never used.
  if (c.encoder_only()) return KvCache(c, CacheLayout::single(c), 1, e.block_size, e.kv_type);
  CacheLayout layout = CacheLayout::for_model(c, e.hybrid_kv_cache);
  const int64_t blocks = blocks_for_budget(c, layout, e);
  return KvCache(c, std::move(layout), blocks, e.block_size, e.kv_type);
}

}  // namespace

// engine_disk.cc: the disk tier of the prefix cache, when the config names a directory and the
// model caches prefixes at all.
std::unique_ptr<KvDiskCache> make_disk_cache(const EngineConfig& config, const Model& model,
                                             const KvCache& kv, const KvCacheManager& manager,
                                             std::function<void()> on_loaded);

namespace {

void fill_kv_groups(EngineStats& stats, const KvCache& kv, const KvBlockPool& pool) {
  const CacheLayout& layout = kv.layout();
  stats.kv_dtype = kernels::kv_type_name(kv.type());
  stats.kv_groups.resize(layout.groups.size());
  for (size_t g = 0; g < layout.groups.size(); ++g) {
    auto& out = stats.kv_groups[g];
    out.kind = cache_kind_name(layout.groups[g].kind);
    out.window = layout.groups[g].window;
    out.layers = static_cast<int64_t>(layout.groups[g].layers.size());
    out.blocks_used = pool.num_used(static_cast<int>(g));
    out.bytes_per_token = kv.bytes_per_token(static_cast<int32_t>(g));
  }
}
}  // namespace

void set_speculative(EngineConfig& config, std::string_view method) {
  config.speculative_ngram = false;
  config.speculative_draft.clear();
  if (method == "ngram") {
    config.speculative_ngram = true;
  } else if (method.starts_with("draft:")) {
    config.speculative_draft = std::string(method.substr(6));
    if (config.speculative_draft.empty()) fail("--speculative draft:PATH names no path");
  } else if (method != "off" && !method.empty()) {
    fail("speculative decoding must be off, ngram or draft:PATH, got '{}'", method);
  }
}

Engine::Engine(Model& model, const Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
               EngineConfig config, Model* draft)
    : model_(model),
      tokenizer_(tokenizer),
      eos_ids_(std::move(eos_ids)),
      config_(with_block_size(model.config(), config)),
      pool_threads_(config.threads),
      kv_(make_kv_cache(model.config(), config_)),
      pool_(kv_.num_blocks(), kv_.block_size(), static_cast<int>(kv_.layout().num_groups())),
      // Each group's blocks behind its window are released (a global layer, as Gemma 2/3's or
      // Qwen's first max_window_layers, reads every key: its group keeps them).
      manager_(pool_, config.prefix_caching, KvCacheManager::specs_of(kv_.layout())),
      scheduler_(config.scheduler, manager_) {
  if (config_.scheduler.max_num_batched_tokens < 1 || config_.scheduler.max_num_seqs < 1) {
    fail("max_num_batched_tokens and max_num_seqs must be at least 1");
  }
  if (config_.speculative_ngram || !config_.speculative_draft.empty())
    (void)ngram_propose({}, config_.ngram);  // throws if invalid (num_tokens is both's)
  if (config_.speculative_ngram && !config_.speculative_draft.empty())
    fail("speculative decoding takes one proposer: ngram or a draft model");
  if ((config_.speculative_ngram || !config_.speculative_draft.empty()) && manager_.recurrent())
    fail(ErrorKind::kUnsupported,
         "speculative decoding is not supported for {}: its recurrent state cannot be rolled "
         "back past a rejected proposal",
         model.config().architecture);
  if (!config_.speculative_draft.empty()) {
    if (!draft) fail("no draft model was loaded for {}", config_.speculative_draft);
    const ModelConfig& d = draft->config();
    if (d.vocab_size != model.config().vocab_size)
      fail("the draft model {} has a vocabulary of {} tokens; the model's has {}",
           config_.speculative_draft, d.vocab_size, model.config().vocab_size);
    // Enough for spec_max_running sequences at the full context (proposals are made for no
    // more), and no more blocks than the model's own cache has.
    const int64_t per_seq = manager_.blocks_for(model.config().max_seq_len) + 1;
    const int64_t blocks =
        std::min(pool_.num_blocks(), std::max<int64_t>(config_.spec_max_running, 1) * per_seq);
    draft_ = std::make_unique<DraftProposer>(*draft, blocks, config_.block_size, config_.kv_type);
  }
  stats_.kv_blocks_total = pool_.num_blocks();
  fill_kv_groups(stats_, kv_, pool_);
  if (model.config().encoder_only()) {
    if (!dynamic_cast<EncoderModel*>(&model))
      fail(ErrorKind::kInternal, "'{}' is an encoder without encode()",
           model.config().architecture);
    stats_.kv_blocks_total = 0;
    stats_.kv_groups.clear();
  }
  last_progress_ns_ = Clock::now().time_since_epoch().count();
  grammar_worker_ = std::make_unique<GrammarWorker>([this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      masks_ready_ = true;
    }
    cv_.notify_all();
  });
  disk_ = make_disk_cache(config_, model, kv_, manager_, [this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      disk_ready_ = true;
    }
    cv_.notify_all();
  });
  stats_.kv_disk = disk_ != nullptr;
  thread_ = std::thread([this] { loop(); });
}

void Engine::leave_queue(EngineRequest& r) {
  if (!r.queued) return;
  r.queued = false;
  --queued_;
}

bool Engine::responsive(std::chrono::milliseconds max_step) const {
  if (!thread_.joinable()) return false;
  if (idle_) return true;
  const auto last = Clock::time_point(Clock::duration(last_progress_ns_.load()));
  return Clock::now() - last <= max_step;
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  grammar_worker_.reset();
  disk_.reset();  // the blocks offered so far are written first
  // Whoever still waits on a stream learns that the request ended.
  for (auto& r : active_) r->stream->push(aborted_output());
  for (auto& r : incoming_) r->stream->push(aborted_output());
}

std::unique_ptr<EngineRequest> Engine::prepare(GenerationRequest request) {
  const ModelConfig& c = model_.config();
  SamplingParams& p = request.params;
  p.validate(c.vocab_size);
  if (p.grammar) p.grammar_budget = config_.grammar_budget;
  if (request.prompt.empty()) fail("the prompt is empty");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= c.vocab_size)
      fail("prompt token id {} is outside the vocabulary (0..{})", id, c.vocab_size - 1);
  }
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  if (c.encoder_only()) return prepare_encoder(std::move(request));
  if (request.pooling == Pooling::kCls || request.pooling == Pooling::kMax || request.scores ||
      !request.token_types.empty())
    fail(ErrorKind::kInvalidArgument,
         "CLS and max pooling, token types and scores are for encoders; '{}' is a generator",
         c.architecture);
  if (!request.score_tokens.empty()) {
    if (request.pooling != Pooling::kNone || c.encoder_decoder())
      fail(ErrorKind::kInvalidArgument,
           "a request scores its prompt or embeds it, on a decoder-only model");
    for (int32_t id : request.score_tokens)
      if (id < 0 || id >= c.vocab_size)
        fail("score token id {} is outside the vocabulary (0..{})", id, c.vocab_size - 1);
  }
  int64_t total = prompt + p.max_tokens, encoder = 0;
  if (c.encoder_decoder()) {
    // The prompt is the encoder's input; the decoder starts from its start token.
    if (prompt > c.max_seq_len)
      fail("the prompt ({} tokens) exceeds the encoder's context of {} tokens", prompt,
           c.max_seq_len);
    if (request.prompt_logprobs || request.pooling != Pooling::kNone)
      fail(ErrorKind::kUnsupported,
           "prompt logprobs and embeddings are not supported for the encoder-decoder {}",
           c.architecture);
    encoder = prompt;
    total = 1 + p.max_tokens;
    if (total > c.max_seq_len)
      fail(
          "max_tokens ({}) exceeds the decoder's context of {} tokens (its start token "
          "included)",
          p.max_tokens, c.max_seq_len);
  } else if (total > c.max_seq_len) {
    fail("the prompt ({} tokens) plus max_tokens ({}) exceeds the model's context of {} tokens",
         request.prompt.size(), p.max_tokens, c.max_seq_len);
  }
  // Beams may each end up with their own blocks: the request must fit num_beams of them.
  const int64_t need =
      manager_.blocks_needed(total, config_.scheduler.max_num_batched_tokens, encoder) *
      (p.beam_search() ? p.num_beams : 1);
  if (need > pool_.num_blocks()) {
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.oom_kv_refused;
    }
    fail(ErrorKind::kResourceExhausted,
         "the prompt plus max_tokens needs {} KV blocks; the whole KV cache has {}", need,
         pool_.num_blocks());
  }
  return build_request(std::move(request), c.encoder_decoder() ? c.decoder_start_id : -1);
}

std::unique_ptr<EngineRequest> Engine::build_request(GenerationRequest request,
                                                     int32_t decoder_start) {
  auto r = std::make_unique<EngineRequest>();
  r->seed = request.params.seed ? *request.params.seed : random_seed();
  r->stream = std::make_shared<RequestStream>();
  r->timings.arrival = Clock::now();
  r->timings.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  r->spec = std::move(request);
  r->group.create_sequences(*r, tokenizer_, eos_ids_, decoder_start);
  return r;
}

std::unique_ptr<EngineRequest> Engine::prepare_encoder(GenerationRequest request) {
  const ModelConfig& c = model_.config();
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  if (request.pooling == Pooling::kNone && !request.scores)
    fail(ErrorKind::kInvalidArgument,
         "'{}' is an encoder: it embeds and scores texts, it does not generate", c.architecture);
  if (request.scores && c.classifier == ModelConfig::Classifier::kNone)
    fail(ErrorKind::kInvalidArgument, "'{}' has no classifier head: it embeds, it does not score",
         c.architecture);
  if (prompt > c.max_seq_len)
    fail("the input ({} tokens) exceeds the encoder's context of {} tokens", prompt, c.max_seq_len);
  if (!request.token_types.empty() && request.token_types.size() != request.prompt.size())
    fail("{} token types for {} tokens", request.token_types.size(), request.prompt.size());
  for (int32_t t : request.token_types)
    if (t < 0 || t >= std::max<int64_t>(c.type_vocab_size, 1))
      fail("token type {} is outside the model's {} types", t,
           std::max<int64_t>(c.type_vocab_size, 1));
  if (request.params.candidates() != 1 || request.params.beam_search())
    fail(ErrorKind::kInvalidArgument, "an encoder's request has one result (n = 1, no beams)");
  return build_request(std::move(request), -1);
}

void Engine::enqueue(std::vector<std::unique_ptr<EngineRequest>> requests) {
  // The queue limit: counted last, once nothing else can refuse the requests.
  const int64_t n = static_cast<int64_t>(requests.size());
  int64_t queued = queued_.load();
  do {
    if (config_.max_queued_requests > 0 && queued + n > config_.max_queued_requests) {
      fail(ErrorKind::kUnavailable, "the server is overloaded ({} requests waiting); retry later",
           queued);
    }
  } while (!queued_.compare_exchange_weak(queued, queued + n));
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : requests) {
      r->arrival_order = next_arrival_++;
      incoming_.push_back(std::move(r));
    }
  }
  cv_.notify_all();
}

std::shared_ptr<RequestStream> Engine::submit(GenerationRequest request) {
  std::vector<std::unique_ptr<EngineRequest>> one;
  one.push_back(prepare(std::move(request)));
  auto stream = one.front()->stream;
  enqueue(std::move(one));
  return stream;
}

std::vector<std::shared_ptr<RequestStream>> Engine::submit_all(
    std::vector<GenerationRequest> requests) {
  std::vector<std::unique_ptr<EngineRequest>> prepared;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (auto& r : requests) {
    prepared.push_back(prepare(std::move(r)));
    streams.push_back(prepared.back()->stream);
  }
  enqueue(std::move(prepared));
  return streams;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  EngineStats s = stats_;
  s.queued = queued_.load();  // live, not as of the last step
  s.grammar_jobs = grammar_worker_ ? grammar_worker_->pending() : 0;
  if (disk_) s.disk = disk_->stats();  // live: writes finish after the steps that offered them
  return s;
}

void Engine::admit_new_requests() {
  std::vector<std::unique_ptr<EngineRequest>> fresh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(incoming_);
  }
  const bool encoder = model_.config().encoder_only();
  for (auto& r : fresh) {
    // Only the first sequence computes the prompt: the other samples of an n > 1 request run
    // once they fork from it, and beams fork from the prompt's. An encoder's requests wait in
    // active_ alone (encoder_step takes them in order).
    if (!encoder && !start_disk_load(r->group.first())) scheduler_.add(&r->group.first());
    active_.push_back(std::move(r));
  }
}

void Engine::wait_until_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return stop_ || (idle_ && incoming_.empty()); });
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (scheduler_.idle() && active_.empty()) {
        if (std::exchange(trim_when_idle_, false)) {
          // A request failed since the engine was last idle: what its transient work left free
          // in the threads' malloc arenas (a grammar matcher of tens of MB, say) is given back
          // before the engine sleeps, so that idle memory does not depend on when it failed.
          lock.unlock();
          release_free_memory();
          lock.lock();
          if (!scheduler_.idle() || !active_.empty() || !incoming_.empty() || stop_) continue;
        }
        idle_ = true;
        idle_cv_.notify_all();
        // (A finished disk load may hold blocks of a request that ended: they go back.)
        cv_.wait(lock, [&] { return stop_ || !incoming_.empty() || disk_ready_; });
        last_progress_ns_ = Clock::now().time_since_epoch().count();
        idle_ = false;
        if (!stop_ && config_.batch_timeout_micros > 0) {
          // TF Serving's batch_timeout_micros: let a batch gather before the first step.
          cv_.wait_for(lock, std::chrono::microseconds(config_.batch_timeout_micros), [&] {
            return stop_ ||
                   static_cast<int64_t>(incoming_.size()) >= config_.scheduler.max_num_seqs;
          });
        }
      }
      if (stop_) return;
    }
    admit_new_requests();
    const auto started = Clock::now();
    bool worked = true;
    try {
      worked = step();
    } catch (const std::exception& e) {
      if (dynamic_cast<const std::bad_alloc*>(&e)) {
        std::lock_guard<std::mutex> lock(stats_mu_);
        ++stats_.oom_alloc_failures;
      }
      // A bug must not leave clients hanging: end every active request, as failed (a server
      // error, not a cancellation).
      log::error("engine step failed: {}", e.what());
      for (auto& r : active_) {
        // Every sequence still open ends with the error (beam search: the request as one).
        std::vector<int32_t> open;
        if (!r->group.beam_search()) {
          for (const auto& s : r->group.sequences())
            if (s->status != SequenceStatus::kFinished) open.push_back(s->index);
        }
        if (open.empty()) open.push_back(0);
        r->group.remove_all(scheduler_);
        for (size_t i = 0; i < open.size(); ++i) {
          RequestOutput out = failed_output();
          out.index = open[i];
          out.request_done = i + 1 == open.size();
          r->stream->push(std::move(out));
        }
        leave_queue(*r);
      }
      active_.clear();
      deferred_.clear();
      loading_.clear();
      if (draft_) draft_->release_all();
    }
    const double busy = std::chrono::duration<double>(Clock::now() - started).count();
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_.busy_seconds += busy;
    }
    if (!worked) {
      // Only sequences waiting for their masks: sleep (not counted busy) until the worker
      // finishes one or a request arrives, not in a loop that takes the worker's core.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100),
                   [&] { return stop_ || masks_ready_ || disk_ready_ || !incoming_.empty(); });
    }
  }
}

bool Engine::step() {
  if (model_.config().encoder_only()) return encoder_step();
  end_cancelled_requests();
  install_disk_loads();
  resume_deferred();
  propose();
  const SchedulerOutput sched = scheduler_.schedule();
  for (Sequence* p : sched.preempted) {
    // Its row is gone with its blocks: recomputed, it is drawn afresh (the mask job stays).
    if (p->deferred) {
      p->deferred = false;
      std::erase(deferred_, p);
    }
  }
  if (sched.chunks.empty() && (!deferred_.empty() || !loading_.empty())) {
    retire_and_record(sched);
    return false;
  }
  run_forward(sched);
  note_first_scheduled(sched);
  gather_prompt_rows(sched);
  const std::vector<ReadySequence> ready = scheduler_.update(sched);
  offer_to_disk(sched);  // before sampling, which frees the blocks of sequences that end
  sample(ready);
  step_beam_searches();
  retire_and_record(sched);
  return true;
}

void Engine::finish_encoder_request(EngineRequest& r, RequestOutput out) {
  Sequence& seq = r.group.first();
  seq.status = SequenceStatus::kFinished;
  (void)r.group.finish_sample();
  out.index = 0;
  out.request_done = true;
  r.timings.finished = Clock::now();
  r.stream->set_timings(r.timings);
  r.stream->push(std::move(out));
}

bool Engine::encoder_step() {
  auto& model = static_cast<EncoderModel&>(model_);
  const ModelConfig& c = model_.config();
  const auto now = Clock::now();
  // Cancelled, or past its deadline: ended without a result, before it is computed.
  for (auto& r : active_) {
    if (r->spec.deadline != Clock::time_point{} && now >= r->spec.deadline) r->stream->cancel();
    if (r->stream->cancelled() && !r->group.done()) {
      RequestOutput out;
      out.finish = FinishReason::kAbort;
      finish_encoder_request(*r, std::move(out));
    }
  }
  // The oldest inputs, as many as max_num_batched_tokens tokens and max_num_seqs hold (one at
  // least: a long input alone).
  std::vector<EngineRequest*> batch;
  int64_t tokens = 0;
  for (auto& r : active_) {
    if (r->group.done()) continue;
    const int64_t n = static_cast<int64_t>(r->spec.prompt.size());
    if (!batch.empty() && (tokens + n > config_.scheduler.max_num_batched_tokens ||
                           static_cast<int64_t>(batch.size()) >= config_.scheduler.max_num_seqs))
      break;
    batch.push_back(r.get());
    tokens += n;
  }
  if (!batch.empty()) {
    std::vector<EncoderInput> inputs;
    bool scores = false;
    for (EngineRequest* r : batch) {
      inputs.push_back({r->spec.prompt, r->spec.token_types});
      scores = scores || r->spec.scores;
      if (r->timings.first_scheduled == Clock::time_point{}) r->timings.first_scheduled = now;
      leave_queue(*r);
    }
    const int64_t dim = c.dim;
    hidden_.resize(static_cast<size_t>(tokens * dim));
    model.encode(inputs, hidden_.data(), pool_threads_);
    std::vector<float> logits;
    if (scores) {
      logits.resize(inputs.size() * static_cast<size_t>(c.num_labels));
      model.classify(inputs, hidden_.data(), logits.data(), pool_threads_);
    }
    const auto done = Clock::now();
    int64_t row = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      EngineRequest& r = *batch[i];
      const int64_t len = static_cast<int64_t>(r.spec.prompt.size());
      RequestOutput out;
      if (r.spec.scores) {
        out.embedding.assign(logits.begin() + static_cast<int64_t>(i) * c.num_labels,
                             logits.begin() + static_cast<int64_t>(i + 1) * c.num_labels);
      } else {
        const EncoderPooling pooling = r.spec.pooling == Pooling::kMean   ? EncoderPooling::kMean
                                       : r.spec.pooling == Pooling::kMax  ? EncoderPooling::kMax
                                       : r.spec.pooling == Pooling::kLast ? EncoderPooling::kLast
                                                                          : EncoderPooling::kCls;
        out.embedding.resize(static_cast<size_t>(dim));
        pool_hidden(hidden_.data() + row * dim, len, dim, pooling, out.embedding.data());
      }
      out.finish = FinishReason::kStop;
      r.timings.first_token = done;
      finish_encoder_request(r, std::move(out));
      row += len;
    }
  }
  int64_t finished = 0, prompt_tokens = 0;
  auto retired = [](const std::unique_ptr<EngineRequest>& r) { return r->group.done(); };
  for (auto& r : active_) {
    if (!retired(r)) continue;
    leave_queue(*r);
    ++finished;
    prompt_tokens += r->timings.prompt_tokens;
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(), retired), active_.end());
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.steps;
  last_progress_ns_ = Clock::now().time_since_epoch().count();
  stats_.batched_tokens += tokens;
  const auto seqs = static_cast<int64_t>(batch.size());
  stats_.count_batch(seqs);
  stats_.running = 0;
  stats_.running_peak = std::max(stats_.running_peak, seqs);
  stats_.waiting = static_cast<int64_t>(active_.size());
  stats_.requests_finished += finished;
  stats_.prompt_tokens += prompt_tokens;
  return true;
}

void Engine::resume_deferred() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    masks_ready_ = false;
  }
  for (size_t i = 0; i < deferred_.size();) {
    Sequence& seq = *deferred_[i];
    if (!seq.deferred || seq.status == SequenceStatus::kFinished) {
      seq.deferred = false;
      deferred_.erase(deferred_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (!seq.sampler->mask_ready()) {
      ++i;
      continue;
    }
    seq.deferred = false;
    deferred_.erase(deferred_.begin() + static_cast<std::ptrdiff_t>(i));
    StepOutput out;
    try {
      out = seq.sampler->resume();
    } catch (const std::exception& e) {
      fail_request(*seq.request, e);
      continue;
    }
    if (out.deferred) {  // (not ready after all: wait again)
      seq.deferred = true;
      deferred_.push_back(&seq);
      continue;
    }
    stream_step(seq, std::move(out), true);
  }
}

void Engine::step_beam_searches() {
  const int64_t vocab = model_.config().vocab_size;
  for (auto& r : active_) {
    if (!r->group.beam_search() || r->group.done()) continue;
    int64_t tokens = 0;
    try {
      tokens = r->group.step_beams(logits_.data(), vocab, eos_ids_, scheduler_);
    } catch (const std::exception& e) {
      fail_request(*r, e);
      continue;
    }
    if (tokens > 0 && r->timings.first_token == Clock::time_point{})
      r->timings.first_token = Clock::now();
    r->timings.generated_tokens += tokens;
    if (r->group.done()) finish_beams(*r, /*aborted=*/false);
  }
}

void Engine::end_cancelled_requests() {
  const auto now = Clock::now();
  for (auto& r : active_) {
    if (r->spec.deadline != Clock::time_point{} && now >= r->spec.deadline) r->stream->cancel();
    if (!r->stream->cancelled() || r->group.done()) continue;
    if (r->group.beam_search()) {
      r->group.remove_all(scheduler_);
      finish_beams(*r, /*aborted=*/true);
      continue;
    }
    for (const auto& s : r->group.sequences()) {
      if (s->status == SequenceStatus::kFinished) continue;
      RequestOutput out;
      out.index = s->index;
      out.text = s->sampler->abort().text;
      finish_sequence(s.get(), out);
      r->stream->push(std::move(out));
    }
  }
}

void Engine::run_forward(const SchedulerOutput& sched) {
  if (sched.chunks.empty()) return;
  for (const BlockCopy& c : sched.block_copies) kv_.copy_block(c.src, c.dst, c.group);
  batch_.clear();
  first_row_.clear();
  last_row_.clear();
  int64_t rows = 0;
  bool hidden = false;
  for (const auto& c : sched.chunks) {
    const GenerationRequest& spec = c.seq->request->spec;
    // Every row of a chunk that computes prompt positions, for the requests that gather them,
    // and of one that computes proposals, to verify them.
    const bool all =
        ((spec.all_prompt_rows() && c.start < c.seq->prompt_len) || c.seq->num_drafts > 0) &&
        !c.seq->padding;
    batch_.push_back({std::span<const int32_t>(c.seq->tokens.data() + c.start, c.count), c.start,
                      c.seq->block_table, all, c.seq->group_tables});
    batch_.back().lora = spec.lora.get();
    if (!c.seq->encoder_tokens.empty()) {  // an encoder-decoder: encode first, if not yet
      batch_.back().encoder_len = static_cast<int64_t>(c.seq->encoder_tokens.size());
      if (!c.seq->cross_ready) batch_.back().encoder_tokens = c.seq->encoder_tokens;
    }
    first_row_.push_back(rows);
    rows += all ? c.count : 1;
    last_row_.push_back(rows - 1);
    hidden = hidden || spec.pooling != Pooling::kNone;
  }
  logits_.resize(static_cast<size_t>(rows * model_.config().vocab_size));
  if (hidden) hidden_.resize(static_cast<size_t>(rows * model_.config().dim));
  model_.forward(batch_, kv_, logits_.data(), pool_threads_, hidden ? hidden_.data() : nullptr);
  for (const auto& c : sched.chunks) c.seq->cross_ready = !c.seq->encoder_tokens.empty();
}

void Engine::propose() {
  // With sliding windows too: a window's blocks are released only behind the first position a
  // rollback can write again (KvCacheManager::release_outside_window).
  if ((!config_.speculative_ngram && !draft_) || config_.scheduler.static_batching) return;
  if (static_cast<int64_t>(scheduler_.num_running()) > config_.spec_max_running) return;
  int64_t context = model_.config().max_seq_len;
  if (draft_) context = std::min(context, draft_->model().config().max_seq_len);
  int64_t free_blocks = pool_.num_blocks() - pool_.num_used();
  std::vector<DraftProposer::Job> jobs;
  for (auto& r : active_) {
    const GenerationRequest& spec = r->spec;
    if (!spec.speculate || spec.pooling != Pooling::kNone || r->group.beam_search()) continue;
    for (const auto& s : r->group.sequences()) {
      Sequence& seq = *s;
      const int64_t len = seq.num_tokens(), generated = len - seq.prompt_len;
      // Decoding: its last token (sampled) is all that waits to be computed.
      if (seq.status != SequenceStatus::kRunning || seq.padding || seq.num_drafts > 0 ||
          generated < 1 || seq.num_computed != len - 1 || seq.sampler->finished())
        continue;
      if (seq.spec_pause > 0) {  // its proposals kept failing: plain steps for a while
        --seq.spec_pause;
        continue;
      }
      // No more than the tokens it may still emit (a step emits up to proposals + 1) and the
      // context holds.
      int64_t room = std::min<int64_t>(spec.params.max_tokens - generated - 1, context - len);
      room = std::min<int64_t>(room, config_.ngram.num_tokens);
      if (room < 1) continue;
      std::vector<int32_t> drafts;
      if (config_.speculative_ngram) {
        drafts = ngram_propose(seq.tokens, config_.ngram);
        if (static_cast<int64_t>(drafts.size()) > room) drafts.resize(static_cast<size_t>(room));
        if (drafts.empty()) continue;
        room = static_cast<int64_t>(drafts.size());
      }
      // Only from free blocks: speculation never preempts anyone.
      const int64_t need = manager_.blocks_to_grow(len, room);
      if (need > free_blocks) continue;
      free_blocks -= need;
      if (draft_) {
        jobs.push_back({&seq, room, {}, {}});
        continue;
      }
      seq.tokens.insert(seq.tokens.end(), drafts.begin(), drafts.end());
      seq.num_drafts = static_cast<int64_t>(drafts.size());
    }
  }
  if (jobs.empty()) return;
  draft_->propose(jobs, pool_threads_, config_.scheduler.max_num_batched_tokens);
  for (DraftProposer::Job& j : jobs) {
    if (j.drafts.empty()) continue;
    j.seq->tokens.insert(j.seq->tokens.end(), j.drafts.begin(), j.drafts.end());
    j.seq->num_drafts = static_cast<int64_t>(j.drafts.size());
    j.seq->draft_q = std::move(j.q);
  }
}

void Engine::gather_prompt_rows(const SchedulerOutput& sched) {
  const int64_t vocab = model_.config().vocab_size, dim = model_.config().dim;
  for (size_t i = 0; i < sched.chunks.size(); ++i) {
    if (!batch_[i].all_logits) continue;
    const ScheduledChunk& c = sched.chunks[i];
    Sequence& seq = *c.seq;
    EngineRequest& r = *seq.request;
    for (int64_t j = 0; j < c.count; ++j) {
      const int64_t pos = c.start + j, row = first_row_[i] + j;
      if (pos >= seq.prompt_len) break;
      // Row pos predicts the prompt's token pos + 1; entry k of the list is token k + 1's.
      if (r.spec.prompt_logprobs && pos + 1 < seq.prompt_len &&
          static_cast<int64_t>(r.prompt_logprobs.size()) == pos) {
        PromptLogprob lp;
        lp.sample = logprobs_of(std::span<const float>(logits_.data() + row * vocab, vocab),
                                seq.tokens[pos + 1], *r.spec.prompt_logprobs, &lp.rank);
        r.prompt_logprobs.push_back(std::move(lp));
      }
      if (r.spec.pooling == Pooling::kMean && r.pooled_positions == pos) {
        r.pooled_sum.resize(static_cast<size_t>(dim), 0.0);
        const float* h = hidden_.data() + row * dim;
        for (int64_t d = 0; d < dim; ++d) r.pooled_sum[d] += h[d];
        ++r.pooled_positions;
      }
    }
  }
}

void Engine::finish_embedding(Sequence& seq, int64_t chunk) {
  EngineRequest& r = *seq.request;
  const int64_t dim = model_.config().dim;
  RequestOutput out;
  out.index = seq.index;
  if (!r.spec.score_tokens.empty()) {  // a reranker's: its tokens' logits after the prompt
    const float* row = logits_.data() + last_row_[chunk] * model_.config().vocab_size;
    for (int32_t t : r.spec.score_tokens) out.embedding.push_back(row[t]);
  } else if (r.spec.pooling == Pooling::kMean) {
    out.embedding.resize(static_cast<size_t>(dim));
    const double n = static_cast<double>(std::max<int64_t>(r.pooled_positions, 1));
    for (int64_t d = 0; d < dim; ++d) out.embedding[d] = static_cast<float>(r.pooled_sum[d] / n);
  } else {
    const float* h = hidden_.data() + last_row_[chunk] * dim;
    out.embedding.assign(h, h + dim);
  }
  if (r.timings.first_token == Clock::time_point{}) r.timings.first_token = Clock::now();
  finish_sequence(&seq, out);
  out.finish = FinishReason::kStop;  // its sampler never ran: the prompt is all there was
  r.stream->push(std::move(out));
}

void Engine::note_first_scheduled(const SchedulerOutput& sched) {
  const auto now = Clock::now();
  for (const auto& c : sched.chunks) {
    EngineRequest* r = c.seq->request;
    if (c.seq->padding || r->timings.first_scheduled != Clock::time_point{}) continue;
    r->timings.first_scheduled = now;
    r->timings.cached_prompt_tokens = c.start;  // found in the prefix cache
    leave_queue(*r);
  }
}

void Engine::sample(const std::vector<ReadySequence>& ready) {
  const int64_t vocab = model_.config().vocab_size;
  draws_.clear();
  size_t copies = 0;
  for (const ReadySequence& r : ready) {
    Sequence& seq = *r.seq;
    SequenceGroup& group = seq.request->group;
    if (seq.request->spec.pooling != Pooling::kNone || !seq.request->spec.score_tokens.empty()) {
      finish_embedding(seq, r.row);
      continue;
    }
    int64_t row_index = last_row_[r.row];  // r.row: the chunk
    std::vector<int32_t> drafts;
    std::vector<float> q;
    if (seq.num_drafts > 0) {
      // Proposals: the rows from the last real token on verify them. A chunk that began past
      // that token (a preempted sequence recomputed in pieces) has lost its row: the proposals
      // are dropped and the token is computed again next step.
      const int64_t len = seq.num_tokens() - seq.num_drafts;
      drafts.assign(seq.tokens.begin() + len, seq.tokens.end());
      seq.tokens.resize(static_cast<size_t>(len));
      seq.num_drafts = 0;
      q = std::exchange(seq.draft_q, {});
      const int64_t start = batch_[r.row].start_pos;  // the chunk's first position
      if (start > len - 1) {
        seq.num_computed = len - 1;
        manager_.truncate(seq);
        continue;
      }
      row_index = first_row_[r.row] + (len - 1 - start);
    }
    if (group.beam_search()) {
      group.set_beam_row(seq, row_index);
      continue;
    }
    const std::span<float> row(logits_.data() + row_index * vocab, vocab);
    for (Sequence* sibling : group.start_siblings(seq, scheduler_)) {
      if (sibling_rows_.size() <= copies) sibling_rows_.emplace_back();
      std::vector<float>& copy = sibling_rows_[copies++];
      copy.assign(row.begin(), row.end());
      draws_.push_back({sibling, copy, {}, {}, {}, {}, {}});
    }
    draws_.push_back({&seq, row, {}, std::move(drafts), std::move(q), {}, {}});
  }
  // Each draw reads and writes only its sequence's sampler and logits row (the tokenizer is
  // shared, and const). At 32 sequences a serial loop of greedy draws was ~8 % of a 110M int8
  // step; a sampled draw over a 50k vocabulary costs 0.1-1.7 ms.
  pool_threads_.parallel_for(static_cast<int64_t>(draws_.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      Draw& d = draws_[i];
      try {
        SequenceSampler& sampler = *d.seq->sampler;
        // Expensive masks go to the worker, the draw deferred: not for a sequence with
        // proposals (its verification rows are this step's) nor in static batching (whose rows
        // move together).
        sampler.set_worker(d.drafts.empty() && !config_.scheduler.static_batching
                               ? grammar_worker_.get()
                               : nullptr);
        auto row = [&](size_t j) {
          return std::span<float>(d.logits.data() + static_cast<int64_t>(j) * vocab, vocab);
        };
        // Proposal j is verified on row j; the row after the last proposal draws a free token.
        // Point-mass proposals (prompt lookup, greedy drafts) are checked against the token the
        // sequence's own draw makes there (with the uniform it would use without speculation):
        // equal, the draw goes on to the next row; else that token is the step's last. A
        // proposal is thus accepted with probability p(token), as rejection sampling would, and
        // every emitted token is the one plain decoding would draw. A sampled draft's proposals
        // are verified by rejection sampling against their q (SequenceSampler::verify).
        auto draw = [&](size_t j) {
          if (j < d.drafts.size() && !d.q.empty())
            return sampler.verify(row(j), d.drafts[j],
                                  std::span<const float>(d.q.data() + j * vocab, vocab));
          return sampler.step(row(j));
        };
        d.out = draw(0);
        if (d.out.deferred) continue;
        const StepOutput* last = &d.out;
        for (size_t j = 0;
             j < d.drafts.size() && !sampler.finished() && last->sample.token == d.drafts[j]; ++j) {
          d.more.push_back(draw(j + 1));
          last = &d.more.back();
        }
      } catch (...) {
        d.error = std::current_exception();
      }
    }
  });
  // What a request brought (its grammar, its processors) failed in its draw: the request ends
  // alone, before anything of this step is streamed for it.
  std::vector<const EngineRequest*> failed;
  for (Draw& d : draws_) {
    if (!d.error) continue;
    EngineRequest& r = *d.seq->request;
    if (std::find(failed.begin(), failed.end(), &r) != failed.end()) continue;
    failed.push_back(&r);
    try {
      std::rethrow_exception(d.error);
    } catch (const std::exception& e) {
      fail_request(r, e);
    } catch (...) {
      fail_request(r, std::runtime_error("an exception of unknown type"));
    }
  }
  EngineStats spec;  // this step's speculation counters, added to stats_ once
  for (Draw& d : draws_) {
    Sequence& seq = *d.seq;
    if (!failed.empty() && std::find(failed.begin(), failed.end(), seq.request) != failed.end())
      continue;
    if (d.out.deferred) {  // drawn once the worker has its mask (resume_deferred)
      seq.deferred = true;
      deferred_.push_back(&seq);
      continue;
    }
    const bool speculated = !d.drafts.empty();
    const int64_t len = seq.num_tokens();
    stream_step(seq, std::move(d.out), d.more.empty());
    for (size_t j = 0; j < d.more.size(); ++j)
      stream_step(seq, std::move(d.more[j]), j + 1 == d.more.size());
    if (!speculated) continue;
    // Accepted: the leading proposals the emitted tokens equal.
    int64_t accepted = 0;
    while (accepted < static_cast<int64_t>(d.drafts.size()) && len + accepted < seq.num_tokens() &&
           seq.tokens[static_cast<size_t>(len + accepted)] == d.drafts[accepted])
      ++accepted;
    if (seq.status != SequenceStatus::kFinished) {
      // The accepted proposals' K/V stay; the rejected ones' positions are written again.
      seq.num_computed = len + accepted;
      manager_.truncate(seq);
      manager_.cache_full_blocks(seq, scheduler_.salt(&seq));
      if (draft_) draft_->keep(seq, len + accepted);
      const double rate = static_cast<double>(accepted) / static_cast<double>(d.drafts.size());
      seq.spec_acceptance = 0.5 * seq.spec_acceptance + 0.5 * rate;
      if (seq.spec_acceptance < config_.spec_min_acceptance) {
        seq.spec_pause = config_.spec_pause_steps;
        seq.spec_acceptance = 1.0;  // a fresh start once the pause is over
      }
    }
    ++spec.spec_drafts;
    spec.spec_draft_tokens += static_cast<int64_t>(d.drafts.size());
    spec.spec_accepted_tokens += accepted;
    spec.spec_emitted_tokens += seq.num_tokens() - len;
    for (int64_t j = 0; j < accepted && j < static_cast<int64_t>(EngineStats::kSpecPositions); ++j)
      ++spec.spec_accepted_per_position[j];
  }
  if (spec.spec_drafts == 0) return;
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.spec_drafts += spec.spec_drafts;
  stats_.spec_draft_tokens += spec.spec_draft_tokens;
  stats_.spec_accepted_tokens += spec.spec_accepted_tokens;
  stats_.spec_emitted_tokens += spec.spec_emitted_tokens;
  for (size_t j = 0; j < EngineStats::kSpecPositions; ++j)
    stats_.spec_accepted_per_position[j] += spec.spec_accepted_per_position[j];
}

void Engine::stream_step(Sequence& seq, StepOutput so, bool last) {
  EngineRequest* r = seq.request;
  seq.tokens.push_back(so.sample.token);
  if (r->timings.first_token == Clock::time_point{}) r->timings.first_token = Clock::now();
  ++r->timings.generated_tokens;
  RequestOutput out;
  out.index = seq.index;
  out.token_ids.push_back(so.sample.token);
  out.text = std::move(so.text);
  if (r->spec.params.logprobs) out.logprobs.push_back(std::move(so.sample));
  if (r->spec.prompt_logprobs && !r->prompt_logprobs_sent) {
    out.prompt_logprobs = std::move(r->prompt_logprobs);
    r->prompt_logprobs_sent = true;
  }
  if (last && seq.sampler->finished()) finish_sequence(&seq, out);
  r->stream->push(std::move(out));
}

void Engine::finish_sequence(Sequence* seq, RequestOutput& out) {
  EngineRequest* r = seq->request;
  forget_disk_load(*seq);
  if (config_.scheduler.static_batching && config_.scheduler.pad_finished) {
    scheduler_.pad(seq);
  } else {
    scheduler_.remove(seq);
  }
  seq->status = SequenceStatus::kFinished;
  if (draft_) draft_->release(*seq);
  out.finish = seq->sampler->finish_reason();
  out.cumulative_logprob = seq->sampler->cumulative_logprob();
  if (r->group.finish_sample()) {
    out.request_done = true;
    r->timings.finished = Clock::now();
    // Before the last event, so that a reader who saw it sees these.
    r->stream->set_timings(r->timings);
  }
}

void Engine::fail_request(EngineRequest& r, const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  const ErrorKind kind = err != nullptr ? err->kind() : ErrorKind::kInternal;
  if (dynamic_cast<const std::bad_alloc*>(&e)) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.oom_alloc_failures;
  }
  log::warn("request {} ended alone: {}", r.spec.id, e.what());
  // What failed may have held tens of MB (a grammar's matcher with 65,536 ways, in a compute
  // thread's malloc arena): given back once the engine is idle (loop), not here on the step.
  trim_when_idle_ = true;
  RequestOutput failure = failed_output();
  failure.error_kind = kind;
  if (kind != ErrorKind::kInternal) failure.error = e.what();  // the client's input: say why
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.requests_failed;
  }
  if (r.group.beam_search()) {
    r.group.remove_all(scheduler_);
    r.timings.finished = Clock::now();
    r.stream->set_timings(r.timings);
    r.stream->push(std::move(failure));
    return;
  }
  for (const auto& s : r.group.sequences()) {
    if (s->status == SequenceStatus::kFinished) continue;
    RequestOutput out;
    out.index = s->index;
    try {
      out.text = s->sampler->abort().text;  // the text held back so far
    } catch (const std::exception&) {
    }
    finish_sequence(s.get(), out);
    out.finish = FinishReason::kAbort;
    out.error = failure.error;
    out.error_kind = kind;
    r.stream->push(std::move(out));
  }
}

void Engine::finish_beams(EngineRequest& r, bool aborted) {
  r.timings.finished = Clock::now();
  r.stream->set_timings(r.timings);
  const auto& hyps = r.group.beams().finished;
  if (aborted || hyps.empty()) {
    r.stream->push(aborted_output());
    return;
  }
  for (size_t i = 0; i < hyps.size(); ++i) {
    RequestOutput out;
    out.index = static_cast<int32_t>(i);
    out.token_ids = hyps[i].tokens;
    std::vector<int32_t> shown = hyps[i].tokens;
    if (hyps[i].finished_by_eos) shown.pop_back();
    if (tokenizer_) out.text = tokenizer_->decode(shown, r.spec.params.skip_special_tokens);
    out.finish = hyps[i].finished_by_eos ? FinishReason::kStop : FinishReason::kLength;
    out.cumulative_logprob = hyps[i].sum_logprob;
    out.request_done = i + 1 == hyps.size();
    r.stream->push(std::move(out));
  }
}

void Engine::retire_and_record(const SchedulerOutput& sched) {
  int64_t finished = 0, prompt_tokens = 0, generated_tokens = 0;
  // A request is retired once every sequence is done and none still pads a static batch.
  auto retired = [](const std::unique_ptr<EngineRequest>& r) {
    return r->group.done() && !r->group.padding();
  };
  for (auto& r : active_) {
    if (!retired(r)) continue;
    for (const auto& s : r->group.sequences()) forget_disk_load(*s);
    leave_queue(*r);  // ended (cancelled) before it ever ran
    ++finished;
    prompt_tokens += r->timings.prompt_tokens;
    generated_tokens += r->timings.generated_tokens;
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(), retired), active_.end());
  std::lock_guard<std::mutex> lock(stats_mu_);
  ++stats_.steps;
  last_progress_ns_ = Clock::now().time_since_epoch().count();
  stats_.batched_tokens += sched.num_tokens;
  const auto seqs = static_cast<int64_t>(sched.chunks.size());
  stats_.count_batch(seqs);
  stats_.running = static_cast<int64_t>(scheduler_.num_running());
  stats_.running_peak = std::max(stats_.running_peak, stats_.running);
  stats_.waiting = static_cast<int64_t>(scheduler_.num_waiting());
  stats_.kv_blocks_used = pool_.num_used();
  if (draft_) stats_.draft_kv_blocks_used = draft_->blocks_used();
  stats_.prefix_queried_tokens = manager_.prefix_queries();
  stats_.prefix_hit_tokens = manager_.prefix_hits();
  stats_.preemptions = scheduler_.preemptions();
  stats_.kv_block_copies = scheduler_.block_copies();
  stats_.kv_window_releases = manager_.window_releases();
  fill_kv_groups(stats_, kv_, pool_);
  stats_.disk_loaded_tokens = disk_loaded_tokens_;
  stats_.requests_finished += finished;
  stats_.prompt_tokens += prompt_tokens;
  stats_.generated_tokens += generated_tokens;
}

std::vector<CompletedSequence> run_to_completion(Engine& engine, GenerationRequest request) {
  const int32_t n = request.params.beam_search() ? request.params.num_return_sequences
                                                 : request.params.candidates();
  auto stream = engine.submit(std::move(request));
  std::vector<CompletedSequence> out(static_cast<size_t>(n));
  RequestOutput o;
  while (stream->next(o)) append_output(out.at(o.index), o);
  return out;
}

void append_output(CompletedSequence& s, const RequestOutput& o) {
  s.tokens.insert(s.tokens.end(), o.token_ids.begin(), o.token_ids.end());
  s.text += o.text;
  s.logprobs.insert(s.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
  if (!o.prompt_logprobs.empty()) s.prompt_logprobs = o.prompt_logprobs;
  if (!o.embedding.empty()) s.embedding = o.embedding;
  if (o.finish != FinishReason::kNone) {
    s.finish = o.finish;
    s.cumulative_logprob = o.cumulative_logprob;
  }
  if (!o.error.empty()) {
    s.error = o.error;
    s.error_kind = o.error_kind;
  }
}

}  // namespace tf
