#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace tf {

const char* rope_kind_name(RopeParams::Kind kind) {
  switch (kind) {
    case RopeParams::Kind::kDefault:
      return "default";
    case RopeParams::Kind::kLinear:
      return "linear";
    case RopeParams::Kind::kDynamic:
      return "dynamic";
    case RopeParams::Kind::kYarn:
      return "yarn";
    case RopeParams::Kind::kLlama3:
      return "llama3";
    case RopeParams::Kind::kLongRope:
      return "longrope";
  }
  return "?";
}

void validate_rope(const RopeParams& p, int64_t head_dim, const std::string& source) {
  using K = RopeParams::Kind;
  const char* kind = rope_kind_name(p.kind);
  if (!(p.theta > 1.0 && p.theta < 1e12))
    fail("{}: rope_theta {} is out of range", source, p.theta);
  const int64_t rot = p.rot_dim > 0 ? p.rot_dim : head_dim;
  if (rot % 2 != 0 || rot > head_dim || rot < 2) {
    fail(
        "{}: rotary dimensions {} (head_dim {} times partial_rotary_factor) must be even and at "
        "most head_dim",
        source, rot, head_dim);
  }
  if (p.kind != K::kDefault && !(p.factor > 0.0 && p.factor < 1e6))
    fail("{}: rope scaling '{}' factor {} is out of range", source, kind, p.factor);
  if ((p.kind == K::kYarn || p.kind == K::kLlama3 || p.kind == K::kLongRope ||
       p.kind == K::kDynamic) &&
      !(p.original_max_pos > 0 && p.original_max_pos <= (int64_t{1} << 24))) {
    fail("{}: rope scaling '{}' needs original_max_position_embeddings in 1..2^24 (got {})", source,
         kind, p.original_max_pos);
  }
  if (p.kind == K::kYarn && !(p.beta_fast > 0.0 && p.beta_slow > 0.0))
    fail("{}: rope scaling 'yarn' beta_fast/beta_slow must be positive", source);
  if (p.kind == K::kLlama3 && !(p.low_freq_factor > 0.0 && p.high_freq_factor > p.low_freq_factor))
    fail("{}: rope scaling 'llama3' needs 0 < low_freq_factor < high_freq_factor (got {}, {})",
         source, p.low_freq_factor, p.high_freq_factor);
  if (!p.freq_factors.empty()) {
    if (static_cast<int64_t>(p.freq_factors.size()) != rot / 2)
      fail("{}: rope frequency factors have {} values, expected {}", source, p.freq_factors.size(),
           rot / 2);
    for (double v : p.freq_factors)
      if (!(v > 0.0 && v < 1e6)) fail("{}: rope frequency factor {} out of range", source, v);
  }
  if (!(p.attention_factor >= 0.0 && p.attention_factor < 100.0))
    fail("{}: rope attention_factor {} is out of range", source, p.attention_factor);
  if (p.kind == K::kLongRope) {
    for (const auto* f : {&p.short_factor, &p.long_factor}) {
      if (static_cast<int64_t>(f->size()) != rot / 2) {
        fail(
            "{}: rope scaling 'longrope' needs short_factor and long_factor of {} values "
            "(rotary dimensions / 2), got {}",
            source, rot / 2, f->size());
      }
      for (double v : *f)
        if (!(v > 0.0 && v < 1e6))
          fail("{}: rope scaling 'longrope' factor {} out of range", source, v);
    }
  }
}

namespace {

// theta^(-2i / dim) for i < dim / 2, in double.
std::vector<double> base_inv_freq(double theta, int64_t dim) {
  std::vector<double> f(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i)
    f[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(dim));
  return f;
}

std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

}  // namespace

double yarn_mscale(double s, double m) {
  return s <= 1.0 ? 1.0 : 0.1 * m * std::log(s) + 1.0;
}

Rope::Rope(const RopeParams& p, int64_t head_dim, kernels::RopeStyle style)
    : p_(p), head_dim_(head_dim), rot_dim_(p.rot_dim > 0 ? p.rot_dim : head_dim), style_(style) {
  using K = RopeParams::Kind;
  const int64_t dim = rot_dim_, half = dim / 2;
  std::vector<double> f = base_inv_freq(p.theta, dim);
  switch (p.kind) {
    case K::kDefault:
    case K::kDynamic:  // below the threshold; beyond it apply() recomputes the base
      break;
    case K::kLinear:
      for (auto& v : f) v /= p.factor;
      break;
    case K::kYarn: {
      // Dimensions that turn fewer than beta_slow times over the original context are
      // interpolated (divided by the factor), those turning more than beta_fast times kept, a
      // linear ramp between (the YaRN paper, section 3.2).
      const auto correction_dim = [&](double rotations) {
        return static_cast<double>(dim) *
               std::log(static_cast<double>(p.original_max_pos) /
                        (rotations * 2.0 * std::numbers::pi)) /
               (2.0 * std::log(p.theta));
      };
      double low = correction_dim(p.beta_fast), high = correction_dim(p.beta_slow);
      if (p.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      for (int64_t i = 0; i < half; ++i) {
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
        f[i] = f[i] / p.factor * (1.0 - extrapolation) + f[i] * extrapolation;
      }
      double a = p.attention_factor;
      if (a <= 0.0) {
        a = p.mscale > 0.0 && p.mscale_all_dim > 0.0
                ? yarn_mscale(p.factor, p.mscale) / yarn_mscale(p.factor, p.mscale_all_dim)
                : yarn_mscale(p.factor);
      }
      scale_ = static_cast<float>(a);
      break;
    }
    case K::kLlama3: {
      // Wavelengths longer than original / low_freq_factor are divided by the factor, shorter
      // than original / high_freq_factor kept, and smoothly blended between.
      const double orig = static_cast<double>(p.original_max_pos);
      const double low_wavelen = orig / p.low_freq_factor, high_wavelen = orig / p.high_freq_factor;
      for (auto& v : f) {
        const double wavelen = 2.0 * std::numbers::pi / v;
        if (wavelen < high_wavelen) continue;
        if (wavelen > low_wavelen) {
          v /= p.factor;
          continue;
        }
        const double smooth =
            (orig / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
        v = (1.0 - smooth) * v / p.factor + smooth * v;
      }
      break;
    }
    case K::kLongRope: {
      std::vector<double> lf = f;
      for (int64_t i = 0; i < half; ++i) {
        f[i] /= p.short_factor[i];
        lf[i] /= p.long_factor[i];
      }
      long_inv_freq_ = to_float(lf);
      double a = p.attention_factor;
      if (a <= 0.0) {
        a = p.factor <= 1.0
                ? 1.0
                : std::sqrt(1.0 +
                            std::log(p.factor) / std::log(static_cast<double>(p.original_max_pos)));
      }
      scale_ = static_cast<float>(a);
      break;
    }
  }
  if (!p.freq_factors.empty()) {
    for (int64_t i = 0; i < half; ++i) f[i] /= p.freq_factors[i];
  }
  inv_freq_ = to_float(f);
}

const float* Rope::inv_freq(int64_t pos, std::vector<float>& scratch) const {
  using K = RopeParams::Kind;
  const int64_t len = pos + 1;
  if (p_.kind == K::kLongRope && len > p_.original_max_pos) return long_inv_freq_.data();
  if (p_.kind == K::kDynamic && len > p_.original_max_pos) {
    const double dim = static_cast<double>(rot_dim_);
    const double base = p_.theta * std::pow(p_.factor * static_cast<double>(len) /
                                                    static_cast<double>(p_.original_max_pos) -
                                                (p_.factor - 1.0),
                                            dim / (dim - 2.0));
    scratch.resize(static_cast<size_t>(rot_dim_ / 2));
    for (int64_t i = 0; i < rot_dim_ / 2; ++i)
      scratch[i] = static_cast<float>(1.0 / std::pow(base, static_cast<double>(2 * i) / dim));
    return scratch.data();
  }
  return inv_freq_.data();
}

void Rope::apply(float* x, int n_heads, int64_t pos) const {
  thread_local std::vector<float> scratch;
  kernels::rope(x, n_heads, static_cast<int>(head_dim_), pos, inv_freq(pos, scratch), style_,
                static_cast<int>(rot_dim_), scale_);
}

void Rope::apply_in(float* x, int n_heads, int64_t pos, int64_t len) const {
  thread_local std::vector<float> scratch;
  kernels::rope(x, n_heads, static_cast<int>(head_dim_), pos, inv_freq(len - 1, scratch), style_,
                static_cast<int>(rot_dim_), scale_);
}

}  // namespace tf
