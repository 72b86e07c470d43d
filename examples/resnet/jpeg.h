// JPEG decoding and encoding with libjpeg(-turbo), from and to memory.
//
// A loader that crops and shrinks photos to 224 pixels throws most of each one away,
// so the decoder is told what will be kept before it starts (DecodePlan, chosen from
// the full size in the header): the scale, 1/2, 1/4 or 1/8, where libjpeg runs a
// smaller inverse DCT per block instead of decoding every pixel (pickScale), and the
// region, outside which whole columns of blocks are not decoded at all and rows are
// only entropy-decoded (libjpeg-turbo's jpeg_crop_scanline and jpeg_skip_scanlines).
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
  // A region decoded from a larger image: where pixel (0, 0) sits in the whole image
  // at the decoded scale, and that whole image's size (0: this image is whole).
  int x0 = 0, y0 = 0;
  int scaled_width = 0, scaled_height = 0;
};

// A rectangle in full-size pixels.
struct CropBox {
  int x = 0, y = 0, w = 0, h = 0;
  bool operator==(const CropBox&) const = default;
};

struct DecodePlan {
  int denom = 1;     // 1, 2, 4 or 8
  CropBox region{};  // the full-size pixels needed; w == 0: all of them
};

// The largest power-of-two denominator in {1, 2, 4, 8} that still leaves a region of
// region_w x region_h full-size pixels at least out_w x out_h after scaling, so the
// resampler only ever shrinks by less than 2 (bilinear does not alias much there).
int pickScale(double region_w, double region_h, int out_w, int out_h);

// Decodes a JPEG held in memory. pick(full_width, full_height) returns the plan; the
// image comes back at ceil(full / denom), cut to a rectangle that holds the region
// with at least a pixel to spare on each side (for bilinear taps); libjpeg widens it
// to whole blocks. The region and its spare pixel are exactly what a whole decode
// gives; the outermost pixels of the rectangle may not be. The rest of
// the stream is not read, so damage after the region goes unnoticed (a packed record
// still has its CRC). Throws JpegError.
RgbImage decodeJpeg(const std::uint8_t* data, std::size_t size,
                    const std::function<DecodePlan(int, int)>& pick = {});

// Encodes RGB pixels (quality 1-100): the test data and the dataset tool.
std::vector<std::uint8_t> encodeJpeg(const RgbImage& image, int quality);

}  // namespace accord::resnet
