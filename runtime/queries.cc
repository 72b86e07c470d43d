// What a running runtime answers: rank and size, the process sets, the timeline's
// start and stop, and what this build contains. Each call names itself in the
// NotInitialized error of a runtime that is not running (runtime.h).
#include "runtime/backend.h"
#include "runtime/runtime.h"
#include "runtime/timeline.h"

#include <accord/accord.h>
#include <accord/error.h>

#include <string>
#include <vector>

namespace accord {

void start_timeline(const std::string& path) {
  if (runtime("accord::start_timeline").rank != 0) return;
  if (path.empty()) throw InvalidArgument("accord::start_timeline: the path is empty");
  Timeline::instance().start(path);
}

void stop_timeline() {
  if (runtime("accord::stop_timeline").rank != 0) return;
  Timeline::instance().stop();
}

void timeline_begin(const std::string& track, const std::string& activity) {
  Timeline::instance().begin(track, activity);
}

void timeline_end(const std::string& track) { Timeline::instance().end(track); }

int rank() { return runtime("accord::rank").rank; }
int size() { return runtime("accord::size").size; }
int local_rank() { return runtime("accord::local_rank").local_rank; }
int local_size() { return runtime("accord::local_size").local_size; }
int cross_rank() { return runtime("accord::cross_rank").cross_rank; }
int cross_size() { return runtime("accord::cross_size").cross_size; }

Version version() { return {ACCORD_VERSION_MAJOR, ACCORD_VERSION_MINOR, ACCORD_VERSION_PATCH}; }

BuildFeatures build_features() { return {deviceSupportBuilt(), ncclBuilt()}; }

int cuda_device_count(std::string* why) { return cudaDevices(why); }

std::vector<int> process_set_ranks(ProcessSetId id) {
  return runtime("accord::process_set_ranks").sets.ranks(id);
}
bool process_set_included(ProcessSetId id) {
  return runtime("accord::process_set_included").sets.included(id);
}
int process_set_rank(ProcessSetId id) {
  return runtime("accord::process_set_rank").sets.rankIn(id);
}
Transport process_set_transport(ProcessSetId id) {
  return runtime("accord::process_set_transport").sets.kind(id);
}

const char* transport_name(Transport transport) {
  switch (transport) {
    case Transport::Local:
      return "local";
    case Transport::SharedMemory:
      return "shared-memory";
    case Transport::Mpi:
      return "mpi";
  }
  return "invalid-transport";
}

int process_set_size(ProcessSetId id) {
  return static_cast<int>(runtime("accord::process_set_size").sets.ranks(id).size());
}

}  // namespace accord
