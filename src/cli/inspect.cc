// tokenflow inspect: what a model is, read from its files and checked by loading it.

#include <fmt/format.h>
#include <cstdio>

#include <map>

#include "cli/commands.h"
#include "core/cpu_features.h"
#include "model/model.h"

namespace tf::cli {
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", b, units[u]);
}

int run_inspect(const std::string& path) {
  std::unique_ptr<Model> model = load_model(path);
  const ModelConfig& c = model->config();
  std::map<std::string, std::pair<int64_t, int64_t>> by_dtype;  // tensors, elements
  for (const auto& name : model->weights().names()) {
    const TensorView& t = model->weights().get(name);
    auto& entry = by_dtype[std::string(dtype_name(t.dtype))];
    entry.first += 1;
    entry.second += t.numel();
  }
  std::string dtypes;
  for (const auto& [name, counts] : by_dtype) {
    if (!dtypes.empty()) dtypes += ", ";
    dtypes += fmt::format("{} ({} tensors, {} elements)", name, counts.first, counts.second);
  }
  const auto row = [](const char* k, const std::string& v) {
    std::printf("%-20s %s\n", k, v.c_str());
  };
  row("path", path);
  row("format", c.format);
  row("architecture", fmt::format("{} ({})", c.architecture, arch_name(c.arch)));
  row("parameters", fmt::format("{}", model->parameter_count()));
  row("vocab_size", fmt::format("{}", c.vocab_size));
  row("hidden_size", fmt::format("{}", c.dim));
  row("layers", fmt::format("{}", c.n_layers));
  row("attention_heads", fmt::format("{}", c.n_heads));
  row("kv_heads", fmt::format("{}", c.n_kv_heads));
  row("head_dim", fmt::format("{}", c.head_dim));
  row("intermediate_size", fmt::format("{}", c.ffn_dim));
  row("context_length", fmt::format("{}", c.max_seq_len));
  row("norm_eps", fmt::format("{}", c.norm_eps));
  if (c.arch == Arch::kLlama) {
    row("rope_theta", fmt::format("{}", c.rope_theta));
    row("rope_style", c.rope_style == kernels::RopeStyle::kHalf ? "half (Hugging Face)"
                                                                : "interleaved (Meta/llama2.c)");
    row("qkv_bias", c.qkv_bias ? "yes" : "no");
  }
  row("tied_embeddings", c.tied_embeddings ? "yes" : "no");
  row("bos_id / eos_id", fmt::format("{} / {}", c.bos_id, c.eos_id));
  row("tensors", fmt::format("{}", model->weights().size()));
  row("dtypes", dtypes);
  row("stored bytes",
      fmt::format("{} ({})", model->weights().stored_bytes(),
                  human_bytes(static_cast<double>(model->weights().stored_bytes()))));
  row("converted bytes",
      fmt::format("{} (f32 copies made at load)", model->weights().converted_bytes()));
  row("kv bytes/token", fmt::format("{}", KvCache::bytes_per_block(c, 1)));
  row("cpu", cpu_features().to_string());
  return 0;
}

}  // namespace

Action add_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  app.add_option("path", *path, "llama2.c .bin file or Hugging Face model directory")->required();
  return [path] { return run_inspect(*path); };
}

}  // namespace tf::cli
