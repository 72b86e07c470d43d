// JPEG through libjpeg; see jpeg.h.
//
// libjpeg reports errors through a callback that must not return. It is C, so an
// exception thrown from the callback would unwind through C frames; instead the
// callback longjmps back into the function that called libjpeg, which then throws.
// Every object with a destructor in those functions is constructed before setjmp, so
// the jump skips no destructor.
#include "jpeg.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <utility>
// jpeglib.h needs FILE and size_t declared first.
#include <jerror.h>
#include <jpeglib.h>

namespace accord::resnet {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg sees only this part
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void onError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// libjpeg calls a damaged or truncated stream a warning and fills the missing pixels
// with grey. A loader that trains on made-up pixels uses corrupt data silently, so a
// warning is an error here.
void onMessage(j_common_ptr cinfo, int level) {
  if (level < 0) onError(cinfo);
}

ErrorManager* installErrors(jpeg_common_struct* cinfo, ErrorManager& err) {
  cinfo->err = jpeg_std_error(&err.pub);
  err.pub.error_exit = onError;
  err.pub.emit_message = onMessage;
  return &err;
}

// One CMYK row to RGB. Adobe's encoders (the only common source of CMYK JPEGs) store
// the inks inverted, so 255 means no ink there.
void cmykToRgb(const std::uint8_t* in, std::uint8_t* out, int width, bool inverted) {
  for (int x = 0; x < width; ++x, in += 4, out += 3) {
    const int k = inverted ? in[3] : 255 - in[3];
    for (int c = 0; c < 3; ++c) {
      const int v = inverted ? in[c] : 255 - in[c];
      out[c] = static_cast<std::uint8_t>((v * k + 127) / 255);
    }
  }
}

// 2^26 pixels (192 MiB of RGB): a 9000 x 7000 photo decoded whole, far more than any
// crop needs once the scale is chosen.
constexpr std::int64_t kMaxDecodedPixels = std::int64_t{1} << 26;

}  // namespace

int pickScale(double region_w, double region_h, int out_w, int out_h) {
  int denom = 1;
  while (denom < 8 && region_w / (2 * denom) >= out_w && region_h / (2 * denom) >= out_h)
    denom *= 2;
  return denom;
}

// The rectangle of the scaled image [lo, hi) to ask libjpeg for: full-size [x, x + w)
// with a pixel to spare each side for the bilinear taps, and one more, since the
// chroma upsampling of a cropped decode has no neighbour at the crop's edge and gets
// that column slightly wrong. scaled = ceil(full / denom), as libjpeg rounds.
std::pair<int, int> scaledSpan(int x, int w, int full, int scaled) {
  const double f = static_cast<double>(scaled) / full;
  const int lo = std::max(0, static_cast<int>(std::floor(x * f)) - 2);
  const int hi = std::min(scaled, static_cast<int>(std::ceil((x + w) * f)) + 2);
  return {lo, std::max(hi, lo + 1)};
}

RgbImage decodeJpeg(const std::uint8_t* data, std::size_t size,
                    const std::function<DecodePlan(int, int)>& pick) {
  RgbImage img;
  std::vector<std::uint8_t> cmyk_row;
  jpeg_decompress_struct cinfo{};
  ErrorManager err;
  installErrors(reinterpret_cast<jpeg_common_struct*>(&cinfo), err);
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    throw JpegError(err.message);
  }
  jpeg_create_decompress(&cinfo);
  if (size == 0) ERREXIT(&cinfo, JERR_INPUT_EMPTY);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  const int full_w = static_cast<int>(cinfo.image_width);
  const int full_h = static_cast<int>(cinfo.image_height);
  const DecodePlan plan = pick ? pick(full_w, full_h) : DecodePlan{};
  cinfo.scale_num = 1;
  cinfo.scale_denom = static_cast<unsigned>(plan.denom);
  jpeg_start_decompress(&cinfo);
  img.scaled_width = static_cast<int>(cinfo.output_width);
  img.scaled_height = static_cast<int>(cinfo.output_height);
  int y_end = img.scaled_height;
  if (plan.region.w > 0 && plan.region.h > 0) {
    const auto [x_lo, x_hi] = scaledSpan(plan.region.x, plan.region.w, full_w, img.scaled_width);
    const auto [y_lo, y_hi] = scaledSpan(plan.region.y, plan.region.h, full_h, img.scaled_height);
    // libjpeg widens the columns to whole blocks and says where they start.
    JDIMENSION x = static_cast<JDIMENSION>(x_lo), w = static_cast<JDIMENSION>(x_hi - x_lo);
    if (w < cinfo.output_width) jpeg_crop_scanline(&cinfo, &x, &w);
    img.x0 = static_cast<int>(x);
    if (y_lo > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(y_lo));
    img.y0 = static_cast<int>(cinfo.output_scanline);
    y_end = y_hi;
  }
  img.width = static_cast<int>(cinfo.output_width);
  img.height = y_end - img.y0;
  // A damaged header can claim up to 65500 x 65500 pixels in a few bytes.
  if (static_cast<std::int64_t>(img.width) * img.height > kMaxDecodedPixels) {
    std::snprintf(err.message, sizeof(err.message),
                  "%d x %d pixels to decode (of a %d x %d image), more than the %lld allowed",
                  img.width, img.height, full_w, full_h, static_cast<long long>(kMaxDecodedPixels));
    std::longjmp(err.jump, 1);
  }
  img.pixels.resize(static_cast<std::size_t>(img.width) * img.height * 3);
  if (cmyk) cmyk_row.resize(static_cast<std::size_t>(img.width) * 4);
  const std::size_t stride = static_cast<std::size_t>(img.width) * 3;
  // Several rows a call where they go straight into the image: one at a time, libjpeg
  // upsamples 2-row chroma into a spare row and copies each row out of it.
  constexpr int kRowsPerCall = 16;
  JSAMPROW rows[kRowsPerCall];
  while (static_cast<int>(cinfo.output_scanline) < y_end) {
    const int at = static_cast<int>(cinfo.output_scanline);
    std::uint8_t* dst = img.pixels.data() + (at - img.y0) * stride;
    const int n = cmyk ? 1 : std::min(kRowsPerCall, y_end - at);
    for (int i = 0; i < n; ++i) rows[i] = cmyk ? cmyk_row.data() : dst + i * stride;
    const JDIMENSION got = jpeg_read_scanlines(&cinfo, rows, static_cast<JDIMENSION>(n));
    if (got == 0) ERREXIT(&cinfo, JERR_INPUT_EOF);
    if (cmyk) cmykToRgb(cmyk_row.data(), dst, img.width, cinfo.saw_Adobe_marker);
  }
  // Rows below the region are not needed: stop without decoding them.
  if (cinfo.output_scanline == cinfo.output_height) jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return img;
}

std::vector<std::uint8_t> encodeJpeg(const RgbImage& image, int quality) {
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != static_cast<std::size_t>(image.width) * image.height * 3)
    throw JpegError("encodeJpeg: " + std::to_string(image.width) + "x" +
                    std::to_string(image.height) + " image with " +
                    std::to_string(image.pixels.size()) + " bytes of pixels");
  std::vector<std::uint8_t> out;
  unsigned char* buffer = nullptr;
  unsigned long length = 0;
  jpeg_compress_struct cinfo{};
  ErrorManager err;
  installErrors(reinterpret_cast<jpeg_common_struct*>(&cinfo), err);
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    std::free(buffer);
    throw JpegError(err.message);
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &buffer, &length);
  cinfo.image_width = static_cast<JDIMENSION>(image.width);
  cinfo.image_height = static_cast<JDIMENSION>(image.height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const std::size_t stride = static_cast<std::size_t>(image.width) * 3;
  while (cinfo.next_scanline < cinfo.image_height) {
    // libjpeg's API takes non-const rows but only reads them when compressing.
    JSAMPROW row = const_cast<std::uint8_t*>(image.pixels.data()) + cinfo.next_scanline * stride;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  out.assign(buffer, buffer + length);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return out;
}

}  // namespace accord::resnet
