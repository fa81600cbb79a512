// `tokenflow quantize`: packs a Hugging Face model directory's linear layers and embeddings into
// int8, q4, bf16 or f16 and writes a new directory that loads without packing again (the job of
// TF's Model Optimization Toolkit in a TF Serving stack).

#include <cstdio>
#include <deque>
#include <filesystem>
#include <vector>

#include "cli/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace tf::cli {
namespace {

namespace fs = std::filesystem;

struct QuantizeOptions {
  std::string dtype;
  std::string in, out;
};

int run_quantize(const QuantizeOptions& o) {
  if (fs::path(o.in).extension() == ".gguf") return requantize_gguf(o.in, o.out, o.dtype);
  const kernels::WeightType type = kernels::parse_weight_type(o.dtype);
  if (type == kernels::WeightType::kF32) fail("--dtype f32 would write the model unchanged");
  std::error_code ec;
  if (!fs::is_directory(o.in, ec) || !fs::exists(fs::path(o.in) / "config.json", ec)) {
    fail(
        "'{}' is not a Hugging Face model directory (config.json + safetensors); quantize takes "
        "one",
        o.in);
  }
  if (fs::exists(o.out, ec) && !fs::is_empty(o.out, ec))
    fail("'{}' exists and is not empty: quantize writes a new directory", o.out);
  if (fs::exists(o.out, ec) && fs::equivalent(o.in, o.out, ec))
    fail("the output directory is the input");

  auto model = load_model(o.in, type, /*keep_files=*/true);
  const WeightStore& w = model->weights();
  // Buffers for tensors converted here (bf16/f16 in their stored layout); deque: stable.
  std::deque<std::vector<uint16_t>> converted;
  std::deque<std::vector<uint8_t>> rows_of_panels;
  std::deque<std::vector<uint8_t>> scales_of_panels;
  std::vector<SafetensorsOutput> out;
  int64_t bytes = 0;
  for (const std::string& name : w.names()) {
    const TensorView& v = w.get(name);
    const kernels::WeightMatrix* m = w.packed_matrix(name);
    if (m != nullptr &&
        (m->type == kernels::WeightType::kQ4Panels || m->type == kernels::WeightType::kI8Panels)) {
      // Laid out in the kernels' panels at load: written as the rows the format stores.
      const bool q4 = m->type == kernels::WeightType::kQ4Panels;
      rows_of_panels.emplace_back(static_cast<size_t>(q4 ? m->n * m->k / 2 : m->n * m->k));
      scales_of_panels.emplace_back(
          static_cast<size_t>(kernels::panel_scale_bytes(m->type, m->n, m->k)));
      kernels::panels_to_rows(*m, rows_of_panels.back().data(), scales_of_panels.back().data());
      if (q4) {
        out.push_back({name, DType::kU8, {m->n, m->k / 2}, rows_of_panels.back().data()});
        out.push_back({name + ".tf_scales",
                       DType::kF16,
                       {m->n, m->k / kernels::kQ4Group},
                       scales_of_panels.back().data()});
      } else {
        out.push_back({name, DType::kI8, {m->n, m->k}, rows_of_panels.back().data()});
        out.push_back({name + ".tf_scale", DType::kF32, {m->n}, scales_of_panels.back().data()});
      }
    } else if (m != nullptr &&
               (m->type == kernels::WeightType::kI8 || m->type == kernels::WeightType::kQ4)) {
      // Packed rows [out, in], with the scales beside them.
      if (m->type == kernels::WeightType::kI8) {
        out.push_back({name, DType::kI8, {m->n, m->k}, m->data});
        out.push_back({name + ".tf_scale", DType::kF32, {m->n}, m->scales});
      } else {
        out.push_back({name, DType::kU8, {m->n, m->k / 2}, m->data});
        out.push_back(
            {name + ".tf_scales", DType::kF16, {m->n, m->k / kernels::kQ4Group}, m->scales});
      }
    } else if (const kernels::WeightType half =
                   m == nullptr                                  ? kernels::WeightType::kF32
                   : m->type == kernels::WeightType::kBF16Panels ? kernels::WeightType::kBF16
                   : m->type == kernels::WeightType::kF16Panels  ? kernels::WeightType::kF16
                                                                 : m->type;
               (half == kernels::WeightType::kBF16 || half == kernels::WeightType::kF16) &&
               v.dtype != (half == kernels::WeightType::kBF16 ? DType::kBF16 : DType::kF16)) {
      // bf16 / f16 (in rows or panels at load): the same tensor in the narrower type, in its
      // stored layout (a plain checkpoint of that dtype), rounded as the loader rounded it.
      const bool bf16 = half == kernels::WeightType::kBF16;
      std::vector<float> f(static_cast<size_t>(v.numel()));
      convert_to_f32(v.dtype, v.data, f.size(), f.data());
      converted.emplace_back(f.size());
      for (size_t i = 0; i < f.size(); ++i)
        converted.back()[i] = bf16 ? f32_to_bf16(f[i]) : f32_to_f16(f[i]);
      out.push_back({name, bf16 ? DType::kBF16 : DType::kF16, v.shape, converted.back().data()});
    } else {
      out.push_back({name, v.dtype, v.shape, v.data});  // norms, biases: as they are
    }
  }
  for (const auto& t : out) bytes += t.shape.numel() * static_cast<int64_t>(dtype_size(t.dtype));
  fs::create_directories(o.out, ec);
  if (ec) fail("cannot create '{}': {}", o.out, ec.message());
  write_safetensors((fs::path(o.out) / "model.safetensors").string(), out);
  // Everything else the directory holds (config, tokenizer, generation config) comes along.
  for (const auto& entry : fs::directory_iterator(o.in)) {
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || entry.path().extension() == ".safetensors" ||
        file == "model.safetensors.index.json") {
      continue;
    }
    fs::copy_file(entry.path(), fs::path(o.out) / file, fs::copy_options::overwrite_existing, ec);
    if (ec) fail("cannot copy '{}': {}", entry.path().string(), ec.message());
  }
  std::printf("wrote %s: %zu tensors, %.1f MiB as %s (from %.1f MiB)\n", o.out.c_str(), out.size(),
              static_cast<double>(bytes) / (1 << 20), o.dtype.c_str(),
              static_cast<double>(w.stored_bytes()) / (1 << 20));
  return 0;
}

}  // namespace

Action add_quantize(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  app.add_option("--dtype", o->dtype,
                 "int8, q4, bf16 or f16 (a GGUF input: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                 "q5_1, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k or iq4_nl)")
      ->required();
  app.add_option("input", o->in, "Hugging Face model directory, or a .gguf file")->required();
  app.add_option("output", o->out, "new directory to write (for a .gguf input: a .gguf file)")
      ->required();
  return [o] { return run_quantize(*o); };
}

}  // namespace tf::cli
