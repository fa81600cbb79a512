#include "sampling/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "sampling/logits_processor.h"

namespace tf {

int64_t beam_search_blocks(int64_t prompt_len, const SamplingParams& params, int block_size) {
  const int64_t per_seq = (prompt_len + params.max_tokens + block_size - 1) / block_size;
  return 2 * params.num_beams * per_seq;
}

namespace {

struct Beam {
  std::vector<int32_t> tokens;
  double sum_logprob = 0.0;
  TokenHistory history;
};

double hypothesis_score(double sum, size_t generated, float length_penalty) {
  return sum / std::pow(static_cast<double>(std::max<size_t>(generated, 1)), length_penalty);
}

void log_softmax(std::vector<float>& row) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : row) mx = std::max(mx, v);
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v - mx));
  const float lse = static_cast<float>(static_cast<double>(mx) + std::log(sum));
  for (float& v : row) v -= lse;
}

}  // namespace

std::vector<BeamHypothesis> beam_search(Model& model, KvCache& kv, ThreadPool& pool,
                                        std::span<const int32_t> prompt,
                                        const SamplingParams& params,
                                        std::span<const int32_t> eos_ids) {
  const ModelConfig& cfg = model.config();
  const int64_t vocab = cfg.vocab_size;
  const int B = params.num_beams;
  const int bs = kv.block_size();
  const int64_t per_seq = (static_cast<int64_t>(prompt.size()) + params.max_tokens + bs - 1) / bs;
  if (beam_search_blocks(static_cast<int64_t>(prompt.size()), params, bs) > kv.num_blocks()) {
    fail(ErrorKind::kResourceExhausted, "beam search needs {} KV blocks, the cache has {}",
         beam_search_blocks(static_cast<int64_t>(prompt.size()), params, bs), kv.num_blocks());
  }
  // Two block sets per beam slot: the current one and the one the next step's beams copy into.
  auto table = [&](int set, int beam) {
    std::vector<int32_t> t(per_seq);
    for (int64_t i = 0; i < per_seq; ++i)
      t[i] = static_cast<int32_t>(((set * B + beam) * per_seq) + i);
    return t;
  };
  std::vector<std::vector<int32_t>> tables[2];
  for (int s = 0; s < 2; ++s)
    for (int b = 0; b < B; ++b) tables[s].push_back(table(s, b));
  int cur = 0;

  // Prefill once into beam 0, then give every beam a copy: they all start from the prompt.
  std::vector<float> logits(static_cast<size_t>(vocab));
  SequenceChunk first{prompt, 0, tables[cur][0], false};
  model.forward(std::span<const SequenceChunk>(&first, 1), kv, logits.data(), pool);
  const int64_t prompt_blocks = (static_cast<int64_t>(prompt.size()) + bs - 1) / bs;
  for (int b = 1; b < B; ++b) {
    for (int64_t i = 0; i < prompt_blocks; ++i) kv.copy_block(tables[cur][0][i], tables[cur][b][i]);
  }
  std::vector<Beam> beams(B, Beam{{}, 0.0, TokenHistory(prompt)});
  std::vector<std::vector<float>> rows(B, logits);
  std::vector<BeamHypothesis> finished;
  auto is_eos = [&](int32_t t) {
    return !params.ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end();
  };
  SamplingParams proc = params;
  proc.temperature = 1.0f;  // beam search is deterministic: scores are log-probabilities

  for (int32_t step = 0; step < params.max_tokens; ++step) {
    // Score candidates: processed log-probabilities plus each beam's running sum. At the first
    // step all beams are equal, so only beam 0 may propose (as Hugging Face's -1e9 init does).
    struct Cand {
      double score;
      int beam;
      int32_t token;
    };
    std::vector<Cand> cands;
    const int live = step == 0 ? 1 : static_cast<int>(beams.size());
    for (int b = 0; b < live; ++b) {
      std::vector<float>& row = rows[b];
      log_softmax(row);
      apply_logits_processors(proc, beams[b].history, eos_ids, row);
      for (int64_t t = 0; t < vocab; ++t) {
        if (std::isinf(row[t])) continue;
        cands.push_back({beams[b].sum_logprob + row[t], b, static_cast<int32_t>(t)});
      }
    }
    const size_t keep = std::min<size_t>(cands.size(), 2 * static_cast<size_t>(B));
    auto better = [](const Cand& a, const Cand& b) {
      return a.score > b.score ||
             (a.score == b.score && (a.beam < b.beam || (a.beam == b.beam && a.token < b.token)));
    };
    std::partial_sort(cands.begin(), cands.begin() + keep, cands.end(), better);
    cands.resize(keep);

    std::vector<Beam> next;
    std::vector<int> parents;
    for (size_t rank = 0; rank < cands.size() && static_cast<int>(next.size()) < B; ++rank) {
      const Cand& c = cands[rank];
      if (is_eos(c.token)) {
        if (static_cast<int>(rank) >= B) continue;  // as the reference: EOS only from the top B
        BeamHypothesis h;
        h.tokens = beams[c.beam].tokens;
        h.tokens.push_back(c.token);
        h.sum_logprob = c.score;
        h.score = hypothesis_score(c.score, h.tokens.size(), params.length_penalty);
        h.finished_by_eos = true;
        finished.push_back(std::move(h));
        continue;
      }
      Beam nb = beams[c.beam];
      nb.tokens.push_back(c.token);
      nb.sum_logprob = c.score;
      nb.history.append(c.token);
      next.push_back(std::move(nb));
      parents.push_back(c.beam);
    }
    std::sort(finished.begin(), finished.end(),
              [](const auto& a, const auto& b) { return a.score > b.score; });
    if (static_cast<int>(finished.size()) > B) finished.resize(B);

    // Done? Enough hypotheses, and (unless early_stopping) no running beam can still beat them.
    bool done = next.empty();
    if (!done && static_cast<int>(finished.size()) >= B) {
      if (params.early_stopping) {
        done = true;
      } else {
        const double best_running =
            hypothesis_score(next[0].sum_logprob, next[0].tokens.size(), params.length_penalty);
        done = finished.back().score >= best_running;
      }
    }
    if (done || step + 1 == params.max_tokens) {
      beams = std::move(next);
      break;
    }
    // Fork: each new beam gets its parent's cache, then all run one decode step together.
    const int nxt = 1 - cur;
    const int64_t pos = static_cast<int64_t>(prompt.size()) + step;  // position of the new token
    const int64_t used_blocks = pos / bs + 1;
    for (size_t j = 0; j < next.size(); ++j) {
      for (int64_t i = 0; i < used_blocks; ++i)
        kv.copy_block(tables[cur][parents[j]][i], tables[nxt][j][i]);
    }
    cur = nxt;
    beams = std::move(next);
    std::vector<SequenceChunk> batch;
    std::vector<int32_t> last(beams.size());
    for (size_t j = 0; j < beams.size(); ++j) {
      last[j] = beams[j].tokens.back();
      batch.push_back({std::span<const int32_t>(&last[j], 1), pos, tables[cur][j], false});
    }
    std::vector<float> out(beams.size() * vocab);
    model.forward(batch, kv, out.data(), pool);
    rows.assign(beams.size(), std::vector<float>());
    for (size_t j = 0; j < beams.size(); ++j)
      rows[j].assign(out.begin() + j * vocab, out.begin() + (j + 1) * vocab);
  }
  // Running beams count as hypotheses at the end (the reference's finalize).
  for (const Beam& b : beams) {
    BeamHypothesis h;
    h.tokens = b.tokens;
    h.sum_logprob = b.sum_logprob;
    h.score = hypothesis_score(b.sum_logprob, b.tokens.size(), params.length_penalty);
    finished.push_back(std::move(h));
  }
  std::stable_sort(finished.begin(), finished.end(),
                   [](const auto& a, const auto& b) { return a.score > b.score; });
  finished.resize(std::min<size_t>(finished.size(), params.num_return_sequences));
  return finished;
}

}  // namespace tf
