// Batches copied to the GPU ahead of their step (model_device.h, uploadAhead): each of
// the training loader's page-locked buffers gets a twin in device memory, which a copy
// stream of its own fills as soon as the loader has filled the buffer, while earlier
// steps compute. The layers' stream then only waits for that copy and takes the batch
// from the twin (a device-to-device copy, or the 16-bit conversion), where it would
// otherwise have copied it across the bus itself.
//
// Threads: beforeFill and filled run on the loader's threads, intoInput on the
// training thread. The loader hands a buffer to the trainer only after filled()
// returned, and takes it back for the next fill only after the trainer's next borrow()
// (or startEpoch()), which comes after intoInput: so the twin's fields are never
// touched by two threads at once. GPU-side, the copy into a twin waits for the layers' stream to have read it
// (`consumed`), and the loader overwrites a host buffer only after its last copy out of
// it finished (`uploaded`).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <unordered_map>
#include <utility>
#include <vector>

namespace accord::resnet {

class UploadAhead {
 public:
  // `buffers`: (pointer, floats) of each loader buffer; `image_floats`: C * H * W.
  UploadAhead(int device, std::size_t image_floats,
              const std::vector<std::pair<float*, std::size_t>>& buffers);
  ~UploadAhead();
  UploadAhead(const UploadAhead&) = delete;
  UploadAhead& operator=(const UploadAhead&) = delete;

  void beforeFill(const float* x);
  void filled(const float* x, int n);
  // When `x` is a buffer whose batch of n images went ahead: queues, on the layers'
  // stream, the wait for that copy and the batch into `input` (input_from_device_async,
  // with C_pad channels there where more than C); false otherwise (the caller uploads as
  // usual).
  bool intoInput(const float* x, int n, float* input, int C, int H, int W, int C_pad = 0);
  // Waits for every copy queued (before the host buffers stop being page-locked).
  void drain();

 private:
  struct Twin {
    float* device = nullptr;
    std::size_t floats = 0;
    cudaEvent_t uploaded = nullptr;  // the copy from the host buffer finished
    cudaEvent_t consumed = nullptr;  // the layers' stream has read the twin
    int n = -1;                      // images of the batch gone ahead; -1: none
  };
  Twin& twinOf(const float* x, const char* what);

  int device_;
  std::size_t image_floats_;
  cudaStream_t stream_ = nullptr;
  std::unordered_map<const float*, Twin> twins_;  // fixed after construction
};

}  // namespace accord::resnet
