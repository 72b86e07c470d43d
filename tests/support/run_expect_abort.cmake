# Runs a job in which one rank dies, and passes when mpirun exits non-zero within
# LIMIT seconds (i.e. no surviving rank hangs) and, with EXPECT, when the output holds
# EXPECT_COUNT lines matching that regular expression (the survivors' own checks).
#   cmake -DMPIEXEC=... -DNP=2 -DEXE=... -DLIMIT=60 [-DPREFLAGS=a;b] [-DEXTRA_PREFLAGS=a;b]
#         [-DARGS=a;b]
#         [-DEXPECT=regex -DEXPECT_COUNT=n] [-DENV=NAME=VALUE;...] [-DANY_EXIT=1]
#         -P run_expect_abort.cmake
# ENV, ARGS and EXTRA_PREFLAGS separate their items with '|': CMake would split a ';' list
# passed through a function's ARGN into separate arguments.
# ANY_EXIT: mpirun's own exit status does not matter (with orte_abort_on_non_zero_status
# off it may report 0 although ranks failed); the markers are the verdict.
# `timeout` sends mpirun SIGTERM (which it forwards to the ranks) rather than leaving
# orphaned ranks behind; execute_process's own TIMEOUT is the backstop.
foreach(var MPIEXEC NP EXE LIMIT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_expect_abort.cmake: -D${var}=... is required")
  endif()
endforeach()

foreach(var ENV ARGS EXTRA_PREFLAGS)
  string(REPLACE "|" ";" ${var} "${${var}}")
endforeach()

string(TIMESTAMP t0 "%s")
# ENV goes to mpirun's own environment, which the ranks (all on this host) inherit, not
# through mpirun -x: Open MPI refuses -x beside mca_base_env_list (ci/sanitize.sh).
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env ${ENV}
          timeout --kill-after=10 ${LIMIT} ${MPIEXEC} -np ${NP} ${PREFLAGS} ${EXTRA_PREFLAGS} ${EXE} ${ARGS}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 600)
string(TIMESTAMP t1 "%s")
math(EXPR elapsed "${t1} - ${t0}")
message("---- output ----\n${out}\n---- errors ----\n${err}")
message("mpirun exited with '${rc}' after ${elapsed} s (limit ${LIMIT} s)")
# 124: `timeout` fired. (137 alone is ambiguous: mpirun also exits 128+9 when a rank
# died of SIGKILL, which is the expected case; hence the elapsed-time test.)
set(count "")
if(DEFINED EXPECT)
  string(REGEX MATCHALL "${EXPECT}" found "${out}\n${err}")
  list(LENGTH found count)
endif()
if(rc STREQUAL "124" OR rc MATCHES "timeout" OR elapsed GREATER_EQUAL LIMIT)
  set(reported "")
  if(DEFINED EXPECT)
    # Survivors that reported may be waiting for one that did not (a final barrier): the
    # one missing from the markers is the rank that hangs or died without a word.
    set(reported " (${count} of ${EXPECT_COUNT} lines match '${EXPECT}': a rank missing from them hangs or died silently)")
  endif()
  message(FATAL_ERROR "FAILED: the job did not end within ${LIMIT} s: a surviving rank hangs${reported}")
endif()
if(rc STREQUAL "0" AND NOT ANY_EXIT)
  message(FATAL_ERROR "FAILED: mpirun exited 0 although a rank was killed")
endif()
if(DEFINED EXPECT)
  if(NOT count EQUAL EXPECT_COUNT)
    message(FATAL_ERROR "FAILED: ${count} lines match '${EXPECT}', expected ${EXPECT_COUNT}")
  endif()
endif()
message("PASSED: the job ended (exit ${rc}) ${elapsed} s after it started")
