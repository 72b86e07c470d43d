// Crops and resampling; see augment.h.
#include "augment.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace accord::resnet {
namespace {

constexpr double kMinArea = 0.08, kMaxArea = 1.0;
constexpr double kMinRatio = 3.0 / 4.0, kMaxRatio = 4.0 / 3.0;
constexpr int kCropTries = 10;
constexpr double kCenterFraction = 0.875;  // 224 / 256

// Uniform in [0, 1) from 53 bits: std::uniform_real_distribution's algorithm is not
// specified, and crops must be the same with every standard library.
double unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// One output axis: for each output pixel, the two source pixels and the weight of the
// second, with pixel centres aligned and edges clamped.
struct Taps {
  std::vector<int> i0, i1;
  std::vector<float> w1;
};

Taps taps(double start, double length, int S, int limit) {
  Taps t;
  t.i0.resize(S);
  t.i1.resize(S);
  t.w1.resize(S);
  const double step = length / S;
  for (int o = 0; o < S; ++o) {
    double s = start + (o + 0.5) * step - 0.5;
    s = std::clamp(s, 0.0, static_cast<double>(limit - 1));
    const int i = std::min(static_cast<int>(s), limit - 1);
    t.i0[o] = i;
    t.i1[o] = std::min(i + 1, limit - 1);
    t.w1[o] = static_cast<float>(s - i);
  }
  return t;
}

}  // namespace

CropBox randomResizedCrop(int width, int height, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(kMinRatio), log_hi = std::log(kMaxRatio);
  for (int i = 0; i < kCropTries; ++i) {
    const double target = area * (kMinArea + (kMaxArea - kMinArea) * unit(rng));
    const double ratio = std::exp(log_lo + (log_hi - log_lo) * unit(rng));
    const int w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      const int x = static_cast<int>(rng() % static_cast<std::uint64_t>(width - w + 1));
      const int y = static_cast<int>(rng() % static_cast<std::uint64_t>(height - h + 1));
      return {x, y, w, h};
    }
  }
  const double ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (ratio < kMinRatio) {
    h = static_cast<int>(std::lround(width / kMinRatio));
  } else if (ratio > kMaxRatio) {
    w = static_cast<int>(std::lround(height * kMaxRatio));
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

CropBox centerCrop(int width, int height) {
  const int side =
      std::max(1, static_cast<int>(std::lround(std::min(width, height) * kCenterFraction)));
  return {(width - side) / 2, (height - side) / 2, side, side};
}

bool randomFlip(std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0xF11Bull);  // apart from the crop's draws
  return (rng() & 1) != 0;
}

void cropResize(const RgbImage& img, int full_w, int full_h, const CropBox& box, int S, bool flip,
                const Normalize& norm, float* out) {
  const int scaled_w = img.scaled_width > 0 ? img.scaled_width : img.width;
  const int scaled_h = img.scaled_height > 0 ? img.scaled_height : img.height;
  const double sx = static_cast<double>(scaled_w) / full_w;
  const double sy = static_cast<double>(scaled_h) / full_h;
  Taps tx = taps(box.x * sx - img.x0, box.w * sx, S, img.width);
  const Taps ty = taps(box.y * sy - img.y0, box.h * sy, S, img.height);
  if (flip) {
    std::reverse(tx.i0.begin(), tx.i0.end());
    std::reverse(tx.i1.begin(), tx.i1.end());
    std::reverse(tx.w1.begin(), tx.w1.end());
  }
  float scale[3], shift[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * norm.std[c]);
    shift[c] = -norm.mean[c] / norm.std[c];
  }
  // Separably, along y first: for each output row the two source rows it blends are
  // blended over the columns the x taps read (contiguous bytes, in a loop the compiler
  // vectorises), then each output pixel interpolates that blended row along x, its
  // three channels at once. Along x first would interpolate every source row a blend
  // uses (1 to 2 per output row, as crops are mostly larger than the output), pixel by
  // pixel; this way only the output's pixels are. The same bilinear value, rounded in
  // another order.
  // The columns the taps read; the blended row holds one pixel more on the right, so
  // that each output pixel reads its two taps as six neighbouring floats: where a tap
  // is clamped at the right edge its weight is exactly 0, and the extra pixel (a copy
  // of the last) counts for nothing.
  const int first = *std::min_element(tx.i0.begin(), tx.i0.end());
  const int last = *std::max_element(tx.i1.begin(), tx.i1.end());
  const int span = (last - first + 1) * 3;
  std::vector<int> at(S);  // each output pixel's first tap in the blended row
  for (int x = 0; x < S; ++x) at[x] = (tx.i0[x] - first) * 3;
  const std::size_t plane = static_cast<std::size_t>(S) * S;
  const std::size_t stride = static_cast<std::size_t>(img.width) * 3;
  std::vector<float> blended(static_cast<std::size_t>(span) + 3);
  float* row = blended.data();
  float* o[3] = {out, out + plane, out + 2 * plane};
  for (int y = 0; y < S; ++y) {
    const std::uint8_t* top = img.pixels.data() + ty.i0[y] * stride + first * 3;
    const std::uint8_t* bottom = img.pixels.data() + ty.i1[y] * stride + first * 3;
    const float wy = ty.w1[y];
    for (int i = 0; i < span; ++i) {
      const float t = top[i];
      row[i] = t + wy * (static_cast<float>(bottom[i]) - t);
    }
    for (int c = 0; c < 3; ++c) row[span + c] = row[span - 3 + c];
    for (int x = 0; x < S; ++x) {
      const float* p = row + at[x];
      const float wx = tx.w1[x];
      for (int c = 0; c < 3; ++c) *o[c]++ = (p[c] + wx * (p[3 + c] - p[c])) * scale[c] + shift[c];
    }
  }
}

}  // namespace accord::resnet
