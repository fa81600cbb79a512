#include "sampling/logits_processor.h"

#include <cmath>
#include <limits>

namespace tf {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}

TokenHistory::TokenHistory(std::span<const int32_t> prompt)
    : prompt_(prompt.begin(), prompt.end()) {
  for (int32_t t : prompt_) ++seen_[t];
}

void TokenHistory::append(int32_t token) {
  output_.push_back(token);
  ++output_counts_[token];
  ++seen_[token];
}

void apply_logits_processors(const SamplingParams& p, const TokenHistory& h,
                             std::span<const int32_t> eos_ids, std::span<float> logits) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  auto in_vocab = [&](int32_t t) { return t >= 0 && t < vocab; };
  const auto& out = h.output();

  // 1. min_tokens: nothing may end the sequence yet.
  if (static_cast<int32_t>(out.size()) < p.min_tokens) {
    for (int32_t t : eos_ids) {
      if (in_vocab(t)) logits[t] = kNegInf;
    }
    for (int32_t t : p.stop_token_ids) {
      if (in_vocab(t)) logits[t] = kNegInf;
    }
  }

  // 2. bad words: a sequence is banned by masking its last token when the output ends with the
  // rest of it (as Hugging Face's NoBadWordsLogitsProcessor).
  for (const auto& seq : p.bad_words_ids) {
    const size_t prefix = seq.size() - 1;
    if (prefix > out.size()) continue;
    bool match = true;
    for (size_t i = 0; i < prefix && match; ++i) match = out[out.size() - prefix + i] == seq[i];
    if (match && in_vocab(seq.back())) logits[seq.back()] = kNegInf;
  }

  // 3. no_repeat_ngram_size over prompt + output, as Hugging Face does.
  if (const int32_t n = p.no_repeat_ngram_size; n > 0) {
    std::vector<int32_t> all = h.prompt();
    all.insert(all.end(), out.begin(), out.end());
    const int64_t len = static_cast<int64_t>(all.size());
    if (len + 1 >= n) {
      // The last n-1 tokens; every earlier occurrence of them bans the token that followed.
      const int64_t tail = len - (n - 1);
      for (int64_t start = 0; start + n <= len; ++start) {
        bool match = true;
        for (int32_t k = 0; k < n - 1 && match; ++k) match = all[start + k] == all[tail + k];
        if (match && in_vocab(all[start + n - 1])) logits[all[start + n - 1]] = kNegInf;
      }
    }
  }

  // 4. Penalties. Repetition (HF): divide positive logits, multiply negative ones, for every
  // token in prompt or output. Presence and frequency (OpenAI): subtract, output tokens only.
  if (p.repetition_penalty != 1.0f) {
    for (const auto& [t, count] : h.seen()) {
      (void)count;
      if (!in_vocab(t)) continue;
      float& l = logits[t];
      l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (const auto& [t, count] : h.output_counts()) {
      if (!in_vocab(t)) continue;
      logits[t] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
    }
  }

  // 5. logit_bias.
  for (const auto& [t, bias] : p.logit_bias) {
    if (in_vocab(t)) logits[t] += bias;
  }

  // 6. temperature (greedy decoding needs none).
  if (!p.greedy() && p.temperature != 1.0f) {
    const float inv = 1.0f / p.temperature;
    if (std::isfinite(inv)) {
      for (float& l : logits) l *= inv;
    } else {
      for (float& l : logits) l /= p.temperature;
    }
  }
}

}  // namespace tf
