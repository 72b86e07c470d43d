# How accord-resnet --device cuda says there is no GPU to run on (no device, no driver,
# or a build without the GPU layers): the trainer scripts report "skipped: no GPU" then.
set(ACCORD_NO_GPU_ERROR "--device cuda: (no GPU that CUDA can use|this build has no GPU layers)")
