// shutdown() while other threads still submit collectives (which the application should
// not let happen, but a thread left running at exit does): those threads' calls fail
// with ShutDown or NotInitialized, never with another error, and never touch a freed
// runtime (a crash, or a report under the sanitizers). Prints a verdict line.
#include <accord/accord.h>
#include <accord/error.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

int main() {
  accord::init();
  const int me = accord::rank();
  std::atomic<bool> stop{false};
  std::atomic<long> done{0}, ended{0};
  std::mutex mu;
  std::string other;  // the first error that is neither ShutDown nor NotInitialized
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (long i = 0; !stop; ++i) {
        float x = 1.0f;
        accord::AllreduceOptions o;
        o.name = "race." + std::to_string(t) + "." + std::to_string(i);
        try {
          accord::allreduce_async({&x, accord::DType::Float32, {1}, {}}, o).wait();
          ++done;
        } catch (const accord::ShutDown&) {
          ++ended;
        } catch (const accord::NotInitialized&) {
          ++ended;
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          if (other.empty()) other = e.what();
        }
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  accord::shutdown();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stop = true;
  for (auto& t : threads) t.join();
  if (!other.empty()) {
    std::printf("[rank %d] FAILED: a call racing shutdown() failed otherwise: %s\n", me,
                other.c_str());
    return 1;
  }
  std::printf("[rank %d] shutdown raced %ld completed and %ld ended calls: ok\n", me, done.load(),
              ended.load());
  return 0;
}
