// JPEG decoding and encoding with libjpeg(-turbo), from and to memory.
//
// The decoder can decode at 1/2, 1/4 or 1/8 of the full size: libjpeg then runs a
// smaller inverse DCT per block instead of decoding every pixel and throwing most of
// them away, which is where a loader that crops and shrinks ImageNet-sized photos to
// 224 pixels saves most of its time. The caller sees the full size first and picks
// the scale (pickScale) from the region it will keep.
//
// Grey images come out as RGB (R = G = B); CMYK and YCCK (Adobe) images are converted
// to RGB here since libjpeg does not. Any libjpeg error becomes a JpegError with
// libjpeg's own message; nothing is printed and the process never exits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace accord::resnet {

class JpegError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RgbImage {
  int width = 0, height = 0;
  std::vector<std::uint8_t> pixels;  // (height, width, 3), row-major RGB
};

// The largest power-of-two denominator in {1, 2, 4, 8} that still leaves a region of
// region_w x region_h full-size pixels at least out_w x out_h after scaling, so the
// resampler only ever shrinks by less than 2 (bilinear does not alias much there).
int pickScale(double region_w, double region_h, int out_w, int out_h);

// Decodes a JPEG held in memory. pick(full_width, full_height) returns the scale
// denominator (1, 2, 4 or 8); the image comes back at ceil(full / denominator).
// Throws JpegError.
RgbImage decodeJpeg(const std::uint8_t* data, std::size_t size,
                    const std::function<int(int, int)>& pick = {});

// Encodes RGB pixels (quality 1-100): the test data and the dataset tool.
std::vector<std::uint8_t> encodeJpeg(const RgbImage& image, int quality);

}  // namespace accord::resnet
