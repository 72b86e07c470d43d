// JPEG decoding (full and reduced scale) against known pixels, the crops' geometry and
// their determinism by seed, and the crop-resize-normalise pass against hand values.
#include "augment.h"
#include "jpeg.h"
#include "jpeg_source.h"
#include "scratch_dir.h"

#include <catch2/catch.hpp>

#include <cstdio>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <tuple>

using namespace accord::resnet;
namespace fs = std::filesystem;

namespace {

// 16x16 blocks of solid colours (aligned to JPEG's 4:2:0 macroblocks, so each block
// decodes to nearly its colour), block (bx, by) coloured by colourOf.
std::array<int, 3> colourOf(int bx, int by) {
  return {(bx * 70 + 30) % 256, (by * 90 + 20) % 256, ((bx + by) * 50 + 60) % 256};
}

RgbImage blocks(int bw, int bh) {
  RgbImage img{bw * 16, bh * 16, {}};
  img.pixels.resize(static_cast<std::size_t>(img.width) * img.height * 3);
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x)
      for (int c = 0; c < 3; ++c)
        img.pixels[(static_cast<std::size_t>(y) * img.width + x) * 3 + c] =
            static_cast<std::uint8_t>(colourOf(x / 16, y / 16)[c]);
  return img;
}

int pixel(const RgbImage& img, int x, int y, int c) {
  return img.pixels[(static_cast<std::size_t>(y) * img.width + x) * 3 + c];
}

std::string jpegError(const std::vector<std::uint8_t>& bytes) {
  try {
    decodeJpeg(bytes.data(), bytes.size());
  } catch (const JpegError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a JPEG decodes to the pixels it was made from, at full and reduced scale", "[jpeg]") {
  const RgbImage src = blocks(5, 3);  // 80 x 48
  const std::vector<std::uint8_t> bytes = encodeJpeg(src, 100);
  for (int denom : {1, 2, 4, 8}) {
    INFO("scale 1/" << denom);
    int seen_w = 0, seen_h = 0;
    const RgbImage img = decodeJpeg(bytes.data(), bytes.size(), [&](int w, int h) {
      seen_w = w;
      seen_h = h;
      return DecodePlan{denom};
    });
    CHECK(seen_w == 80);
    CHECK(seen_h == 48);
    CHECK(img.width == 80 / denom);
    CHECK(img.height == 48 / denom);
    // The centre of every block keeps the block's colour (chroma is subsampled, so a
    // few levels of error; at 1/8 each pixel is its 8x8 block's mean, i.e. the colour).
    const int b = 16 / denom;
    int worst = 0;
    for (int by = 0; by < 3; ++by)
      for (int bx = 0; bx < 5; ++bx)
        for (int c = 0; c < 3; ++c)
          worst = std::max(
              worst, std::abs(pixel(img, bx * b + b / 2, by * b + b / 2, c) - colourOf(bx, by)[c]));
    CHECK(worst <= 4);
  }
  // Sizes that do not divide: libjpeg rounds up.
  RgbImage odd{50, 30, std::vector<std::uint8_t>(50 * 30 * 3, 200)};
  const auto odd_bytes = encodeJpeg(odd, 90);
  const RgbImage quarter =
      decodeJpeg(odd_bytes.data(), odd_bytes.size(), [](int, int) { return DecodePlan{4}; });
  CHECK(quarter.width == 13);
  CHECK(quarter.height == 8);
  CHECK(std::abs(pixel(quarter, 6, 4, 1) - 200) <= 2);
}

TEST_CASE("a region decodes to the same pixels as the whole image", "[jpeg]") {
  // Mixed content, sizes that are not multiples of a block.
  RgbImage src{301, 203, {}};
  for (int y = 0; y < 203; ++y)
    for (int x = 0; x < 301; ++x)
      for (int c = 0; c < 3; ++c)
        src.pixels.push_back(
            static_cast<std::uint8_t>((x * (c + 2) + y * (3 - c) + (x * y) % 17) % 256));
  const auto bytes = encodeJpeg(src, 90);
  for (int denom : {1, 2, 4}) {
    const RgbImage whole =
        decodeJpeg(bytes.data(), bytes.size(), [&](int, int) { return DecodePlan{denom}; });
    for (const CropBox box : {CropBox{0, 0, 50, 40}, CropBox{100, 70, 120, 90},
                              CropBox{250, 150, 51, 53}, CropBox{33, 0, 1, 203}}) {
      INFO("scale 1/" << denom << ", box " << box.x << "," << box.y << " " << box.w << "x"
                      << box.h);
      const RgbImage part = decodeJpeg(bytes.data(), bytes.size(), [&](int, int) {
        return DecodePlan{denom, box};
      });
      CHECK(part.scaled_width == whole.width);
      CHECK(part.scaled_height == whole.height);
      // The region, a pixel to spare around it, is inside what came back...
      const int x_lo = std::max(0, box.x / denom - 1), y_lo = std::max(0, box.y / denom - 1);
      const int x_hi = std::min(whole.width, (box.x + box.w + denom - 1) / denom + 1);
      const int y_hi = std::min(whole.height, (box.y + box.h + denom - 1) / denom + 1);
      CHECK(part.x0 <= x_lo);
      CHECK(part.y0 <= y_lo);
      CHECK(part.x0 + part.width >= x_hi);
      CHECK(part.y0 + part.height >= y_hi);
      // ...less than the whole where the region is small, and the same pixel for pixel.
      if (box.w * box.h * 4 < 301 * 203) CHECK(part.pixels.size() < whole.pixels.size());
      int differ = 0;
      for (int y = y_lo; y < y_hi; ++y)
        for (int x = x_lo; x < x_hi; ++x)
          for (int c = 0; c < 3; ++c)
            differ += pixel(part, x - part.x0, y - part.y0, c) != pixel(whole, x, y, c);
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("damaged, truncated and foreign bytes are JPEG errors, never grey pixels", "[jpeg]") {
  const std::vector<std::uint8_t> good = encodeJpeg(blocks(4, 4), 90);
  CHECK(jpegError(good).empty());
  CHECK(jpegError({}).find("Empty") != std::string::npos);
  CHECK(jpegError({'G', 'I', 'F', '8', '9', 'a', 0, 0}).find("Not a JPEG") != std::string::npos);
  // Cut in the middle: libjpeg calls this a warning and makes up the rest.
  std::vector<std::uint8_t> cut(good.begin(), good.begin() + good.size() / 2);
  CHECK(jpegError(cut).find("Premature end") != std::string::npos);
  // A header claiming 60000 x 60000 pixels is refused before 10 GB are allocated.
  std::vector<std::uint8_t> huge = good;
  for (std::size_t i = 0; i + 8 < huge.size(); ++i)
    if (huge[i] == 0xFF && huge[i + 1] == 0xC0) {  // SOF0: length, precision, height, width
      for (std::size_t b : {i + 5, i + 7}) {
        huge[b] = 60000 >> 8;
        huge[b + 1] = 60000 & 0xFF;
      }
      break;
    }
  CHECK(jpegError(huge).find("60000 x 60000 pixels to decode") != std::string::npos);
}

// A solid-colour CMYK JPEG as Adobe's encoders write it: an Adobe marker and inverted
// inks (255: none), so stored (200, 100, 50, 255) is R, G, B = 200, 100, 50, no black.
std::vector<std::uint8_t> adobeCmyk(int w, int h, const std::uint8_t (&inks)[4]) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long length = 0;
  jpeg_mem_dest(&cinfo, &buffer, &length);
  cinfo.image_width = w;
  cinfo.image_height = h;
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 95, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<std::uint8_t> row(static_cast<std::size_t>(w) * 4);
  for (int x = 0; x < w; ++x) std::copy(inks, inks + 4, row.begin() + x * 4);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<std::uint8_t> out(buffer, buffer + length);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return out;
}

TEST_CASE("CMYK JPEGs come out as RGB", "[jpeg]") {
  const auto bytes = adobeCmyk(40, 24, {200, 100, 50, 255});
  const RgbImage img = decodeJpeg(bytes.data(), bytes.size());
  REQUIRE(img.width == 40);
  CHECK(std::abs(pixel(img, 20, 12, 0) - 200) <= 2);
  CHECK(std::abs(pixel(img, 20, 12, 1) - 100) <= 2);
  CHECK(std::abs(pixel(img, 20, 12, 2) - 50) <= 2);
  // Half the black ink halves every channel.
  const auto dark = adobeCmyk(40, 24, {200, 100, 50, 128});
  const RgbImage d = decodeJpeg(dark.data(), dark.size());
  CHECK(std::abs(pixel(d, 20, 12, 0) - 100) <= 2);
  CHECK(std::abs(pixel(d, 20, 12, 2) - 25) <= 2);
}

TEST_CASE("pickScale keeps the crop at least as large as the output", "[jpeg]") {
  CHECK(pickScale(400, 400, 224, 224) == 1);
  CHECK(pickScale(448, 448, 224, 224) == 2);
  CHECK(pickScale(500, 300, 224, 224) == 1);
  CHECK(pickScale(2000, 1000, 224, 224) == 4);
  CHECK(pickScale(4000, 4000, 224, 224) == 8);  // 1/8 is libjpeg's smallest
  CHECK(pickScale(100, 100, 224, 224) == 1);
}

TEST_CASE("random-resized crops follow their seed and stay inside the image", "[augment]") {
  std::set<std::tuple<int, int, int, int>> distinct;
  for (std::uint64_t seed = 0; seed < 500; ++seed) {
    const CropBox b = randomResizedCrop(500, 375, seed);
    CHECK(b == randomResizedCrop(500, 375, seed));  // the seed decides, nothing else
    REQUIRE(b.w > 0);
    REQUIRE(b.h > 0);
    CHECK(b.x >= 0);
    CHECK(b.y >= 0);
    CHECK(b.x + b.w <= 500);
    CHECK(b.y + b.h <= 375);
    const double area = static_cast<double>(b.w) * b.h / (500.0 * 375.0);
    CHECK(area >= 0.08 * 0.97);
    CHECK(area <= 1.0);
    const double ratio = static_cast<double>(b.w) / b.h;
    // Rounding w and h to pixels moves the ratio a little off [3/4, 4/3].
    CHECK(ratio >= 0.75 * 0.97);
    CHECK(ratio <= 4.0 / 3.0 * 1.03);
    distinct.insert({b.x, b.y, b.w, b.h});
  }
  CHECK(distinct.size() > 490);
  // A 1000 x 10 strip fits no allowed ratio in 10 draws: the centred 4/3 crop.
  CHECK(randomResizedCrop(1000, 10, 3) == CropBox{493, 0, 13, 10});
  int flips = 0;
  for (std::uint64_t seed = 0; seed < 1000; ++seed) flips += randomFlip(seed);
  CHECK(flips > 430);
  CHECK(flips < 570);
  CHECK(centerCrop(500, 375) == CropBox{86, 23, 328, 328});
  CHECK(centerCrop(256, 256) == CropBox{16, 16, 224, 224});
}

TEST_CASE("crop-resize maps the crop onto the output, mirrored and normalised", "[augment]") {
  // A horizontal ramp: pixel (x, y) has value x in every channel.
  RgbImage ramp{256, 64, {}};
  for (int y = 0; y < 64; ++y)
    for (int x = 0; x < 256; ++x)
      for (int c = 0; c < 3; ++c) ramp.pixels.push_back(static_cast<std::uint8_t>(x));
  const Normalize norm;
  const int S = 32;
  std::vector<float> out(3 * S * S);
  auto value = [&](int c, int y, int x) {  // back to grey levels
    return out[(c * S + y) * S + x] * 255.0f * norm.std[c] + 255.0f * norm.mean[c];
  };
  // Columns 64-127 onto 32 pixels: output x samples the centre of pixel pair 2x, 2x+1.
  cropResize(ramp, 256, 64, CropBox{64, 0, 64, 64}, S, false, norm, out.data());
  for (int c = 0; c < 3; ++c)
    for (int x : {0, 7, 31}) CHECK(value(c, 5, x) == Approx(64 + 2 * x + 0.5).margin(1e-3));
  cropResize(ramp, 256, 64, CropBox{64, 0, 64, 64}, S, true, norm, out.data());
  for (int x : {0, 7, 31}) CHECK(value(1, 9, x) == Approx(64 + 2 * (31 - x) + 0.5).margin(1e-3));
  // The same crop of the image decoded at half size (128 wide, pixel x = 2x + 0.5):
  // the box is scaled with the image, so the output is the same ramp.
  RgbImage half{128, 32, {}};
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 128; ++x)
      for (int c = 0; c < 3; ++c) half.pixels.push_back(static_cast<std::uint8_t>(2 * x));
  cropResize(half, 256, 64, CropBox{64, 0, 64, 64}, S, false, norm, out.data());
  for (int x : {0, 7, 31}) CHECK(value(2, 3, x) == Approx(64 + 2 * x).margin(1e-3));
}

TEST_CASE("crop-resize is bilinear in x and y, whatever the crop, scale and flip", "[augment]") {
  // Noise in every channel apart, so that a tap taken from the wrong row, column or
  // channel shows; part of a 200 x 150 photo decoded at half size from row 3, column 8
  // on (as a cropped, scaled decode hands it over).
  RgbImage img{60, 50, {}};
  img.scaled_width = 100;
  img.scaled_height = 75;
  img.x0 = 8;
  img.y0 = 3;
  std::mt19937 rng(11);
  for (int i = 0; i < 60 * 50 * 3; ++i) img.pixels.push_back(static_cast<std::uint8_t>(rng()));
  const Normalize norm;
  // Output pixel o of S over [start, start + length) of a row of `limit` source pixels:
  // centres aligned, clamped at the edges; the two taps and the second one's weight.
  auto tap = [](double start, double length, int S, int o, int limit) {
    const double s = std::clamp(start + (o + 0.5) * length / S - 0.5, 0.0, limit - 1.0);
    const int i = static_cast<int>(s);
    return std::tuple<int, int, double>{i, std::min(i + 1, limit - 1), s - i};
  };
  for (const auto& [box, S, flip] : {std::tuple{CropBox{30, 20, 80, 60}, 24, false},
                                     std::tuple{CropBox{30, 20, 80, 60}, 24, true},
                                     std::tuple{CropBox{40, 30, 30, 25}, 37, false},
                                     std::tuple{CropBox{20, 10, 100, 90}, 7, true}}) {
    std::vector<float> out(3 * S * S);
    cropResize(img, 200, 150, box, S, flip, norm, out.data());
    for (int y = 0; y < S; ++y)
      for (int x = 0; x < S; ++x)
        for (int c = 0; c < 3; ++c) {
          const auto [y0, y1, wy] = tap(box.y * 0.5 - img.y0, box.h * 0.5, S, y, img.height);
          const auto [x0, x1, wx] =
              tap(box.x * 0.5 - img.x0, box.w * 0.5, S, flip ? S - 1 - x : x, img.width);
          auto at = [&](int row, int col) { return img.pixels[(row * 60 + col) * 3 + c]; };
          const double top = at(y0, x0) + wx * (at(y0, x1) - at(y0, x0));
          const double bottom = at(y1, x0) + wx * (at(y1, x1) - at(y1, x0));
          const double grey = top + wy * (bottom - top);
          const double expected = (grey / 255.0 - norm.mean[c]) / norm.std[c];
          INFO("S " << S << " flip " << flip << " at y " << y << " x " << x << " c " << c);
          REQUIRE(out[(c * S + y) * S + x] == Approx(expected).margin(1e-4));
        }
  }
}

TEST_CASE("a folder sample decodes, crops and normalises to its colour", "[augment][jpeg]") {
  const fs::path dir = accord_test::scratchDir("jpeg_folder");
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  const int rgb[3] = {200, 100, 50};
  RgbImage img{300, 260, {}};
  for (int i = 0; i < 300 * 260; ++i)
    for (int c = 0; c < 3; ++c) img.pixels.push_back(static_cast<std::uint8_t>(rgb[c]));
  const auto bytes = encodeJpeg(img, 95);
  for (const char* name : {"a/x.jpg", "b/y.JPEG"})
    std::ofstream(dir / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  std::ofstream(dir / "b" / "notes.txt") << "not an image";  // ignored
  auto src = makeJpegFolder(dir.string(), 64);
  REQUIRE(src->size() == 2);
  CHECK(src->classNames() == std::vector<std::string>{"a", "b"});
  std::vector<float> out(3 * 64 * 64);
  const Normalize norm;
  for (bool augment : {false, true}) {
    CHECK(src->fill(1, augment, 7, out.data()) == 1);
    for (int c = 0; c < 3; ++c) {
      const float expect = (rgb[c] / 255.0f - norm.mean[c]) / norm.std[c];
      for (int i : {0, 100, 4095}) CHECK(out[c * 4096 + i] == Approx(expect).margin(0.05));
    }
  }
}
