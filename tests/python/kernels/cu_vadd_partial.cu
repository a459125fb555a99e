// Broken: the last block is never launched, so the tail of out stays unwritten (poisoned).
#include <cuda_runtime.h>

__global__ void vadd_kernel(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}

extern "C" void solve(const float* x, const float* y, float* out, int N) {
    vadd_kernel<<<N / 256, 256>>>(x, y, out, N);
}
