// Broken: spins forever.
#include <cuda_runtime.h>

__global__ void spin_kernel(const float* x, float* out, int n) {
    volatile const float* v = x;
    while (v[0] == v[0] || v[0] != v[0]) { }
    out[0] = 1.0f;
}

extern "C" void solve(const float* x, const float* y, float* out, int N) {
    spin_kernel<<<1, 1>>>(x, out, N);
}
