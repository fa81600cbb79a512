#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"
#include "engine/engine_request.h"

namespace tf {

uint64_t Scheduler::salt(const Sequence* seq) const {
  // A LoRA adapter's blocks hold its own K/V: keyed apart from the base's and other adapters'.
  const GenerationRequest& spec = seq->request->spec;
  if (!spec.lora) return spec.cache_salt;
  return root_hash(spec.cache_salt, spec.lora->id() ^ 0x4c6f5241ull);
}

namespace {

// The tenant whose turns a sequence takes: the key, else its group, else its request.
uint64_t tenant_of(const Sequence* seq) {
  const GenerationRequest& spec = seq->request->spec;
  if (spec.tenant != 0) return spec.tenant;
  if (spec.group != 0) return spec.group ^ (uint64_t{1} << 62);
  return reinterpret_cast<uintptr_t>(seq->request) | (uint64_t{1} << 63);
}

}  // namespace

void Scheduler::add(Sequence* seq, bool front) {
  seq->status = SequenceStatus::kWaiting;
  if (front) {  // preempted: first in line again
    seq->fair_tag = 0;
    waiting_.push_front(seq);
    return;
  }
  const uint64_t tenant = tenant_of(seq);
  if (tenant_tags_.size() > 4096) {  // tenants whose turns are all past weigh nothing
    std::erase_if(tenant_tags_, [&](const auto& kv) { return kv.second <= virtual_clock_; });
  }
  uint64_t& last = tenant_tags_[tenant];
  seq->fair_tag = std::max(last, virtual_clock_) + 1;
  last = seq->fair_tag;
  // By priority (lower first), then tag: after every sequence of equal priority and tag.
  const int32_t p = seq->request->spec.priority;
  auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](const Sequence* s) {
    const int32_t sp = s->request->spec.priority;
    return sp > p || (sp == p && s->fair_tag > seq->fair_tag);
  });
  waiting_.insert(it, seq);
  if (seq->request->spec.tenant != 0) share_turns(tenant, p);
}

// The tenant's turns (its waiting sequences' tags at this priority, in order) go round its
// groups: the k-th waiting sequence of every group before the (k+1)-th of any, groups in the
// order they first wait. The tags stay where they are, so the tenant's share among tenants is
// what it was; only which of its sequences takes each turn changes. Preempted sequences (tag 0)
// keep their place at the front.
void Scheduler::share_turns(uint64_t tenant, int32_t priority) {
  std::vector<size_t> at;
  for (size_t i = 0; i < waiting_.size(); ++i) {
    const Sequence* s = waiting_[i];
    if (s->fair_tag != 0 && s->request->spec.priority == priority && tenant_of(s) == tenant)
      at.push_back(i);
  }
  if (at.size() < 2) return;
  struct Turn {
    Sequence* seq;
    size_t round, first;  // rank within its group; when its group first appears
  };
  std::vector<Turn> turns;
  std::unordered_map<uint64_t, std::pair<size_t, size_t>> groups;  // group -> (count, first)
  for (size_t i : at) {
    Sequence* s = waiting_[i];
    const uint64_t g = s->request->spec.group;
    auto& [count, first] = groups.try_emplace(g, 0, groups.size()).first->second;
    turns.push_back({s, count++, first});
  }
  if (groups.size() < 2) return;
  std::stable_sort(turns.begin(), turns.end(), [](const Turn& a, const Turn& b) {
    return a.round != b.round ? a.round < b.round : a.first < b.first;
  });
  std::vector<uint64_t> tags;
  for (size_t i : at) tags.push_back(waiting_[i]->fair_tag);
  for (size_t k = 0; k < at.size(); ++k) {
    waiting_[at[k]] = turns[k].seq;
    turns[k].seq->fair_tag = tags[k];
  }
}

void Scheduler::remove(Sequence* seq) {
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  kv_.free(*seq);
  seq->padding = false;
  seq->status = SequenceStatus::kFinished;
}

void Scheduler::pad(Sequence* seq) {
  if (seq->status == SequenceStatus::kRunning) {
    seq->padding = true;
  } else {
    remove(seq);
  }
}

void Scheduler::drop_padding(Sequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  kv_.free(*seq);
  seq->padding = false;
}

void Scheduler::fork(const Sequence& parent, Sequence& child) {
  kv_.fork(parent, child);
  running_.push_back(&child);
  child.status = SequenceStatus::kRunning;
}

void Scheduler::preempt(Sequence* victim, SchedulerOutput& out) {
  if (victim->padding) {  // a padding row only costs; it has nothing to recompute
    drop_padding(victim);
    return;
  }
  // Copies into the victim's blocks are void: the blocks go back to the pool and may be handed
  // out again in this same step. (Victims are taken from the back of running_, after every
  // sequence scheduled so far, so none has copies today; this keeps it so if that changes.)
  std::erase_if(out.block_copies, [&](const BlockCopy& c) {
    for (size_t g = 0; g <= victim->group_tables.size(); ++g) {
      const auto& t = victim->table(g);
      if (std::find(t.begin(), t.end(), c.dst) != t.end()) return true;
    }
    return false;
  });
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  kv_.free(*victim);  // recomputed later; its blocks may still be found in the prefix cache
  ++victim->preemptions;
  ++preemptions_;
  add(victim, /*front=*/true);
  out.preempted.push_back(victim);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;

  // A padded static batch ends when only padding rows are left.
  if (std::all_of(running_.begin(), running_.end(), [](const Sequence* s) { return s->padding; })) {
    while (!running_.empty()) drop_padding(running_.back());
  }

  // 1. Running sequences, oldest first. Each needs its remaining tokens (1 when decoding; a
  // padding row recomputes its last token without advancing).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int64_t remaining = seq->padding ? 1 : seq->num_tokens() - seq->num_computed;
    const int64_t take = config_.chunked_prefill ? std::min(remaining, budget) : remaining;
    if (take > budget || take <= 0) {
      ++i;
      continue;
    }
    bool ok = kv_.allocate_slots(*seq, seq->num_computed + take, out.block_copies);
    while (!ok) {
      Sequence* victim = running_.back();
      preempt(victim, out);
      if (victim == seq) break;
      ok = kv_.allocate_slots(*seq, seq->num_computed + take, out.block_copies);
    }
    if (!ok) continue;  // seq itself was preempted (running_ shrank; i now points at the next)
    out.chunks.push_back({seq, seq->num_computed, take});
    budget -= take;
    ++i;
  }

  // 2. Waiting sequences. Static batching admits a new batch only when nothing runs.
  const bool admit = !config_.static_batching || running_.empty();
  while (admit && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    // A request gathering every prompt row computes them all: a cached position has no row.
    if (seq->num_computed == 0 && seq->holds_no_blocks() && !seq->request->spec.all_prompt_rows())
      kv_.match_prefix(*seq, salt(seq));
    const int64_t remaining = seq->num_tokens() - seq->num_computed;
    const int64_t take = config_.chunked_prefill ? std::min(remaining, budget) : remaining;
    if (take > budget || !kv_.allocate_slots(*seq, seq->num_computed + take, out.block_copies)) {
      // Wait for memory, keeping FCFS (no overtaking). Hand back the prefix blocks it matched:
      // a waiting sequence must not pin memory (it matches again when it is admitted).
      kv_.free(*seq);
      if (out.chunks.empty() && running_.empty() && take <= budget) {
        fail(ErrorKind::kInternal, "a sequence of {} tokens does not fit the empty KV cache",
             seq->num_tokens());
      }
      break;
    }
    waiting_.pop_front();
    virtual_clock_ = std::max(virtual_clock_, seq->fair_tag);
    seq->status = SequenceStatus::kRunning;
    running_.push_back(seq);
    out.chunks.push_back({seq, seq->num_computed, take});
    budget -= take;
  }
  for (const auto& c : out.chunks) out.num_tokens += c.count;
  block_copies_ += static_cast<int64_t>(out.block_copies.size());
  return out;
}

std::vector<ReadySequence> Scheduler::update(const SchedulerOutput& out) {
  std::vector<ReadySequence> ready;
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    Sequence* seq = out.chunks[i].seq;
    // A padding row recomputes the same token every step; a removed sequence has no blocks.
    if (seq->padding || seq->status != SequenceStatus::kRunning) continue;
    seq->num_computed += out.chunks[i].count;
    kv_.cache_full_blocks(*seq, salt(seq));
    kv_.release_outside_window(*seq);
    if (seq->num_computed == seq->num_tokens()) ready.push_back({seq, static_cast<int64_t>(i)});
  }
  return ready;
}

}  // namespace tf
