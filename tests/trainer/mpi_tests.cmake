# Trainer tests under mpirun (label `trainer-mpi`), each a short accord-resnet run or
# two driven by trainer_mpi_check.cmake:
#   equivalence  2 ranks x batch B == 1 rank x batch 2B after K steps (BN inference mode)
#   resume       a run interrupted mid-epoch and resumed == the uninterrupted run, and
#                its --metrics file holds each epoch once
#   resume-batch a checkpoint resumed at another global batch is refused on every rank;
#                the same global batch on other ranks resumes at the same sample
#   nonfinite    a NaN loss stops every rank naming the step, or with
#                --skip-nonfinite-steps leaves the model as it was
#   bad-resume   a truncated checkpoint stops every rank with a clear error, and a
#                --checkpoint or --dump-params that cannot be written, or two outputs in
#                one file, do so before training; a bad ACCORD_* setting is an error line
#   elastic-resume  a restarted elastic job resumes from its own commit, not --resume
#   threads      --threads and --data-workers beyond a rank's cores (bound by the
#                launcher) are cut to them and said, without oneTBB's warnings
#   accuracy     the no-flag default (small ResNet, Fashion-MNIST, 2 ranks) >= 85%
#   photos-*     JPEG folder and packed data, a damaged record (photos_mpi_check.cmake)
# The device-* modes, on a GPU, are registered in tests/trainer/gpu.
if(NOT TARGET accord-resnet)
  return()
endif()

# accord_trainer_mpi_test(<mode> <timeout>): trainer.mpi.<mode>, working in the calling
# folder's mpi_work/<mode>. Functions are global in CMake: tests/trainer/gpu registers
# its modes with this one and the next.
function(accord_trainer_mpi_test mode timeout)
  set(mpirun ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none)
  add_test(NAME trainer.mpi.${mode}
           COMMAND ${CMAKE_COMMAND} -DMODE=${mode} "-DMPIRUN=${mpirun}"
                   -DTRAINER=$<TARGET_FILE:accord-resnet>
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/mpi_work/${mode}
                   -DNCCL_ONE_GPU=${PROJECT_SOURCE_DIR}/ci/nccl-one-gpu.sh
                   -P ${PROJECT_SOURCE_DIR}/tests/trainer/trainer_mpi_check.cmake)
  # Ranks waiting in MPI yield the CPU: CI has 2 cores for 2 ranks plus helpers.
  set_tests_properties(trainer.mpi.${mode} PROPERTIES TIMEOUT ${timeout} LABELS "trainer;trainer-mpi"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1")
endfunction()

accord_trainer_mpi_test(equivalence 300)
accord_trainer_mpi_test(resume 300)
accord_trainer_mpi_test(resume-batch 300)
accord_trainer_mpi_test(nonfinite 300)
accord_trainer_mpi_test(bad-resume 120)
accord_trainer_mpi_test(threads 120)
accord_trainer_mpi_test(elastic-resume 120)
accord_trainer_mpi_test(accuracy 900)

# The trainer on photos (photos_mpi_check.cmake): a JPEG folder, a packed set, and a
# damaged record skipped or rejected. They need the data tools.
# accord_trainer_photos_test(<mode>): trainer.mpi.photos-<mode>, as above.
function(accord_trainer_photos_test mode)
  set(mpirun ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none)
  add_test(NAME trainer.mpi.photos-${mode}
           COMMAND ${CMAKE_COMMAND} -DMODE=${mode} "-DMPIRUN=${mpirun}"
                   -DTRAINER=$<TARGET_FILE:accord-resnet>
                   -DMAKE_JPEGS=$<TARGET_FILE:accord-make-jpegs> -DPACK=$<TARGET_FILE:accord-pack>
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/mpi_work/photos-${mode}
                   -P ${PROJECT_SOURCE_DIR}/tests/trainer/photos_mpi_check.cmake)
  set_tests_properties(trainer.mpi.photos-${mode} PROPERTIES TIMEOUT 300
                       LABELS "trainer;trainer-mpi"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1")
endfunction()
if(TARGET accord-make-jpegs AND TARGET accord-pack)
  foreach(mode folder packed corrupt)
    accord_trainer_photos_test(${mode})
  endforeach()
endif()
