// Running a model's passes on a GPU (--device cuda).
//
// The host Model stays the model the rest of the trainer sees: the optimizer, the
// checkpoints, the broadcasts and the BN averaging all keep working on its host
// arenas. useDevice() gives it a device copy with the same layout (the same code lays
// it out, in arenas of device memory) and the GPU's layer table; forward, loss,
// accuracy and backward then run there:
//   forward:   parameters, BN statistics and the batch go up; BN statistics come back
//   backward:  each layer's gradients come down into the host model's gradient arena
//              right after that layer's backward, and go on to its sink from there
// So the host's optimizer and code written for the CPU model (the GPU tests compare
// the two this way) work unchanged, at the price of moving every parameter and
// gradient across the bus each step. The host arenas that travel (parameters,
// gradients, BN statistics, the input batch) are page-locked for the time the model
// is on the GPU, so those copies run at the bus's speed.
//
// The trainer goes further (trainOnDevice): there the device copy of the parameters is
// the one trained. The sink then receives the gradients where they are, in device
// memory, for the runtime to average as CUDA tensors; deviceSgdStep updates parameters
// and momentum on the GPU (nn::cuda::FusedSgd, the CPU optimizer's arithmetic); nothing
// travels per step but the batch, the labels and the BN statistics. The host arenas
// and the optimizer's momentum then hold the trained values only after pullToHost
// (checkpoints, the final parameters), and pushToDevice takes host values up (a resume,
// the initial broadcast).
#pragma once

#include "model.h"
#include "optimizer.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace accord::resnet {

// Moves m's passes to `device`: "cpu" does nothing, "cuda" uses GPU local_rank modulo
// the GPUs present. `precision`: "fp32", "tf32" (cuda only: tensor cores on float32
// data), "bf16" (cuda only: activations stored as bfloat16 NHWC, bf16 tensor cores,
// float32 parameters, gradients and statistics; nn::cuda::Math::Bf16), "fp16" (the
// same in IEEE half, which needs m.loss_scale; nn::cuda::Math::Fp16) or "auto" (bf16 on
// a GPU with bf16 tensor cores, compute capability 8.0 and up; fp32 elsewhere).
// Returns the precision the passes use. Throws InvalidArgument for another name,
// "cuda" in a build without cuDNN, or anything but fp32 or auto on the CPU. Call after
// buildModel().
std::string useDevice(Model& m, const std::string& device, int local_rank,
                      const std::string& precision = "fp32");

// Page-locks [p, p + floats) of host memory for as long as m's device copy lives (its
// copies to the GPU then run as DMA); a no-op on the CPU. Where the system refuses, the
// copies still work from pageable memory (with a warning, once).
void pinHostMemory(Model& m, float* p, std::size_t floats);

// Training on the GPU (see above); every call needs useDevice(m, "cuda") first.
// trainOnDevice also pushes the host's parameters and sgd's momentum up.
void trainOnDevice(Model& m, const Sgd& sgd);
void pushToDevice(Model& m, const Sgd& sgd);
void pullToHost(Model& m, Sgd& sgd);
// One update of every parameter from its (averaged) device gradient divided by
// m.loss_scale, queued on the layers' stream.
void deviceSgdStep(Model& m, double lr);
// No NaN or infinity in any device gradient: checked on the GPU when training there
// (trainOnDevice), else in m's gradient arena after copying them down.
bool deviceGradientsFinite(Model& m, const Sgd& sgd);
// Batches copied to the GPU ahead of their step, on a stream of their own, from the
// training loader's page-locked buffers while earlier steps compute (upload_ahead.h):
// returns the hooks for Loader::watchBuffers. A deviceForward whose m.input is one of
// `buffers` ((pointer, floats) each) then only waits for that copy. The hooks keep what
// they use alive, so they may outlive m. Needs useDevice(m, "cuda") first.
struct LoaderHooks {
  std::function<void(const float*)> before_fill;
  std::function<void(const float*, int)> filled;
};
LoaderHooks uploadAhead(Model& m, const std::vector<std::pair<float*, std::size_t>>& buffers);
// Convolution algorithms timed once per shape (nn::cuda::set_conv_search) instead of
// cuDNN's heuristics: --cudnn-search. Needs useDevice(m, "cuda") first.
void searchConvolutionAlgorithms(Model& m, bool on);
// Convolution and batch-norm algorithms that sum in a fixed order only, so that a run
// repeats bit for bit (nn::cuda::set_deterministic): --cudnn-deterministic. Needs
// useDevice(m, "cuda") first.
void deterministicLayers(Model& m, bool on);
// Each convolution followed by a batch norm in training sums the batch norm's
// statistics in its own pass, through cuDNN's graph API, for the shapes where that
// checks out and pays (nn::cuda::conv_bn_forward, Fusion::WherePays): --cudnn-fusion.
// 16-bit activations only (other shapes and precisions run unfused). The report says,
// per shape, what was decided and why. Both need useDevice(m, "cuda") first.
void fuseConvBatchNorm(Model& m, bool on);
// Each residual block's last batch norm, its shortcut's batch norm, the add and the ReLU
// in one pass in training (Model::fuse_residual, nn::cuda::bn_add_relu_forward):
// --fuse-residual. Needs useDevice(m, "cuda") first.
void fuseResidual(Model& m, bool on);
// Each batch goes to the GPU with `channels` channels, zeros after the images' own, and
// the first convolution reads them so (nn::Conv2d::x_channels): cuDNN has tensor-core
// kernels for 4 channels, not for RGB's 3. 16-bit activations only; from the images'
// channels to twice as many (what the device's input buffer holds); 0 or the images'
// channels: none. --pad-input. Needs useDevice(m, "cuda") first.
void padInput(Model& m, int channels);
// A graphed training step (deviceTrainStep) is captured as several graphs, one ending
// after each `bytes` of gradients backward handed on, and each one's gradients go to
// the sink right after its launch, so that their allreduces overlap the graphs after
// it; 0 (the default): one graph, its gradients sent after it.
void graphSegments(Model& m, std::size_t bytes);
std::string convBatchNormFusionReport(const Model& m);
// Synthetic data resident on the GPU: useDevicePool uploads a source's image pool
// (SyntheticPool, data.h) once; deviceInputFromPool makes the next deviceForward build
// its batch there from the samples' indices (image index % pool images) instead of
// uploading m.input. The same values as the host path, without the batch's trip across
// the bus. Both need useDevice(m, "cuda") first.
void useDevicePool(Model& m, const float* pixels, int images);
void deviceInputFromPool(Model& m, const std::int64_t* indices, int N);
// Times the model's GPU work by kind from here on (nn::cuda::profiledLayers, plus the
// copies and the optimizer); deviceProfileReport waits for the GPU and returns the
// table, per step over `steps`; resetDeviceProfile forgets the times so far.
void profileDevice(Model& m);
std::string deviceProfileReport(Model& m, int steps);
void resetDeviceProfile(Model& m);
// How deviceTrainStep launches a step's GPU work.
enum class StepLaunch {
  LayerByLayer,  // each layer's work queued from the host
  Graph,         // --cuda-graphs: as a CUDA graph; a capture that fails is an error
  // The default on one rank: as a CUDA graph where the step can be captured; where a
  // capture fails, a warning, and this step and the rest run layer by layer.
  GraphWhereItWorks,
};
// One training step's GPU work (forward, loss with its gradient scaled by m.loss_scale,
// accuracy, backward) queued without waiting for the GPU (model_step_cuda.cc): the
// batch comes as for deviceForward; the loss and the hits stay in device memory.
// deviceStepLoss is the device float the caller may average over the ranks (in place,
// before deviceStepResult); deviceStepResult waits for the step and returns its loss
// and hits (InvalidArgument for labels outside the classes). The host's BN statistics
// are the step's after it. Needs trainOnDevice. Layer by layer, backward hands each
// gradient to m.sink as its layer's work is queued. As a graph (not with
// profileDevice), the work is captured the second time a kind of step (batch size,
// loss scale, BN mode, smoothing) is seen and replayed after, and the gradients go to
// the sink after the launch of the graph that made them (graphSegments), in backward's
// order.
void deviceTrainStep(Model& m, const int32_t* labels, int N, float smoothing, StepLaunch launch);
float* deviceStepLoss(Model& m);
struct DeviceStepResult {
  float loss = 0;          // this rank's
  float loss_average = 0;  // deviceStepLoss's value: this rank's unless averaged
  nn::TopK hits;
};
DeviceStepResult deviceStepResult(Model& m);
struct GraphStats {
  int captured = 0;           // graphs made
  std::int64_t replayed = 0;  // steps launched from one
  std::int64_t eager = 0;     // steps run call by call before their capture
  int segments = 0;           // graphs per step, in the last capture (graphSegments)
  // StepLaunch::GraphWhereItWorks: why a capture or a graph launch failed, after which every step
  // ran layer by layer (empty: it never failed).
  std::string failure;
};
GraphStats deviceGraphStats(const Model& m);
// The GPU the model runs on, and the stream its layers run on (a cudaStream_t).
int deviceIndex(const Model& m);
void* deviceStream(const Model& m);

// The passes on m.device (model_pass.cc forwards to these when it is set).
void deviceForward(Model& m, int N);
float deviceLoss(Model& m, const int32_t* labels, int N, float smoothing, bool with_grad);
nn::TopK deviceAccuracy(Model& m, const int32_t* labels, int N);
void deviceBackward(Model& m, int N);

}  // namespace accord::resnet
