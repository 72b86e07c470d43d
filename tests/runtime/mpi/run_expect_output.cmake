# Runs an mpirun job that must succeed and whose output must match every one of
# EXPECT_1 .. EXPECT_9 (regular expressions; numbered variables, because a list would
# be split into separate arguments on its way here), and not REJECT if given.
#   cmake -DMPIEXEC=... -DNP=2 -DEXE=... [-DPREFLAGS=a;b] [-DENV=NAME=VALUE|...]
#         -DEXPECT_1=regex [-DEXPECT_2=regex ...] [-DREJECT=regex] -P run_expect_output.cmake
foreach(var MPIEXEC NP EXE EXPECT_1)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_expect_output.cmake: -D${var}=... is required")
  endif()
endforeach()
string(REPLACE "|" ";" ENV "${ENV}")
# ENV goes to mpirun's own environment, which the ranks (all on this host) inherit, not
# through mpirun -x: Open MPI refuses -x beside mca_base_env_list (ci/sanitize.sh).
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env ${ENV} ${MPIEXEC} -np ${NP} ${PREFLAGS} ${EXE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
message("---- output ----\n${out}\n---- errors ----\n${err}")
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "FAILED: mpirun exited with '${rc}'")
endif()
foreach(i RANGE 1 9)
  if(DEFINED EXPECT_${i} AND NOT "${out}\n${err}" MATCHES "${EXPECT_${i}}")
    message(FATAL_ERROR "FAILED: nothing in the output matches '${EXPECT_${i}}'")
  endif()
endforeach()
if(DEFINED REJECT AND "${out}\n${err}" MATCHES "${REJECT}")
  message(FATAL_ERROR "FAILED: the output has '${CMAKE_MATCH_0}', which it must not")
endif()
message("PASSED")
