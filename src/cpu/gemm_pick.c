/*
 * gemm_pick.c — per-shape choice between OpenBLAS and BLIS for the CPU
 * backend's products, by a one-time measurement cached on disk
 * (gemm_pick.h says why).
 *
 * BLIS is reached through dlopen/dlsym of its typed API (bli_sgemm,
 * bli_dgemm), not its CBLAS: both libraries export cblas_sgemm, and
 * loading BLIS with RTLD_LOCAL keeps the process's CBLAS names bound to
 * OpenBLAS.  The typed API takes a row stride and a column stride per
 * operand, so row-major operands go in as they are.
 *
 * The measurement: scratch operands of the shape (contiguous, the same
 * transposes), each library run in turn for ROUNDS rounds (the order
 * alternating between rounds), each round enough calls to take ~0.2 ms
 * of this thread's CPU time (CPU time, not the wall clock: the machine may
 * be shared, and waiting for a core is not the library's cost).  BLIS is
 * chosen when its fastest round is at least MARGIN faster than
 * OpenBLAS's, so noise leaves the default (OpenBLAS) in place.  A shape
 * whose operands take more than SCRATCH_L2 times the L2 cache, or whose
 * one call takes more than HUGE_NS, is not measured (OpenBLAS; recorded
 * with times 0 0 when not timed at all).  The result is appended to
 * <cache dir>/gemm-pick-<key>.txt, one line per shape:
 *     <dtype> <ta> <tb> <m> <n> <k> <openblas|blis> <ns openblas> <ns blis>
 * where key hashes the CPU model and flags (the kernel cache's target)
 * and both libraries' versions, so another machine or library measures
 * afresh.  The table in memory is an open-addressing hash under a mutex
 * (a product is microseconds at the least; the lookup tens of ns).
 */
#include "cpu/gemm_pick.h"
#include "cgen/cgint.h"
#include "engine/engine.h"
#include "engine/tune.h"
#include "tgl.h"

#include <cblas.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char *openblas_get_config(void);

/* ---- BLIS through dlopen ------------------------------------------------ */

/* BLIS 0.9's types on LP64 (blis.h: dim_t and inc_t are 64-bit, trans_t
 * an enum with BLIS_NO_TRANSPOSE = 0 and BLIS_TRANSPOSE = 8). */
typedef int64_t bli_dim;
enum { BLI_NO_TRANSPOSE = 0, BLI_TRANSPOSE = 8 };
typedef void (*bli_sgemm_fn)(int, int, bli_dim, bli_dim, bli_dim, const float *, const float *,
                             bli_dim, bli_dim, const float *, bli_dim, bli_dim, const float *,
                             float *, bli_dim, bli_dim);
typedef void (*bli_dgemm_fn)(int, int, bli_dim, bli_dim, bli_dim, const double *,
                             const double *, bli_dim, bli_dim, const double *, bli_dim, bli_dim,
                             const double *, double *, bli_dim, bli_dim);

static struct {
    pthread_once_t once;
    bool loaded;
    bli_sgemm_fn sgemm;
    bli_dgemm_fn dgemm;
    char version[64], arch[32], why[160];
} blis = {PTHREAD_ONCE_INIT, false, NULL, NULL, "", "", ""};

#ifndef TGL_BLIS_SONAME
#define TGL_BLIS_SONAME "libblis.so.4"
#endif

/* The library: $TGL_BLIS_LIB when set (a path or a soname; "" never loads
 * BLIS), else the build's TGL_BLIS_SONAME ("" with TGL_BLIS=OFF, and in
 * sanitizer builds: gcc 12's LeakSanitizer crashes at exit scanning the
 * dynamic TLS that a dlopen'd BLIS gives the pool's threads). */
static void blis_load(void)
{
    const char *env = getenv("TGL_BLIS_LIB");
    const char *name = env ? env : TGL_BLIS_SONAME;
    if (!*name) {
        snprintf(blis.why, sizeof blis.why, "BLIS not used (%s)",
                 env ? "TGL_BLIS_LIB is empty" : "built with TGL_BLIS=OFF or a sanitizer");
        return;
    }
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(blis.why, sizeof blis.why, "BLIS not found (%s)", name);
        return;
    }
    blis.sgemm = (bli_sgemm_fn)dlsym(h, "bli_sgemm");
    blis.dgemm = (bli_dgemm_fn)dlsym(h, "bli_dgemm");
    char *(*version)(void) = (char *(*)(void))dlsym(h, "bli_info_get_version_str");
    int (*arch_id)(void) = (int (*)(void))dlsym(h, "bli_arch_query_id");
    char *(*arch_str)(int) = (char *(*)(int))dlsym(h, "bli_arch_string");
    void (*threads)(bli_dim) = (void (*)(bli_dim))dlsym(h, "bli_thread_set_num_threads");
    if (!blis.sgemm || !blis.dgemm || !version || !threads) {
        snprintf(blis.why, sizeof blis.why, "BLIS not used (%s lacks bli_sgemm/bli_dgemm)",
                 name);
        dlclose(h);
        return;
    }
    /* one thread per call, as OpenBLAS: tgl splits large products itself */
    threads(1);
    snprintf(blis.version, sizeof blis.version, "%s", version());
    if (arch_id && arch_str)
        snprintf(blis.arch, sizeof blis.arch, "%s", arch_str(arch_id()));
    blis.loaded = true; /* the handle stays open for the process's life */
}

bool tgl_gemm_blis_loaded(void)
{
    pthread_once(&blis.once, blis_load);
    return blis.loaded;
}

static CBLAS_TRANSPOSE op(bool t)
{
    return t ? CblasTrans : CblasNoTrans;
}

void tgl_gemm_run(tgl_gemm_lib lib, int dtype, bool ta, bool tb, int m, int n, int k,
                  double alpha, const void *a, int lda, const void *b, int ldb, double beta,
                  void *c, int ldc)
{
    if (lib == TGL_GEMM_BLIS) {
        /* row-major: row stride ld, column stride 1, transposes as given */
        int bta = ta ? BLI_TRANSPOSE : BLI_NO_TRANSPOSE, btb = tb ? BLI_TRANSPOSE : BLI_NO_TRANSPOSE;
        if (dtype == TGL_FLOAT32) {
            float al = (float)alpha, be = (float)beta;
            blis.sgemm(bta, btb, m, n, k, &al, a, lda, 1, b, ldb, 1, &be, c, ldc, 1);
        } else
            blis.dgemm(bta, btb, m, n, k, &alpha, a, lda, 1, b, ldb, 1, &beta, c, ldc, 1);
        return;
    }
    if (dtype == TGL_FLOAT32)
        cblas_sgemm(CblasRowMajor, op(ta), op(tb), m, n, k, (float)alpha, a, lda, b, ldb,
                    (float)beta, c, ldc);
    else
        cblas_dgemm(CblasRowMajor, op(ta), op(tb), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ---- the table of choices ------------------------------------------------ */

/* One measured shape.  nblocks 0: the library choice (lib is a
 * tgl_gemm_lib); nblocks >= 2: the split choice for that many blocks (lib
 * is 1 when splitting pays, 0 when not, 2 while being measured). */
typedef struct pick {
    int32_t m, n, k, nblocks;
    uint8_t used, dtype, ta, tb, acc, lib;
} pick;

enum { SPLIT_NO = 0, SPLIT_YES = 1, SPLIT_PENDING = 2 };

#define ROUNDS 5
#define LONG_NS 5e6      /* a call this long: 3 rounds                      */
#define HUGE_NS 2e7      /* this long: not measured, OpenBLAS (both libraries
                          * run such products at their peak; measuring would
                          * cost seconds) */
#define MARGIN 0.95      /* BLIS's time at most this x OpenBLAS's        */
#define ROUND_NS 200000  /* CPU time per round and library, at least      */
#define MAX_CALLS 64     /* calls per round, at most (the smallest shapes)  */
#define SCRATCH_L2 16    /* operands of at most this many L2 caches measured */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pick *table;
static size_t cap, count;
static bool loaded_file;
static int forced = -2; /* -2: TGL_BLAS_PICK not read yet; -1 auto */
static char path[1200];

static uint64_t fnv(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static size_t slot(int dtype, bool ta, bool tb, bool acc, int m, int n, int k, int nblocks)
{
    uint64_t h = 1469598103934665603ull;
    int64_t v[8] = {dtype, ta, tb, acc, m, n, k, nblocks};
    for (int i = 0; i < 8; i++)
        h = (h ^ (uint64_t)v[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

static pick *find(int dtype, bool ta, bool tb, bool acc, int m, int n, int k, int nblocks,
                  bool *fresh)
{
    if (count + 1 > cap / 2) {
        size_t ncap = cap ? cap * 2 : 256;
        pick *nt = calloc(ncap, sizeof *nt);
        if (!nt)
            return NULL;
        for (size_t i = 0; i < cap; i++)
            if (table[i].used) {
                size_t s = slot(table[i].dtype, table[i].ta, table[i].tb, table[i].acc,
                                table[i].m, table[i].n, table[i].k, table[i].nblocks);
                while (nt[s & (ncap - 1)].used)
                    s++;
                nt[s & (ncap - 1)] = table[i];
            }
        free(table);
        table = nt, cap = ncap;
    }
    for (size_t s = slot(dtype, ta, tb, acc, m, n, k, nblocks);; s++) {
        pick *p = &table[s & (cap - 1)];
        if (!p->used) {
            *p = (pick){m, n, k, nblocks, 1, (uint8_t)dtype, ta, tb, acc, TGL_GEMM_OPENBLAS};
            count++;
            *fresh = true;
            return p;
        }
        if (p->m == m && p->n == n && p->k == k && p->dtype == dtype && p->ta == ta &&
            p->tb == tb && p->acc == acc && p->nblocks == nblocks) {
            *fresh = false;
            return p;
        }
    }
}

/* The cache file's name: <dir>/gemm-pick-<16 hex>.txt, or "" when there
 * is no cache directory (the directory is made at the first save, so
 * `tgl -v` changes nothing on disk).  The directory is $TGL_CACHE_DIR or
 * ~/.cache/tgl: the products do not see tgl.config.cache_dir.  The key
 * names the file's format and the split measurement too ("v5": the
 * accumulate flag and the split choices, measured with warm operands), so
 * a file of an earlier format or measurement is left alone. */
static void make_path(void)
{
    char dir[1024];
    if (tgl_cache_dir_name(NULL, dir, sizeof dir) != 0) {
        path[0] = 0;
        return;
    }
    uint64_t h = fnv(1469598103934665603ull, tgl_cache_host_target());
    h = fnv(h, openblas_get_config());
    h = fnv(h, blis.version);
    h = fnv(h, blis.arch);
    h = fnv(h, "v5");
    snprintf(path, sizeof path, "%s/gemm-pick-%016llx.txt", dir, (unsigned long long)h);
}

/* Reads the cache file's lines
 *     <dtype> <ta> <tb> <acc> <m> <n> <k> <blocks> <choice> <ns> <ns>
 * into the table: blocks 0 is a library choice (openblas|blis), blocks
 * >= 2 a split choice (one|split).  Lines that do not parse (the header,
 * a line a crash cut short, garbage) are skipped. */
static void load_file(void)
{
    loaded_file = true;
    /* the key names BLIS's version: load it first (the split choice may
     * come before any library choice, and without this it keyed its file
     * as if BLIS were absent, a second file beside the library choices') */
    tgl_gemm_blis_loaded();
    make_path();
    FILE *f = path[0] ? fopen(path, "r") : NULL;
    if (!f)
        return;
    char line[256], word[16];
    int dt, ta, tb, acc, m, n, k, nb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%d %d %d %d %d %d %d %d %15s", &dt, &ta, &tb, &acc, &m, &n, &k, &nb,
                   word) != 9)
            continue;
        if ((dt != TGL_FLOAT32 && dt != TGL_FLOAT64) || m < 0 || n < 0 || k < 0 || nb < 0 ||
            nb == 1)
            continue;
        bool fresh;
        pick *p = find(dt, ta != 0, tb != 0, acc != 0, m, n, k, nb, &fresh);
        if (!p)
            break;
        if (nb > 0)
            p->lib = strcmp(word, "split") == 0 ? SPLIT_YES : SPLIT_NO;
        else
            p->lib = strcmp(word, "blis") == 0 ? TGL_GEMM_BLIS : TGL_GEMM_OPENBLAS;
    }
    fclose(f);
}

/* Appends p's line to the cache file (the header first when the file is
 * new): its choice and the two times measured. */
static void save(const pick *p, double ns0, double ns1)
{
    char dir[1024];
    if (!path[0] || tgl_cache_dir(NULL, dir, sizeof dir) != 0)
        return;
    /* O_APPEND: lines from concurrent processes do not interleave */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    char line[300];
    int len = 0;
    if (lseek(fd, 0, SEEK_END) == 0)
        len = snprintf(line, sizeof line,
                       "# tgl gemm pick: dtype ta tb acc m n k blocks choice ns ns: blocks 0 "
                       "openblas|blis ns_openblas ns_blis, else one|split ns_one ns_split "
                       "(%s; BLIS %s %s)\n",
                       openblas_get_config(), blis.version, blis.arch);
    if (len > 0 && len < (int)sizeof line && write(fd, line, (size_t)len) != len) {
        close(fd);
        return;
    }
    const char *choice = p->nblocks > 0 ? (p->lib == SPLIT_YES ? "split" : "one")
                                        : (p->lib == TGL_GEMM_BLIS ? "blis" : "openblas");
    len = snprintf(line, sizeof line, "%d %d %d %d %d %d %d %d %s %.0f %.0f\n", p->dtype, p->ta,
                   p->tb, p->acc, p->m, p->n, p->k, p->nblocks, choice, ns0, ns1);
    if (len > 0 && len < (int)sizeof line && write(fd, line, (size_t)len) != len) {
        /* a short write leaves a cut line, which load_file skips */
    }
    close(fd);
}

static double cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return 1e9 * (double)t.tv_sec + (double)t.tv_nsec;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Fills scratch operands of p's shape (contiguous) with small values of
 * both signs and no denormals, and c too when the product accumulates
 * into it: written by the calling thread, so their cache lines are this
 * core's, as a step's products read what its previous kernels wrote. */
static void scratch_fill(const pick *p, char *a, char *b, char *c)
{
    size_t es = p->dtype == TGL_FLOAT32 ? 4 : 8;
    size_t na = (size_t)p->m * p->k, nb = (size_t)p->k * p->n;
    if (p->acc) {
        for (size_t i = 0, nc = (size_t)p->m * p->n; i < nc; i++)
            if (es == 4)
                ((float *)c)[i] = (float)((int)(i % 3) - 1) * 0.5f;
            else
                ((double *)c)[i] = (double)((int)(i % 3) - 1) * 0.5;
    }
    for (size_t i = 0; i < na; i++)
        if (es == 4)
            ((float *)a)[i] = (float)((int)(i % 7) - 3) * 0.125f;
        else
            ((double *)a)[i] = (double)((int)(i % 7) - 3) * 0.125;
    for (size_t i = 0; i < nb; i++)
        if (es == 4)
            ((float *)b)[i] = (float)((int)(i % 5) - 2) * 0.25f;
        else
            ((double *)b)[i] = (double)((int)(i % 5) - 2) * 0.25;
}

/* Allocates and fills them (c zeroed); false when out of memory. */
static bool scratch_new(const pick *p, char **a, char **b, char **c)
{
    size_t es = p->dtype == TGL_FLOAT32 ? 4 : 8;
    *a = malloc((size_t)p->m * p->k * es + 1);
    *b = malloc((size_t)p->k * p->n * es + 1);
    *c = calloc((size_t)p->m * p->n + 1, es);
    if (!*a || !*b || !*c) {
        free(*a), free(*b), free(*c);
        return false;
    }
    scratch_fill(p, *a, *b, *c);
    return true;
}

/* Times both libraries on scratch operands of the shape; sets p->lib. */
static void measure(pick *p)
{
    int m = p->m, n = p->n, k = p->k;
    size_t es = p->dtype == TGL_FLOAT32 ? 4 : 8;
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    /* Operands far past the caches: not measured, OpenBLAS.  Both
     * libraries run such products at their peak, and the scratch would
     * raise the process's peak memory by the operands' size (a user's
     * memory budget sees it) for no gain. */
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    size_t limit = (size_t)(l2 > 0 ? l2 : 512 * 1024) * SCRATCH_L2;
    if ((na + nb + nc) * es > limit) {
        save(p, 0, 0);
        return;
    }
    char *a, *b, *c;
    if (!scratch_new(p, &a, &b, &c))
        return;
    int lda = p->ta ? m : k, ldb = p->tb ? k : n;
    double beta = p->acc ? 1.0 : 0.0;
    /* calls per round: enough for ROUND_NS, from one warm call of each */
    double t0 = cpu_ns();
    tgl_gemm_run(TGL_GEMM_OPENBLAS, p->dtype, p->ta, p->tb, m, n, k, 1.0, a, lda, b, ldb, beta,
                 c, n);
    tgl_gemm_run(TGL_GEMM_BLIS, p->dtype, p->ta, p->tb, m, n, k, 1.0, a, lda, b, ldb, beta, c,
                 n);
    double one = (cpu_ns() - t0) / 2;
    if (one > HUGE_NS) {
        free(a), free(b), free(c);
        save(p, one, one);
        return;
    }
    int calls = one > 0 ? (int)(ROUND_NS / one) + 1 : MAX_CALLS;
    if (calls > MAX_CALLS)
        calls = MAX_CALLS;
    int rounds = one > LONG_NS ? 3 : ROUNDS;
    double t[2][ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < 2; i++) {
            tgl_gemm_lib lib = (tgl_gemm_lib)((i + r) & 1);
            double sum = 0;
            for (int q = 0; q < calls; q++) {
                scratch_fill(p, a, b, c);
                double s = cpu_ns();
                tgl_gemm_run(lib, p->dtype, p->ta, p->tb, m, n, k, 1.0, a, lda, b, ldb, beta, c,
                             n);
                sum += cpu_ns() - s;
            }
            t[lib][r] = sum / calls;
        }
    free(a), free(b), free(c);
    /* the fastest round of each: other work on the machine only ever adds
     * time (cache misses, a shared core), so the minimum is the closest to
     * the library's own cost */
    qsort(t[0], (size_t)rounds, sizeof(double), cmp_double);
    qsort(t[1], (size_t)rounds, sizeof(double), cmp_double);
    double open_ns = t[0][0], blis_ns = t[1][0];
    p->lib = blis_ns <= MARGIN * open_ns ? TGL_GEMM_BLIS : TGL_GEMM_OPENBLAS;
    save(p, open_ns, blis_ns);
}

/* ---- the split choice --------------------------------------------------- */

#define SPLIT_REPS 15    /* timed calls of each way                        */
/* The split is kept unless its median is more than SPLIT_MARGIN times the
 * whole call's: the measurement is the split's worst case (the worker
 * asleep at every call; in a step it is often awake from the previous
 * kernel), and near a tie a step gains from the split (2-core AMD EPYC:
 * 10x500x784 measured 101 us whole, 97-86 us split, and the MLP at batch
 * 10 ran 42k examples/s whole, 57k split; logreg at batch 256, whose
 * 256x10x784 measured 101 against 103 us, ran 0.90M examples/s with its
 * products whole and 1.08M with it split), while a clear loss stays one
 * (the RNN's 50x50x100, 7 against 12 us). */
#define SPLIT_MARGIN 1.1

/* Reads c (as the product's consumer would, from this thread): one
 * element of every cache line, into a volatile so the reads stay. */
static volatile double sink;

static void consume(const pick *p, const char *c)
{
    size_t bytes = (size_t)p->m * p->n * (p->dtype == TGL_FLOAT32 ? 4 : 8);
    double s = 0;
    for (size_t i = 0; i < bytes; i += 64)
        s += (double)c[i];
    sink = s;
}

/* Times the product one call on this thread against split over the pool,
 * as it runs inside a step: before every timed call this thread waits
 * until the pool's workers have stopped watching for work and sleep
 * (pool.h: they watch pool.spin_ns after a run), so the split pays its
 * wake-up, and the timed call ends when this thread has read the whole
 * result (the next kernel's reads: a block the worker wrote comes from its
 * core).  The operands stay where the previous calls left them, as a
 * step's weights do from one step to the next.  The two ways alternate;
 * medians of SPLIT_REPS.  (Measured in a tight loop with the worker
 * awake, as blas.split_gemm is on cubes, the split won for the RNN
 * grid's 50x50x100 weight gradient, which runs after a long
 * single-threaded loop and took 12 us whole and 22 us split in a step.
 * Writing the operands afresh from this thread before each call, as a
 * first version did, made the split lose even where a step gains from it:
 * a 10x500x784 product, the MLP 784-500-10 at batch 10.)  Returns
 * SPLIT_YES or SPLIT_NO and the medians. */
static int measure_split(const pick *p, tgl_gemm_split_fn run, void *arg, double ns[2])
{
    char *a, *b, *c;
    ns[0] = ns[1] = 0;
    /* operands far past the caches: a product that streams memory, which
     * two cores do faster; no scratch of that size just to measure */
    size_t es = p->dtype == TGL_FLOAT32 ? 4 : 8;
    size_t bytes = ((size_t)p->m * p->k + (size_t)p->k * p->n + (size_t)p->m * p->n) * es;
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (bytes > (size_t)(l2 > 0 ? l2 : 512 * 1024) * SCRATCH_L2)
        return SPLIT_YES;
    if (!scratch_new(p, &a, &b, &c))
        return SPLIT_NO;
    uint64_t quiet = (uint64_t)tgl_tune_get(TGL_TUNE_POOL_SPIN_NS) * 3 / 2 + 20000;
    double t[2][SPLIT_REPS];
    run(arg, false, a, b, c); /* warm: code, pages, the pool's threads */
    run(arg, true, a, b, c);
    uint64_t last_split = tgl_now_ns();
    for (int r = 0; r < SPLIT_REPS; r++)
        for (int i = 0; i < 2; i++) {
            bool split = ((i + r) & 1) != 0;
            while (tgl_now_ns() - last_split < quiet) {
            }
            uint64_t t0 = tgl_now_ns();
            run(arg, split, a, b, c);
            consume(p, c);
            uint64_t t1 = tgl_now_ns();
            t[split][r] = (double)(t1 - t0);
            if (split)
                last_split = t1;
        }
    free(a), free(b), free(c);
    qsort(t[0], SPLIT_REPS, sizeof(double), cmp_double);
    qsort(t[1], SPLIT_REPS, sizeof(double), cmp_double);
    ns[0] = t[0][SPLIT_REPS / 2], ns[1] = t[1][SPLIT_REPS / 2];
    return ns[1] <= SPLIT_MARGIN * ns[0] ? SPLIT_YES : SPLIT_NO;
}

bool tgl_gemm_split_pays(int dtype, bool ta, bool tb, bool acc, int m, int n, int k,
                         int nblocks, tgl_gemm_split_fn run, void *arg)
{
    if (m <= 0 || n <= 0 || k <= 0 || nblocks < 2 ||
        (dtype != TGL_FLOAT32 && dtype != TGL_FLOAT64))
        return false;
    pthread_mutex_lock(&lock);
    if (!loaded_file)
        load_file();
    bool fresh = false;
    pick *p = find(dtype, ta, tb, acc, m, n, k, nblocks, &fresh);
    if (!p || (!fresh && p->lib != SPLIT_PENDING)) {
        bool pays = p && p->lib == SPLIT_YES;
        pthread_mutex_unlock(&lock);
        return pays;
    }
    if (!fresh || !run) { /* being measured by another thread, or a lookup
                             only: one call meanwhile */
        if (fresh)
            p->lib = SPLIT_NO;
        pthread_mutex_unlock(&lock);
        return false;
    }
    p->lib = SPLIT_PENDING;
    pick shape = *p;
    /* measured without the lock: the run picks each block's library */
    pthread_mutex_unlock(&lock);
    double ns[2];
    int got = measure_split(&shape, run, arg, ns);
    pthread_mutex_lock(&lock);
    p = find(dtype, ta, tb, acc, m, n, k, nblocks, &fresh);
    if (p) {
        p->lib = (uint8_t)got;
        save(p, ns[0], ns[1]);
    }
    pthread_mutex_unlock(&lock);
    return got == SPLIT_YES;
}

static void read_env(void)
{
    const char *e = getenv("TGL_BLAS_PICK");
    forced = -1;
    if (e && strcmp(e, "openblas") == 0)
        forced = TGL_GEMM_OPENBLAS;
    else if (e && strcmp(e, "blis") == 0)
        forced = TGL_GEMM_BLIS;
}

tgl_gemm_lib tgl_gemm_pick(int dtype, bool ta, bool tb, bool acc, int m, int n, int k)
{
    /* empty products and unknown dtypes stay with OpenBLAS (whose handling
     * of k == 0, beta scaling only, the backend's tests pin down) */
    if (m <= 0 || n <= 0 || k <= 0 || (dtype != TGL_FLOAT32 && dtype != TGL_FLOAT64) ||
        !tgl_gemm_blis_loaded())
        return TGL_GEMM_OPENBLAS;
    pthread_mutex_lock(&lock);
    if (forced == -2)
        read_env();
    if (forced >= 0) {
        tgl_gemm_lib lib = (tgl_gemm_lib)forced;
        pthread_mutex_unlock(&lock);
        return lib;
    }
    if (!loaded_file)
        load_file();
    bool fresh = false;
    pick *p = find(dtype, ta, tb, acc, m, n, k, 0, &fresh);
    if (p && fresh)
        measure(p);
    tgl_gemm_lib lib = p ? (tgl_gemm_lib)p->lib : TGL_GEMM_OPENBLAS;
    pthread_mutex_unlock(&lock);
    return lib;
}

void tgl_gemm_pick_force(int lib)
{
    pthread_mutex_lock(&lock);
    forced = lib == TGL_GEMM_BLIS && !tgl_gemm_blis_loaded() ? TGL_GEMM_OPENBLAS
             : lib < 0                                       ? -1
                                                             : lib;
    pthread_mutex_unlock(&lock);
}

const char *tgl_gemm_pick_info(void)
{
    static char info[1600];
    if (!tgl_gemm_blis_loaded())
        return blis.why;
    pthread_mutex_lock(&lock);
    if (forced == -2)
        read_env();
    if (!loaded_file && forced < 0)
        load_file();
    size_t n_blis = 0, n_shapes = 0;
    for (size_t i = 0; i < cap; i++)
        if (table[i].used && table[i].nblocks == 0) {
            n_shapes++;
            n_blis += table[i].lib == TGL_GEMM_BLIS;
        }
    if (forced >= 0)
        snprintf(info, sizeof info, "BLIS %s (%s): every product on %s (TGL_BLAS_PICK)",
                 blis.version, blis.arch, forced == TGL_GEMM_BLIS ? "BLIS" : "OpenBLAS");
    else
        snprintf(info, sizeof info,
                 "BLIS %s (%s): chosen per product shape by measurement, %zu of %zu shapes "
                 "on BLIS (%s)",
                 blis.version, blis.arch, n_blis, n_shapes, path[0] ? path : "no cache dir");
    pthread_mutex_unlock(&lock);
    return info;
}
