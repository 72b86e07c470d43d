// The GPU copy of a model (model_device.h), shared by the trainer's CUDA files:
// model_device_cuda.cc (the passes, the optimizer, the copies) and model_step_cuda.cc
// (the training step that does not wait, as a CUDA graph or not). Nothing outside them
// includes this.
#pragma once

#include "model.h"
#include "nn/cuda/layers_cuda.h"
#include "upload_ahead.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accord::resnet {

struct StepState;  // model_step_cuda.cc

// One gradient as backward handed it to the sink.
struct SentGradient {
  std::string name;
  float* g;
  std::size_t n;
};

struct DeviceModel {
  Model mirror;  // device arenas, nn::cuda::layers()
  int device = 0;
  int32_t* labels = nullptr;  // (max_batch) device
  std::vector<void*> pinned;  // host ranges of the host model made page-locked
  // trainOnDevice: the mirror's parameters are the trained ones.
  bool resident = false;
  bool profiled = false;      // profileDevice
  float* momentum = nullptr;  // (params.capacity) device, the parameters' layout
  std::unique_ptr<nn::cuda::FusedSgd> sgd;
  // useDevicePool: the images (pool_images, C, S, S) and, set by deviceInputFromPool
  // for the next forward only, the batch's images in it.
  float* pool = nullptr;
  int pool_images = 0;
  std::vector<int32_t> batch_slots;
  bool batch_from_pool = false;
  std::shared_ptr<UploadAhead> ahead;  // uploadAhead; shared with the loader's hooks
  // While set, the mirror's sink appends each gradient here instead of sending it on
  // (a step being captured into a CUDA graph sends them after its launch), then calls
  // `recorded` with its element count, where set (a capture cut into segments).
  std::vector<SentGradient>* recording = nullptr;
  std::function<void(std::size_t)> recorded;
  // graphSegments: bytes of gradients after which a capture ends a graph; 0: one graph.
  std::size_t graph_segment_bytes = 0;
  // padInput: the channels each batch is given on the device, zeros after the real
  // ones (the stem's x_channels); 0: as the data has them.
  int input_channels = 0;
  std::shared_ptr<StepState> step;  // deviceTrainStep's, made on its first call
  // For the tests: the next capture makes a call no capture allows (it waits for the
  // stream), as a layer that cannot be captured would, and fails.
  bool break_next_capture = false;
  ~DeviceModel() {
    // From a destructor: no throw. No copy may still read a buffer that stops being
    // page-locked (later ones run from pageable memory).
    if (ahead) ahead->drain();
    for (void* p : pinned) cudaHostUnregister(p);
    if (labels) cudaFree(labels);
    if (momentum) cudaFree(momentum);
    if (pool) cudaFree(pool);
  }
};

// Throws accord::Error naming `what` when s is an error.
void checkCuda(cudaError_t s, const std::string& what);
// Queues on the layers' stream what a forward pass reads from the host: the parameters
// (unless trained on the device), the BN statistics and the batch of N images (from
// the pool on the GPU, a copy gone ahead, or m.input).
void stageInputs(Model& m, int N);
// The N labels copied to the device's label buffer on the layers' stream; returns it.
const int32_t* uploadLabels(Model& m, const int32_t* labels, int N);

}  // namespace accord::resnet
