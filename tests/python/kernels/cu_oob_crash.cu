// Broken: writes far outside the output buffer -> illegal memory access.
#include <cuda_runtime.h>

__global__ void bad_kernel(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i + (1LL << 36)] = x[i] + y[i];
}

extern "C" void solve(const float* x, const float* y, float* out, int N) {
    bad_kernel<<<(N + 255) / 256, 256>>>(x, y, out, N);
}
