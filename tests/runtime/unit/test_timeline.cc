// The timeline writer on its own: valid JSON after every write, after a kill and after a
// failed write; names escaped, phases balanced, and a path it cannot create refused
// with the path.
#include "runtime/timeline.h"

#include <accord/error.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using accord::Clock;
using accord::Timeline;
using nlohmann::json;

std::string tempPath(const char* tag) {
  return "/tmp/accord_timeline_" + std::string(tag) + "_" + std::to_string(::getpid()) + ".json";
}

json parseFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());  // throws when the file is not complete JSON
}

// Per track: begins minus ends never negative, zero at the end; times never go back.
void checkBalanced(const json& events) {
  std::map<int, int> depth;
  std::map<int, double> last;
  for (const auto& e : events) {
    const std::string ph = e.at("ph");
    if (ph == "M") continue;
    const int tid = e.at("tid");
    const double ts = e.at("ts");
    INFO(e.dump());
    CHECK(ts >= last[tid]);
    last[tid] = ts;
    if (ph == "B") ++depth[tid];
    if (ph == "E") CHECK(--depth[tid] >= 0);
  }
  for (const auto& [tid, d] : depth) {
    INFO("track " << tid);
    CHECK(d == 0);
  }
}

std::map<std::string, int> tracksByName(const json& events) {
  std::map<std::string, int> out;
  for (const auto& e : events)
    if (e.at("ph") == "M" && e.at("name") == "thread_name") out[e["args"]["name"]] = e["tid"];
  return out;
}

}  // namespace

TEST_CASE("timeline: valid JSON after each write, phases nested and balanced", "[timeline]") {
  const std::string path = tempPath("basic");
  Timeline& t = Timeline::instance();
  t.start(path);
  REQUIRE(t.active());
  const std::vector<std::string> group = {"grad \"w\"\n1", "grad.b", "\xff\xfe bad utf-8"};
  auto now = Clock::now();
  t.tensorSpan(group[0], "queue", now - std::chrono::microseconds(10), now);
  t.tensorsPhase(group, "negotiate", now);
  t.flush(true);
  CHECK(parseFile(path).size() > 1);  // complete JSON mid-run
  t.tensorsPhase(group, "allreduce", Clock::now(), "{\"tensors\":3,\"bytes\":12}");
  t.tensorsStep(group, "copy_in", Clock::now());
  t.tensorsStep(group, "reduce", Clock::now());
  t.tensorsDone(group, Clock::now());
  t.begin("trainer", "compute \"fwd\"");
  t.begin("trainer", "comm wait");  // ends "compute" first
  t.instant("cycle", "{\"us\":1.5}");
  t.tensorsPhase({"left open"}, "negotiate", Clock::now());
  t.stop();  // ends what is open
  CHECK_FALSE(t.active());

  const json events = parseFile(path);
  checkBalanced(events);
  const auto tracks = tracksByName(events);
  CHECK(tracks.count("grad \"w\"\n1") == 1);
  CHECK(tracks.count("trainer") == 1);
  CHECK(tracks.count("left open") == 1);
  int allreduce = 0, steps = 0, queue = 0;
  for (const auto& e : events) {
    if (e.value("name", "") == "allreduce") {
      ++allreduce;
      CHECK(e["args"]["bytes"] == 12);
    }
    if (e.value("name", "") == "copy_in" || e.value("name", "") == "reduce") ++steps;
    if (e.value("name", "") == "queue") {
      ++queue;
      CHECK(e["ph"] == "X");
      CHECK(e["dur"].get<double>() >= 10.0);
    }
  }
  CHECK(allreduce == 3);
  CHECK(steps == 6);
  CHECK(queue == 1);
  std::remove(path.c_str());
}

TEST_CASE("timeline: a killed process leaves a file that parses", "[timeline]") {
  const std::string path = tempPath("killed");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    Timeline& t = Timeline::instance();
    t.start(path);
    t.tensorsPhase({"written"}, "negotiate", Clock::now());
    t.flush(true);
    t.tensorsPhase({"never written"}, "negotiate", Clock::now());  // still in the buffer
    std::raise(SIGKILL);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  const json events = parseFile(path);
  const auto tracks = tracksByName(events);
  CHECK(tracks.count("written") == 1);
  CHECK(tracks.count("never written") == 0);
  std::remove(path.c_str());
}

// Events reach the file within Timeline::kWriteEvery with no flush() at all: the
// background thread may sit in one long wait (a frozen peer) after recording them, and
// a process killed then must still leave them.
TEST_CASE("timeline: recorded events reach the file without a flush", "[timeline]") {
  const std::string path = tempPath("unflushed");
  Timeline& t = Timeline::instance();
  t.start(path);
  t.tensorsPhase({"unflushed"}, "negotiate", Clock::now());
  t.begin("app", "compute");
  // Well above kWriteEvery (20 ms), for a loaded machine.
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  std::map<std::string, int> tracks;
  while (Clock::now() < deadline) {
    tracks = tracksByName(parseFile(path));  // complete JSON at every moment
    if (tracks.count("unflushed") && tracks.count("app")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(tracks.count("unflushed") == 1);
  CHECK(tracks.count("app") == 1);
  t.stop();
  checkBalanced(parseFile(path));
  // Started again, it writes again (a new writer for the new file).
  t.start(path);
  t.tensorsPhase({"second"}, "negotiate", Clock::now());
  const auto again = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < again && !tracksByName(parseFile(path)).count("second"))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(tracksByName(parseFile(path)).count("second") == 1);
  t.stop();
  std::remove(path.c_str());
}

// A write that fails part way (a full disk; here the file-size limit) stops the
// timeline, and the file is the complete JSON of the writes before it.
TEST_CASE("timeline: a failed write leaves the file as it was, complete", "[timeline]") {
  const std::string path = tempPath("full");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
    const rlimit limit{16384, 16384};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    Timeline& t = Timeline::instance();
    t.start(path);
    t.tensorsPhase({"first"}, "negotiate", Clock::now());
    t.tensorsDone({"first"}, Clock::now());
    t.flush(true);
    for (int i = 0; i < 2000 && t.active(); ++i) {  // each write larger than what is left
      t.tensorsPhase({"later." + std::to_string(i)}, "negotiate", Clock::now());
      if (i % 300 == 299) t.flush(true);  // 300 tracks: more than the 16 KiB allowed
    }
    const bool still_active = t.active();  // false: stopped by the failed write
    t.stop();  // joins the writer thread, which the failed write ended
    ::_exit(still_active ? 1 : 0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  const json events = parseFile(path);  // complete JSON
  CHECK(tracksByName(events).count("first") == 1);
  CHECK(tracksByName(events).count("later.0") == 0);  // the failed write left nothing
  std::remove(path.c_str());
}

TEST_CASE("timeline: a path that cannot be created is refused, naming it", "[timeline]") {
  CHECK_THROWS_WITH(Timeline::instance().start("/nonexistent-dir/t.json"),
                    Catch::Contains("/nonexistent-dir/t.json") &&
                        Catch::Contains("No such file"));
  CHECK_FALSE(Timeline::instance().active());
  // Recording without a timeline does nothing (and does not throw).
  Timeline::instance().begin("x", "y");
  Timeline::instance().tensorsPhase({"x"}, "negotiate", Clock::now());
}
