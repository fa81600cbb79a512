#pragma once
// One model instance served to many requests: a thread runs the step loop (schedule, one forward
// pass over the ragged batch, update the scheduler with what it computed, sample every sequence
// that reached the end of its tokens, stream the results), while any thread may submit or
// cancel. No lock is held across a forward pass.

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_request.h"
#include "engine/kv_block_pool.h"
#include "engine/kv_cache_manager.h"
#include "engine/kv_disk_cache.h"
#include "engine/scheduler.h"
#include "engine/spec_draft.h"
#include "engine/spec_proposer.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tf {

struct EngineConfig {
  SchedulerConfig scheduler;
  int64_t kv_cache_bytes = 256ll << 20;  // KV budget; the block count follows from the model
  int block_size = KvCache::kDefaultBlockSize;
  kernels::KvType kv_type = kernels::KvType::kF32;  // --kv-cache-dtype
  bool prefix_caching = true;
  // Sliding-window layers beside global ones get cache groups of their own that release the
  // blocks behind the window (CacheLayout); false keeps every block of every layer (vLLM's
  // --disable-hybrid-kv-cache-manager), to compare.
  bool hybrid_kv_cache = true;
  int64_t batch_timeout_micros = 0;  // an idle engine waits this long to gather a first batch
  int threads = 0;                   // compute threads (0: one per core)
  // Requests submitted and not yet scheduled at which submit() refuses more (kUnavailable); 0:
  // no limit. Bounds memory under overload: the excess is shed instead of queued.
  int64_t max_queued_requests = 0;
  // Speculative decoding by prompt lookup (spec_proposer.h): a decoding sequence whose suffix
  // recurred proposes up to num_tokens tokens, verified in the next step's forward pass.
  // Proposals are made only while at most spec_max_running sequences run (a busy batch already
  // uses the compute that verification rows would take).
  bool speculative_ngram = false;
  NgramConfig ngram;  // num_tokens: the most proposals per step, by either proposer
  int64_t spec_max_running = 8;
  // Speculative decoding with a draft model (spec_draft.h): the path ModelInstance loads it
  // from (as draft_weight_type) and hands to the Engine. Exclusive with speculative_ngram.
  std::string speculative_draft;
  kernels::WeightType draft_weight_type = kernels::WeightType::kF32;
  // Adapting: a sequence whose proposals' running acceptance rate falls below this stops
  // proposing for spec_pause_steps steps (a proposal that fails costs verification rows).
  double spec_min_acceptance = 0.3;
  int64_t spec_pause_steps = 16;
  // What a request's grammar (structured output) may cost: its mask and matcher's CPU time per
  // token and in all (--grammar-token-budget-ms, --grammar-request-budget-ms), on the thread that
  // computes them (CPU time: a loaded machine does not fail honest grammars). Past either, its
  // request ends alone with an error. A mask that takes longer than inline_time (2 ms) is
  // computed by the GrammarWorker while the other sequences step on.
  GrammarBudget grammar_budget{std::chrono::milliseconds(5000), std::chrono::milliseconds(60000)};
  // The prefix cache's tier on disk (kv_disk.dir non-empty; engine_disk.cc): every full block
  // is written there as it is computed, and a new request whose prefix goes past the RAM cache
  // waits (off the step loop) for the blocks the directory has before it is scheduled. For
  // models whose prefixes are cached at all (not recurrent, not encoder-decoder).
  KvDiskConfig kv_disk;
};

// Sets the speculation fields of `config` from "off", "ngram" or "draft:PATH" (the --speculative
// flag and a model config's `speculative`); throws Error naming anything else.
void set_speculative(EngineConfig& config, std::string_view method);

struct EngineStats {
  int64_t steps = 0;
  int64_t batched_tokens = 0;  // token rows forwarded, over all steps (padding rows included)
  int64_t running = 0, waiting = 0;
  int64_t grammar_jobs = 0;  // masks being computed off the engine thread (live)
  int64_t running_peak = 0;  // the most sequences running after any step
  int64_t kv_blocks_total = 0, kv_blocks_used = 0;
  int64_t prefix_queried_tokens = 0, prefix_hit_tokens = 0;
  int64_t preemptions = 0;
  int64_t kv_block_copies = 0;     // shared blocks copied on first write (forks: n > 1, beams)
  int64_t kv_window_releases = 0;  // blocks released behind a sliding window
  // Each cache group of the layout: its kind, window, layers and blocks in use now.
  struct KvGroup {
    const char* kind = "";
    int64_t window = 0;
    int64_t layers = 0;
    int64_t blocks_used = 0;
    int64_t bytes_per_token = 0;  // K and V over its layers (0: a recurrent group)
  };
  const char* kv_dtype = "";  // --kv-cache-dtype
  std::vector<KvGroup> kv_groups;
  int64_t requests_finished = 0;
  int64_t queued = 0;  // submitted and not yet scheduled (live, not as of the last step)
  int64_t prompt_tokens = 0, generated_tokens = 0;
  // Sequences per step: steps with at most kBatchBuckets[i] sequences (not cumulative), for a
  // histogram; batch_seqs is their sum.
  static constexpr std::array<int64_t, 10> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  std::array<int64_t, kBatchBuckets.size() + 1> batch_size_steps{};  // the last: above 512
  int64_t batch_seqs = 0;
  // A step of `seqs` sequences into the histogram and the sum.
  void count_batch(int64_t seqs) {
    size_t bucket = 0;
    while (bucket < kBatchBuckets.size() && seqs > kBatchBuckets[bucket]) ++bucket;
    ++batch_size_steps[bucket];
    batch_seqs += seqs;
  }
  // Seconds the engine spent in steps (forward passes, sampling): busy_seconds over wall time is
  // the compute pool's utilization, the CPU's counterpart of GPU utilization.
  double busy_seconds = 0.0;
  // Out of memory: requests refused because their prompt plus max_tokens can never fit the KV
  // cache; steps that failed to allocate (std::bad_alloc: their requests ended as failed).
  int64_t oom_kv_refused = 0, oom_alloc_failures = 0;
  // Requests ended alone by a failure in their own draw (a grammar past its budget).
  int64_t requests_failed = 0;
  // Speculative decoding (vLLM's spec_decode counters): tokens proposed, proposals accepted,
  // tokens emitted by verification steps, and accepted per proposal position.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0, spec_emitted_tokens = 0;
  static constexpr size_t kSpecPositions = 16;
  int64_t draft_kv_blocks_used = 0;  // the draft model's KV blocks in use
  std::array<int64_t, kSpecPositions> spec_accepted_per_position{};
  // The prefix cache on disk (EngineConfig::kv_disk): whether it is on, its I/O figures, and
  // the prompt tokens whose blocks came from it into the RAM cache (the compute it saved).
  bool kv_disk = false;
  KvDiskStats disk;
  int64_t disk_loaded_tokens = 0;
};

class Engine {
 public:
  // The engine does not own the model or tokenizer; they must outlive it. eos_ids end sequences.
  // draft: the draft model when config.speculative_draft names one (same vocabulary).
  Engine(Model& model, const Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
         EngineConfig config, Model* draft = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request; throws Error (nothing queued) when it can never run:
  // invalid parameters, token ids outside the vocabulary, prompt + max_tokens over the context
  // or over the whole KV pool; or (kUnavailable) when max_queued_requests already wait.
  std::shared_ptr<RequestStream> submit(GenerationRequest request);
  // Several requests queued together (one client request's prompts, a Predict's instances): all
  // checked first (one that can never run throws and none is queued), then queued at once, so
  // the next step admits them side by side however the submitting thread is scheduled.
  std::vector<std::shared_ptr<RequestStream>> submit_all(std::vector<GenerationRequest> requests);

  EngineStats stats() const;
  // Blocks until nothing is queued or running and the last step's figures are in stats() (a
  // stream's last output arrives before its step is recorded).
  void wait_until_idle();
  // Liveness for a readiness probe: true when the loop is idle (waiting for work) or finished a
  // step within max_step; false when one step has run longer (a wedged engine) or it stopped.
  bool responsive(std::chrono::milliseconds max_step) const;
  const Model& model() const { return model_; }
  int64_t kv_blocks() const { return pool_.num_blocks(); }
  const CacheLayout& kv_layout() const { return kv_.layout(); }
  // Blocks until the prefix cache's disk tier (if on) has written every block offered to it.
  void flush_disk() {
    if (disk_) disk_->flush();
  }

 private:
  void loop();
  // cancels -> schedule -> copies + forward -> update -> sample (and fork) -> retire.
  // One step; false when it had nothing to compute (only sequences waiting for their masks).
  bool step();
  // An encoder's step: the oldest requests' inputs (up to max_num_batched_tokens tokens, at
  // least one input) encoded together, each pooled or scored and finished. No KV cache.
  bool encoder_step();
  void finish_encoder_request(EngineRequest& r, RequestOutput out);
  // Draws for the sequences whose grammar masks the worker has finished (deferred draws).
  void resume_deferred();
  void admit_new_requests();
  // A request checked and built, not yet queued (throws what submit throws, except the queue
  // limit).
  std::unique_ptr<EngineRequest> prepare(GenerationRequest request);
  // An encoder's request: pooled or scored, its input within the context, n = 1.
  std::unique_ptr<EngineRequest> prepare_encoder(GenerationRequest request);
  // A checked request as the engine keeps it: its stream, timings and sequences.
  std::unique_ptr<EngineRequest> build_request(GenerationRequest request, int32_t decoder_start);
  // Counts n more queued requests against max_queued_requests (kUnavailable past it) and
  // queues them.
  void enqueue(std::vector<std::unique_ptr<EngineRequest>> requests);
  // Requests past their deadline or cancelled end, so their blocks are free for this schedule.
  void end_cancelled_requests();
  // Copies the blocks the scheduler asked for and runs the forward pass over the step's chunks.
  void run_forward(const SchedulerOutput& sched);
  void note_first_scheduled(const SchedulerOutput& sched);
  // Appends proposals to the decoding sequences that may speculate (EngineConfig).
  void propose();
  // What requests asking for every prompt row gather from the step's rows: prompt logprobs
  // and mean-pooled hidden states.
  void gather_prompt_rows(const SchedulerOutput& sched);
  // Ends an embedding (or prompt-scoring) request whose prompt is computed: its pooled hidden
  // state (or its score tokens' logits), nothing sampled.
  void finish_embedding(Sequence& seq, int64_t chunk);
  // Samples the sequences whose logits are ready (starting a request's siblings the first
  // time), or hands a beam's row to its group. The draws (processors, sampling, detokenizing,
  // stop checks: each sequence's own state) run side by side on the pool; what touches the
  // scheduler and the requests' streams runs after them, in the sequences' order.
  void sample(const std::vector<ReadySequence>& ready);
  // Beam searches whose beams all have their logits this step select and fork their next beams.
  void step_beam_searches();
  // Streams a sequence's sampled step (and ends the sequence when the step finished it).
  // last: the draw's last output (the sampler's finish belongs to it; a verification step's
  // earlier outputs come first).
  void stream_step(Sequence& seq, StepOutput so, bool last = true);
  void finish_sequence(Sequence* seq, RequestOutput& out);
  // Streams an ended beam search's hypotheses (an abort when cancelled or there are none).
  void finish_beams(EngineRequest& r, bool aborted);
  void retire_and_record(const SchedulerOutput& sched);
  // The prefix cache on disk (engine_disk.cc). A new request's first sequence whose prefix goes
  // past the RAM cache: its blocks are asked of the disk and it waits in loading_ (true), or it
  // is scheduled at once (false).
  bool start_disk_load(Sequence& seq);
  // Puts the blocks the disk read into the RAM prefix cache and schedules their sequences.
  void install_disk_loads();
  // Offers the disk every full block the step's sequences computed that it lacks.
  void offer_to_disk(const SchedulerOutput& sched);
  // The root of seq's disk key chain (its salt and adapter), and the keys of its first n full
  // blocks.
  KvDiskCache::Key disk_root(const Sequence& seq) const;
  std::vector<KvDiskCache::Key> disk_keys(const Sequence& seq, int64_t n) const;
  // A sequence that ends while its blocks load is no longer waited for (the load's blocks go
  // back when it is done).
  void forget_disk_load(Sequence& seq);

  Model& model_;
  const Tokenizer* tokenizer_;
  std::vector<int32_t> eos_ids_;
  EngineConfig config_;
  ThreadPool pool_threads_;
  KvCache kv_;
  KvBlockPool pool_;
  KvCacheManager manager_;
  Scheduler scheduler_;
  std::unique_ptr<DraftProposer> draft_;

  std::mutex mu_;  // guards incoming_, stop_ and masks_ready_
  std::condition_variable cv_;
  std::vector<std::unique_ptr<EngineRequest>> incoming_;
  bool stop_ = false;
  bool masks_ready_ = false;  // the grammar worker finished a job since the engine last looked
  bool disk_ready_ = false;   // the disk finished a load since the engine last looked
  uint64_t next_arrival_ = 0;

  std::vector<std::unique_ptr<EngineRequest>> active_;  // engine thread only
  std::vector<float> logits_;
  std::vector<float> hidden_;  // the rows' final hidden states, when an embedding request runs
  std::vector<SequenceChunk> batch_;
  std::vector<int64_t> first_row_;  // per chunk of the step: its first logits row (last: below)
  std::vector<int64_t> last_row_;
  // One step's draws: a sequence, its logits row (a sibling's own copy on its first step), the
  // result.
  struct Draw {
    Sequence* seq;
    std::span<float> logits;
    StepOutput out;
    // A sequence with proposals: the draw goes on through the next rows while it equals them.
    std::vector<int32_t> drafts;
    std::vector<float> q;  // a draft model's distributions of them (empty: point masses)
    std::vector<StepOutput> more;
    std::exception_ptr error;  // the draw threw: its request ends alone (fail_request)
  };
  std::vector<Draw> draws_;
  std::vector<std::vector<float>> sibling_rows_;
  // Sequences whose draw waits for a grammar mask the worker computes (engine thread only).
  std::vector<Sequence*> deferred_;
  bool trim_when_idle_ = false;  // a request failed: free memory goes back once idle

  void leave_queue(EngineRequest& r);
  // Ends every open sequence of r alone, with the error its own input caused (a grammar past
  // its budget, a processor's failure): the other requests of the step go on.
  void fail_request(EngineRequest& r, const std::exception& e);

  std::atomic<int64_t> queued_{0};  // submitted, not yet scheduled (or ended first)
  std::atomic<bool> idle_{true};
  std::condition_variable idle_cv_;           // notified (under mu_) when the loop goes idle
  std::atomic<int64_t> last_progress_ns_{0};  // steady clock, at the end of each step

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  std::thread thread_;
  // Expensive grammar masks, off the engine's thread (last: its callback uses mu_ and cv_).
  std::unique_ptr<GrammarWorker> grammar_worker_;
  // The prefix cache on disk (null: off), its loads in flight (by job id; engine thread only):
  // the sequence that waits (null once its request ended: the blocks stay taken until the disk
  // is done with them), the first block asked for and the pool blocks it reads into (one per
  // caching group for each block of tokens).
  std::unique_ptr<KvDiskCache> disk_;
  struct DiskLoad {
    Sequence* seq = nullptr;
    int64_t first = 0;
    std::vector<std::vector<int32_t>> blocks;
  };
  std::unordered_map<uint64_t, DiskLoad> loading_;
  uint64_t next_disk_job_ = 0;
  int64_t disk_loaded_tokens_ = 0;
};

// Runs one request to completion through an engine and collects its sequences' tokens and text.
struct CompletedSequence {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  double cumulative_logprob = 0.0;
  std::vector<SampleResult> logprobs;
  std::vector<PromptLogprob> prompt_logprobs;   // when asked for (on one of a request's sequences)
  std::vector<float> embedding;                 // an embedding request's
  std::string error;                            // the engine failed on it (RequestOutput::error)
  ErrorKind error_kind = ErrorKind::kInternal;  // RequestOutput::error_kind
};
// Adds one output event to the sequence it belongs to.
void append_output(CompletedSequence& seq, const RequestOutput& out);
std::vector<CompletedSequence> run_to_completion(Engine& engine, GenerationRequest request);

}  // namespace tf
