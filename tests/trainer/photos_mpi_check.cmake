# Driven by mpi_tests.cmake: cmake -DMODE=... -DMPIRUN=... -DTRAINER=... -DMAKE_JPEGS=...
#   -DPACK=... -DWORK=... -P this
# The trainer on photos, 2 ranks: a tiny JPEG set made from Fashion-MNIST (128
# training and 32 validation images of 40-80 px), as a folder and packed.
#   folder   one epoch from the folder: 8 steps, evaluated on val/
#   packed   the same from shards: 8 steps, no sample skipped
#   packed-gpu  the same with --device cuda, both ranks on GPU 0 (ACCORD_NCCL=0 from the
#            test): the batches reach the GPU through page-locked memory; "skipped: no
#            GPU" where there is none
#   corrupt  record 0 of shard 0 damaged in train/ and val/: --corrupt skip trains on,
#            counts both and names their shards and offsets; --corrupt reject stops
#            the run naming the training record
include(${CMAKE_CURRENT_LIST_DIR}/no_gpu.cmake)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(DATA ${WORK}/jpegs)
set(ARGS --image-size 32 --batch-size 8 --epochs 1 --width 0.125 --threads 1 --data-workers 1
         --no-progress --seed 3)

function(tool)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGN} failed (${rc}):\n${out}${err}")
  endif()
endfunction()

# train(<name> args...): a 2-rank run; sets OUT, ERR, RC and METRICS (the epoch's JSON).
function(train name)
  execute_process(COMMAND ${MPIRUN} -np 2 ${TRAINER} ${ARGS} --metrics ${WORK}/${name}.jsonl
                          ${ARGN}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("---- ${name}: ${ARGN}\n${out}${err}")
  set(metrics "")
  if(EXISTS ${WORK}/${name}.jsonl)
    file(READ ${WORK}/${name}.jsonl metrics)
  endif()
  set(OUT "${out}" PARENT_SCOPE)
  set(ERR "${err}" PARENT_SCOPE)
  set(RC "${rc}" PARENT_SCOPE)
  set(METRICS "${metrics}" PARENT_SCOPE)
endfunction()

# expect(<json> <field> <value>): the epoch's metrics field equals value.
function(expect json field value)
  string(JSON got ERROR_VARIABLE bad GET "${json}" ${field})
  if(bad OR NOT got STREQUAL "${value}")
    message(FATAL_ERROR "metrics ${field}: expected ${value}, got '${got}' (${bad}): ${json}")
  endif()
endfunction()

set(fashion)
if(DEFINED ENV{TEST_FASHION_MNIST_DIR})  # a slice of it where it is not installed
  set(fashion --fashion-dir $ENV{TEST_FASHION_MNIST_DIR})
endif()
tool(${MAKE_JPEGS} ${DATA} --train 128 --val 32 --min-size 40 --max-size 80 ${fashion})
if(NOT MODE STREQUAL "folder")
  tool(${PACK} ${DATA}/train ${DATA}/packed/train --shards 4 --quiet)
  tool(${PACK} ${DATA}/val ${DATA}/packed/val --shards 2 --quiet)
endif()

if(MODE STREQUAL "folder" OR MODE STREQUAL "packed" OR MODE STREQUAL "packed-gpu")
  set(dir ${DATA})
  set(dataset ${MODE})
  set(device)
  if(MODE STREQUAL "packed" OR MODE STREQUAL "packed-gpu")
    set(dir ${DATA}/packed)
    set(dataset packed)
  endif()
  if(MODE STREQUAL "packed-gpu")
    set(device --device cuda)
  endif()
  train(${MODE} --dataset ${dataset} --data-dir ${dir} ${device})
  if(NOT RC EQUAL 0)
    if(device AND ERR MATCHES "${ACCORD_NO_GPU_ERROR}")
      message("skipped: no GPU (${CMAKE_MATCH_0})")
      return()
    endif()
    message(FATAL_ERROR "--dataset ${dataset} ${device} failed")
  endif()
  expect("${METRICS}" steps 8)  # 128 images / (2 ranks x 8)
  expect("${METRICS}" skipped_samples 0)
  string(JSON top1 GET "${METRICS}" val_top1)  # evaluated on val/
  if(NOT OUT MATCHES "final test accuracy")
    message(FATAL_ERROR "no evaluation")
  endif()
elseif(MODE STREQUAL "corrupt")
  # Record 0 sits at offset 0 of shard 0 (index line: 0, 0, length, ...); zero 16 bytes
  # in its middle, in train/ and in val/. where_<split>: how its report must read.
  foreach(split train val)
    set(packed ${DATA}/packed/${split})
    file(STRINGS ${packed}/index.tsv first REGEX "^0\t0\t")
    string(REPLACE "\t" ";" first "${first}")
    list(GET first 2 length)
    math(EXPR middle "${length} / 2")
    tool(dd if=/dev/zero of=${packed}/shard-00000.rec bs=1 count=16 seek=${middle} conv=notrunc
         status=none)
    string(REGEX REPLACE "([][+.*()^$])" "\\\\\\1" shard_re "${packed}/shard-00000.rec")
    set(where_${split}
        "${shard_re} \\(offset 0, ${length} bytes, record 0 from [^)]*\\): corrupt: CRC-32")
  endforeach()
  set(where "${where_train}")

  train(skip --dataset packed --data-dir ${DATA}/packed --corrupt skip)
  if(NOT RC EQUAL 0)
    message(FATAL_ERROR "--corrupt skip stopped the run")
  endif()
  expect("${METRICS}" skipped_samples 2)  # one training, one test record
  expect("${METRICS}" steps 8)
  foreach(split train val)
    if(NOT ERR MATCHES "\\(rank [01]\\): skipped bad sample 0: ${where_${split}}")
      message(FATAL_ERROR "the skipped ${split} record was not reported with its shard and offset")
    endif()
  endforeach()
  if(NOT OUT MATCHES "\\(2 bad samples skipped\\)")
    message(FATAL_ERROR "the epoch line does not count the skipped records")
  endif()

  train(reject --dataset packed --data-dir ${DATA}/packed)  # --corrupt reject: the default
  if(RC EQUAL 0 OR NOT ERR MATCHES "\\(rank [01]\\): error: ${where}")
    message(FATAL_ERROR "the damaged record did not stop the run naming its shard and offset")
  endif()
  # The other rank, whose data was sound, names the rank that stopped first and says
  # where to look, rather than only that Accord shut down.
  if(NOT ERR MATCHES "\\(rank [01]\\): error: [^\n]*shut down \\(rank [01] called shutdown\\(\\) or exited\\): it stopped first, and its own error line says why")
    message(FATAL_ERROR "the rank left behind did not point at the other's error")
  endif()
else()
  message(FATAL_ERROR "unknown MODE ${MODE}")
endif()
