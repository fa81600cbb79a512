#include "engine/sequence_group.h"

#include <algorithm>

#include "engine/engine_request.h"
#include "engine/scheduler.h"

namespace tf {

void SequenceGroup::create_sequences(EngineRequest& request, const Tokenizer* tokenizer,
                                     const std::vector<int32_t>& eos_ids, int32_t decoder_start) {
  request_ = &request;
  const GenerationRequest& spec = request.spec;
  beam_search_ = spec.params.beam_search();
  const int32_t count = beam_search_ ? 1 : spec.params.candidates();
  for (int32_t i = 0; i < count; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->request = &request;
    seq->index = i;
    if (decoder_start >= 0) {
      seq->encoder_tokens = spec.prompt;
      seq->tokens = {decoder_start};
    } else {
      seq->tokens = spec.prompt;
    }
    seq->prompt_len = static_cast<int64_t>(seq->tokens.size());
    if (!beam_search_) {
      seq->sampler.emplace(spec.params, request.seed, static_cast<uint64_t>(i), seq->tokens,
                           tokenizer, eos_ids);
    }
    seqs_.push_back(std::move(seq));
  }
  unfinished_ = beam_search_ ? 1 : count;  // a beam search ends as one
  if (beam_search_) {
    beams_.sums.assign(1, 0.0);
    beams_.rows.assign(1, -1);
  }
}

bool SequenceGroup::padding() const {
  return std::any_of(seqs_.begin(), seqs_.end(), [](const auto& s) { return s->padding; });
}

bool SequenceGroup::finish_sample() {
  return --unfinished_ == 0;
}

void SequenceGroup::remove_all(Scheduler& sched) {
  for (auto& s : seqs_) sched.remove(s.get());
  unfinished_ = 0;
}

std::vector<Sequence*> SequenceGroup::start_siblings(const Sequence& ready, Scheduler& sched) {
  std::vector<Sequence*> started;
  if (beam_search_ || siblings_started_ || &ready != seqs_[0].get()) return started;
  siblings_started_ = true;
  for (size_t k = 1; k < seqs_.size(); ++k) {
    Sequence& s = *seqs_[k];
    if (s.status == SequenceStatus::kFinished) continue;
    sched.fork(ready, s);
    started.push_back(&s);
  }
  return started;
}

void SequenceGroup::set_beam_row(const Sequence& beam, int64_t row) {
  beams_.rows.at(beam.index) = row;
}

int64_t SequenceGroup::step_beams(const float* logits, int64_t vocab,
                                  std::span<const int32_t> eos_ids, Scheduler& sched) {
  std::vector<int64_t>& rows = beams_.rows;
  if (std::find(rows.begin(), rows.end(), -1) != rows.end()) {
    // A beam is still being recomputed: the ready ones compute their last token again.
    for (size_t b = 0; b < rows.size(); ++b) {
      if (rows[b] >= 0) --seqs_[b]->num_computed;
    }
    std::fill(rows.begin(), rows.end(), -1);
    return 0;
  }
  const SamplingParams& p = request_->spec.params;
  const int64_t prompt_len = seqs_[0]->prompt_len;
  std::vector<BeamCandidate> cands;
  std::vector<std::vector<int32_t>> generated(seqs_.size());
  std::vector<float> row(static_cast<size_t>(vocab));
  for (size_t b = 0; b < seqs_.size(); ++b) {
    const Sequence& s = *seqs_[b];
    generated[b].assign(s.tokens.begin() + prompt_len, s.tokens.end());
    TokenHistory h(std::span<const int32_t>(s.tokens.data(), prompt_len));
    for (int32_t t : generated[b]) h.append(t);
    std::copy_n(logits + rows[b] * vocab, vocab, row.data());
    add_beam_candidates(row, p, h, eos_ids, beams_.sums[b], static_cast<int>(b), cands);
  }
  const std::vector<BeamCandidate> next =
      select_beams(cands, p, eos_ids, generated, beams_.finished);
  std::vector<std::unique_ptr<Sequence>> children;
  std::vector<double> sums;
  for (size_t j = 0; j < next.size(); ++j) {
    auto child = std::make_unique<Sequence>();
    child->request = request_;
    child->index = static_cast<int32_t>(j);
    child->tokens = seqs_[next[j].beam]->tokens;
    child->tokens.push_back(next[j].token);
    child->prompt_len = prompt_len;
    children.push_back(std::move(child));
    sums.push_back(next[j].score);
  }
  const auto selected = static_cast<int64_t>(next.size());
  if (beams_done(beams_.finished, next, generated[0].size() + 1, p)) {
    std::vector<std::vector<int32_t>> running;
    for (const auto& c : children)
      running.emplace_back(c->tokens.begin() + prompt_len, c->tokens.end());
    beams_.finished = finalize_beams(std::move(beams_.finished), running, sums, p);
    remove_all(sched);
    return selected;
  }
  for (size_t j = 0; j < next.size(); ++j) sched.fork(*seqs_[next[j].beam], *children[j]);
  for (auto& parent : seqs_) sched.remove(parent.get());  // its blocks live on in its children
  seqs_ = std::move(children);
  beams_.sums = std::move(sums);
  rows.assign(seqs_.size(), -1);
  return selected;
}

}  // namespace tf
