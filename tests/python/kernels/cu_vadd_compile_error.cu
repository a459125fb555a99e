// Broken: does not compile.
extern "C" void solve(const float* x, const float* y, float* out, int N) {
    this_is_not_cuda(x, y, out, N);
}
