#include "model/mamba.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/transformer.h"

namespace tf {
namespace {

struct MambaLayer {
  const float* norm = nullptr;
  kernels::WeightMatrix in_x, in_z;                     // the halves of in_proj [2 * inner, dim]
  const float *in_bias = nullptr, *out_bias = nullptr;  // use_bias
  const float* conv_w = nullptr;   // [inner, kernel]: tap kernel-1 is the current input
  const float* conv_b = nullptr;   // [inner] (use_conv_bias)
  kernels::WeightMatrix x_proj;    // [dt_rank + 2 * state, inner]
  kernels::WeightMatrix dt_proj;   // [inner, dt_rank]
  const float* dt_bias = nullptr;  // [inner]
  std::vector<float> a;            // -exp(A_log) [inner, state]
  const float* d = nullptr;        // [inner]
  kernels::WeightMatrix out_proj;  // [dim, inner]
};

using transformer::silu;
using transformer::softplus;

class MambaModel final : public Model {
 public:
  MambaModel(ModelConfig config, WeightStore weights)
      : Model(std::move(config), std::move(weights)) {
    const ModelConfig& c = config_;
    WeightStore& w = weights_;
    const int64_t inner = c.ssm_inner, n = c.ssm_state, r = c.ssm_dt_rank, k = c.ssm_conv_kernel;
    embed_ = w.matrix("backbone.embeddings.weight", c.vocab_size, c.dim);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string p = "backbone.layers." + std::to_string(l) + ".";
      MambaLayer L;
      L.norm = w.f32(p + "norm.weight", {c.dim});
      const kernels::WeightMatrix in =
          w.matrix(p + "mixer.in_proj.weight", 2 * inner, c.dim, false, inner);
      L.in_x = in.rows(0, inner);
      L.in_z = in.rows(inner, inner);
      if (c.ssm_proj_bias) {
        L.in_bias = w.f32(p + "mixer.in_proj.bias", {2 * inner});
        L.out_bias = w.f32(p + "mixer.out_proj.bias", {c.dim});
      }
      // Hugging Face stores the depthwise convolution [inner, 1, kernel]; llama.cpp's converter
      // squeezes it to [inner, kernel]. The same values either way.
      L.conv_w = w.get(p + "mixer.conv1d.weight").shape.rank == 2
                     ? w.f32(p + "mixer.conv1d.weight", {inner, k})
                     : w.f32(p + "mixer.conv1d.weight", {inner, 1, k});
      if (c.ssm_conv_bias) L.conv_b = w.f32(p + "mixer.conv1d.bias", {inner});
      L.x_proj = w.matrix(p + "mixer.x_proj.weight", r + 2 * n, inner);
      L.dt_proj = w.matrix(p + "mixer.dt_proj.weight", inner, r);
      L.dt_bias = w.f32(p + "mixer.dt_proj.bias", {inner});
      // A = -exp(A_log) (Hugging Face), or A itself (GGUF's ssm_a, the converter's -exp(A_log)).
      L.a.resize(static_cast<size_t>(inner * n));
      if (w.has(p + "mixer.A")) {
        const float* a = w.f32(p + "mixer.A", {inner, n});
        std::copy_n(a, inner * n, L.a.begin());
      } else {
        const float* a_log = w.f32(p + "mixer.A_log", {inner, n});
        for (int64_t i = 0; i < inner * n; ++i) L.a[i] = -std::exp(a_log[i]);
      }
      L.d = w.f32(p + "mixer.D", {inner});
      L.out_proj = w.matrix(p + "mixer.out_proj.weight", c.dim, inner);
      layers_.push_back(std::move(L));
    }
    norm_f_ = w.f32("backbone.norm_f.weight", {c.dim});
    lm_head_ = w.has("lm_head.weight") ? w.matrix("lm_head.weight", c.vocab_size, c.dim) : embed_;
  }

 protected:
  void run(std::span<const SequenceChunk> batch, std::span<const TokenPosition> tokens, KvCache& kv,
           float* logits, ThreadPool& pool) override {
    const ModelConfig& c = config_;
    const int64_t T = static_cast<int64_t>(tokens.size());
    const int64_t dim = c.dim, inner = c.ssm_inner, n = c.ssm_state, r = c.ssm_dt_rank;
    const int64_t k = c.ssm_conv_kernel, xw = r + 2 * n;
    transformer::grow(x_, T * dim);
    transformer::grow(xb_, T * dim);
    transformer::grow(xs_, T * inner);
    transformer::grow(z_, T * inner);
    transformer::grow(dbl_, T * xw);
    transformer::grow(dt_in_, T * r);
    transformer::grow(dt_, T * inner);
    transformer::grow(y_, T * inner);
    // Where each sequence's tokens start in the flattened batch.
    starts_.assign(batch.size() + 1, 0);
    for (size_t s = 0; s < batch.size(); ++s)
      starts_[s + 1] = starts_[s] + static_cast<int64_t>(batch[s].tokens.size());

    int64_t t = 0;
    for (const auto& s : batch)
      for (int32_t id : s.tokens) embed_.dequantize_row(id, x_.data() + dim * t++);

    // The scan's tasks: a sequence's channels in ranges of kChannels, so that two threads split
    // even one sequence's work.
    constexpr int64_t kChannels = 64;
    const int64_t per_seq = (inner + kChannels - 1) / kChannels;
    const int64_t n_tasks = static_cast<int64_t>(batch.size()) * per_seq;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const MambaLayer& L = layers_[l];
      transformer::for_rows(pool, T, [&](int64_t i) {
        kernels::rms_norm(x_.data() + i * dim, L.norm, c.norm_eps, dim, xb_.data() + i * dim);
      });
      const kernels::MatmulOutput in[] = {
          {L.in_x, L.in_bias, xs_.data()},
          {L.in_z, L.in_bias ? L.in_bias + inner : nullptr, z_.data()}};
      kernels::matmul_many(xb_.data(), T, in, pool);
      // The causal convolution over each sequence's tokens, from its state, then SiLU (in place:
      // each channel's inputs are read before its output overwrites them).
      pool.parallel_for(n_tasks, [&](int64_t b, int64_t e) {
        for (int64_t task = b; task < e; ++task) {
          const int64_t s = task / per_seq, c0 = task % per_seq * kChannels;
          const int64_t c1 = std::min(inner, c0 + kChannels);
          float* conv = kv.state(l, batch[s].table(kv.layout().group_of_layer[l])[0]);
          if (batch[s].start_pos == 0) {
            for (int64_t j = 0; j + 1 < k; ++j)
              std::fill(conv + j * inner + c0, conv + j * inner + c1, 0.0f);
          }
          for (int64_t i = starts_[s]; i < starts_[s + 1]; ++i) {
            float* xi = xs_.data() + i * inner;
            for (int64_t d = c0; d < c1; ++d) {
              const float* w = L.conv_w + d * k;
              float acc = L.conv_b ? L.conv_b[d] : 0.0f;
              for (int64_t j = 0; j + 1 < k; ++j) acc += w[j] * conv[j * inner + d];
              acc += w[k - 1] * xi[d];
              for (int64_t j = 0; j + 2 < k; ++j) conv[j * inner + d] = conv[(j + 1) * inner + d];
              if (k > 1) conv[(k - 2) * inner + d] = xi[d];
              xi[d] = silu(acc);
            }
          }
        }
      });
      // The step sizes and the B, C of every token, from its convolved x.
      kernels::matmul(xs_.data(), T, L.x_proj, nullptr, dbl_.data(), pool);
      for (int64_t i = 0; i < T; ++i)
        std::memcpy(dt_in_.data() + i * r, dbl_.data() + i * xw, static_cast<size_t>(r) * 4);
      kernels::matmul(dt_in_.data(), T, L.dt_proj, L.dt_bias, dt_.data(), pool);
      // The selective scan: h = exp(dt A) h + dt B x, y = C h + D x, gated by SiLU(z).
      pool.parallel_for(n_tasks, [&](int64_t b, int64_t e) {
        for (int64_t task = b; task < e; ++task) {
          const int64_t s = task / per_seq, c0 = task % per_seq * kChannels;
          const int64_t c1 = std::min(inner, c0 + kChannels);
          float* h =
              kv.state(l, batch[s].table(kv.layout().group_of_layer[l])[0]) + (k - 1) * inner;
          if (batch[s].start_pos == 0) std::fill(h + c0 * n, h + c1 * n, 0.0f);
          for (int64_t i = starts_[s]; i < starts_[s + 1]; ++i) {
            const float* bc = dbl_.data() + i * xw + r;  // B [n], then C [n]
            const float* xi = xs_.data() + i * inner;
            const float* dti = dt_.data() + i * inner;
            const float* zi = z_.data() + i * inner;
            float* yi = y_.data() + i * inner;
            for (int64_t d = c0; d < c1; ++d) {
              const float delta = softplus(dti[d]);
              const float dx = delta * xi[d];
              const float* a = L.a.data() + d * n;
              float* hd = h + d * n;
              float acc = 0.0f;
              for (int64_t j = 0; j < n; ++j) {
                hd[j] = std::exp(delta * a[j]) * hd[j] + dx * bc[j];
                acc += hd[j] * bc[n + j];
              }
              yi[d] = (acc + L.d[d] * xi[d]) * silu(zi[d]);
            }
          }
        }
      });
      kernels::matmul_add(y_.data(), T, L.out_proj, L.out_bias, x_.data(), pool);
    }
    const int64_t rows = transformer::gather_logit_rows(batch, x_.data(), dim, xb_.data());
    transformer::for_rows(pool, rows, [&](int64_t i) {
      kernels::rms_norm(xb_.data() + i * dim, norm_f_, c.norm_eps, dim, xb_.data() + i * dim);
    });
    if (hidden_out_)
      std::memcpy(hidden_out_, xb_.data(), static_cast<size_t>(rows * dim) * sizeof(float));
    kernels::matmul(xb_.data(), rows, lm_head_, nullptr, logits, pool);
  }

 private:
  kernels::WeightMatrix embed_, lm_head_;
  const float* norm_f_ = nullptr;
  std::vector<MambaLayer> layers_;
  std::vector<float> x_, xb_, xs_, z_, dbl_, dt_in_, dt_, y_;
  std::vector<int64_t> starts_;
};

}  // namespace

std::unique_ptr<Model> make_mamba(ModelConfig config, WeightStore weights) {
  return std::make_unique<MambaModel>(std::move(config), std::move(weights));
}

}  // namespace tf
