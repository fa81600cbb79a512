// Test tool for tests/reference: runs prompts through the model as one ragged batch and writes
// every logit row, or greedy continuations, so Python can compare them with numpy.
//
//   dump_logits --model PATH --prompts "1,2,3;4,5" [--decode "7,8;9,10"] --out FILE
//   dump_logits --model PATH --prompts "1,2,3;4,5" --greedy N
//   dump_logits --isa      (the kernel table's name, and 1 if it scores q8_0 caches in int8)
// --lora "DIR" (every sequence) or "DIR;-;DIR2" (one per sequence, - for none): LoRA adapters.

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/isa.h"
#include "model/kv_cache.h"
#include "model/lora.h"
#include "model/model.h"
#include "sampling/sampler.h"

#include <span>

namespace {

using Ids = std::vector<int32_t>;

std::vector<Ids> parse_batch(const std::string& text) {
  std::vector<Ids> out;
  std::stringstream seqs(text);
  std::string seq;
  while (std::getline(seqs, seq, ';')) {
    Ids ids;
    std::stringstream items(seq);
    std::string item;
    while (std::getline(items, item, ',')) ids.push_back(std::stoi(item));
    out.push_back(ids);
  }
  return out;
}

int run(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--isa") == 0) {
    // The kernel table the tool runs (TOKENFLOW_ISA caps it) and whether it scores a q8_0
    // cache with int8 queries: what the numpy reference must mirror.
    const tf::kernels::IsaKernels& t = tf::kernels::isa();
    std::printf("%s %d\n", t.name, t.int8_attention_scores ? 1 : 0);
    return 0;
  }
  std::string model_path, prompts_arg, decode_arg, out_path, dtype = "f32", kv_dtype = "f32",
                                                             lora_arg;
  int greedy = -1, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const std::string val = argv[i + 1];
    if (key == "--model")
      model_path = val;
    else if (key == "--prompts")
      prompts_arg = val;
    else if (key == "--decode")
      decode_arg = val;
    else if (key == "--out")
      out_path = val;
    else if (key == "--greedy")
      greedy = std::stoi(val);
    else if (key == "--threads")
      threads = std::stoi(val);
    else if (key == "--dtype")
      dtype = val;
    else if (key == "--kv-dtype")
      kv_dtype = val;
    else if (key == "--lora")
      lora_arg = val;
    else
      tf::fail("unknown option {}", key);
  }
  auto model = tf::load_model(model_path, tf::kernels::parse_weight_type(dtype));
  const tf::ModelConfig& cfg = model->config();
  const std::vector<Ids> prompts = parse_batch(prompts_arg);
  const std::vector<Ids> decode = decode_arg.empty() ? std::vector<Ids>() : parse_batch(decode_arg);
  const size_t B = prompts.size();
  if (!decode.empty() && decode.size() != B) tf::fail("--decode needs one list per sequence");
  const size_t steps =
      greedy >= 0 ? static_cast<size_t>(greedy) : (decode.empty() ? 0 : decode[0].size());
  for (const Ids& d : decode)
    if (d.size() != decode[0].size()) tf::fail("--decode lists must all have the same length");

  tf::ThreadPool pool(threads);
  const int bs = 4;  // small blocks so that every test crosses block boundaries
  int64_t max_len = 0;
  for (const auto& p : prompts)
    max_len = std::max<int64_t>(max_len, static_cast<int64_t>(p.size()) + steps);
  const int64_t per_seq = (max_len + bs - 1) / bs;
  // Every group of the layout (a hybrid's attention and recurrent layers) gets its own blocks.
  const tf::CacheLayout layout = tf::CacheLayout::single(cfg);
  const int64_t n_groups = static_cast<int64_t>(layout.groups.size());
  const int64_t group_blocks = per_seq * static_cast<int64_t>(B);
  tf::KvCache kv(cfg, layout, group_blocks * n_groups, bs,
                 tf::kernels::parse_kv_type(kv_dtype.c_str()));
  // Interleave the sequences' and the groups' blocks so that a wrong block table (or a group
  // that reaches past its block) reads another sequence's keys or another layer's state.
  std::vector<std::vector<Ids>> tables(n_groups, std::vector<Ids>(B, Ids(per_seq)));
  for (int64_t g = 0; g < n_groups; ++g) {
    for (int64_t b = 0; b < per_seq; ++b) {
      for (size_t s = 0; s < B; ++s)
        tables[g][s][b] = static_cast<int32_t>(
            (b * static_cast<int64_t>(B) + static_cast<int64_t>(B - 1 - s)) * n_groups +
            (n_groups - 1 - g));
    }
  }
  std::vector<std::vector<Ids>> group_tables(B);  // groups 1.. of each sequence
  for (size_t s = 0; s < B; ++s)
    for (int64_t g = 1; g < n_groups; ++g) group_tables[s].push_back(tables[g][s]);

  // Each sequence's adapter (each directory loaded once).
  std::vector<const tf::LoraAdapter*> lora(B, nullptr);
  std::map<std::string, std::shared_ptr<const tf::LoraAdapter>> adapters;
  if (!lora_arg.empty()) {
    std::vector<std::string> paths;
    std::stringstream ss(lora_arg);
    for (std::string p; std::getline(ss, p, ';');) paths.push_back(p);
    if (paths.size() != 1 && paths.size() != B)
      tf::fail("--lora needs one path or one per sequence");
    for (size_t s = 0; s < B; ++s) {
      const std::string& p = paths[paths.size() == 1 ? 0 : s];
      if (p == "-") continue;
      auto& ad = adapters[p];
      if (!ad) ad = tf::LoraAdapter::load(p, *model);
      lora[s] = ad.get();
    }
  }

  std::vector<float> all;
  std::vector<tf::SequenceChunk> batch(B);
  for (size_t s = 0; s < B; ++s) {
    batch[s] = {prompts[s], 0, tables[0][s], greedy < 0, group_tables[s]};
    batch[s].lora = lora[s];
  }
  std::vector<float> logits(static_cast<size_t>(tf::Model::logit_rows(batch) * cfg.vocab_size));
  model->forward(batch, kv, logits.data(), pool);
  all.insert(all.end(), logits.begin(), logits.end());

  std::vector<Ids> generated(B);
  std::vector<Ids> inputs(B);
  for (size_t step = 0; step < steps; ++step) {
    for (size_t s = 0; s < B; ++s) {
      if (greedy >= 0) {
        const int64_t row = static_cast<int64_t>(s);
        const int32_t next = tf::argmax(
            std::span<const float>(logits.data() + row * cfg.vocab_size, cfg.vocab_size));
        generated[s].push_back(next);
        inputs[s] = {next};
      } else {
        inputs[s] = {decode[s][step]};
      }
      batch[s] = {inputs[s], static_cast<int64_t>(prompts[s].size() + step), tables[0][s], false,
                  group_tables[s]};
      batch[s].lora = lora[s];
    }
    if (greedy >= 0 && step + 1 == steps) break;  // the last token needs no forward pass
    logits.resize(B * cfg.vocab_size);
    model->forward(batch, kv, logits.data(), pool);
    if (greedy < 0) all.insert(all.end(), logits.begin(), logits.end());
  }
  if (greedy >= 0) {
    for (const auto& g : generated) {
      std::string line;
      for (size_t i = 0; i < g.size(); ++i) {
        if (i > 0) line += ',';
        line += std::to_string(g[i]);
      }
      std::printf("%s\n", line.c_str());
    }
    return 0;
  }
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(all.data()),
            static_cast<std::streamsize>(all.size() * 4));
  if (!out) tf::fail("cannot write '{}'", out_path);
  std::printf("{\"vocab\": %lld, \"rows\": %lld}\n", static_cast<long long>(cfg.vocab_size),
              static_cast<long long>(all.size() / cfg.vocab_size));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
