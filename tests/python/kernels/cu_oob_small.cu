// Broken in a way only compute-sanitizer sees: correct results, plus one thread writing one
// element past the end of out (into allocation padding, so nothing crashes).
#include <cuda_runtime.h>

__global__ void vadd_kernel(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
    if (i == 0) out[n] = 1.0f;
}

extern "C" void solve(const float* x, const float* y, float* out, int N) {
    vadd_kernel<<<(N + 255) / 256, 256>>>(x, y, out, N);
}
