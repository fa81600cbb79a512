// tokenflow inspect: what a model is, read from its files and checked by loading it.

#include <fmt/format.h>
#include <cstdio>

#include <filesystem>
#include <map>

#include "cli/commands.h"
#include "core/cpu_features.h"
#include "core/mapped_file.h"
#include "model/gguf.h"
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

// A GGUF file as its header says: metadata (long arrays shortened), tensor types and sizes, and
// with `tensors` every tensor. Read without loading the model, so any GGUF can be looked at.
int run_inspect_gguf(const std::string& path, bool tensors) {
  const MappedFile file = MappedFile::open(path);
  const GgufFile f = parse_gguf(file.data(), file.size(), path);
  const auto row = [](const std::string& k, const std::string& v) {
    std::printf("%-40s %s\n", k.c_str(), v.c_str());
  };
  row("path", path);
  row("format", fmt::format("GGUF v{} (alignment {}, data at byte {})", f.version, f.alignment,
                            f.data_offset));
  row("file bytes", fmt::format("{} ({})", file.size(), human_bytes(file.size())));
  std::printf("\nmetadata (%zu keys)\n", f.metadata.size());
  for (const auto& [key, value] : f.metadata) {
    std::string type = gguf_type_name(value.type);
    if (value.type == GgufType::kArray)
      type = fmt::format("{}[{}]", gguf_type_name(value.item_type), value.count);
    std::string text = value.to_string(8);
    if (text.size() > 200) text = text.substr(0, 200) + "...";
    row("  " + key, fmt::format("{:<14} {}", type, text));
  }
  std::map<std::string, std::pair<int64_t, uint64_t>> by_type;  // tensors, bytes
  uint64_t total = 0;
  int64_t params = 0;
  for (const auto& t : f.tensors) {
    auto& e = by_type[ggml_type_info(static_cast<uint32_t>(t.type))->name];
    e.first += 1;
    e.second += t.bytes;
    total += t.bytes;
    params += t.numel();
  }
  std::printf("\ntensors (%zu, %lld parameters, %s)\n", f.tensors.size(),
              static_cast<long long>(params), human_bytes(static_cast<double>(total)).c_str());
  for (const auto& [name, e] : by_type)
    row("  " + name,
        fmt::format("{} tensors, {}", e.first, human_bytes(static_cast<double>(e.second))));
  if (tensors) {
    std::printf("\n");
    for (const auto& t : f.tensors) {
      std::string dims;
      for (int64_t d : t.ne) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      row("  " + t.name, fmt::format("{:<7} [{}] {} bytes at {}",
                                     ggml_type_info(static_cast<uint32_t>(t.type))->name, dims,
                                     t.bytes, t.offset));
    }
  }
  return 0;
}

int run_inspect(const std::string& path, bool tensors) {
  if (std::filesystem::is_regular_file(path)) {
    const MappedFile head = MappedFile::open(path);
    if (is_gguf(head.data(), head.size())) return run_inspect_gguf(path, tensors);
  }
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
  if (c.arch == Arch::kLlama || c.arch == Arch::kGptJ) {
    row("rope_theta", fmt::format("{}", c.rope.theta));
    if (c.rope.kind != RopeParams::Kind::kDefault)
      row("rope_scaling",
          fmt::format("{} (factor {}, original context {})", rope_kind_name(c.rope.kind),
                      c.rope.factor, c.rope.original_max_pos));
    if (c.rope.rot_dim > 0 && c.rope.rot_dim != c.head_dim)
      row("rotary_dims", fmt::format("{} of {}", c.rope.rot_dim, c.head_dim));
    if (c.qk_norm) row("qk_norm", "yes");
    row("rope_style", c.rope_style == kernels::RopeStyle::kHalf ? "half (Hugging Face)"
                                                                : "interleaved (Meta/llama2.c)");
    row("qkv_bias", c.qkv_bias ? "yes" : "no");
  }
  if (c.arch == Arch::kGptJ)
    row("residual", c.parallel_residual
                        ? (c.two_norms ? "parallel, two norms" : "parallel, one norm")
                        : "sequential");
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
  auto tensors = std::make_shared<bool>(false);
  app.add_option("path", *path, "llama2.c .bin file, GGUF file or Hugging Face model directory")
      ->required();
  app.add_flag("--tensors", *tensors, "GGUF: list every tensor (name, type, shape, bytes)");
  return [path, tensors] { return run_inspect(*path, *tensors); };
}

}  // namespace tf::cli
