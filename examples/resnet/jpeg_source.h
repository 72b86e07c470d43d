// Image sources of JPEG photos: an ImageNet-style folder (one subfolder per class) or
// a packed set (records.h). Both decode and augment the same way: training samples get
// a random-resized crop and a random flip, evaluation samples the centre crop, both
// scaled to S x S and normalised with ImageNet's statistics (augment.h).
//
// A sample that cannot be used (unreadable file, a record whose bytes fail their
// CRC-32 or lie past the end of its shard, a JPEG libjpeg refuses or finds damaged) is
// a BadRecord naming the file and the offset; the loader skips or rejects it.
#pragma once

#include "data.h"
#include "idx.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accord::resnet {

class BadRecord : public DataError {
 public:
  using DataError::DataError;
};

std::unique_ptr<ImageSource> makeJpegFolder(const std::string& dir, int image_size);
std::unique_ptr<ImageSource> makePacked(const std::string& dir, int image_size);

}  // namespace accord::resnet
