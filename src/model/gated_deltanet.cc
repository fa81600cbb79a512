#include "model/gated_deltanet.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/transformer.h"

namespace tf {
namespace {

using transformer::sigmoid;
using transformer::silu;
using transformer::softplus;

// Runs of at least this many tokens of one sequence take the chunkwise form (shorter ones, decode
// steps above all, the recurrent one). TOKENFLOW_GDN_FORM=recurrent or chunked forces one form
// (benchmarks compare them).
int64_t min_chunked_run() {
  static const int64_t v = [] {
    const char* e = std::getenv("TOKENFLOW_GDN_FORM");
    if (e != nullptr && std::string_view(e) == "recurrent") return int64_t{1} << 40;
    if (e != nullptr && std::string_view(e) == "chunked") return int64_t{1};
    return int64_t{8};
  }();
  return v;
}

}  // namespace

GatedDeltaNet::GatedDeltaNet(const ModelConfig& c, WeightStore& w, const std::string& p)
    : nk_(c.lin_k_heads),
      nv_(c.lin_v_heads),
      dk_(c.lin_k_dim),
      dv_(c.lin_v_dim),
      kernel_(c.ssm_conv_kernel),
      channels_(c.lin_conv_channels()),
      eps_(c.norm_eps),
      split_(c.split_linear_proj) {
  const int64_t kd = nk_ * dk_, vd = nv_ * dv_;
  if (split_) {
    qkv_ = w.matrix(p + "in_proj_qkv.weight", 2 * kd + vd, c.dim);
    z_ = w.matrix(p + "in_proj_z.weight", vd, c.dim);
    b_ = w.matrix(p + "in_proj_b.weight", nv_, c.dim);
    a_ = w.matrix(p + "in_proj_a.weight", nv_, c.dim);
  } else {
    qkvz_ = w.matrix(p + "in_proj_qkvz.weight", 2 * kd + 2 * vd, c.dim);
    ba_ = w.matrix(p + "in_proj_ba.weight", 2 * nv_, c.dim);
  }
  // Hugging Face stores the depthwise convolution [channels, 1, kernel]; [channels, kernel] too.
  const std::string conv = p + "conv1d.weight";
  const float* cw = w.get(conv).shape.rank == 2 ? w.f32(conv, {channels_, kernel_})
                                                : w.f32(conv, {channels_, 1, kernel_});
  conv_.assign(cw, cw + channels_ * kernel_);
  if (w.has(p + "conv1d.bias"))
    fail(ErrorKind::kUnsupported, "'{}conv1d.bias': Gated DeltaNet's convolution has no bias", p);
  const float* a_log = w.f32(p + "A_log", {nv_});
  const float* dt = w.f32(p + "dt_bias", {nv_});
  a_neg_.resize(static_cast<size_t>(nv_));
  for (int64_t h = 0; h < nv_; ++h) a_neg_[h] = -std::exp(a_log[h]);
  dt_bias_.assign(dt, dt + nv_);
  norm_ = w.f32(p + "norm.weight", {dv_});
  out_ = w.matrix(p + "out_proj.weight", c.dim, vd);
}

void GatedDeltaNet::forward(std::span<const SequenceChunk> batch, const float* xb, int64_t T,
                            KvCache& kv, int64_t layer, float* x, Scratch& s, ThreadPool& pool,
                            bool chunked) const {
  using transformer::grow;
  const int64_t C = channels_, K = kernel_, kd = nk_ * dk_, vd = nv_ * dv_, r = nv_ / nk_;
  grow(s.mixed, T * C);
  grow(s.z, T * vd);
  grow(s.beta, T * nv_);
  grow(s.g, T * nv_);
  grow(s.out, T * vd);
  if (split_) {
    grow(s.proj, T * nv_);  // b
    grow(s.ba, T * nv_);    // a
    const kernels::MatmulOutput outs[] = {{qkv_, nullptr, s.mixed.data()},
                                          {z_, nullptr, s.z.data()},
                                          {b_, nullptr, s.proj.data()},
                                          {a_, nullptr, s.ba.data()}};
    kernels::matmul_many(xb, T, outs, pool);
    transformer::for_rows(pool, T, [&](int64_t i) {
      for (int64_t h = 0; h < nv_; ++h) {
        s.beta[i * nv_ + h] = sigmoid(s.proj[i * nv_ + h]);
        s.g[i * nv_ + h] = a_neg_[h] * softplus(s.ba[i * nv_ + h] + dt_bias_[h]);
      }
    });
  } else {
    const int64_t width = 2 * kd + 2 * vd;  // per key head: q, k, r value heads' v, their z
    grow(s.proj, T * width);
    grow(s.ba, T * 2 * nv_);
    const kernels::MatmulOutput outs[] = {{qkvz_, nullptr, s.proj.data()},
                                          {ba_, nullptr, s.ba.data()}};
    kernels::matmul_many(xb, T, outs, pool);
    transformer::for_rows(pool, T, [&](int64_t i) {
      const float* src = s.proj.data() + i * width;
      float* m = s.mixed.data() + i * C;
      float* z = s.z.data() + i * vd;
      const int64_t group = 2 * dk_ + 2 * r * dv_;
      for (int64_t g = 0; g < nk_; ++g) {
        const float* in = src + g * group;
        std::copy_n(in, dk_, m + g * dk_);
        std::copy_n(in + dk_, dk_, m + kd + g * dk_);
        std::copy_n(in + 2 * dk_, r * dv_, m + 2 * kd + g * r * dv_);
        std::copy_n(in + 2 * dk_ + r * dv_, r * dv_, z + g * r * dv_);
        const float* ba = s.ba.data() + i * 2 * nv_ + g * 2 * r;
        for (int64_t j = 0; j < r; ++j) {
          const int64_t h = g * r + j;
          s.beta[i * nv_ + h] = sigmoid(ba[j]);
          s.g[i * nv_ + h] = a_neg_[h] * softplus(ba[r + j] + dt_bias_[h]);
        }
      }
    });
  }
  // Where each sequence's tokens start in the flattened batch.
  s.starts.assign(batch.size() + 1, 0);
  for (size_t i = 0; i < batch.size(); ++i)
    s.starts[i + 1] = s.starts[i] + static_cast<int64_t>(batch[i].tokens.size());
  const int32_t group = kv.layout().group_of_layer[layer];
  const auto state_of = [&](size_t seq) { return kv.state(layer, batch[seq].table(group)[0]); };

  // The causal convolution over each sequence's tokens from its window, then SiLU, in place, in
  // tasks of kChannels channels (the window: the last K - 1 inputs, [K - 1, C]).
  constexpr int64_t kChannels = 64;
  const int64_t per_seq = (C + kChannels - 1) / kChannels;
  pool.parallel_for(static_cast<int64_t>(batch.size()) * per_seq, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const size_t sq = static_cast<size_t>(task / per_seq);
      const int64_t c0 = task % per_seq * kChannels, c1 = std::min(C, c0 + kChannels);
      float* win = state_of(sq);
      if (batch[sq].start_pos == 0)
        for (int64_t j = 0; j + 1 < K; ++j) std::fill(win + j * C + c0, win + j * C + c1, 0.0f);
      for (int64_t i = s.starts[sq]; i < s.starts[sq + 1]; ++i) {
        float* xi = s.mixed.data() + i * C;
        for (int64_t d = c0; d < c1; ++d) {
          const float* wd = conv_.data() + d * K;
          float acc = wd[K - 1] * xi[d];
          for (int64_t j = 0; j + 1 < K; ++j) acc += wd[j] * win[j * C + d];
          for (int64_t j = 0; j + 2 < K; ++j) win[j * C + d] = win[(j + 1) * C + d];
          if (K > 1) win[(K - 2) * C + d] = xi[d];
          xi[d] = silu(acc);
        }
      }
    }
  });
  // q and k L2-normalized per key head (q also over sqrt(dk)), as transformers'
  // use_qk_l2norm_in_kernel does.
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk_));
  transformer::for_rows(pool, T, [&](int64_t i) {
    float* m = s.mixed.data() + i * C;
    for (int64_t v = 0; v < 2 * nk_; ++v) {
      float* h = m + v * dk_;
      float ss = 0.0f;
      for (int64_t j = 0; j < dk_; ++j) ss += h[j] * h[j];
      const float f = 1.0f / std::sqrt(ss + 1e-6f) * (v < nk_ ? q_scale : 1.0f);
      for (int64_t j = 0; j < dk_; ++j) h[j] *= f;
    }
  });
  // The delta rule, a task per sequence and value head.
  const int64_t min_run = chunked ? min_chunked_run() : int64_t{1} << 40;
  pool.parallel_for(static_cast<int64_t>(batch.size()) * nv_, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const size_t sq = static_cast<size_t>(task / nv_);
      const int64_t h = task % nv_;
      float* S = state_of(sq) + (K - 1) * C + h * dk_ * dv_;
      if (batch[sq].start_pos == 0) std::fill(S, S + dk_ * dv_, 0.0f);
      const int64_t first = s.starts[sq], end = s.starts[sq + 1];
      if (end - first >= min_run)
        chunkwise(first, end, h, S, s);
      else
        recurrent(first, end, h, S, s);
    }
  });
  // Each head's output RMS-normalized (times the norm's weight), gated by SiLU(z).
  transformer::for_rows(pool, T, [&](int64_t i) {
    for (int64_t h = 0; h < nv_; ++h) {
      float* o = s.out.data() + i * vd + h * dv_;
      const float* z = s.z.data() + i * vd + h * dv_;
      float ss = 0.0f;
      for (int64_t j = 0; j < dv_; ++j) ss += o[j] * o[j];
      const float f = 1.0f / std::sqrt(ss / static_cast<float>(dv_) + eps_);
      for (int64_t j = 0; j < dv_; ++j) o[j] = o[j] * f * norm_[j] * silu(z[j]);
    }
  });
  kernels::matmul_add(s.out.data(), T, out_, nullptr, x, pool);
}

void GatedDeltaNet::recurrent(int64_t first, int64_t end, int64_t h, float* S, Scratch& s) const {
  const int64_t C = channels_, kd = nk_ * dk_, kh = h / (nv_ / nk_), dk = dk_, dv = dv_;
  thread_local std::vector<float> buf;
  transformer::grow(buf, 2 * dv);
  float* mem = buf.data();
  float* d = buf.data() + dv;
  for (int64_t i = first; i < end; ++i) {
    const float* m = s.mixed.data() + i * C;
    const float* q = m + kh * dk;
    const float* k = m + kd + kh * dk;
    const float* v = m + 2 * kd + h * dv;
    const float decay = std::exp(s.g[i * nv_ + h]), beta = s.beta[i * nv_ + h];
    std::fill(mem, mem + dv, 0.0f);
    for (int64_t a = 0; a < dk; ++a) {
      float* row = S + a * dv;
      const float ka = k[a];
      for (int64_t j = 0; j < dv; ++j) {
        row[j] *= decay;
        mem[j] += row[j] * ka;
      }
    }
    for (int64_t j = 0; j < dv; ++j) d[j] = (v[j] - mem[j]) * beta;
    float* o = s.out.data() + i * nv_ * dv + h * dv;
    std::fill(o, o + dv, 0.0f);
    for (int64_t a = 0; a < dk; ++a) {
      float* row = S + a * dv;
      const float ka = k[a], qa = q[a];
      for (int64_t j = 0; j < dv; ++j) {
        row[j] += ka * d[j];
        o[j] += row[j] * qa;
      }
    }
  }
}

// Per chunk of n tokens, with G_t the sum of g over the chunk's first t + 1 tokens and S0 the
// state before it: the writes d_t = beta_t (v_t - e^{G_t} S0^T k_t - sum_{j<t} e^{G_t - G_j}
// (k_t.k_j) d_j) by forward substitution; outputs o_t = e^{G_t} S0^T q_t + sum_{j<=t}
// e^{G_t - G_j} (q_t.k_j) d_j; the state after it e^{G_n} S0 + sum_j e^{G_n - G_j} k_j d_j^T.
void GatedDeltaNet::chunkwise(int64_t first, int64_t end, int64_t h, float* S, Scratch& s) const {
  const int64_t C = channels_, kd = nk_ * dk_, kh = h / (nv_ / nk_), dk = dk_, dv = dv_;
  constexpr int64_t N = kChunk;
  thread_local std::vector<float> buf;
  transformer::grow(buf, 2 * N + 2 * N * N + N * dv);
  float* G = buf.data();
  float* tail = G + N;     // [N]: e^{G_n - G_t}
  float* KK = tail + N;    // [N, N]: k_t.k_j, j < t
  float* QK = KK + N * N;  // [N, N]: q_t.k_j, j <= t
  float* D = QK + N * N;   // [N, dv]: the writes
  for (int64_t c0 = first; c0 < end; c0 += N) {
    const int64_t n = std::min(N, end - c0);
    const auto row = [&](int64_t t) { return s.mixed.data() + (c0 + t) * C; };
    float acc = 0.0f;
    for (int64_t t = 0; t < n; ++t) G[t] = acc += s.g[(c0 + t) * nv_ + h];
    for (int64_t t = 0; t < n; ++t) {
      const float* qt = row(t) + kh * dk;
      const float* kt = row(t) + kd + kh * dk;
      for (int64_t j = 0; j <= t; ++j) {
        const float* kj = row(j) + kd + kh * dk;
        float a = 0.0f, b = 0.0f;
        for (int64_t c = 0; c < dk; ++c) {
          a += kt[c] * kj[c];
          b += qt[c] * kj[c];
        }
        KK[t * N + j] = a;
        QK[t * N + j] = b;
      }
    }
    // The writes, token by token: d_t needs the d_j before it.
    for (int64_t t = 0; t < n; ++t) {
      const float* kt = row(t) + kd + kh * dk;
      const float* vt = row(t) + 2 * kd + h * dv;
      const float beta = s.beta[(c0 + t) * nv_ + h], eg = std::exp(G[t]);
      float* dt = D + t * dv;
      std::fill(dt, dt + dv, 0.0f);
      for (int64_t a = 0; a < dk; ++a) {  // S0^T k_t
        const float ka = kt[a];
        const float* sr = S + a * dv;
        for (int64_t j = 0; j < dv; ++j) dt[j] += sr[j] * ka;
      }
      for (int64_t j = 0; j < dv; ++j) dt[j] *= eg;
      for (int64_t j = 0; j < t; ++j) {
        const float f = std::exp(G[t] - G[j]) * KK[t * N + j];
        const float* dj = D + j * dv;
        for (int64_t u = 0; u < dv; ++u) dt[u] += f * dj[u];
      }
      for (int64_t j = 0; j < dv; ++j) dt[j] = beta * (vt[j] - dt[j]);
    }
    // The outputs, from S0 before the state moves on.
    for (int64_t t = 0; t < n; ++t) {
      const float* qt = row(t) + kh * dk;
      float* o = s.out.data() + (c0 + t) * nv_ * dv + h * dv;
      std::fill(o, o + dv, 0.0f);
      for (int64_t a = 0; a < dk; ++a) {
        const float qa = qt[a];
        const float* sr = S + a * dv;
        for (int64_t j = 0; j < dv; ++j) o[j] += sr[j] * qa;
      }
      const float eg = std::exp(G[t]);
      for (int64_t j = 0; j < dv; ++j) o[j] *= eg;
      for (int64_t j = 0; j <= t; ++j) {
        const float f = std::exp(G[t] - G[j]) * QK[t * N + j];
        const float* dj = D + j * dv;
        for (int64_t u = 0; u < dv; ++u) o[u] += f * dj[u];
      }
    }
    // The state after the chunk: row a of S is e^{G_n} S0[a] + sum_j e^{G_n - G_j} k_j[a] d_j.
    const float last = G[n - 1], el = std::exp(last);
    for (int64_t t = 0; t < n; ++t) tail[t] = std::exp(last - G[t]);
    for (int64_t a = 0; a < dk; ++a) {
      float* sr = S + a * dv;
      for (int64_t j = 0; j < dv; ++j) sr[j] *= el;
      for (int64_t t = 0; t < n; ++t) {
        const float f = tail[t] * row(t)[kd + kh * dk + a];
        const float* dt = D + t * dv;
        for (int64_t j = 0; j < dv; ++j) sr[j] += f * dt[j];
      }
    }
  }
}

}  // namespace tf
