#include "engine/spec_draft.h"

#include <algorithm>
#include <unordered_set>

#include "engine/engine_request.h"

namespace tf {

DraftProposer::DraftProposer(Model& model, int64_t kv_blocks, int block_size,
                             kernels::KvType kv_type)
    : model_(model),
      kv_(model.config(), kv_blocks, block_size, kv_type),
      pool_(kv_.num_blocks(), block_size),
      manager_(pool_, /*prefix_caching=*/false) {}

uint64_t DraftProposer::owner_of(const Sequence& seq) {
  return (seq.request->arrival_order << 20) ^ static_cast<uint64_t>(seq.index);
}

DraftProposer::Shadow& DraftProposer::shadow_of(const Sequence& seq) {
  Shadow& sh = shadows_[&seq];
  const uint64_t owner = owner_of(seq);
  if (sh.owner != owner) {  // a new sequence where an ended one lived
    manager_.free(sh.seq);
    sh.seq.tokens.clear();
    sh.owner = owner;
  }
  return sh;
}

void DraftProposer::propose(std::vector<Job>& jobs, ThreadPool& pool, int64_t max_catch_up) {
  const int64_t vocab = model_.config().vocab_size;
  struct Feed {
    Job* job;
    Sequence* shadow;
    bool proposes;
  };
  std::vector<Feed> feeds;
  bool evicted = false;
  for (Job& j : jobs) {
    j.drafts.clear();
    j.q.clear();
    Sequence& s = shadow_of(*j.seq).seq;
    const int64_t len = j.seq->num_tokens();
    // The shadow's K/V hold for the tokens it shares with the sequence, never its last one
    // (just sampled): what follows them (rejected proposals) is computed again.
    const int64_t common = std::min(s.num_computed, len - 1);
    s.num_computed =
        std::mismatch(s.tokens.begin(), s.tokens.begin() + common, j.seq->tokens.begin()).first -
        s.tokens.begin();
    s.tokens.resize(static_cast<size_t>(s.num_computed));
    manager_.truncate(s);
    const bool proposes = len - s.num_computed <= max_catch_up;
    const int64_t upto = proposes ? len : s.num_computed + max_catch_up;
    s.tokens.insert(s.tokens.end(), j.seq->tokens.begin() + s.num_computed,
                    j.seq->tokens.begin() + upto);
    const int64_t slots = proposes ? len + j.k - 1 : upto;
    std::vector<BlockCopy> copies;  // none: the draft's pool neither forks nor caches
    bool ok = manager_.allocate_slots(s, slots, copies);
    if (!ok && !evicted) {
      // Room from the shadows of sequences not speculating this step (they catch up again).
      std::unordered_set<const Sequence*> wanted;
      for (const Job& w : jobs) wanted.insert(w.seq);
      for (auto it = shadows_.begin(); it != shadows_.end();) {
        if (wanted.count(it->first)) {
          ++it;
          continue;
        }
        manager_.free(it->second.seq);
        it = shadows_.erase(it);
      }
      evicted = true;
      ok = manager_.allocate_slots(s, slots, copies);
    }
    if (!ok) {
      s.tokens.resize(static_cast<size_t>(s.num_computed));
      continue;
    }
    feeds.push_back({&j, &s, proposes});
    if (proposes) {
      j.drafts.reserve(static_cast<size_t>(j.k));
      if (!j.seq->sampler->greedy()) j.q.assign(static_cast<size_t>(j.k * vocab), 0.0f);
    }
  }
  // Round r feeds what each shadow has not computed (round 0: the catch-up, ending with the
  // sequence's last token; then the previous proposal) and draws proposal r from its logits.
  for (int64_t round = 0;; ++round) {
    batch_.clear();
    std::vector<Feed*> fed;
    for (Feed& f : feeds) {
      if (round > 0 && (!f.proposes || round >= f.job->k)) continue;
      Sequence& s = *f.shadow;
      const int64_t n = s.num_tokens() - s.num_computed;
      batch_.push_back({std::span<const int32_t>(s.tokens.data() + s.num_computed, n),
                        s.num_computed, s.block_table, false});
      fed.push_back(&f);
    }
    if (batch_.empty()) break;
    logits_.resize(static_cast<size_t>(static_cast<int64_t>(batch_.size()) * vocab));
    model_.forward(batch_, kv_, logits_.data(), pool);
    for (Feed* f : fed) f->shadow->num_computed = f->shadow->num_tokens();
    pool.parallel_for(static_cast<int64_t>(fed.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        Feed& f = *fed[i];
        if (!f.proposes) continue;
        Job& j = *f.job;
        std::span<float> q;
        if (!j.q.empty()) q = std::span<float>(j.q.data() + round * vocab, vocab);
        j.drafts.push_back(
            j.seq->sampler->draft(std::span<float>(logits_.data() + i * vocab, vocab), round, q));
      }
    });
    for (Feed* f : fed)
      if (f->proposes && round + 1 < f->job->k) f->shadow->tokens.push_back(f->job->drafts.back());
  }
}

void DraftProposer::keep(const Sequence& seq, int64_t valid) {
  auto it = shadows_.find(&seq);
  if (it == shadows_.end() || it->second.owner != owner_of(seq)) return;
  Sequence& s = it->second.seq;
  s.num_computed = std::min(s.num_computed, valid);
  s.tokens.resize(static_cast<size_t>(s.num_computed));
  manager_.truncate(s);
}

void DraftProposer::release(const Sequence& seq) {
  auto it = shadows_.find(&seq);
  if (it == shadows_.end()) return;
  manager_.free(it->second.seq);
  shadows_.erase(it);
}

void DraftProposer::release_all() {
  for (auto& [seq, sh] : shadows_) manager_.free(sh.seq);
  shadows_.clear();
}

}  // namespace tf
