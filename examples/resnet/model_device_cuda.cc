// The model on a GPU (see model_device.h): a second Model laid out by the same code in
// device arenas, running the GPU's layer table, kept in step with the host model.
#include "device_model.h"
#include "model_device.h"

#include <accord/accord.h>
#include <accord/error.h>

#include <algorithm>
#include <cstdio>
#include <optional>

namespace accord::resnet {

void checkCuda(cudaError_t s, const std::string& what) {
  if (s != cudaSuccess) throw Error(what + ": CUDA failed: " + cudaGetErrorString(s));
}

namespace {

// Asynchronous: the host arenas change only after a synchronous copy back (the
// gradients' and statistics' downloads), which the stream reaches after this.
void upload(nn::Arena& device, const nn::Arena& host) {
  nn::cuda::copy_to_device_async(device.base, host.base, host.capacity);
}

// Page-locks [p, p + floats) of the host model, so that copies to and from the GPU run
// as DMA at the bus's speed. Where the system refuses (a locked-memory limit), the
// copies still work from pageable memory, only slower: say so once and go on.
void pin(DeviceModel& d, float* p, size_t floats) {
  if (!p || floats == 0) return;
  const cudaError_t s = cudaHostRegister(p, floats * sizeof(float), cudaHostRegisterDefault);
  if (s == cudaSuccess) {
    d.pinned.push_back(p);
    return;
  }
  cudaGetLastError();  // not sticky: clear it
  static bool said = false;
  if (!said)
    std::fprintf(stderr,
                 "accord-resnet: warning: cannot page-lock host buffers for the GPU (%s); "
                 "copies run from pageable memory\n",
                 cudaGetErrorString(s));
  said = true;
}

// Times the GPU work enqueued in its life as `kind`, when the model is profiled.
class Timed {
 public:
  Timed(const DeviceModel& d, const char* kind) {
    if (d.profiled) scope_.emplace(kind);
  }

 private:
  std::optional<nn::cuda::ProfileScope> scope_;
};

// The gradient at `g` in the mirror's arena lives at the same offset in the host's.
float* hostTwin(Model& m, float* g) { return m.grads.base + (g - m.device->mirror.grads.base); }

}  // namespace

const int32_t* uploadLabels(Model& m, const int32_t* labels, int N) {
  DeviceModel& d = *m.device;
  checkCuda(cudaMemcpyAsync(d.labels, labels, sizeof(int32_t) * N, cudaMemcpyHostToDevice,
                            nn::cuda::stream()),
            "uploading labels");
  return d.labels;
}

std::string useDevice(Model& m, const std::string& device, int local_rank,
                      const std::string& asked) {
  if (asked != "auto" && asked != "fp32" && asked != "tf32" && asked != "bf16" && asked != "fp16")
    throw InvalidArgument("unknown --precision '" + asked +
                          "' (expected auto, fp32, tf32, bf16 or fp16)");
  if (device == "cpu") {
    if (asked != "fp32" && asked != "auto")
      throw InvalidArgument("--precision " + asked +
                            " needs --device cuda (the CPU layers are fp32)");
    return "fp32";
  }
  if (device != "cuda")
    throw InvalidArgument("unknown --device '" + device + "' (expected cpu or cuda)");
  std::string why;
  const int count = cuda_device_count(&why);
  if (count == 0)
    throw InvalidArgument("--device cuda: no GPU that CUDA can use here (" + why +
                          "); train with --device cpu, or where an NVIDIA GPU and its driver are");
  checkCuda(cudaSetDevice(local_rank % count), "--device cuda: selecting a GPU");
  std::string precision = asked;
  if (precision == "auto") {  // bf16 tensor cores came with compute capability 8.0
    int major = 0;
    checkCuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, local_rank % count),
              "--device cuda: reading the GPU's compute capability");
    precision = major >= 8 ? "bf16" : "fp32";
  }
  auto d = std::make_shared<DeviceModel>();
  d->device = local_rank % count;
  for (nn::Arena* a : {&d->mirror.params, &d->mirror.grads, &d->mirror.buffers, &d->mirror.acts})
    nn::cuda::useDeviceMemory(*a);
  nn::cuda::set_math(precision == "tf32"   ? nn::cuda::Math::Tf32
                     : precision == "bf16" ? nn::cuda::Math::Bf16
                     : precision == "fp16" ? nn::cuda::Math::Fp16
                                           : nn::cuda::Math::Fp32);
  d->mirror.ops = &nn::cuda::layers();
  buildModel(d->mirror, m.cfg, false);
  if (d->mirror.params.capacity != m.params.capacity || d->mirror.acts.capacity != m.acts.capacity)
    throw Error("--device cuda: the device model's layout differs from the host model's");
  checkCuda(cudaMalloc(reinterpret_cast<void**>(&d->labels), sizeof(int32_t) * m.cfg.max_batch),
            "--device cuda: allocating labels");
  pin(*d, m.params.base, m.params.capacity);
  pin(*d, m.grads.base, m.grads.capacity);
  pin(*d, m.buffers.base, m.buffers.capacity);
  pin(*d, m.input,
      size_t(m.cfg.max_batch) * m.cfg.in_channels * m.cfg.image_size * m.cfg.image_size);
  // Each gradient comes down to its place in the host arena, then goes on to the host
  // model's sink (the runtime), exactly as on the CPU. copy_to_host waits for it.
  // Trained on the device, a gradient goes on where it is.
  Model* host = &m;
  DeviceModel* dm = d.get();
  d->mirror.sink = [host, dm](const std::string& name, float* g, std::size_t n) {
    if (dm->recording) {
      dm->recording->push_back({name, g, n});
      if (dm->recorded) dm->recorded(n);
      return;
    }
    if (dm->resident) {
      if (host->sink) host->sink(name, g, n);
      return;
    }
    float* h = hostTwin(*host, g);
    nn::cuda::copy_to_host(h, g, n);
    if (host->sink) host->sink(name, h, n);
  };
  m.device = std::move(d);
  return precision;
}

void pinHostMemory(Model& m, float* p, std::size_t floats) {
  if (m.device) pin(*m.device, p, floats);
}

void stageInputs(Model& m, int N) {
  Model& d = m.device->mirror;
  DeviceModel& dm = *m.device;
  Timed timed(dm, "copies to the GPU");
  // The host optimizer, a resume or BN averaging may have changed these since (trained
  // on the device, the parameters are already there).
  if (!dm.resident) upload(d.params, m.params);
  upload(d.buffers, m.buffers);
  // The batch, like the parameters, is read before the host writes the next one: the
  // trainer writes it only after it waited for this step (its downloads, or
  // deviceStepResult).
  const int C = m.cfg.in_channels, S = m.cfg.image_size;
  if (dm.batch_from_pool) {
    if (static_cast<int>(dm.batch_slots.size()) != N)
      throw Error("deviceForward: a batch of " + std::to_string(N) + " after " +
                  std::to_string(dm.batch_slots.size()) + " indices (deviceInputFromPool)");
    nn::cuda::gather_input_async(d.input, dm.pool, dm.batch_slots.data(), N, C, S, S,
                                 dm.input_channels);
    dm.batch_from_pool = false;
  } else if (!dm.ahead || !dm.ahead->intoInput(m.input, N, d.input, C, S, S, dm.input_channels)) {
    nn::cuda::upload_input_async(d.input, m.input, N, C, S, S, dm.input_channels);
  }
}

void deviceForward(Model& m, int N) {
  Model& d = m.device->mirror;
  stageInputs(m, N);
  d.bn_training = m.bn_training;
  forward(d, N);
  // The running statistics forward moved, and the logits, for whoever reads them.
  Timed timed(*m.device, "copies from the GPU");
  nn::cuda::copy_to_host(m.buffers.base, d.buffers.base, m.buffers.capacity);
  nn::cuda::copy_to_host(m.logits, d.logits, size_t(N) * m.fc.out);
}

float deviceLoss(Model& m, const int32_t* labels, int N, float smoothing, bool with_grad) {
  Model& d = m.device->mirror;
  const float value = loss(d, uploadLabels(m, labels, N), N, smoothing, with_grad);
  if (with_grad && m.loss_scale != 1.0f)
    nn::cuda::scale(d.dlogits, size_t(N) * m.fc.out, m.loss_scale);
  return value;
}

LoaderHooks uploadAhead(Model& m, const std::vector<std::pair<float*, std::size_t>>& buffers) {
  if (!m.device) throw Error("uploadAhead: the model is not on a GPU (useDevice)");
  const std::size_t image = std::size_t(m.cfg.in_channels) * m.cfg.image_size * m.cfg.image_size;
  auto ahead = std::make_shared<UploadAhead>(m.device->device, image, buffers);
  m.device->ahead = ahead;
  return {[ahead](const float* x) { ahead->beforeFill(x); },
          [ahead](const float* x, int n) { ahead->filled(x, n); }};
}

void searchConvolutionAlgorithms(Model& m, bool on) {
  if (!m.device) throw Error("searchConvolutionAlgorithms: the model is not on a GPU (useDevice)");
  nn::cuda::set_conv_search(on);
}

void deterministicLayers(Model& m, bool on) {
  if (!m.device) throw Error("deterministicLayers: the model is not on a GPU (useDevice)");
  nn::cuda::set_deterministic(on);
}

void fuseConvBatchNorm(Model& m, bool on) {
  if (!m.device) throw Error("fuseConvBatchNorm: the model is not on a GPU (useDevice)");
  nn::cuda::set_conv_bn_fusion(on ? nn::cuda::Fusion::WherePays : nn::cuda::Fusion::Off);
}

void fuseResidual(Model& m, bool on) {
  if (!m.device) throw Error("fuseResidual: the model is not on a GPU (useDevice)");
  m.device->mirror.fuse_residual = on;
}

void padInput(Model& m, int channels) {
  if (!m.device) throw Error("padInput: the model is not on a GPU (useDevice)");
  const int C = m.cfg.in_channels;
  if (channels == 0 || channels == C) {
    m.device->input_channels = 0;
    m.device->mirror.stem.conv.x_channels = 0;
    return;
  }
  if (nn::cuda::math() != nn::cuda::Math::Bf16 && nn::cuda::math() != nn::cuda::Math::Fp16)
    throw InvalidArgument("--pad-input needs --precision bf16 or fp16 (the padded input is "
                          "16-bit channels-last data)");
  // The device's input buffer holds C float32 values a pixel: 2 C 16-bit ones at most.
  if (channels < C || channels > 2 * C)
    throw InvalidArgument("--pad-input " + std::to_string(channels) + ": expected 0 or from " +
                          std::to_string(C) + " (the images' channels) to " +
                          std::to_string(2 * C));
  m.device->input_channels = channels;
  m.device->mirror.stem.conv.x_channels = channels;
}

void graphSegments(Model& m, std::size_t bytes) {
  if (!m.device) throw Error("graphSegments: the model is not on a GPU (useDevice)");
  m.device->graph_segment_bytes = bytes;
}

std::string convBatchNormFusionReport(const Model& m) {
  if (!m.device) throw Error("convBatchNormFusionReport: the model is not on a GPU (useDevice)");
  return nn::cuda::conv_bn_fusion_report();
}

void useDevicePool(Model& m, const float* pixels, int images) {
  if (!m.device) throw Error("useDevicePool: the model is not on a GPU (useDevice)");
  if (!pixels || images < 1)
    throw InvalidArgument("useDevicePool: no images (" + std::to_string(images) + ")");
  DeviceModel& d = *m.device;
  const size_t floats = size_t(images) * m.cfg.in_channels * m.cfg.image_size * m.cfg.image_size;
  float* pool = nullptr;
  checkCuda(cudaMalloc(reinterpret_cast<void**>(&pool), floats * sizeof(float)),
            "useDevicePool: allocating the image pool");
  if (d.pool) cudaFree(d.pool);
  d.pool = pool;
  d.pool_images = images;
  nn::cuda::copy_to_device(d.pool, pixels, floats);
}

void deviceInputFromPool(Model& m, const std::int64_t* indices, int N) {
  if (!m.device || !m.device->pool)
    throw Error("deviceInputFromPool: no image pool on the GPU (useDevicePool)");
  DeviceModel& d = *m.device;
  d.batch_slots.resize(N);
  for (int i = 0; i < N; ++i) {
    if (indices[i] < 0)
      throw InvalidArgument("deviceInputFromPool: sample index " + std::to_string(indices[i]));
    d.batch_slots[i] = static_cast<int32_t>(indices[i] % d.pool_images);
  }
  d.batch_from_pool = true;
}

nn::TopK deviceAccuracy(Model& m, const int32_t* labels, int N) {
  return accuracy(m.device->mirror, uploadLabels(m, labels, N), N);
}

void deviceBackward(Model& m, int N) { backward(m.device->mirror, N); }

namespace {

DeviceModel& trained(Model& m, const char* what) {
  if (!m.device) throw Error(std::string(what) + ": the model is not on a GPU (useDevice)");
  return *m.device;
}

// The optimizer's momentum, one vector per parameter, and the flat device buffer with
// the parameters' layout.
std::vector<float> flatMomentum(const Model& m, const Sgd& sgd) {
  std::vector<float> flat(m.params.capacity, 0.0f);
  for (std::size_t i = 0; i < sgd.params().size(); ++i) {
    const ParamRef& p = sgd.params()[i];
    std::copy(sgd.momentum()[i].begin(), sgd.momentum()[i].end(),
              flat.begin() + (p.w - m.params.base));
  }
  return flat;
}

}  // namespace

void trainOnDevice(Model& m, const Sgd& sgd) {
  DeviceModel& d = trained(m, "trainOnDevice");
  if (!d.momentum)
    checkCuda(cudaMalloc(reinterpret_cast<void**>(&d.momentum), sizeof(float) * m.params.capacity),
              "--device cuda: allocating the momentum buffer");
  std::vector<nn::cuda::SgdSegment> segments;
  const SgdOptions& o = sgd.options();
  for (const ParamRef& p : sgd.params()) {
    const auto offset = static_cast<std::size_t>(p.w - m.params.base);
    // FusedSgd reads each gradient at its parameter's offset.
    if (static_cast<std::size_t>(p.g - m.grads.base) != offset)
      throw Error("trainOnDevice: " + p.name + "'s gradient is not at its parameter's offset");
    const bool decay = o.bn_bias_decay || !p.is_bn_or_bias;
    segments.push_back({offset, p.n, decay ? static_cast<float>(o.weight_decay) : 0.0f});
  }
  d.sgd =
      std::make_unique<nn::cuda::FusedSgd>(segments, static_cast<float>(o.momentum), o.nesterov);
  d.resident = true;
  pushToDevice(m, sgd);
}

void pushToDevice(Model& m, const Sgd& sgd) {
  DeviceModel& d = trained(m, "pushToDevice");
  nn::cuda::copy_to_device(d.mirror.params.base, m.params.base, m.params.capacity);
  if (d.momentum) {
    const std::vector<float> flat = flatMomentum(m, sgd);
    nn::cuda::copy_to_device(d.momentum, flat.data(), flat.size());
  }
}

void pullToHost(Model& m, Sgd& sgd) {
  DeviceModel& d = trained(m, "pullToHost");
  if (!d.resident) return;  // the host's are the trained ones
  nn::cuda::copy_to_host(m.params.base, d.mirror.params.base, m.params.capacity);
  std::vector<float> flat(m.params.capacity);
  nn::cuda::copy_to_host(flat.data(), d.momentum, flat.size());
  for (std::size_t i = 0; i < sgd.params().size(); ++i) {
    const ParamRef& p = sgd.params()[i];
    const auto at = flat.begin() + (p.w - m.params.base);
    std::copy(at, at + static_cast<std::ptrdiff_t>(p.n), sgd.momentum()[i].begin());
  }
}

void deviceSgdStep(Model& m, double lr) {
  DeviceModel& d = trained(m, "deviceSgdStep");
  if (!d.sgd) throw Error("deviceSgdStep: trainOnDevice was not called");
  Timed timed(d, "optimizer (fused SGD)");
  d.sgd->step(d.mirror.params.base, d.mirror.grads.base, d.momentum, static_cast<float>(lr),
              1.0f / m.loss_scale);
}

bool deviceGradientsFinite(Model& m, const Sgd& sgd) {
  DeviceModel& d = trained(m, "deviceGradientsFinite");
  if (!d.resident) {  // the host's gradients are the ones the update reads
    nn::cuda::copy_to_host(m.grads.base, d.mirror.grads.base, m.grads.capacity);
    return sgd.gradientsFinite();
  }
  return nn::cuda::all_finite(d.mirror.grads.base, m.grads.capacity);
}

void profileDevice(Model& m) {
  DeviceModel& d = trained(m, "profileDevice");
  d.profiled = true;
  d.mirror.ops = &nn::cuda::profiledLayers();
}

std::string deviceProfileReport(Model& m, int steps) {
  trained(m, "deviceProfileReport");
  return nn::cuda::profileReport(steps);
}

void resetDeviceProfile(Model& m) {
  trained(m, "resetDeviceProfile");
  nn::cuda::profileReset();
}

int deviceIndex(const Model& m) {
  if (!m.device) throw Error("deviceIndex: the model is not on a GPU (useDevice)");
  return m.device->device;
}

void* deviceStream(const Model&) { return static_cast<void*>(nn::cuda::stream()); }

}  // namespace accord::resnet
