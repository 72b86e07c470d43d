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
#   accuracy     the no-flag default (small ResNet, Fashion-MNIST, 2 ranks) >= 85%
#   device-resume  CPU checkpoint -> GPU -> CPU ends where the CPU alone does
#   device-equivalence  2 ranks x B on one GPU == 1 rank x 2B on the CPU, with the
#                batches copied ahead on their own stream or not
#   device-half-accuracy  the default in bf16 and in fp16 on one GPU >= 85%, as on the CPU
#   device-synthetic  synthetic batches built on the GPU == the same uploaded from the host
#                (fp32 and bf16);
#                --cudnn-search trains as the heuristics' algorithms do, --cudnn-fusion
#                as bf16 without it
#   device-graphs  --cuda-graphs == the same steps launched layer by layer (1 and 2
#                ranks, fp32 and fp16)
#   device-nccl  2 ranks sharing one GPU through NCCL == the same through MPI, bit for
#                bit (bf16 and fp32, layer by layer and graphed)
#   photos-*     JPEG folder and packed data, a damaged record (photos_mpi_check.cmake)
if(NOT TARGET accord-resnet)
  return()
endif()

set(ACCORD_TRAINER_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none)
set(ACCORD_TRAINER_WORK ${CMAKE_CURRENT_BINARY_DIR}/mpi_work)

function(accord_trainer_mpi_test mode timeout)
  add_test(NAME trainer.mpi.${mode}
           COMMAND ${CMAKE_COMMAND} -DMODE=${mode} "-DMPIRUN=${ACCORD_TRAINER_MPIRUN}"
                   -DTRAINER=$<TARGET_FILE:accord-resnet> -DWORK=${ACCORD_TRAINER_WORK}/${mode}
                   -DNCCL_ONE_GPU=${PROJECT_SOURCE_DIR}/ci/nccl-one-gpu.sh
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/trainer_mpi_check.cmake)
  # Ranks waiting in MPI yield the CPU: CI has 2 cores for 2 ranks plus helpers.
  set_tests_properties(trainer.mpi.${mode} PROPERTIES TIMEOUT ${timeout} LABELS "trainer;trainer-mpi"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1")
endfunction()

accord_trainer_mpi_test(equivalence 300)
accord_trainer_mpi_test(resume 300)
accord_trainer_mpi_test(resume-batch 300)
accord_trainer_mpi_test(nonfinite 300)
accord_trainer_mpi_test(bad-resume 120)
accord_trainer_mpi_test(accuracy 900)
# On the GPU, "skipped: no GPU" where there is none: CPU -> GPU -> CPU through
# checkpoints, and 2 ranks sharing one GPU (gradients as CUDA tensors through MPI).
accord_trainer_mpi_test(device-resume 300)
accord_trainer_mpi_test(device-equivalence 300)
accord_trainer_mpi_test(device-half-accuracy 600)
accord_trainer_mpi_test(device-synthetic 300)
accord_trainer_mpi_test(device-graphs 300)
accord_trainer_mpi_test(device-nccl 300)
set_tests_properties(trainer.mpi.device-resume trainer.mpi.device-equivalence
                     trainer.mpi.device-half-accuracy trainer.mpi.device-synthetic
                     trainer.mpi.device-graphs trainer.mpi.device-nccl PROPERTIES
                     LABELS "trainer;gpu" SKIP_REGULAR_EXPRESSION "skipped: no GPU")
# Where a GPU runs them side by side (ci/gpu-check.sh, ctest -j), the longest start first.
set_tests_properties(trainer.mpi.device-half-accuracy PROPERTIES COST 600)
set_tests_properties(trainer.mpi.device-resume trainer.mpi.device-equivalence
                     trainer.mpi.device-synthetic trainer.mpi.device-graphs
                     trainer.mpi.device-nccl PROPERTIES COST 300)
set_tests_properties(trainer.mpi.device-equivalence trainer.mpi.device-graphs PROPERTIES ENVIRONMENT
                     "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1;ACCORD_NCCL=0")

# The trainer on photos (photos_mpi_check.cmake): a JPEG folder, a packed set, and a
# damaged record skipped or rejected. They need the data tools.
if(TARGET accord-make-jpegs AND TARGET accord-pack)
  foreach(mode folder packed corrupt packed-gpu)
    add_test(NAME trainer.mpi.photos-${mode}
             COMMAND ${CMAKE_COMMAND} -DMODE=${mode} "-DMPIRUN=${ACCORD_TRAINER_MPIRUN}"
                     -DTRAINER=$<TARGET_FILE:accord-resnet>
                     -DMAKE_JPEGS=$<TARGET_FILE:accord-make-jpegs> -DPACK=$<TARGET_FILE:accord-pack>
                     -DWORK=${ACCORD_TRAINER_WORK}/photos-${mode}
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/photos_mpi_check.cmake)
    set_tests_properties(trainer.mpi.photos-${mode} PROPERTIES TIMEOUT 300
                         LABELS "trainer;trainer-mpi"
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1")
  endforeach()
  # Both ranks share one GPU: gradients through MPI (ACCORD_NCCL=0).
  set_tests_properties(trainer.mpi.photos-packed-gpu PROPERTIES LABELS "trainer;gpu"
                       SKIP_REGULAR_EXPRESSION "skipped: no GPU"
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1;ACCORD_NCCL=0")
endif()
