// Grammar masks over GPT-2's real 50,257-token vocabulary (issue 24): the tokens a JSON grammar
// allows at three points of a document, tried token by token, through the vocabulary's trie, and
// from the compiled grammar's context cache (warm: what every step after the first meets); and
// over a 150k vocabulary (GPT-2's tokens and 100k pairs of them, Qwen's size).
// A 32-sequence step of a 110M model takes ~30 ms on class A (bench/RESULTS.md): a mask must
// cost a small share of that per sequence.
// Run: build/release/bench/bench_grammar --benchmark_repetitions=5
// --benchmark_report_aggregates_only

#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sampling/grammar.h"
#include "sampling/json_schema.h"
#include "tokenizer/tokenizer_loader.h"

namespace {

const std::vector<std::string>& vocab() {
  static const std::vector<std::string> v = [] {
    const auto loaded = tf::load_tokenizer(TF_SHARED_DIR "/tokenizers/gpt2", 0);
    std::vector<std::string> out;
    for (int32_t id = 0; id < loaded.tokenizer->vocab_size(); ++id) {
      const int32_t one[] = {id};
      out.push_back(loaded.tokenizer->decode_bytes(one, false));
    }
    return out;
  }();
  return v;
}

// The matcher after `prefix` (0: a fresh document, 1: inside a string, 2: after a key's colon).
tf::GrammarMatcher at(const tf::Grammar& g, int where) {
  tf::GrammarMatcher m(g);
  const char* prefixes[] = {"", "{\"name\": \"Ada Lov", "{\"age\": "};
  m.accept(prefixes[where]);
  return m;
}

void BM_MaskTokenByToken(benchmark::State& state) {
  const tf::Grammar g = tf::parse_gbnf(tf::kJsonGbnf);
  const tf::GrammarMatcher m = at(g, static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(m.allowed(vocab()));
}
BENCHMARK(BM_MaskTokenByToken)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

void BM_MaskTrie(benchmark::State& state) {
  const tf::Grammar g = tf::parse_gbnf(tf::kJsonGbnf);
  const tf::TokenTrie trie(vocab());
  const tf::GrammarMatcher m = at(g, static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(m.allowed(trie));
}
BENCHMARK(BM_MaskTrie)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

// GPT-2's tokens, then pairs of them up to n tokens in all (deterministic).
std::shared_ptr<const tf::GrammarVocab> big_vocab(size_t n) {
  std::vector<std::string> v = vocab();
  uint64_t x = 1;
  while (v.size() < n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const std::string& a = vocab()[(x >> 20) % vocab().size()];
    const std::string& b = vocab()[(x >> 40) % vocab().size()];
    v.push_back(a + b);
  }
  return std::make_shared<const tf::GrammarVocab>(std::move(v));
}

// Arg 0: where (as `at`); arg 1: the vocabulary's size (50257: GPT-2's own).
void BM_MaskCompiled(benchmark::State& state) {
  static std::map<int64_t, std::shared_ptr<const tf::GrammarVocab>> vocabs;
  auto& v = vocabs[state.range(1)];
  if (!v) v = big_vocab(static_cast<size_t>(state.range(1)));
  const auto compiled = v->compile(tf::kJsonGbnf);
  const tf::GrammarMatcher m = at(compiled->grammar(), static_cast<int>(state.range(0)));
  benchmark::DoNotOptimize(compiled->mask(m));  // the context's first computation
  for (auto _ : state) benchmark::DoNotOptimize(compiled->mask(m));
}
BENCHMARK(BM_MaskCompiled)
    ->Args({0, 50257})
    ->Args({1, 50257})
    ->Args({2, 50257})
    ->Args({0, 151936})
    ->Args({1, 151936})
    ->Args({2, 151936})
    ->Unit(benchmark::kMicrosecond);

// A schema's grammar (compact, properties in order) over the 150k vocabulary.
std::shared_ptr<const tf::CompiledGrammar> person_grammar() {
  static const auto v = big_vocab(151936);
  return v->compile(tf::json_schema_to_gbnf(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":40},
          "age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array",
          "items":{"type":"string"}}},"required":["name","age","tags"]})")));
}

// The schema's masks inside a string value and before a number.
void BM_MaskSchema(benchmark::State& state) {
  const auto compiled = person_grammar();
  tf::GrammarMatcher m(compiled->grammar());
  m.accept(state.range(0) == 0 ? R"({"name":"Ada Lov)" : R"({"name":"Ada","age":)");
  benchmark::DoNotOptimize(compiled->mask(m));
  for (auto _ : state) benchmark::DoNotOptimize(compiled->mask(m));
}
BENCHMARK(BM_MaskSchema)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// What a decode step of 32 constrained sequences adds over a 150k vocabulary: each sequence's
// mask (warm cache), applied to its logits (-inf where refused), as SequenceSampler::constrain
// does. The sequences stand at 8 different points of a schema's document.
void BM_Step32Constrained(benchmark::State& state) {
  const auto compiled = person_grammar();
  const char* points[] = {"",
                          R"({"na)",
                          R"({"name":"Ad)",
                          R"({"name":"Ada",)",
                          R"({"name":"Ada","age":)",
                          R"({"name":"Ada","age":4)",
                          R"({"name":"Ada","age":42,"tags":[)",
                          R"({"name":"Ada","age":42,"tags":["x)"};
  std::vector<tf::GrammarMatcher> seqs;
  for (int i = 0; i < 32; ++i) {
    seqs.emplace_back(compiled->grammar());
    seqs.back().accept(points[i % 8]);
    benchmark::DoNotOptimize(compiled->mask(seqs.back()));  // warm the contexts
  }
  std::vector<float> logits(151936);
  for (size_t t = 0; t < logits.size(); ++t) logits[t] = static_cast<float>(t % 97) * 0.01f;
  std::vector<float> work(logits.size());
  for (auto _ : state) {
    for (const auto& m : seqs) {
      const std::vector<uint64_t> bits = compiled->mask(m);
      work = logits;
      benchmark::DoNotOptimize(tf::apply_token_mask(work, bits));
    }
  }
}
BENCHMARK(BM_Step32Constrained)->Unit(benchmark::kMillisecond);

// The same step without constraints: copying each sequence's logits (the baseline the masks
// add to is the model's step; see bench/results/text.md for the ratio).
void BM_Step32Copy(benchmark::State& state) {
  std::vector<float> logits(151936, 0.5f), work(logits.size());
  for (auto _ : state) {
    for (int i = 0; i < 32; ++i) {
      work = logits;
      benchmark::DoNotOptimize(work.data());
    }
  }
}
BENCHMARK(BM_Step32Copy)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
