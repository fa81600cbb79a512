#include "sampling/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace tf {

int64_t beam_search_blocks(int64_t prompt_len, const SamplingParams& params, int block_size) {
  const int64_t per_seq = (prompt_len + params.max_tokens + block_size - 1) / block_size;
  return 2 * params.num_beams * per_seq;
}

namespace {

double hypothesis_score(double sum, size_t generated, float length_penalty) {
  return sum / std::pow(static_cast<double>(std::max<size_t>(generated, 1)), length_penalty);
}

bool better(const BeamCandidate& a, const BeamCandidate& b) {
  return a.score > b.score ||
         (a.score == b.score && (a.beam < b.beam || (a.beam == b.beam && a.token < b.token)));
}

}  // namespace

void add_beam_candidates(std::vector<float>& row, const SamplingParams& params,
                         const TokenHistory& history, std::span<const int32_t> eos_ids,
                         double running_sum, int beam, std::vector<BeamCandidate>& out) {
  // Scores are log-probabilities; the processors act on them as Hugging Face's beam search does.
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : row) mx = std::max(mx, v);
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v - mx));
  const float lse = static_cast<float>(static_cast<double>(mx) + std::log(sum));
  for (float& v : row) v -= lse;
  SamplingParams proc = params;
  proc.temperature = 1.0f;  // beam search is deterministic
  apply_logits_processors(proc, history, eos_ids, row);
  for (size_t t = 0; t < row.size(); ++t) {
    if (!std::isinf(row[t])) out.push_back({running_sum + row[t], beam, static_cast<int32_t>(t)});
  }
}

std::vector<BeamCandidate> select_beams(std::vector<BeamCandidate>& cands,
                                        const SamplingParams& params,
                                        std::span<const int32_t> eos_ids,
                                        const std::vector<std::vector<int32_t>>& beam_tokens,
                                        std::vector<BeamHypothesis>& finished) {
  const int B = params.num_beams;
  const size_t keep = std::min<size_t>(cands.size(), 2 * static_cast<size_t>(B));
  std::partial_sort(cands.begin(), cands.begin() + keep, cands.end(), better);
  cands.resize(keep);
  // The model's end-of-sequence ids (unless ignored) and the request's stop_token_ids end a
  // hypothesis.
  const auto& stops = params.stop_token_ids;
  auto is_eos = [&](int32_t t) {
    return (!params.ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end()) ||
           std::find(stops.begin(), stops.end(), t) != stops.end();
  };
  std::vector<BeamCandidate> next;
  for (size_t rank = 0; rank < cands.size() && static_cast<int>(next.size()) < B; ++rank) {
    const BeamCandidate& c = cands[rank];
    if (is_eos(c.token)) {
      if (static_cast<int>(rank) >= B) continue;  // as the reference: EOS only from the top B
      BeamHypothesis h;
      h.tokens = beam_tokens[c.beam];
      h.tokens.push_back(c.token);
      h.sum_logprob = c.score;
      h.score = hypothesis_score(c.score, h.tokens.size(), params.length_penalty);
      h.finished_by_eos = true;
      finished.push_back(std::move(h));
      continue;
    }
    next.push_back(c);
  }
  std::stable_sort(finished.begin(), finished.end(),
                   [](const auto& a, const auto& b) { return a.score > b.score; });
  if (static_cast<int>(finished.size()) > B) finished.resize(B);
  return next;
}

bool beams_done(const std::vector<BeamHypothesis>& finished, const std::vector<BeamCandidate>& next,
                size_t generated, const SamplingParams& params) {
  if (next.empty() || static_cast<int32_t>(generated) >= params.max_tokens) return true;
  if (static_cast<int>(finished.size()) < params.num_beams) return false;
  if (params.early_stopping) return true;
  // No running beam can still beat the worst kept hypothesis.
  return finished.back().score >= hypothesis_score(next[0].score, generated, params.length_penalty);
}

std::vector<BeamHypothesis> finalize_beams(std::vector<BeamHypothesis> finished,
                                           const std::vector<std::vector<int32_t>>& running_tokens,
                                           const std::vector<double>& running_sums,
                                           const SamplingParams& params) {
  for (size_t b = 0; b < running_tokens.size(); ++b) {
    BeamHypothesis h;
    h.tokens = running_tokens[b];
    h.sum_logprob = running_sums[b];
    h.score = hypothesis_score(running_sums[b], h.tokens.size(), params.length_penalty);
    finished.push_back(std::move(h));
  }
  std::stable_sort(finished.begin(), finished.end(),
                   [](const auto& a, const auto& b) { return a.score > b.score; });
  finished.resize(std::min<size_t>(finished.size(), params.num_return_sequences));
  return finished;
}

std::vector<BeamHypothesis> beam_search(Model& model, KvCache& kv, ThreadPool& pool,
                                        std::span<const int32_t> prompt,
                                        const SamplingParams& params,
                                        std::span<const int32_t> eos_ids) {
  const int64_t vocab = model.config().vocab_size;
  const int B = params.num_beams;
  const int bs = kv.block_size();
  const int64_t per_seq = (static_cast<int64_t>(prompt.size()) + params.max_tokens + bs - 1) / bs;
  if (beam_search_blocks(static_cast<int64_t>(prompt.size()), params, bs) > kv.num_blocks()) {
    fail(ErrorKind::kResourceExhausted, "beam search needs {} KV blocks, the cache has {}",
         beam_search_blocks(static_cast<int64_t>(prompt.size()), params, bs), kv.num_blocks());
  }
  // Two block sets per beam slot: the current one and the one the next step's beams copy into.
  std::vector<std::vector<int32_t>> tables[2];
  for (int s = 0; s < 2; ++s) {
    for (int b = 0; b < B; ++b) {
      std::vector<int32_t> t(per_seq);
      for (int64_t i = 0; i < per_seq; ++i) t[i] = static_cast<int32_t>((s * B + b) * per_seq + i);
      tables[s].push_back(std::move(t));
    }
  }
  int cur = 0;
  std::vector<float> logits(static_cast<size_t>(vocab));
  SequenceChunk first{prompt, 0, tables[cur][0], false};
  model.forward(std::span<const SequenceChunk>(&first, 1), kv, logits.data(), pool);

  std::vector<std::vector<int32_t>> tokens(1);  // generated tokens per beam
  std::vector<double> sums(1, 0.0);
  std::vector<std::vector<float>> rows(1, logits);
  std::vector<BeamHypothesis> finished;
  for (size_t generated = 1;; ++generated) {
    std::vector<BeamCandidate> cands;
    for (size_t b = 0; b < tokens.size(); ++b) {
      TokenHistory h(prompt);
      for (int32_t t : tokens[b]) h.append(t);
      add_beam_candidates(rows[b], params, h, eos_ids, sums[b], static_cast<int>(b), cands);
    }
    const std::vector<BeamCandidate> next = select_beams(cands, params, eos_ids, tokens, finished);
    std::vector<std::vector<int32_t>> next_tokens;
    std::vector<double> next_sums;
    for (const auto& c : next) {
      next_tokens.push_back(tokens[c.beam]);
      next_tokens.back().push_back(c.token);
      next_sums.push_back(c.score);
    }
    if (beams_done(finished, next, generated, params))
      return finalize_beams(finished, next_tokens, next_sums, params);
    // Fork: each new beam gets a copy of its parent's blocks, then all decode together.
    const int nxt = 1 - cur;
    const int64_t pos = static_cast<int64_t>(prompt.size() + generated) - 1;  // of the new token
    for (size_t j = 0; j < next.size(); ++j) {
      for (int64_t i = 0; i <= pos / bs; ++i)
        kv.copy_block(tables[cur][next[j].beam][i], tables[nxt][j][i]);
    }
    cur = nxt;
    tokens = std::move(next_tokens);
    sums = std::move(next_sums);
    std::vector<SequenceChunk> batch;
    for (size_t j = 0; j < tokens.size(); ++j) {
      batch.push_back({std::span<const int32_t>(&tokens[j].back(), 1), pos, tables[cur][j], false});
    }
    std::vector<float> out(tokens.size() * vocab);
    model.forward(batch, kv, out.data(), pool);
    rows.assign(tokens.size(), std::vector<float>());
    for (size_t j = 0; j < tokens.size(); ++j)
      rows[j].assign(out.begin() + j * vocab, out.begin() + (j + 1) * vocab);
  }
}

}  // namespace tf
