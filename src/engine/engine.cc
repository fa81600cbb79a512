#include "engine/engine.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

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
int64_t blocks_for_budget(const ModelConfig& c, const EngineConfig& e) {
  const int64_t per_block = KvCache::bytes_per_block(c, e.block_size, e.kv_type);
  const int64_t n = e.kv_cache_bytes / per_block;
  if (n < 1) {
    fail(ErrorKind::kResourceExhausted,
         "a KV cache budget of {} bytes holds no block ({} bytes each)", e.kv_cache_bytes,
         per_block);
  }
  return n;
}
}  // namespace

Engine::Engine(Model& model, const Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
               EngineConfig config)
    : model_(model),
      tokenizer_(tokenizer),
      eos_ids_(std::move(eos_ids)),
      config_(config),
      pool_threads_(config.threads),
      kv_(model.config(), blocks_for_budget(model.config(), config), config.block_size,
          config.kv_type),
      pool_(kv_.num_blocks(), config.block_size),
      manager_(pool_, config.prefix_caching),
      scheduler_(config.scheduler, manager_) {
  if (config_.scheduler.max_num_batched_tokens < 1 || config_.scheduler.max_num_seqs < 1) {
    fail("max_num_batched_tokens and max_num_seqs must be at least 1");
  }
  stats_.kv_blocks_total = pool_.num_blocks();
  last_progress_ns_ = Clock::now().time_since_epoch().count();
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
  // Whoever still waits on a stream learns that the request ended.
  for (auto& r : active_) {
    RequestOutput out;
    out.finish = FinishReason::kAbort;
    out.request_done = true;
    r->stream->push(std::move(out));
  }
  for (auto& r : incoming_) {
    RequestOutput out;
    out.finish = FinishReason::kAbort;
    out.request_done = true;
    r->stream->push(std::move(out));
  }
}

std::shared_ptr<RequestStream> Engine::submit(GenerationRequest request) {
  const ModelConfig& c = model_.config();
  SamplingParams& p = request.params;
  p.validate(c.vocab_size);
  if (request.prompt.empty()) fail("the prompt is empty");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= c.vocab_size)
      fail("prompt token id {} is outside the vocabulary (0..{})", id, c.vocab_size - 1);
  }
  const int64_t total = static_cast<int64_t>(request.prompt.size()) + p.max_tokens;
  if (total > c.max_seq_len) {
    fail("the prompt ({} tokens) plus max_tokens ({}) exceeds the model's context of {} tokens",
         request.prompt.size(), p.max_tokens, c.max_seq_len);
  }
  // Beams may each end up with their own blocks: the request must fit num_beams of them.
  const int64_t need = manager_.blocks_for(total) * (p.beam_search() ? p.num_beams : 1);
  if (need > pool_.num_blocks()) {
    fail(ErrorKind::kResourceExhausted,
         "the prompt plus max_tokens needs {} KV blocks; the whole KV cache has {}", need,
         pool_.num_blocks());
  }
  auto r = std::make_unique<EngineRequest>();
  r->seed = p.seed ? *p.seed : random_seed();
  r->stream = std::make_shared<RequestStream>();
  r->timings.arrival = Clock::now();
  r->timings.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  r->spec = std::move(request);
  const bool beam = r->spec.params.beam_search();
  const int32_t slots = beam ? r->spec.params.num_beams : r->spec.params.candidates();
  for (int32_t i = 0; i < slots; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->request = r.get();
    seq->index = i;
    seq->tokens = r->spec.prompt;
    seq->prompt_len = static_cast<int64_t>(r->spec.prompt.size());
    if (!beam) {
      seq->sampler.emplace(r->spec.params, r->seed, static_cast<uint64_t>(i), r->spec.prompt,
                           tokenizer_, eos_ids_);
    }
    r->seqs.push_back(std::move(seq));
  }
  r->unfinished = beam ? 1 : static_cast<int32_t>(r->seqs.size());
  // The queue limit: counted last, once nothing else can refuse the request.
  int64_t queued = queued_.load();
  do {
    if (config_.max_queued_requests > 0 && queued >= config_.max_queued_requests) {
      fail(ErrorKind::kUnavailable, "the server is overloaded ({} requests waiting); retry later",
           queued);
    }
  } while (!queued_.compare_exchange_weak(queued, queued + 1));
  auto stream = r->stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    r->arrival_order = next_arrival_++;
    incoming_.push_back(std::move(r));
  }
  cv_.notify_all();
  return stream;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  EngineStats s = stats_;
  s.queued = queued_.load();  // live, not as of the last step
  return s;
}

void Engine::admit_new_requests() {
  std::vector<std::unique_ptr<EngineRequest>> fresh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(incoming_);
  }
  for (auto& r : fresh) {
    // Only the first sequence computes the prompt: the other samples of an n > 1 request and
    // the other beam slots run once a fork gives them the prompt's blocks.
    scheduler_.add(r->seqs[0].get());
    active_.push_back(std::move(r));
  }
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (scheduler_.idle() && active_.empty()) {
        idle_ = true;
        cv_.wait(lock, [&] { return stop_ || !incoming_.empty(); });
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
    try {
      step();
    } catch (const std::exception& e) {
      // A bug must not leave clients hanging: end every active request with abort.
      log::error("engine step failed: {}", e.what());
      for (auto& r : active_) {
        for (auto& s : r->seqs) {
          if (s->status == SequenceStatus::kFinished && !s->padding) continue;
          scheduler_.remove(s.get());
          s->status = SequenceStatus::kFinished;
        }
        RequestOutput out;
        out.finish = FinishReason::kAbort;
        out.request_done = true;
        r->stream->push(std::move(out));
        leave_queue(*r);
      }
      active_.clear();
    }
  }
}

void Engine::finish_sequence(Sequence* seq, RequestOutput& out) {
  EngineRequest* r = seq->request;
  if (config_.scheduler.static_batching && config_.scheduler.pad_finished) {
    scheduler_.pad(seq);
  } else {
    scheduler_.remove(seq);
  }
  seq->status = SequenceStatus::kFinished;
  out.finish = seq->sampler->finish_reason();
  out.cumulative_logprob = seq->sampler->cumulative_logprob();
  if (--r->unfinished == 0) {
    out.request_done = true;
    r->timings.finished = Clock::now();
    r->stream->set_timings(
        r->timings);  // before the last event, so a reader that saw it sees these
  }
}

void Engine::step() {
  // Requests past their deadline end as cancelled ones do.
  const auto now = Clock::now();
  for (auto& r : active_) {
    if (r->spec.deadline != Clock::time_point{} && now >= r->spec.deadline) r->stream->cancel();
  }
  // Cancelled requests leave first: their blocks are free for this step's schedule.
  for (auto& r : active_) {
    if (!r->stream->cancelled() || r->unfinished == 0) continue;
    if (r->spec.params.beam_search()) {
      finish_beams(*r, /*aborted=*/true);
      continue;
    }
    for (auto& s : r->seqs) {
      if (s->status == SequenceStatus::kFinished) continue;
      RequestOutput out;
      out.index = s->index;
      out.text = s->sampler->abort().text;
      finish_sequence(s.get(), out);
      r->stream->push(std::move(out));
    }
  }
  const SchedulerOutput sched = scheduler_.schedule();
  if (!sched.chunks.empty()) {
    const int64_t vocab = model_.config().vocab_size;
    batch_.clear();
    for (const auto& c : sched.chunks) {
      batch_.push_back({std::span<const int32_t>(c.seq->tokens.data() + c.start, c.count), c.start,
                        c.seq->block_table, false});
    }
    logits_.resize(sched.chunks.size() * vocab);
    model_.forward(batch_, kv_, logits_.data(), pool_threads_);

    const auto now = Clock::now();
    for (size_t i = 0; i < sched.chunks.size(); ++i) {
      Sequence* seq = sched.chunks[i].seq;
      if (seq->padding) continue;  // a padded row's logits are thrown away
      EngineRequest* r = seq->request;
      if (r->timings.first_scheduled == Clock::time_point{}) {
        r->timings.first_scheduled = now;
        r->timings.cached_prompt_tokens = sched.chunks[i].start;  // found in the prefix cache
        leave_queue(*r);
      }
      seq->num_computed += sched.chunks[i].count;
      manager_.cache_full_blocks(*seq, r->spec.cache_salt);
      if (seq->num_computed < seq->num_tokens()) continue;  // a prompt chunk: nothing to sample yet
      if (r->spec.params.beam_search()) {
        beam_rows_[seq] = static_cast<int64_t>(i);
        continue;
      }
      const std::span<float> row(logits_.data() + i * vocab, vocab);
      if (seq->index == 0 && !r->siblings_started && r->seqs.size() > 1) {
        r->siblings_started = true;
        fork_siblings(*r, row);  // before the lead's sampler changes the row
      }
      sample_and_stream(*seq, row);
    }
  }
  for (auto& r : active_) {
    if (r->spec.params.beam_search() && r->unfinished > 0) beam_step(*r);
  }
  beam_rows_.clear();
  // Retire finished requests.
  int64_t finished = 0, prompt_tokens = 0, generated_tokens = 0;
  // A request is retired once every sequence is done and none still pads a static batch.
  auto retired = [](const std::unique_ptr<EngineRequest>& r) {
    return r->unfinished == 0 &&
           std::none_of(r->seqs.begin(), r->seqs.end(), [](const auto& s) { return s->padding; });
  };
  for (auto& r : active_) {
    if (!retired(r)) continue;
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
  size_t bucket = 0;
  while (bucket < EngineStats::kBatchBuckets.size() && seqs > EngineStats::kBatchBuckets[bucket])
    ++bucket;
  ++stats_.batch_size_steps[bucket];
  stats_.batch_seqs += seqs;
  stats_.running = static_cast<int64_t>(scheduler_.num_running());
  stats_.waiting = static_cast<int64_t>(scheduler_.num_waiting());
  stats_.kv_blocks_used = pool_.num_used();
  stats_.prefix_queried_tokens = manager_.prefix_queries();
  stats_.prefix_hit_tokens = manager_.prefix_hits();
  stats_.preemptions = scheduler_.preemptions();
  stats_.requests_finished += finished;
  stats_.prompt_tokens += prompt_tokens;
  stats_.generated_tokens += generated_tokens;
}

void Engine::sample_and_stream(Sequence& seq, std::span<float> logits) {
  EngineRequest* r = seq.request;
  StepOutput so = seq.sampler->step(logits);
  seq.tokens.push_back(so.sample.token);
  if (r->timings.first_token == Clock::time_point{}) r->timings.first_token = Clock::now();
  ++r->timings.generated_tokens;
  RequestOutput out;
  out.index = seq.index;
  out.token_ids.push_back(so.sample.token);
  out.text = std::move(so.text);
  if (r->spec.params.logprobs) out.logprobs.push_back(so.sample);
  if (seq.sampler->finished()) finish_sequence(&seq, out);
  r->stream->push(std::move(out));
}

bool Engine::fork_blocks(const Sequence& parent, Sequence& child, const EngineRequest* keep) {
  const int bsz = pool_.block_size();
  const int64_t n = parent.num_computed;
  const int64_t full = n / bsz;
  std::vector<int32_t> table;
  for (int64_t i = 0; i < full; ++i) {
    pool_.retain(parent.block_table[i]);
    table.push_back(parent.block_table[i]);
  }
  if (n % bsz != 0) {
    // Make room by preempting other requests' newest sequences, as schedule() would.
    bool ok = pool_.allocate(1, table);
    while (!ok && scheduler_.preempt_newest_other(keep)) ok = pool_.allocate(1, table);
    if (!ok) {
      for (int32_t b : table) pool_.release(b);
      return false;
    }
    kv_.copy_block(parent.block_table[full], table.back());
  }
  child.block_table = std::move(table);
  child.block_hashes.assign(
      parent.block_hashes.begin(),
      parent.block_hashes.begin() + std::min<int64_t>(full, parent.block_hashes.size()));
  child.num_computed = n;
  return true;
}

void Engine::fork_siblings(EngineRequest& r, std::span<const float> logits) {
  // The other samples of an n > 1 request start from the lead's prompt: they share its full
  // blocks, copy its partial last block, and sample their first token from the same logits.
  const Sequence& lead = *r.seqs[0];
  std::vector<float> row;
  for (size_t k = 1; k < r.seqs.size(); ++k) {
    Sequence& s = *r.seqs[k];
    if (s.status == SequenceStatus::kFinished) continue;
    if (!fork_blocks(lead, s, &r)) {
      scheduler_.add(&s);  // no memory to fork: it computes the prompt itself, later
      continue;
    }
    row.assign(logits.begin(), logits.end());
    scheduler_.adopt_running(&s);
    sample_and_stream(s, row);
  }
}

void Engine::beam_step(EngineRequest& r) {
  const SamplingParams& p = r.spec.params;
  BeamState& beam = r.beam;
  const int live = beam.started ? beam.live : 1;
  std::vector<int64_t> rows(live, -1);
  bool all_ready = true;
  for (int b = 0; b < live; ++b) {
    auto it = beam_rows_.find(r.seqs[b].get());
    if (it == beam_rows_.end()) {
      all_ready = false;
    } else {
      rows[b] = it->second;
    }
  }
  if (!all_ready) {
    // A beam is still being recomputed after a preemption: the others compute their last token
    // again next step, so that every beam has its logits in the same step.
    for (int b = 0; b < live; ++b) {
      if (rows[b] >= 0) --r.seqs[b]->num_computed;
    }
    return;
  }
  if (!beam.started) beam.sums.assign(1, 0.0);
  const int64_t vocab = model_.config().vocab_size;
  std::vector<BeamCandidate> cands;
  std::vector<std::vector<int32_t>> generated(live);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int b = 0; b < live; ++b) {
    const Sequence& s = *r.seqs[b];
    generated[b].assign(s.tokens.begin() + s.prompt_len, s.tokens.end());
    TokenHistory h(std::span<const int32_t>(s.tokens.data(), s.prompt_len));
    for (int32_t t : generated[b]) h.append(t);
    std::copy_n(logits_.data() + rows[b] * vocab, vocab, row.data());
    add_beam_candidates(row, p, h, eos_ids_, beam.sums[b], b, cands);
  }
  const std::vector<BeamCandidate> next =
      select_beams(cands, p, eos_ids_, generated, beam.finished);
  const size_t n_generated = generated[0].size() + 1;
  if (r.timings.first_token == Clock::time_point{}) r.timings.first_token = Clock::now();
  r.timings.generated_tokens += static_cast<int64_t>(next.size());
  std::vector<std::vector<int32_t>> next_tokens;
  std::vector<double> next_sums;
  for (const auto& c : next) {
    next_tokens.push_back(r.seqs[c.beam]->tokens);
    next_tokens.back().push_back(c.token);
    next_sums.push_back(c.score);
  }
  if (beams_done(beam.finished, next, n_generated, p)) {
    for (auto& t : next_tokens) t.erase(t.begin(), t.begin() + r.seqs[0]->prompt_len);
    beam.finished = finalize_beams(std::move(beam.finished), next_tokens, next_sums, p);
    finish_beams(r, /*aborted=*/false);
    return;
  }
  // Fork: each new beam shares its parent's full blocks (refcounts) and gets a copy of the
  // parent's partial last block, the only one it will write into.
  std::vector<Sequence> forks(next.size());
  for (size_t j = 0; j < next.size(); ++j) {
    if (!fork_blocks(*r.seqs[next[j].beam], forks[j], &r)) {
      for (size_t k = 0; k < j; ++k) {
        for (int32_t b : forks[k].block_table) pool_.release(b);
      }
      log::warn("beam search request '{}' ran out of KV blocks while forking", r.spec.id);
      finish_beams(r, /*aborted=*/true);
      return;
    }
  }
  for (int b = 0; b < static_cast<int>(r.seqs.size()); ++b) {
    if (b < live || b < static_cast<int>(next.size())) scheduler_.remove(r.seqs[b].get());
  }
  for (size_t j = 0; j < next.size(); ++j) {
    Sequence& s = *r.seqs[j];
    s.tokens = std::move(next_tokens[j]);
    s.block_table = std::move(forks[j].block_table);
    s.block_hashes = std::move(forks[j].block_hashes);
    s.num_computed = forks[j].num_computed;
    scheduler_.adopt_running(&s);
  }
  beam.sums = std::move(next_sums);
  beam.live = static_cast<int32_t>(next.size());
  beam.started = true;
}

void Engine::finish_beams(EngineRequest& r, bool aborted) {
  for (auto& s : r.seqs) {
    scheduler_.remove(s.get());
    s->status = SequenceStatus::kFinished;
  }
  r.timings.finished = Clock::now();
  r.stream->set_timings(r.timings);
  r.unfinished = 0;
  if (aborted || r.beam.finished.empty()) {
    RequestOutput out;
    out.finish = FinishReason::kAbort;
    out.request_done = true;
    r.stream->push(std::move(out));
    return;
  }
  const auto& hyps = r.beam.finished;
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
  if (o.finish != FinishReason::kNone) {
    s.finish = o.finish;
    s.cumulative_logprob = o.cumulative_logprob;
  }
}

}  // namespace tf
