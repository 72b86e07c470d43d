# Driven by mpi_tests.cmake: cmake -DMODE=... -DMPIRUN=... -DTRAINER=... -DWORK=... -P this
# Every run is small (a few hundred Fashion-MNIST images, a width-1/8 ResNet-18) except
# `accuracy`, which is the trainer's no-flag default.
include(${CMAKE_CURRENT_LIST_DIR}/no_gpu.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
# Where Fashion-MNIST is not installed (a GPU machine), ci/device-run.sh points
# TEST_FASHION_MNIST_DIR at a slice of it.
set(DATA_ARGS)
if(DEFINED ENV{TEST_FASHION_MNIST_DIR})
  set(DATA_ARGS --data-dir $ENV{TEST_FASHION_MNIST_DIR})
endif()
set(SMALL ${DATA_ARGS} --width 0.125 --train-limit 512 --no-eval --no-progress --threads 1 --seed 7)
# A one-rank job that fails (a refusal checked for, a machine without a GPU) ends at
# once: mpirun's kill sequence otherwise sleeps twice for a second (Open MPI's
# odls_base_sigkill_timeout) with nobody left to kill. Jobs of more ranks keep the
# default, a second in which the others finish saying why.
set(QUICK_EXIT OMPI_MCA_odls_base_sigkill_timeout=0)
set(MPIRUN1 ${CMAKE_COMMAND} -E env ${QUICK_EXIT} ${MPIRUN} -np 1)

# mpirun_np(<np> <var>): <var> = the command that starts <np> ranks (MPIRUN1 for one).
function(mpirun_np np var)
  if(np EQUAL 1)
    set(${var} ${MPIRUN1} PARENT_SCOPE)
  else()
    set(${var} ${MPIRUN} -np ${np} PARENT_SCOPE)
  endif()
endfunction()

# run(<np> <log-name> args...): runs the trainer under mpirun, fails the test on error.
function(run np name)
  mpirun_np(${np} launch)
  execute_process(COMMAND ${launch} ${TRAINER} ${ARGN}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  file(WRITE ${WORK}/${name}.log "${out}\n${err}")
  message("---- ${name} (np ${np}): ${ARGN}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name} failed with ${rc}")
  endif()
  set(LAST_OUT "${out}" PARENT_SCOPE)
endfunction()

# run_on_gpu(<np> <log-name> args...): run() with --device cuda, in fp32 unless args
# name a --precision (the comparisons with the CPU are float32's); where no GPU answers,
# says "skipped: no GPU" (CTest's skip) and sets NO_GPU for the caller to return. The
# caller's GPU_ENV (NAME=VALUE items) goes into mpirun's environment, and GPU_PREFIX
# (a command) before the trainer on every rank.
function(run_on_gpu np name)
  set(precision)
  list(FIND ARGN --precision named)
  if(named EQUAL -1)
    set(precision --precision fp32)
  endif()
  mpirun_np(${np} launch)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${GPU_ENV} ${launch} ${GPU_PREFIX}
                          ${TRAINER} ${ARGN} --device cuda ${precision}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  file(WRITE ${WORK}/${name}.log "${out}\n${err}")
  message("---- ${name} (np ${np}, GPU${GPU_ENV}${GPU_PREFIX}): ${ARGN}\n${out}${err}")
  set(LAST_OUT "${out}" PARENT_SCOPE)
  set(NO_GPU FALSE PARENT_SCOPE)
  if(rc EQUAL 0)
    return()
  endif()
  if(err MATCHES "${ACCORD_NO_GPU_ERROR}")
    message("skipped: no GPU (${CMAKE_MATCH_0})")
    set(NO_GPU TRUE PARENT_SCOPE)
    return()
  endif()
  message(FATAL_ERROR "${name} on the GPU failed with ${rc}")
endfunction()

# refused(<what> <regex> args...): a 2-rank run of SMALL plus args, in WORK, that must
# stop before its first epoch with rank 1's error matching <regex>.
function(refused what expect)
  execute_process(COMMAND ${MPIRUN} -np 2 ${TRAINER} ${SMALL} --epochs 1 --batch-size 16 ${ARGN}
                  WORKING_DIRECTORY ${WORK}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  if(rc EQUAL 0 OR out MATCHES "epoch 1 " OR NOT err MATCHES "rank 1[^\n]*${expect}")
    message(FATAL_ERROR "${what} was not refused before training")
  endif()
endfunction()

# check_accuracy(<label> [floor]): the final test accuracy LAST_OUT printed is >= floor
# (85 unless given) percent; sets ACC.
function(check_accuracy label)
  set(floor 85)
  if(ARGC GREATER 1)
    set(floor ${ARGV1})
  endif()
  if(NOT LAST_OUT MATCHES "final test accuracy: ([0-9.]+)%")
    message(FATAL_ERROR "${label}: no final accuracy printed")
  endif()
  set(acc ${CMAKE_MATCH_1})
  if(acc LESS floor)
    message(FATAL_ERROR "${label}: test accuracy ${acc}% is below ${floor}%")
  endif()
  set(ACC ${acc} PARENT_SCOPE)
endfunction()

function(compare a b)
  execute_process(COMMAND ${TRAINER} compare ${a} ${b} ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "parameters differ: ${a} vs ${b}")
  endif()
endfunction()

if(MODE STREQUAL "equivalence")
  # LR and momentum on from the first step, so K = 6 steps move every parameter.
  set(args ${SMALL} --steps 6 --warmup-epochs 0 --lr 0.2 --train-bn-mode running)
  run(1 one ${args} --batch-size 32 --dump-params ${WORK}/one.params)
  run(2 two ${args} --batch-size 16 --dump-params ${WORK}/two.params)
  # Float sums in a different order (per-rank means, then the average): not bitwise.
  compare(${WORK}/one.params ${WORK}/two.params --atol 1e-5 --rtol 1e-3)
elseif(MODE STREQUAL "resume")
  # 512 images / (2 x 16) = 16 steps an epoch; stop at step 20, i.e. inside epoch 2.
  set(args ${SMALL} --epochs 2 --batch-size 16 --warmup-epochs 1)
  run(2 full ${args} --dump-params ${WORK}/full.params)
  run(2 first ${args} --steps 20 --checkpoint ${WORK}/ckpt --metrics ${WORK}/run.jsonl)
  run(2 resumed ${args} --resume ${WORK}/ckpt --dump-params ${WORK}/resumed.params
      --metrics ${WORK}/run.jsonl)
  # Counted as the epoch lines count: step 20 is the 4th of 16 in epoch 2.
  if(NOT LAST_OUT MATCHES "resumed from [^\n]*ckpt after step 20 \\(epoch 2, step 4 of 16\\)")
    message(FATAL_ERROR "the resume did not say where it resumed, as the epochs count")
  endif()
  compare(${WORK}/full.params ${WORK}/resumed.params --atol 0 --rtol 0)
  # The same --metrics file: epoch 1's line from the first run, epoch 2's from the resumed.
  file(STRINGS ${WORK}/run.jsonl epochs)
  list(LENGTH epochs count)
  if(NOT count EQUAL 2 OR NOT epochs MATCHES "^{\"epoch\":1,[^;]*;{\"epoch\":2,")
    message(FATAL_ERROR "the resumed run's metrics are not epochs 1 and 2: ${epochs}")
  endif()
elseif(MODE STREQUAL "resume-batch")
  # 512 images / (2 x 16) = 16 steps an epoch; stop at step 12. A global batch of 64
  # would have 8 steps an epoch and count step 12 past its end: refused on every rank.
  # 1 rank x 32 trains on the same samples per step: resumes and trains steps 12-15.
  set(args ${SMALL} --epochs 2 --warmup-epochs 1)
  run(2 first ${args} --batch-size 16 --steps 12 --checkpoint ${WORK}/ckpt)
  execute_process(COMMAND ${MPIRUN} -np 2 ${TRAINER} ${args} --batch-size 32 --resume ${WORK}/ckpt
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  set(expect "written at global batch 32 \\(--batch-size 16 x 2 ranks\\), this run has global batch 64 \\(--batch-size 32 x 2 ranks\\)")
  if(rc EQUAL 0 OR NOT err MATCHES "\\(rank 1\\): error: --resume failed on rank 0: [^\n]*${expect}")
    message(FATAL_ERROR "resuming at a larger global batch was not refused clearly on every rank")
  endif()
  run(1 regrouped ${args} --batch-size 32 --resume ${WORK}/ckpt --metrics ${WORK}/regrouped.jsonl)
  file(STRINGS ${WORK}/regrouped.jsonl epochs)
  list(GET epochs 0 first_epoch)
  if(NOT first_epoch MATCHES "\"epoch\":1,\"steps\":4,")
    message(FATAL_ERROR "1 x 32 did not resume at step 12 of 16: ${first_epoch}")
  endif()
elseif(MODE STREQUAL "nonfinite")
  # At LR 1e30 step 1 is finite, step 2's gradients overflow and step 3's loss is NaN.
  set(args ${SMALL} --batch-size 16 --warmup-epochs 0 --lr 1e30)
  execute_process(COMMAND ${MPIRUN} -np 2 ${TRAINER} ${args} --metrics ${WORK}/stop.jsonl
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  foreach(rank 0 1)
    if(NOT err MATCHES "\\(rank ${rank}\\): error: the loss is NaN at step 3 \\(epoch 1, step 3 of 16\\)")
      message(FATAL_ERROR "rank ${rank} did not stop at the NaN loss of step 3")
    endif()
  endforeach()
  file(READ ${WORK}/stop.jsonl metrics)
  if(rc EQUAL 0 OR metrics MATCHES "nan|inf")
    message(FATAL_ERROR "a diverged run exited ${rc} or wrote NaN into its metrics")
  endif()
  # Skipping: steps 2-6 leave parameters, momentum and BN statistics as step 1 left them.
  set(args ${args} --skip-nonfinite-steps)
  run(2 one ${args} --steps 1 --checkpoint ${WORK}/one.ckpt)
  run(2 six ${args} --steps 6 --checkpoint ${WORK}/six.ckpt --metrics ${WORK}/six.jsonl)
  compare(${WORK}/one.ckpt ${WORK}/six.ckpt --atol 0 --rtol 0)
  file(READ ${WORK}/six.jsonl line)
  string(JSON skipped GET "${line}" skipped_steps)  # fails the test unless valid JSON
  if(NOT skipped EQUAL 5)
    message(FATAL_ERROR "expected steps 2-6 skipped, the metrics say ${skipped}: ${line}")
  endif()
  # A model that fails every step is not skipped forever.
  execute_process(COMMAND ${MPIRUN} -np 2 ${TRAINER} ${args} --steps 40
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  if(rc EQUAL 0 OR NOT err MATCHES "\\(rank 1\\): error: [^\n]*the 16 steps up to it all skipped")
    message(FATAL_ERROR "16 skipped steps in a row did not stop every rank")
  endif()
elseif(MODE STREQUAL "bad-resume")
  run(2 first ${SMALL} --epochs 1 --steps 2 --batch-size 16 --checkpoint ${WORK}/ckpt)
  file(SIZE ${WORK}/ckpt size)
  math(EXPR half "${size} / 2")
  execute_process(COMMAND head -c ${half} ${WORK}/ckpt OUTPUT_FILE ${WORK}/cut)
  execute_process(COMMAND ${MPIRUN} -np 2 ${TRAINER} ${SMALL} --epochs 1 --batch-size 16
                          --resume ${WORK}/cut
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  if(rc EQUAL 0 OR NOT err MATCHES "truncated")
    message(FATAL_ERROR "a truncated checkpoint was not rejected clearly")
  endif()
  # A --checkpoint or --dump-params that rank 0 cannot write is refused on every rank
  # before the first step, not when the run first saves.
  foreach(flag --checkpoint --dump-params)
    execute_process(COMMAND ${MPIRUN} -np 2 ${TRAINER} ${SMALL} --epochs 1 --batch-size 16
                            ${flag} ${WORK}/absent/out
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    message("${out}${err}")
    if(rc EQUAL 0 OR out MATCHES "epoch 1 "
       OR NOT err MATCHES "rank 0[^\n]*${flag} [^\n]*absent/out cannot be written"
       OR NOT err MATCHES "rank 1[^\n]*${flag} [^\n]*absent/out cannot be written")
      message(FATAL_ERROR "${flag} into a missing folder was not refused on both ranks before training")
    endif()
  endforeach()
  # A bad ACCORD_* setting: an error line on every rank, not an abort.
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ACCORD_CYCLE_TIME=abc
                          ${MPIRUN} -np 2 ${TRAINER} ${SMALL} --epochs 1 --batch-size 16
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  if(rc EQUAL 0 OR err MATCHES "terminate called"
     OR NOT err MATCHES "accord-resnet: error: ACCORD_CYCLE_TIME='abc': expected")
    message(FATAL_ERROR "a bad ACCORD_CYCLE_TIME was not an error line")
  endif()
  # Batches that cannot fit in memory: refused with the sizes, before they are allocated.
  execute_process(COMMAND ${MPIRUN} -np 2 ${TRAINER} --dataset synthetic --batch-size 65536
                          --prefetch 64 --epochs 1
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  if(rc EQUAL 0 OR NOT err MATCHES "rank 1[^\n]*the data loaders need [0-9.]+ GiB \\(2 x 65 batches of 65536 images of 3x224x224 floats\\), more than this machine's")
    message(FATAL_ERROR "batches larger than the memory were not refused with their sizes")
  endif()
  # Two outputs in one file would overwrite each other: refused before training too,
  # named relative to the working folder as well, the file not there yet.
  refused("--checkpoint and --metrics in one file"
          "--checkpoint and --metrics both name [^\n]*same; give each"
          --checkpoint ${WORK}/same --metrics ${WORK}/./same)
  refused("fresh and ./fresh" "--checkpoint and --metrics both name ./fresh; give each"
          --checkpoint fresh --metrics ./fresh)
  # --channels is the synthetic images' alone: refused with another dataset, not ignored.
  refused("--channels with Fashion-MNIST"
          "--channels 3 sets synthetic images' channels; --dataset fashion-mnist has its own"
          --channels 3)
elseif(MODE STREQUAL "elastic-resume")
  # A job started with --resume (a checkpoint of step 4) and --commit-every, which a
  # failure stopped after its commit of step 8 (in the commit's place on this host's
  # disk: a checkpoint of step 8 from the same run, which a commit's format is), is
  # restarted by the elastic driver (its variables set here as accordrun sets them):
  # the restart resumes from the job's own commit, not from --resume.
  set(args ${SMALL} --batch-size 16 --epochs 1)
  run(2 start ${args} --steps 4 --checkpoint ${WORK}/ck)
  run(2 on ${args} --resume ${WORK}/ck --steps 8 --checkpoint ${WORK}/at8)
  cmake_host_system_information(RESULT host QUERY HOSTNAME)
  file(MAKE_DIRECTORY ${WORK}/store/resume-test/${host})
  file(COPY_FILE ${WORK}/at8 ${WORK}/store/resume-test/${host}/accord-resnet.ckpt)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ACCORDRUN_ELASTIC_JOB=resume-test
                          ACCORDRUN_ELASTIC_STORE=${WORK}/store ACCORDRUN_ELASTIC_RESET=1
                          ${MPIRUN} -np 2 ${TRAINER} ${args} --resume ${WORK}/ck --commit-every 2
                          --steps 10
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  if(NOT rc EQUAL 0 OR NOT out MATCHES "resumed from the commit [^\n]*\\(step 8 of"
     OR out MATCHES "resumed from [^\n]*ck after")
    message(FATAL_ERROR "the restart did not resume from the job's commit of step 8")
  endif()
elseif(MODE STREQUAL "threads")
  # Ranks bound to one core each (taskset binds them as mpirun's --bind-to core does)
  # and asked for more compute threads and decoders: cut to that core and said once, on
  # rank 0, without oneTBB's own warnings; unbound, the same asks go through.
  set(args ${DATA_ARGS} --width 0.125 --train-limit 512 --no-eval --no-progress --seed 7
           --steps 2 --batch-size 16 --threads 2 --data-workers 2)
  execute_process(COMMAND ${MPIRUN} -np 2 taskset -c 0 ${TRAINER} ${args}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  foreach(flag --threads --data-workers)
    string(REGEX MATCHALL "accord-resnet: ${flag} 2, but this rank may run on 1 core \\([^\n]*\\): using 1\\."
           said "${out}")
    list(LENGTH said times)
    if(NOT rc EQUAL 0 OR NOT times EQUAL 1)
      message(FATAL_ERROR "${flag} 2 on one core was not cut to it and said once (${times} times, rc ${rc})")
    endif()
  endforeach()
  if("${out}${err}" MATCHES "TBB Warning")
    message(FATAL_ERROR "oneTBB warned about its workers")
  endif()
  run(2 unbound ${args})
  if("${LAST_OUT}" MATCHES "but this rank may run on")
    message(FATAL_ERROR "unbound ranks were cut")
  endif()
elseif(MODE STREQUAL "device-equivalence")
  # 2 ranks x 16 on the GPU (sharing it: gradients averaged as CUDA tensors through
  # MPI, ACCORD_NCCL=0 from the test) train as 1 rank x 32 on the CPU does, as in
  # `equivalence`, to float32's differences between cuDNN and oneDNN.
  set(args ${SMALL} --steps 6 --warmup-epochs 0 --lr 0.2 --train-bn-mode running)
  run_on_gpu(2 gpu ${args} --batch-size 16 --cudnn-deterministic --dump-params ${WORK}/gpu.params)
  if(NO_GPU)
    return()
  endif()
  run(1 cpu ${args} --batch-size 32 --dump-params ${WORK}/cpu.params)
  compare(${WORK}/cpu.params ${WORK}/gpu.params --atol 1e-3 --rtol 1e-2)
  # Batches copied ahead on their own stream (the default) train as the same batches
  # copied on the layers' stream when their step starts (both with the algorithms that
  # repeat bit for bit, so that only a wrong batch could set them apart).
  run_on_gpu(2 gpu-no-copy-stream ${args} --batch-size 16 --no-copy-stream --cudnn-deterministic
             --dump-params ${WORK}/gpu-no-copy-stream.params)
  compare(${WORK}/gpu-no-copy-stream.params ${WORK}/gpu.params --atol 1e-6 --rtol 1e-5)
elseif(MODE STREQUAL "device-resume")
  # A checkpoint written on the CPU resumes on the GPU, and the GPU's resumes on the CPU:
  # 2 + 2 + 2 steps end where 6 steps on the CPU alone end, to float32's differences
  # between cuDNN and oneDNN (a resume that lost its state would be off by far more).
  set(args ${SMALL} --batch-size 16 --warmup-epochs 0 --lr 0.1)
  run(1 first ${args} --steps 2 --checkpoint ${WORK}/cpu.ckpt)
  run_on_gpu(1 gpu ${args} --resume ${WORK}/cpu.ckpt --steps 4 --checkpoint ${WORK}/gpu.ckpt)
  if(NO_GPU)
    return()
  endif()
  run(1 last ${args} --resume ${WORK}/gpu.ckpt --steps 6 --dump-params ${WORK}/mixed.params)
  run(1 cpu ${args} --steps 6 --dump-params ${WORK}/cpu.params)
  compare(${WORK}/cpu.params ${WORK}/mixed.params --atol 1e-3 --rtol 1e-2)
  # fp16: the dynamic loss scale travels in the checkpoint, as PyTorch's GradScaler
  # state does, rather than starting from 65536 again.
  run_on_gpu(1 fp16-first ${args} --precision fp16 --steps 2 --checkpoint ${WORK}/fp16.ckpt)
  run_on_gpu(1 fp16-resumed ${args} --precision fp16 --resume ${WORK}/fp16.ckpt --steps 4)
  if(NOT LAST_OUT MATCHES "loss scale [0-9]+ restored")
    message(FATAL_ERROR "the fp16 run resumed without its loss scale")
  endif()
elseif(MODE STREQUAL "device-synthetic")
  # Synthetic batches built on the GPU from its copy of the image pool train exactly as
  # the same batches uploaded from the host loader (--synthetic-on-host) do, and as the
  # CPU does to float32's differences between cuDNN and oneDNN. First, on any machine:
  # the flag without a GPU is refused naming what it needs.
  set(args --dataset synthetic --image-size 32 --classes 10 --synthetic-size 256 --width 0.125
           --no-eval --no-progress --threads 1 --seed 7 --batch-size 16 --steps 4
           --warmup-epochs 0 --lr 0.1)
  execute_process(COMMAND ${MPIRUN1} ${TRAINER} ${args} --synthetic-on-host
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  if(rc EQUAL 0 OR NOT err MATCHES "--synthetic-on-host needs --dataset synthetic and --device cuda")
    message(FATAL_ERROR "--synthetic-on-host on the CPU was not refused clearly")
  endif()
  foreach(flag --cudnn-search --no-copy-stream --cudnn-fusion --no-cuda-graphs
               --cudnn-deterministic "--cuda-graph-segment;64K" "--pad-input;4")
    execute_process(COMMAND ${MPIRUN1} ${TRAINER} ${args} ${flag}
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    list(GET flag 0 name)  # the flag without its value
    if(rc EQUAL 0 OR NOT err MATCHES "${name} needs --device cuda")
      message(FATAL_ERROR "${name} on the CPU was not refused clearly")
    endif()
  endforeach()
  run_on_gpu(1 pool ${args} --cudnn-deterministic --dump-params ${WORK}/pool.params)
  if(NO_GPU)
    return()
  endif()
  run_on_gpu(1 host ${args} --synthetic-on-host --cudnn-deterministic
             --dump-params ${WORK}/host.params)
  compare(${WORK}/host.params ${WORK}/pool.params --atol 1e-6 --rtol 1e-5)
  run(1 cpu ${args} --dump-params ${WORK}/cpu.params)
  compare(${WORK}/cpu.params ${WORK}/pool.params --atol 1e-3 --rtol 1e-2)
  # The same in bf16, where the GPU reads each image from the pool into the conversion to
  # 16 bits channels last, and the host's batches are converted after their upload.
  run_on_gpu(1 pool-bf16 ${args} --precision bf16 --cudnn-deterministic
             --dump-params ${WORK}/pool-bf16.params)
  run_on_gpu(1 host-bf16 ${args} --precision bf16 --synthetic-on-host --cudnn-deterministic
             --dump-params ${WORK}/host-bf16.params)
  compare(${WORK}/host-bf16.params ${WORK}/pool-bf16.params --atol 1e-6 --rtol 1e-5)
  # Timed convolution algorithms (--cudnn-search) train the same, to the rounding of
  # other algorithms.
  run_on_gpu(1 search ${args} --cudnn-search --dump-params ${WORK}/search.params)
  compare(${WORK}/cpu.params ${WORK}/search.params --atol 1e-3 --rtol 1e-2)
  # --cudnn-fusion (batch-norm statistics summed by the convolutions where cuDNN's fused
  # engines check out and pay) trains as bf16 without it, to the rounding of the other
  # sums; it is refused in fp32 and says what it fused.
  execute_process(COMMAND ${MPIRUN1} ${TRAINER} ${args} --device cuda --precision fp32
                          --cudnn-fusion
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(rc EQUAL 0 OR NOT err MATCHES "--cudnn-fusion needs --precision bf16 or fp16")
    message(FATAL_ERROR "--cudnn-fusion in fp32 was not refused clearly")
  endif()
  execute_process(COMMAND ${MPIRUN1} ${TRAINER} ${args} --device cuda --precision bf16
                          --cudnn-fusion --cudnn-deterministic
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(rc EQUAL 0 OR NOT err MATCHES "--cudnn-deterministic and --cudnn-fusion cannot go together")
    message(FATAL_ERROR "--cudnn-fusion with --cudnn-deterministic was not refused clearly")
  endif()
  run_on_gpu(1 bf16 ${args} --precision bf16 --dump-params ${WORK}/bf16.params)
  run_on_gpu(1 fused ${args} --precision bf16 --cudnn-fusion --dump-params ${WORK}/fused.params)
  if(NOT LAST_OUT MATCHES "batch-norm statistics fused for [0-9]+ of [1-9][0-9]* shapes")
    message(FATAL_ERROR "--cudnn-fusion did not report what it fused")
  endif()
  compare(${WORK}/bf16.params ${WORK}/fused.params --atol 1e-2 --rtol 1e-1)
  # --pad-input 4: the first convolution reads the images with a zero channel added, as
  # cuDNN's 4-channel tensor-core kernels take them. It trains as bf16 without it, to
  # the rounding of other kernels; the batches built from the pool and those uploaded
  # from the host are padded alike; fp32 and more than twice the channels are refused.
  run_on_gpu(1 padded ${args} --precision bf16 --pad-input 4 --cudnn-deterministic
             --dump-params ${WORK}/padded.params)
  compare(${WORK}/bf16.params ${WORK}/padded.params --atol 1e-2 --rtol 1e-1)
  run_on_gpu(1 padded-host ${args} --precision bf16 --pad-input 4 --cudnn-deterministic
             --synthetic-on-host --dump-params ${WORK}/padded-host.params)
  compare(${WORK}/padded-host.params ${WORK}/padded.params --atol 1e-6 --rtol 1e-5)
  foreach(bad "fp32;4;--pad-input needs --precision bf16 or fp16"
              "bf16;7;--pad-input 7: expected 0 or from 3")
    list(GET bad 0 precision)
    list(GET bad 1 channels)
    list(GET bad 2 expected)
    execute_process(COMMAND ${MPIRUN1} ${TRAINER} ${args} --device cuda
                            --precision ${precision} --pad-input ${channels}
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(rc EQUAL 0 OR NOT err MATCHES "${expected}")
      message(FATAL_ERROR "--pad-input ${channels} in ${precision} was not refused clearly: ${err}")
    endif()
  endforeach()
elseif(MODE STREQUAL "device-graphs")
  # CUDA graphs: each step's GPU work launched as one graph trains as the same steps
  # launched layer by layer: on one rank; on two sharing the GPU (the gradients and the
  # loss averaged as CUDA tensors after the graph, through MPI: ACCORD_NCCL=0 from the
  # test); in fp16, whose changing loss scale makes new graphs. One rank graphs its
  # steps by default, in bf16 where the GPU has it; two ranks, or a profile, do not.
  # Every GPU run here takes the algorithms that repeat bit for bit, so that only a
  # graph that did something else could set two runs apart. First, on any machine: the
  # flag without a GPU is refused naming what it needs.
  set(args ${SMALL} --steps 6 --warmup-epochs 0 --lr 0.2)
  execute_process(COMMAND ${MPIRUN1} ${TRAINER} ${args} --batch-size 16 --cuda-graphs
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  if(rc EQUAL 0 OR NOT err MATCHES "--cuda-graphs needs --device cuda")
    message(FATAL_ERROR "--cuda-graphs on the CPU was not refused clearly")
  endif()
  list(APPEND args --cudnn-deterministic)
  run_on_gpu(1 eager ${args} --batch-size 16 --no-cuda-graphs --dump-params ${WORK}/eager.params)
  if(NO_GPU)
    return()
  endif()
  if(LAST_OUT MATCHES "CUDA graphs")
    message(FATAL_ERROR "--no-cuda-graphs graphed its steps")
  endif()
  run_on_gpu(1 graphs ${args} --batch-size 16 --cuda-graphs --dump-params ${WORK}/graphs.params)
  # Step 1 runs layer by layer, step 2 is captured, and it and the 4 after replay.
  if(NOT LAST_OUT MATCHES "CUDA graphs: 1 captured, 5 steps replayed from them, 1 run")
    message(FATAL_ERROR "the graphed run did not replay its steps from one graph")
  endif()
  compare(${WORK}/eager.params ${WORK}/graphs.params --atol 1e-6 --rtol 1e-5)
  # The defaults: graphed, in the precision the run names (bf16 from compute
  # capability 8.0), as that precision layer by layer trains.
  run_on_gpu(1 defaults ${args} --batch-size 16 --precision auto
             --dump-params ${WORK}/defaults.params)
  if(NOT LAST_OUT MATCHES "on GPU 0 in (bf16|fp32), steps as CUDA graphs")
    message(FATAL_ERROR "the default run did not say it graphs its steps, and in what precision")
  endif()
  set(chosen ${CMAKE_MATCH_1})
  if(NOT LAST_OUT MATCHES "CUDA graphs: 1 captured, 5 steps replayed from them, 1 run")
    message(FATAL_ERROR "the default run did not replay its steps from one graph")
  endif()
  run_on_gpu(1 defaults-eager ${args} --batch-size 16 --precision ${chosen} --no-cuda-graphs
             --dump-params ${WORK}/defaults-eager.params)
  compare(${WORK}/defaults-eager.params ${WORK}/defaults.params --atol 1e-6 --rtol 1e-5)
  run_on_gpu(1 profiled ${args} --batch-size 16 --gpu-profile)
  set(conv_row "[0-9]+x[0-9]+x[0-9]+ -> [0-9]+, [0-9]x[0-9]/[0-9] +[0-9.]+ +[0-9.]+ +[0-9]+")
  if(LAST_OUT MATCHES "CUDA graphs" OR NOT LAST_OUT MATCHES "conv forward"
     OR NOT LAST_OUT MATCHES "host ms" OR NOT LAST_OUT MATCHES "convolutions by shape"
     OR NOT LAST_OUT MATCHES "forward  16x${conv_row}" OR NOT LAST_OUT MATCHES "backward 16x${conv_row}"
     OR NOT LAST_OUT MATCHES "steps 2 to 6 profiled \\(the first step left out")
    message(FATAL_ERROR "the profiled run graphed its steps, or printed no profile (with the "
                        "host's time and the convolutions by shape, the first step left out)")
  endif()
  # The passes over activations with the bandwidth they achieved, against the GPU's.
  if(NOT LAST_OUT MATCHES "batch norm forward +[0-9.]+ +[0-9.]+% +[0-9.]+ +[0-9]+ +[0-9]+ +[0-9]+%"
     OR NOT LAST_OUT MATCHES "GB/s: for the passes over activations")
    message(FATAL_ERROR "the profile gave batch norm forward no achieved bandwidth (GB/s and "
                        "share of the GPU's)")
  endif()
  execute_process(COMMAND ${MPIRUN1} ${TRAINER} ${args} --batch-size 16 --device cuda
                          --cuda-graphs --gpu-profile
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(rc EQUAL 0 OR NOT err MATCHES "--cuda-graphs and --gpu-profile cannot go together")
    message(FATAL_ERROR "--cuda-graphs with --gpu-profile was not refused clearly")
  endif()
  run_on_gpu(2 eager-np2 ${args} --batch-size 8 --dump-params ${WORK}/eager-np2.params)
  if(LAST_OUT MATCHES "CUDA graphs")
    message(FATAL_ERROR "two ranks graphed their steps by default")
  endif()
  run_on_gpu(2 graphs-np2 ${args} --batch-size 8 --cuda-graphs
             --dump-params ${WORK}/graphs-np2.params)
  compare(${WORK}/eager-np2.params ${WORK}/graphs-np2.params --atol 1e-6 --rtol 1e-5)
  # Cut into graphs of 64 KiB of gradients, whose allreduces start after each launch.
  run_on_gpu(2 segments-np2 ${args} --batch-size 8 --cuda-graphs --cuda-graph-segment 64K
             --dump-params ${WORK}/segments-np2.params)
  if(NOT LAST_OUT MATCHES "a step is ([2-9]|[1-9][0-9]+) graphs")
    message(FATAL_ERROR "--cuda-graph-segment 64K did not cut the step into graphs")
  endif()
  compare(${WORK}/eager-np2.params ${WORK}/segments-np2.params --atol 1e-6 --rtol 1e-5)
  run_on_gpu(1 fp16-eager ${args} --batch-size 16 --precision fp16 --no-cuda-graphs
             --dump-params ${WORK}/fp16-eager.params)
  run_on_gpu(1 fp16-graphs ${args} --batch-size 16 --precision fp16 --cuda-graphs
             --dump-params ${WORK}/fp16-graphs.params)
  compare(${WORK}/fp16-eager.params ${WORK}/fp16-graphs.params --atol 1e-6 --rtol 1e-5)
elseif(MODE STREQUAL "device-nccl")
  # 2 ranks sharing the GPU through NCCL (ci/nccl-one-gpu.sh gives each rank a host of
  # its own for NCCL: its socket transport over loopback) train as the same 2 ranks
  # through MPI, staged in host memory (ACCORD_NCCL=0), bit for bit: the gradients'
  # sums of two ranks and their averages (a power of two: ncclAvg is exact) round
  # alike on both paths. bf16 and fp32, layer by layer and graphed, with the algorithms
  # that repeat bit for bit.
  set(args ${SMALL} --steps 6 --warmup-epochs 0 --lr 0.2 --batch-size 8 --cudnn-deterministic)
  foreach(precision bf16 fp32)
    foreach(graphs --no-cuda-graphs --cuda-graphs)
      set(tag ${precision}${graphs})
      set(GPU_ENV ACCORD_NCCL=0)
      set(GPU_PREFIX)
      run_on_gpu(2 staged${tag} ${args} --precision ${precision} ${graphs}
                 --dump-params ${WORK}/staged${tag}.params)
      if(NO_GPU)
        return()
      endif()
      set(GPU_ENV ACCORD_NCCL=1)
      set(GPU_PREFIX bash ${NCCL_ONE_GPU})
      run_on_gpu(2 nccl${tag} ${args} --precision ${precision} ${graphs}
                 --dump-params ${WORK}/nccl${tag}.params)
      compare(${WORK}/staged${tag}.params ${WORK}/nccl${tag}.params --atol 0 --rtol 0)
    endforeach()
  endforeach()
elseif(MODE STREQUAL "device-half-accuracy")
  # The no-flag default on one GPU in bf16 and in fp16 (loss scaling) reaches the
  # accuracy the CPU's run must reach (MODE accuracy); fp16 may skip the few steps whose
  # gradients overflow while its loss scale settles, not more.
  # On a slice of the data (DATA_ARGS) the bar is the CPU's accuracy on the same slice,
  # less 2 points, instead of 85%.
  set(floor 85)
  foreach(precision bf16 fp16)
    run_on_gpu(1 ${precision} --no-progress --precision ${precision} ${DATA_ARGS})
    if(NO_GPU)
      return()
    endif()
    if(DATA_ARGS AND precision STREQUAL "bf16")
      set(gpu_out "${LAST_OUT}")
      run(1 cpu --no-progress ${DATA_ARGS})
      check_accuracy(cpu 0)
      string(REGEX REPLACE "\\..*" "" whole "${ACC}")
      math(EXPR floor "${whole} - 2")
      message("the CPU reaches ${ACC}% on this slice: the bar is ${floor}%")
      set(LAST_OUT "${gpu_out}")
    endif()
    check_accuracy(${precision} ${floor})
    string(REGEX MATCHALL "gradients overflowed" overflows "${LAST_OUT}")
    list(LENGTH overflows skipped)
    if(skipped GREATER 20)
      message(FATAL_ERROR "${precision}: ${skipped} steps skipped for overflowing gradients")
    endif()
    message("${precision}: test accuracy ${ACC}% >= ${floor}%, ${skipped} overflow skips")
  endforeach()
elseif(MODE STREQUAL "accuracy")
  run(2 default --no-progress --metrics ${WORK}/metrics.jsonl)
  check_accuracy(default)
  message("test accuracy ${ACC}% >= 85%")
else()
  message(FATAL_ERROR "unknown MODE ${MODE}")
endif()
