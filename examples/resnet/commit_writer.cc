// The elastic commit's copy and its write on a thread of its own; see commit_writer.h.
#include "commit_writer.h"

#include <algorithm>
#include <exception>
#include <filesystem>

namespace accord::resnet {

CommitWriter::~CommitWriter() { join(); }

void CommitWriter::start(const std::string& path, const std::string& description,
                         const TrainState& state, const std::vector<TensorRef>& tensors,
                         const StepGeometry& geometry) {
  join();  // a failure of the previous write stays in error_ for wait()
  std::size_t total = 0;
  for (const TensorRef& t : tensors) total += t.n;
  // Kept across commits (resize() of the same size neither frees nor touches it).
  snapshot_.resize(total);
  refs_.resize(tensors.size());
  float* at = snapshot_.data();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::copy(tensors[i].data, tensors[i].data + tensors[i].n, at);
    refs_[i] = {tensors[i].name, at, tensors[i].n};
    at += tensors[i].n;
  }
  path_ = path;
  description_ = description;
  state_ = state;
  geometry_ = geometry;
  thread_ = std::thread([this] { write(); });
}

void CommitWriter::join() {
  if (thread_.joinable()) thread_.join();
}

std::string CommitWriter::wait() {
  join();
  std::string error;
  error.swap(error_);
  return error;
}

void CommitWriter::write() {
  try {
    const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir);
    saveCheckpoint(path_, description_, state_, refs_, geometry_);
  } catch (const std::exception& e) {  // handed to the training thread by wait()
    error_ += (error_.empty() ? "" : "; then ") + std::string(e.what());
  }
}

}  // namespace accord::resnet
