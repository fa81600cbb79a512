#include "sampling/sampling_params.h"

#include <cmath>

#include "core/error.h"

namespace tf {

void SamplingParams::validate(int64_t vocab_size) const {
  auto finite = [](float v) { return std::isfinite(v); };
  if (max_tokens < 1) fail_field("max_tokens", "max_tokens must be at least 1, got {}", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens) {
    fail_field("min_tokens", "min_tokens must be between 0 and max_tokens ({}), got {}", max_tokens,
               min_tokens);
  }
  if (!finite(temperature) || temperature < 0.0f)
    fail_field("temperature", "temperature must be >= 0, got {}", temperature);
  if (top_k < 0) fail_field("top_k", "top_k must be >= 0 (0 disables it), got {}", top_k);
  if (!finite(top_p) || top_p <= 0.0f || top_p > 1.0f)
    fail_field("top_p", "top_p must be in (0, 1], got {}", top_p);
  if (!finite(min_p) || min_p < 0.0f || min_p > 1.0f)
    fail_field("min_p", "min_p must be in [0, 1], got {}", min_p);
  if (!finite(typical_p) || typical_p <= 0.0f || typical_p > 1.0f) {
    fail_field("typical_p", "typical_p must be in (0, 1], got {}", typical_p);
  }
  if (!finite(repetition_penalty) || repetition_penalty <= 0.0f) {
    fail_field("repetition_penalty", "repetition_penalty must be > 0, got {}", repetition_penalty);
  }
  if (!finite(presence_penalty) || std::fabs(presence_penalty) > 2.0f) {
    fail_field("presence_penalty", "presence_penalty must be in [-2, 2], got {}", presence_penalty);
  }
  if (!finite(frequency_penalty) || std::fabs(frequency_penalty) > 2.0f) {
    fail_field("frequency_penalty", "frequency_penalty must be in [-2, 2], got {}",
               frequency_penalty);
  }
  auto check_token = [&](int32_t id, const char* what) {
    if (id < 0 || id >= vocab_size)
      fail_field(what, "{}: token id {} is outside the vocabulary (0..{})", what, id,
                 vocab_size - 1);
  };
  for (const auto& [id, bias] : logit_bias) {
    check_token(id, "logit_bias");
    if (!finite(bias) || std::fabs(bias) > 100.0f)
      fail_field("logit_bias", "logit_bias values must be in [-100, 100], got {}", bias);
  }
  if (no_repeat_ngram_size < 0)
    fail_field("no_repeat_ngram_size", "no_repeat_ngram_size must be >= 0, got {}",
               no_repeat_ngram_size);
  for (const auto& seq : bad_words_ids) {
    if (seq.empty()) fail_field("bad_words_ids", "bad_words_ids entries must not be empty");
    for (int32_t id : seq) check_token(id, "bad_words_ids");
  }
  if (vocab_size > 0 && static_cast<int64_t>(bad_words_ids.size()) >= vocab_size) {
    // One-token entries banning every token: nothing could ever be generated.
    std::vector<bool> banned(static_cast<size_t>(vocab_size), false);
    int64_t count = 0;
    for (const auto& seq : bad_words_ids) {
      if (seq.size() != 1 || banned[static_cast<size_t>(seq[0])]) continue;
      banned[static_cast<size_t>(seq[0])] = true;
      ++count;
    }
    if (count == vocab_size)
      fail_field("bad_words_ids", "bad_words_ids bans every token of the vocabulary ({})",
                 vocab_size);
  }
  for (const auto& s : stop) {
    if (s.empty()) fail_field("stop", "stop strings must not be empty");
  }
  for (int32_t id : stop_token_ids) check_token(id, "stop_token_ids");
  if (thinking.tokens >= 0) {
    if (thinking.end.empty() || thinking.close.empty())
      fail_field("thinking", "a thinking budget needs the tokens that close the think block");
    for (const auto* ids : {&thinking.start, &thinking.close, &thinking.end})
      for (int32_t id : *ids) check_token(id, "thinking");
  }
  if (n < 1 || n > 128) fail_field("n", "n must be between 1 and 128, got {}", n);
  if (best_of && (*best_of < n || *best_of > 128)) {
    fail_field("best_of", "best_of must be between n ({}) and 128, got {}", n, *best_of);
  }
  if (logprobs && (*logprobs < 0 || *logprobs > kMaxLogprobs))
    fail_field("logprobs", "logprobs must be between 0 and {}, got {}", kMaxLogprobs, *logprobs);
  if (num_beams < 1 || num_beams > 64)
    fail_field("num_beams", "num_beams must be between 1 and 64, got {}", num_beams);
  if (num_return_sequences < 1 || num_return_sequences > num_beams) {
    fail_field("num_return_sequences",
               "num_return_sequences must be between 1 and num_beams ({}), got {}", num_beams,
               num_return_sequences);
  }
  if (!finite(length_penalty))
    fail_field("length_penalty", "length_penalty must be a finite number");
  if (beam_search() && (n > 1 || best_of))
    fail_field("n", "beam search returns num_return_sequences; n and best_of must be unset");
}

}  // namespace tf
