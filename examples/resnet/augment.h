// Geometry and resampling of photos into the model's input: the crop each sample gets
// (random-resized for training, centred for evaluation), and one pass that cuts it
// out, scales it to S x S, flips it and normalises it into planar floats.
//
// The crop is drawn from the full image size before anything is decoded, so the
// decoder can pick the smallest DCT scale that still covers the crop at S pixels
// (pickScale in jpeg.h); the resampler then maps the crop onto whatever size the image
// was decoded at. The draw depends only on the seed and the image's size, never on the
// scale or the thread, so a seed gives the same crop on every rank and every run.
#pragma once

#include "jpeg.h"

#include <cstdint>

namespace accord::resnet {

// The usual ImageNet training crop: a fraction of the area drawn uniformly from
// [0.08, 1] and an aspect ratio log-uniformly from [3/4, 4/3]; after 10 draws that do
// not fit, the largest centred crop of the nearest allowed aspect ratio.
CropBox randomResizedCrop(int width, int height, std::uint64_t seed);
// Evaluation: the centred square of side 0.875 x the shorter side, i.e. resizing the
// shorter side to S / 0.875 and cutting the centre S x S (256 -> 224).
CropBox centerCrop(int width, int height);
// Whether the training sample with this seed is flipped (drawn apart from the crop).
bool randomFlip(std::uint64_t seed);

// Per-channel normalisation: (v / 255 - mean) / std.
struct Normalize {
  float mean[3] = {0.485f, 0.456f, 0.406f};  // ImageNet's RGB statistics
  float std[3] = {0.229f, 0.224f, 0.225f};
};

// Writes crop `box` of an image whose full size is full_w x full_h, decoded as `img`
// (possibly at a reduced scale, possibly only a region of it), into out (3, S, S):
// bilinear, mirrored if flip.
void cropResize(const RgbImage& img, int full_w, int full_h, const CropBox& box, int S, bool flip,
                const Normalize& norm, float* out);

}  // namespace accord::resnet
