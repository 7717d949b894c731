/*
 * bench/gemm_shapes.c — sgemm rate of the GEMM-bound shapes of issue 23
 * item 3 (the MLP 784-500-10 products at batch 60 and 256, forward and both
 * backward products, and the 100x50x3000 output layer of the RNN grid) in
 * each BLAS this binary was linked with, one thread, side by side.
 *
 * Why a standalone program: it times the library alone, with no tgl in
 * between, so the figures say what the BLAS can do for the shape, and
 * bench/peers/gemm_jax.py times the same shapes through XLA.  Each library
 * is timed in turn for each shape (interleaved rounds), the figure is the
 * median of the rounds' GFLOP/s (per second of CPU time) with the min-max
 * spread.
 *
 *   cc -O2 bench/gemm_shapes.c -o gemm_shapes -lopenblas [-DWITH_BLIS -idirafter /usr/include/x86_64-linux-gnu/blis-pthread -lblis]
 *   taskset -c 0 ./gemm_shapes [rounds] [min_seconds]
 *
 * Row-major as tgl calls it: "NN" C = A B, "NT" C = A B^T, "TN" C = A^T B.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cblas.h>

extern void openblas_set_num_threads(int);

#ifdef WITH_BLIS
/* BLIS's own typed API (libblis-dev installs blis-pthread/blis.h, found with -idirafter; its CBLAS
 * shares the cblas_ names with OpenBLAS, so the BLIS path calls bli_sgemm
 * directly, which also takes row-major strides without a transpose). */
#include <blis.h>
#endif

typedef struct shape {
    const char *name;
    char ta, tb;
    int m, n, k;
} shape;

static const shape shapes[] = {
    {"mlp1 b60 fwd  X.W1", 'N', 'N', 60, 500, 784},
    {"mlp1 b60 dW1  X'.d", 'T', 'N', 784, 500, 60},
    {"mlp1 b60 dX   d.W1'", 'N', 'T', 60, 784, 500},
    {"mlp1 b60 fwd  H.W2", 'N', 'N', 60, 10, 500},
    {"mlp1 b60 dW2  H'.d", 'T', 'N', 500, 10, 60},
    {"mlp1 b60 dH   d.W2'", 'N', 'T', 60, 500, 10},
    {"mlp1 b256 fwd X.W1", 'N', 'N', 256, 500, 784},
    {"mlp1 b256 dW1 X'.d", 'T', 'N', 784, 500, 256},
    {"mlp1 b256 dX  d.W1'", 'N', 'T', 256, 784, 500},
    {"mlp1 b256 fwd H.W2", 'N', 'N', 256, 10, 500},
    {"mlp1 b256 dW2 H'.d", 'T', 'N', 500, 10, 256},
    {"mlp1 b256 dH  d.W2'", 'N', 'T', 256, 500, 10},
    {"rnn 100x50x3000 fwd", 'N', 'N', 100, 3000, 50},
    {"rnn 100x50x3000 dH", 'N', 'T', 100, 50, 3000},
    {"rnn 100x50x3000 dV", 'T', 'N', 50, 3000, 100},
};

/* The process's CPU time, not the wall clock: the machine is shared with
 * other builds, and CPU time leaves out the time this process waited for
 * a core (it still pays for caches the neighbours evict). */
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

typedef void (*gemm_fn)(const shape *s, const float *a, const float *b, float *c);

static void run_openblas(const shape *s, const float *a, const float *b, float *c)
{
    int lda = s->ta == 'N' ? s->k : s->m, ldb = s->tb == 'N' ? s->n : s->k;
    cblas_sgemm(CblasRowMajor, s->ta == 'N' ? CblasNoTrans : CblasTrans,
                s->tb == 'N' ? CblasNoTrans : CblasTrans, s->m, s->n, s->k, 1.0f, a, lda, b, ldb,
                0.0f, c, s->n);
}

#ifdef WITH_BLIS
static void run_blis(const shape *s, const float *a, const float *b, float *c)
{
    /* row-major: row stride = ld, column stride 1 */
    int lda = s->ta == 'N' ? s->k : s->m, ldb = s->tb == 'N' ? s->n : s->k;
    float one = 1.0f, zero = 0.0f;
    bli_sgemm(s->ta == 'N' ? BLIS_NO_TRANSPOSE : BLIS_TRANSPOSE,
              s->tb == 'N' ? BLIS_NO_TRANSPOSE : BLIS_TRANSPOSE, s->m, s->n, s->k, &one,
              (float *)a, lda, 1, (float *)b, ldb, 1, &zero, c, s->n, 1);
}
#endif

static int cmpd(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    double min_t = argc > 2 ? atof(argv[2]) : 0.1;
    openblas_set_num_threads(1);
#ifdef WITH_BLIS
    bli_thread_set_num_threads(1);
#endif
    struct { const char *name; gemm_fn f; } libs[] = {
        {"openblas", run_openblas},
#ifdef WITH_BLIS
        {"blis", run_blis},
#endif
    };
    int nlib = sizeof libs / sizeof libs[0];
    printf("shape,lib,m,n,k,gflops_median,gflops_min,gflops_max\n");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n, nc = (size_t)s->m * s->n;
        float *a = aligned_alloc(64, (na * 4 + 63) / 64 * 64);
        float *b = aligned_alloc(64, (nb * 4 + 63) / 64 * 64);
        float *c = aligned_alloc(64, (nc * 4 + 63) / 64 * 64);
        for (size_t i = 0; i < na; i++) a[i] = (float)rand() / RAND_MAX - 0.5f;
        for (size_t i = 0; i < nb; i++) b[i] = (float)rand() / RAND_MAX - 0.5f;
        double flop = 2.0 * s->m * s->n * s->k;
        double r[8][64];
        for (int l = 0; l < nlib; l++) libs[l].f(s, a, b, c); /* warm */
        for (int it = 0; it < rounds; it++)
            for (int l = 0; l < nlib; l++) {
                int n = 0;
                double t0 = now(), t;
                do {
                    libs[l].f(s, a, b, c);
                    n++;
                } while ((t = now() - t0) < min_t);
                r[l][it] = flop * n / t * 1e-9;
            }
        for (int l = 0; l < nlib; l++) {
            qsort(r[l], rounds, sizeof(double), cmpd);
            printf("%s,%s,%d,%d,%d,%.1f,%.1f,%.1f\n", s->name, libs[l].name, s->m, s->n, s->k,
                   r[l][rounds / 2], r[l][0], r[l][rounds - 1]);
        }
        fflush(stdout);
        free(a), free(b), free(c);
    }
    return 0;
}
