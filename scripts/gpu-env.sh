# scripts/gpu-env.sh: sourced first by every script that runs on the GPU machine (gpu-check, gpu-matrix,
# gpu-ab, gpu-ncu): NVLink multicast stays off in NCCL, PyTorch and NVSHMEM on every kind (the device
# notes: a program that uses it can take a shared host's GPUs out of service), also for the children
# and ranks these scripts start.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
