// Elastic training for the trainer (docs/elastic.md). Under accordrun's elastic driver
// (which sets ACCORDRUN_ELASTIC_JOB), `--commit-every N` writes the training state
// every N steps, in the checkpoint format (checkpoint.h), to each host's local disk:
//
//   <ACCORDRUN_ELASTIC_STORE or /tmp/accord-elastic>/<job>/<host>/accord-resnet.ckpt
//
// written by the host's local rank 0, so a commit survives the loss of any host with
// no shared file system (the same directories as the Python side's commits). A job
// the driver restarts finds the newest commit any host holds, loads it on the lowest
// rank holding it, broadcasts it, and re-cuts its position for the new number of
// ranks (reshard). A communication failure ends the process with the report and the
// exit status the driver reads (tools/accord_elastic.py; notice.py on the Python side).
#pragma once

#include "checkpoint.h"

#include <cstdint>
#include <string>
#include <vector>

namespace accord::resnet {

// notice.py's EXIT_RESTART: a communication failure, restart from the last commit.
inline constexpr int kExitRestart = 75;

// <store>/<job>/<host>, or "" where the elastic driver did not start this process.
std::string elasticStoreDirectory();
inline std::string elasticCommitPath(const std::string& dir) { return dir + "/accord-resnet.ckpt"; }
// How many times the driver restarted this job (0: its first start).
int elasticRestarts();

// The position of a commit made with geometry `saved`, for a run whose steps take
// now.globalBatch() samples, steps_per_epoch of them an epoch: the same epoch; of the
// samples done in it, those that fill whole new steps (the rest, fewer than one new
// step, are redone); and the global step counted as if the whole run had had the new
// geometry, so the LR schedule reads the same fractional epoch at the new global batch.
TrainState reshard(const TrainState& state, const StepGeometry& saved, const StepGeometry& now,
                   std::int64_t steps_per_epoch);

// The ranks a runtime error blames ("rank 2 did not ... and stopped answering", "ranks
// 2, 3 stopped answering"), read as runner.py reads them.
std::vector<int> blamedRanks(const std::string& message);

// What a report carries of `error`: its first line, cut short where it would not leave
// the report within one write of PIPE_BUF (4096) bytes, which a pipe passes on whole,
// never mixed with another process's output.
std::string reportedError(const std::string& error);
// One "[accord-elastic] {...}" line on standard error: this rank lost others (or the
// job) to a communication failure at global step `step`; `commit` is the last commit.
void reportFailure(int rank, const std::string& error, std::int64_t step, std::int64_t commit);
// One "[accord-elastic]" line saying this rank failed with `error` of its own (not a
// lost rank), as hvd.elastic.run reports an exception raised in user code.
void reportRaised(int rank, const std::string& error);

}  // namespace accord::resnet
