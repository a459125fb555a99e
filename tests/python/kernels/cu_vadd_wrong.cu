// Broken: subtracts instead of adding.
#include <cuda_runtime.h>

__global__ void vsub_kernel(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] - y[i];
}

extern "C" void solve(const float* x, const float* y, float* out, int N) {
    vsub_kernel<<<(N + 255) / 256, 256>>>(x, y, out, N);
}
