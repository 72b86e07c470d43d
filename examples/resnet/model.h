// ResNet-18/34/50/101/152 with torchvision's architecture (v1.5: the bottleneck's
// stride sits on its 3x3 conv), any number of classes and input channels, an optional
// small-image stem (--stem cifar: 3x3 conv, stride 1, no max pool) and a width
// multiplier for tiny test models.
//
// The model is plain data (layer structs, activation pointers) carved from four
// arenas; forward() is a flat list of layer calls per block, backward() runs
// the same list in reverse and hands each layer's gradients to a GradSink right after
// that layer's backward, so the runtime reduces them while the rest of backward runs.
//
// Parameter names follow torchvision's state_dict ("layer1.0.conv1.weight",
// "layer2.0.downsample.1.bias", "fc.weight") so counts and checkpoints compare with
// PyTorch one to one.
#pragma once

#include "nn/layer_ops.h"
#include "nn/layers.h"
#include "optimizer.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accord::resnet {

struct ModelConfig {
  int depth = 18;  // 18, 34, 50, 101, 152
  int classes = 1000;
  int in_channels = 3;
  bool cifar_stem = false;          // 3x3/1 conv, no max pool (28x28 or 32x32 images)
  double width = 1.0;               // multiplies every channel count (64 -> round(64 * width))
  bool zero_init_residual = false;  // last BN scale of each block starts at 0
  std::uint64_t seed = 42;          // Kaiming init
  int max_batch = 32;               // activation arena is planned for this many images
  int image_size = 224;             // H = W
  // The host model of a GPU run, whose activation arena the layers barely touch: it is
  // mapped without reserving memory for it (nn::Arena::reserve), so that a batch whose
  // activations would not fit in host memory still runs. Not part of describe().
  bool host_of_device = false;

  std::string describe() const;  // "resnet18 classes=10 in=1 stem=cifar width=0.25"
};

// Receives one layer's gradient as soon as backward produced it; the trainer turns it
// into a named allreduce. Called on the training thread.
using GradSink = std::function<void(const std::string& name, float* grad, std::size_t n)>;

struct DeviceModel;  // a copy of a Model on a GPU (model_device.h)

// conv -> batch norm (-> ReLU in place on the BN output).
struct ConvBn {
  nn::Conv2d conv;
  nn::BatchNorm2d bn;
  std::string conv_name, bn_name;        // "layer1.0.conv1", "layer1.0.bn1"
  int H_in = 0, W_in = 0, H = 0, W = 0;  // input and output spatial size
  float* a = nullptr;                    // (N, C_out, H, W) conv output = BN input
  float* b = nullptr;  // (N, C_out, H, W) BN output (ReLU'd in place where it applies)
};

struct Block {
  std::vector<ConvBn> convs;  // 2 (basic) or 3 (bottleneck); the last one has no ReLU
  bool has_down = false;
  ConvBn down;               // 1x1 conv + BN on the shortcut when shape changes
  const float* x = nullptr;  // (N, C_in, H_in, W_in) block input
  float* y = nullptr;        // (N, C_out, H, W) block output = last BN output buffer
};

struct Model {
  ModelConfig cfg;
  nn::Arena params, grads, buffers, acts;  // buffers: BN running statistics

  ConvBn stem;
  bool has_maxpool = true;
  nn::MaxPool2d maxpool;
  float* pool_y = nullptr;   // (N, C, Hp, Wp)
  float* pool_ws = nullptr;  // (N, C, Hp, Wp) opaque arg-max record
  int Hp = 0, Wp = 0;        // spatial size entering layer1
  std::vector<Block> blocks;
  std::vector<std::string> block_names;  // "layer1.0"
  float* features = nullptr;             // (N, C_final) average pool output
  nn::Linear fc;
  float* input = nullptr;    // (N, in_channels, S, S) the trainer copies a batch here
  float* logits = nullptr;   // (N, classes)
  float* dlogits = nullptr;  // (N, classes)
  float* scratch[3] = {};    // (max activation) gradient ping-pong buffers
  float* bn_dx = nullptr;    // (max activation) a batch norm's input gradient in backward
  bool bn_training = true;   // false: BN uses running statistics (inference mode)
  // Each block's last batch norm, its shortcut's batch norm, the residual add and the ReLU
  // as one pass in training, where the layers offer it (ops->bn_add_relu_forward: the
  // GPU's, --fuse-residual); the blocks' b buffers of those batch norms are then not
  // written.
  bool fuse_residual = false;
  // Loss scaling (fp16 on a GPU): the loss's gradient is multiplied by this before
  // backward, so every gradient comes out scaled by it (the device's deviceSgdStep
  // divides it out again). 1 on the CPU.
  float loss_scale = 1.0f;
  GradSink sink;             // may be empty (one process, tests)
  // The layers the passes call: the CPU's, or the GPU's in a model laid out in device
  // memory (the device copy below).
  const nn::LayerOps* ops = &nn::cpuLayers();
  // Set by useDevice(): the passes then run on this device copy, and this Model, on the
  // host, stays what the rest of the trainer reads and writes (see model_device.h).
  std::shared_ptr<DeviceModel> device;
};

// Builds and initialises (Kaiming, seeded) the model; throws InvalidArgument for an
// unsupported depth or nonsensical sizes. Without `initialise` the parameters stay zero
// (a device copy, whose parameters come from the host model).
void buildModel(Model& m, const ModelConfig& cfg, bool initialise = true);

// Number of trainable parameters (weights + biases; no BN running statistics).
std::size_t parameterCount(const Model& m);
// Every parameter tensor with its gradient, in torchvision's state_dict order.
std::vector<ParamRef> parameterList(Model& m);
// Every BN running statistic ("layer1.0.bn1.running_mean", ...), same order.
std::vector<ParamRef> bufferList(Model& m);

// Forward of N <= max_batch images already in m.input; fills m.logits.
void forward(Model& m, int N);
// Loss of m.logits against labels (and dlogits when training). labels: host memory.
float loss(Model& m, const int32_t* labels, int N, float smoothing, bool with_grad);
// How many of the N images have their label in the top 1 / top 5 logits.
nn::TopK accuracy(Model& m, const int32_t* labels, int N);
// Backward from m.dlogits; every layer's gradients go to m.sink as soon as they exist.
void backward(Model& m, int N);

// One residual block's passes exactly as forward() and backward() run them, for tests
// that check a block apart from the model around it (on a GPU model, its device copy's
// blocks). blockForward reads x, N images of the block's input (b.x from then on), and
// writes b.y. blockBackward takes the gradient w.r.t. b.y in m.scratch[in], or with
// dy_masked already through the ReLU that ends the block, and returns the index of the
// scratch buffer holding the gradient w.r.t. b.x (with mask_dx through the ReLU that
// ended the block before, read from b.x).
void blockForward(Model& m, Block& b, const float* x, int N);
int blockBackward(Model& m, Block& b, int in, int N, bool dy_masked, bool mask_dx);

}  // namespace accord::resnet
