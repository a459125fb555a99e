// Out-of-place transpose y[N][M] = x[M][N]^T, staged through a padded 32x33 shared-memory tile.
#include <cuda_runtime.h>

constexpr int TILE = 32;
constexpr int ROWS = 4;  // threads per block in y; each thread moves TILE / ROWS elements

__global__ void transpose_tiled(const float* __restrict__ x, float* __restrict__ y, int M, int N) {
    __shared__ float tile[TILE][TILE + 1];  // one padding column: a column read spans all 32 banks
    int col = blockIdx.x * TILE + threadIdx.x;  // index into N
    int row = blockIdx.y * TILE + threadIdx.y;  // index into M
    for (int j = 0; j < TILE; j += ROWS) {
        if (row + j < M && col < N) tile[threadIdx.y + j][threadIdx.x] = x[(size_t)(row + j) * N + col];
    }
    __syncthreads();
    int out_col = blockIdx.y * TILE + threadIdx.x;  // index into M
    int out_row = blockIdx.x * TILE + threadIdx.y;  // index into N
    for (int j = 0; j < TILE; j += ROWS) {
        if (out_row + j < N && out_col < M) y[(size_t)(out_row + j) * M + out_col] = tile[threadIdx.x][threadIdx.y + j];
    }
}

extern "C" void solve(const float* x, float* y, int M, int N) {
    dim3 block(TILE, ROWS);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    transpose_tiled<<<grid, block>>>(x, y, M, N);
}
