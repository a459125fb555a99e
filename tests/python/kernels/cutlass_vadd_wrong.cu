// Broken CuTe vector add: subtracts instead of adding (correctness must FAIL it).
#include <cute/tensor.hpp>

__global__ void cute_add_kernel(const float* x, const float* y, float* out, int n) {
    using namespace cute;
    Tensor gx = make_tensor(make_gmem_ptr(x), make_layout(n));
    Tensor gy = make_tensor(make_gmem_ptr(y), make_layout(n));
    Tensor go = make_tensor(make_gmem_ptr(out), make_layout(n));
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) go(i) = gx(i) - gy(i);  // planted bug: subtracts
}

extern "C" void solve(const float* x, const float* y, float* out, int N) {
    cute_add_kernel<<<(N + 255) / 256, 256>>>(x, y, out, N);
}
