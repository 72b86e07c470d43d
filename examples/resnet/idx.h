// Reading gzipped IDX files (the MNIST / Fashion-MNIST format) with zlib.
//
// IDX: a big-endian header {0, 0, type, ndims} then ndims big-endian uint32 sizes,
// then the data. Only unsigned bytes (type 0x08) are needed here. Every failure names
// the file and says what is wrong with it: missing, not gzip, wrong magic, truncated,
// or header sizes that the data does not match. The header is not trusted: its sizes
// are checked for overflow and against a limit before anything is allocated, and the
// data is read in pieces, so a lying header costs no more memory than the file holds.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace accord::resnet {

// A dataset file could not be read or is not what it should be.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct IdxArray {
  std::vector<std::uint32_t> dims;  // e.g. {60000, 28, 28}
  std::vector<std::uint8_t> data;   // (product of dims)
};

// Reads a gzipped (or plain) IDX file of unsigned bytes; throws DataError.
IdxArray readIdx(const std::string& path);

// An image classification dataset held in memory as bytes.
struct ImageSet {
  int n = 0, C = 1, H = 0, W = 0;
  int classes = 0;
  std::vector<std::uint8_t> pixels;  // (n, C, H, W)
  std::vector<std::int32_t> labels;  // (n)
};

// Loads Fashion-MNIST's train or test split from dir (the Debian package installs it at
// kFashionMnistDir). Checks that images and labels agree in count and that labels are
// in [0, 10). dir_flag: the command-line flag that names dir, which the message for
// missing files suggests (the trainer's --data-dir, accord-make-jpegs' --fashion-dir).
ImageSet loadFashionMnist(const std::string& dir, bool train,
                          const std::string& dir_flag = "--data-dir");

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace accord::resnet
