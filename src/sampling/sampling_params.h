#pragma once
// Every decoding knob, with the meaning users know from the OpenAI API, vLLM's SamplingParams and
// Hugging Face generate(). Processors run in this order (see logits_processor.h):
//   1. min_tokens        EOS and stop_token_ids masked until min_tokens are generated
//   2. bad_words_ids     banned tokens / sequences masked
//   3. no_repeat_ngram   tokens that would repeat an n-gram masked
//   4. penalties         repetition (HF: prompt + output), presence and frequency (OpenAI: output)
//   5. logit_bias        added
//   6. temperature       divided (skipped when greedy)
//   7. truncation        top_k, then top_p, min_p and typical_p over the survivors
// logprobs are taken after step 6, before truncation (the distribution the user shaped, with
// every alternative still visible).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tf {

class CompiledGrammar;
struct GrammarVocab;

// What a grammar may cost its sequence (not a client's parameter: the server sets it): the time
// its mask and matcher may take in one step, and in all its steps together. Zero: no limit.
struct GrammarBudget {
  std::chrono::milliseconds step{0}, total{0};
  // How long a mask may take inline (on the engine's thread) before a GrammarWorker, where the
  // engine gives one, takes it over and the sequence's draw waits for it.
  std::chrono::microseconds inline_time{2000};
  bool operator==(const GrammarBudget&) const = default;
};

// The most alternatives a token's (or a prompt token's) logprobs may list.
inline constexpr int32_t kMaxLogprobs = 20;

struct SamplingParams {
  // Lengths.
  int32_t max_tokens = 16;  // new tokens at most
  int32_t min_tokens = 0;   // EOS / stop tokens are not allowed before this many

  // Randomness. temperature 0 means greedy.
  float temperature = 1.0f;
  int32_t top_k = 0;  // 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float typical_p = 1.0f;
  std::optional<uint64_t> seed;  // none: a random seed per request

  // Penalties and biases.
  float repetition_penalty = 1.0f;  // > 1 discourages any token already in prompt or output
  float presence_penalty = 0.0f;    // [-2, 2], once per token present in the output
  float frequency_penalty = 0.0f;   // [-2, 2], per occurrence in the output
  std::vector<std::pair<int32_t, float>> logit_bias;  // [-100, 100]
  int32_t no_repeat_ngram_size = 0;
  std::vector<std::vector<int32_t>> bad_words_ids;  // single ids are banned outright

  // Stopping.
  std::vector<std::string> stop;  // strings; not included in the output
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;

  // Several sequences per request.
  int32_t n = 1;
  std::optional<int32_t>
      best_of;  // sample best_of, return the n with the highest cumulative logprob

  // Log-probabilities: nullopt = none; k = the chosen token's plus the top k alternatives.
  std::optional<int32_t> logprobs;

  // Beam search (Hugging Face semantics); num_beams > 1 turns it on.
  int32_t num_beams = 1;
  float length_penalty = 1.0f;
  bool early_stopping = false;
  int32_t num_return_sequences = 1;

  bool skip_special_tokens = true;

  // A reasoning model's think block held to a budget (Anthropic's thinking.budget_tokens,
  // vLLM's thinking_token_budget): once `tokens` tokens were generated inside the block, `end`
  // is forced, token by token, to close it. The block is open from the first token when `start`
  // is empty (the prompt opened it), else from when the output writes `start`; the model
  // closing it itself (writing `close`) ends the count. Not applied under a grammar (which
  // decides every token itself) or to beams.
  struct ThinkingBudget {
    int32_t tokens = -1;  // -1: no budget
    std::vector<int32_t> start, close, end;
    bool operator==(const ThinkingBudget&) const = default;
  };
  ThinkingBudget thinking;

  // Constrained decoding: the output stays a prefix of a sentence of the grammar, and ends (an
  // end-of-sequence token) only where the grammar allows. grammar: compiled against
  // grammar_vocab (the model's token bytes), which it points into. Both set, or neither.
  std::shared_ptr<const CompiledGrammar> grammar;
  std::shared_ptr<const GrammarVocab> grammar_vocab;
  GrammarBudget grammar_budget;

  bool greedy() const { return temperature == 0.0f || top_k == 1; }
  bool beam_search() const { return num_beams > 1; }
  int32_t candidates() const { return best_of.value_or(n); }

  // Throws an Error naming the parameter and its allowed range. vocab_size bounds token ids.
  void validate(int64_t vocab_size) const;

  bool operator==(const SamplingParams&) const = default;
};

}  // namespace tf
