// Grammar masks over GPT-2's real 50,257-token vocabulary (issue 24): the tokens a JSON grammar
// allows at three points of a document, tried token by token and through the vocabulary's trie.
// A 32-sequence step of a 110M model takes ~30 ms on class A (bench/RESULTS.md): a mask must
// cost a small share of that per sequence.
// Run: build/release/bench/bench_grammar --benchmark_repetitions=5
// --benchmark_report_aggregates_only

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "sampling/grammar.h"
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

}  // namespace

BENCHMARK_MAIN();
