// Grammar masks over GPT-2's real 50,257-token vocabulary (issue 24): the tokens a JSON grammar
// allows at three points of a document, tried token by token, through the vocabulary's trie, and
// from the compiled grammar's context cache (warm: what every step after the first meets); and
// over a 150k vocabulary (GPT-2's tokens and 100k pairs of them, Qwen's size).
// A 32-sequence step of a 110M model takes ~30 ms on class A (bench/RESULTS.md): a mask must
// cost a small share of that per sequence.
// Run: build/release/bench/bench_grammar --benchmark_repetitions=5
// --benchmark_report_aggregates_only

#include <benchmark/benchmark.h>

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
  benchmark::DoNotOptimize(compiled->allowed(m));  // the context's first computation
  for (auto _ : state) benchmark::DoNotOptimize(compiled->allowed(m));
}
BENCHMARK(BM_MaskCompiled)
    ->Args({0, 50257})
    ->Args({1, 50257})
    ->Args({2, 50257})
    ->Args({0, 151936})
    ->Args({1, 151936})
    ->Args({2, 151936})
    ->Unit(benchmark::kMicrosecond);

// A schema's grammar (compact, properties in order), inside a string value and before a number.
void BM_MaskSchema(benchmark::State& state) {
  static const auto v = big_vocab(151936);
  const auto compiled = v->compile(tf::json_schema_to_gbnf(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":40},
          "age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array",
          "items":{"type":"string"}}},"required":["name","age","tags"]})")));
  tf::GrammarMatcher m(compiled->grammar());
  m.accept(state.range(0) == 0 ? R"({"name":"Ada Lov)" : R"({"name":"Ada","age":)");
  benchmark::DoNotOptimize(compiled->allowed(m));
  for (auto _ : state) benchmark::DoNotOptimize(compiled->allowed(m));
}
BENCHMARK(BM_MaskSchema)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
