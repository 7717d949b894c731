/*
 * drv_emu.c — the emulated GPU (tgl_cuda_driver_emu, "emu"): the CUDA
 * driver table (cuda_int.h) on the host, so the whole CUDA backend, its
 * host logic and its kernel sources, runs and is tested on machines
 * without a GPU (TGL_CUDA_EMU=1; doc/cuda.md: for tests only).
 *
 *   memory    device memory is host memory (256-byte aligned, new blocks
 *             filled with 0xff bytes, a NaN in every float dtype, so a
 *             kernel that reads what nobody wrote shows it); copies and
 *             memsets are plain and synchronous.
 *   modules   a source is compiled by the host C++ compiler ($TGL_CUDA_EMU_CXX,
 *             else c++, g++ or clang++ from PATH) after
 *             kernels/emu_prelude.h, into a shared object: the image is
 *             its bytes; loading writes them to a temporary file and
 *             dlopens it.  Under AddressSanitizer the objects are
 *             instrumented too (TGL_CUDA_EMU_SANITIZE=0: not), so a kernel
 *             reading out of bounds is reported where it does.  With GCC
 *             the prelude is precompiled once (a header and its .gch in
 *             $TMPDIR/tgl-emu-pch-<uid>/; TGL_CUDA_EMU_PCH=0: not), which
 *             halves a small kernel's compile.
 *   launches  blocks one after another on the calling thread, each thread
 *             of a block a coroutine with its own stack that switches only
 *             at __syncthreads, __syncwarp and the warp-wide calls; a warp
 *             whose lanes do not all reach the same warp-wide call is an
 *             error naming the kernel (never a hang).
 *             To keep the tests fast the geometry shrinks: blockDim.x to
 *             at most 64 and the grid to at most 4 blocks per dimension.
 *             The kernel rules (cuda_int.h: any blockDim multiple of 32 and
 *             any grid give the same result) promise the same result; it
 *             also exercises the kernels' grid-stride paths.
 *             TGL_CUDA_EMU_FULL=1 runs the geometry as given.
 *   BLAS      the CPU backend's entries (tgl_backend_get(TGL_DEVICE_CPU));
 *             tf32 is ignored.
 *   graphs    between capture_begin and capture_end, launches, device to
 *             device copies, memsets and BLAS calls are recorded, their
 *             parameters copied by value as CUDA does, and replayed by
 *             graph_launch; a copy to or from the host, or a synchronize,
 *             during a capture is an error, and the capture fails.
 */
#include "cuda/cuda_int.h"

#define TGL_EMU_ABI_ONLY
#include "cuda/kernels/emu_prelude.h"
#include "cuda_text_emu_prelude_h.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifndef EMU_ASAN
#define EMU_ASAN 0
#endif
#if EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

extern char **environ;

/* ---- coroutines ------------------------------------------------------------ */

/* A kernel thread's stack (instrumented frames are larger under ASan),
 * below it a guard page. */
#define STACK_BYTES ((size_t)(EMU_ASAN ? 512 : 128) * 1024)

#if defined(__x86_64__)
/* The switch saves the registers the System V ABI says a call preserves
 * (rbx, rbp, r12-r15) on the old stack, stores the stack pointer and loads
 * the new one: a few nanoseconds, where swapcontext makes a system call
 * (the signal mask) at every switch.  The SSE and x87 control words are
 * not switched (saving them doubled the cost): nothing in a kernel or in
 * the scheduler changes the rounding mode, and all threads run with the
 * launching thread's. */
#define EMU_ASM_SWITCH 1
__attribute__((visibility("hidden"))) void tgl_emu_swap(void **save_sp, void *to_sp);
__attribute__((visibility("hidden"))) void tgl_emu_start(void);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl tgl_emu_swap\n"
        ".hidden tgl_emu_swap\n"
        ".type tgl_emu_swap,@function\n"
        "tgl_emu_swap:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size tgl_emu_swap, .-tgl_emu_swap\n"
        /* A fresh thread's first switch returns here: r12 = its argument,
         * r13 = its function, which never returns. */
        ".p2align 4\n"
        ".globl tgl_emu_start\n"
        ".hidden tgl_emu_start\n"
        ".type tgl_emu_start,@function\n"
        "tgl_emu_start:\n"
        "    movq %r12, %rdi\n"
        "    callq *%r13\n"
        "    ud2\n"
        ".size tgl_emu_start, .-tgl_emu_start\n");
#else
#define EMU_ASM_SWITCH 0
#include <ucontext.h>
#endif

enum { T_RUN, T_AT_BLOCK, T_AT_WARP, T_DONE };

typedef struct emu_thread {
    tgl_emu_dim3 idx;              /* threadIdx                           */
    int state;                     /* T_*                                 */
    unsigned warp_calls;           /* warp-wide calls so far: slot parity */
    unsigned long long slot[2];    /* the value posted to a warp-wide call */
    char *stack;                   /* STACK_BYTES, above a guard page     */
    size_t top;                    /* where its frames start: staggered   */
    bool dirty;                    /* abandoned mid-kernel (ASan: frames) */
#if EMU_ASM_SWITCH
    void *sp;
#else
    ucontext_t uc;
#endif
#if EMU_ASAN
    void *fake;
#endif
} emu_thread;

struct tgl_cuda_func {
    struct tgl_cuda_func *next;
    void (*fn)(void **);
    const unsigned long long *psizes; /* NULL: the object has none        */
    char symbol[];
};

struct tgl_cuda_module {
    void *dl;
    tgl_cuda_func *funcs;
    char path[512]; /* the object's file, kept while loaded ("" : unlinked) */
    struct tgl_cuda_module *next_kept, **prev_kept; /* the kept files' list */
};

/* The modules whose file is kept (under the sanitizers), unlinked at
 * unload or at exit. */
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;
static struct tgl_cuda_module *kept;

static void kept_cleanup(void)
{
    pthread_mutex_lock(&kept_mu);
    for (struct tgl_cuda_module *m = kept; m; m = m->next_kept)
        unlink(m->path);
    pthread_mutex_unlock(&kept_mu);
}

static void kept_register(void)
{
    atexit(kept_cleanup);
}

/* The emulator: one launch at a time (mu), on the calling OS thread. */
static struct {
    pthread_mutex_t mu;
    tgl_emu_state st;           /* what the objects read (tgl_emu_bind) */
    emu_thread **threads;
    unsigned nthreads;
    emu_thread *cur;
    void (*fn)(void **);
    void **params;
#if EMU_ASM_SWITCH
    void *sched_sp;
#else
    ucontext_t sched_uc;
#endif
#if EMU_ASAN
    void *sched_fake;
    const void *sched_bottom;
    size_t sched_size;
#endif
    unsigned char *dyn;         /* dynamic shared memory             */
    size_t dyn_cap;
} E = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Scheduler -> t. */
static void to_thread(emu_thread *t)
{
    E.cur = t;
    E.st.thread_idx = &t->idx;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&E.sched_fake, t->stack, STACK_BYTES);
#endif
#if EMU_ASM_SWITCH
    tgl_emu_swap(&E.sched_sp, t->sp);
#else
    swapcontext(&E.sched_uc, &t->uc);
#endif
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(E.sched_fake, NULL, NULL);
#endif
}

/* The running thread t -> scheduler (for good when t has finished). */
static void to_sched(emu_thread *t, bool finished)
{
#if EMU_ASAN
    __sanitizer_start_switch_fiber(finished ? NULL : &t->fake, E.sched_bottom, E.sched_size);
#else
    (void)finished;
#endif
#if EMU_ASM_SWITCH
    tgl_emu_swap(&t->sp, E.sched_sp);
#else
    swapcontext(&t->uc, &E.sched_uc);
#endif
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(t->fake, &E.sched_bottom, &E.sched_size);
#endif
}

static void thread_main(emu_thread *t)
{
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &E.sched_bottom, &E.sched_size);
#endif
    E.fn(E.params);
    t->state = T_DONE;
    to_sched(t, true);
    abort(); /* never resumed */
}

#if !EMU_ASM_SWITCH
static void thread_main_uc(int hi, int lo)
{
    thread_main((emu_thread *)(((uintptr_t)(unsigned)hi << 32) | (uintptr_t)(unsigned)lo));
}
#endif

/* Makes t start the kernel afresh at its next switch. */
static void thread_reset(emu_thread *t)
{
#if EMU_ASAN
    if (t->dirty)
        __asan_unpoison_memory_region(t->stack, STACK_BYTES);
#endif
    t->dirty = false;
    t->state = T_RUN;
    t->warp_calls = 0;
#if EMU_ASM_SWITCH
    /* What tgl_emu_swap pops, then its return address; the stack is
     * 16-byte aligned after that return, as a call expects. */
    uint64_t *s = (uint64_t *)(t->stack + t->top - 72);
    s[0] = s[1] = 0;                         /* r15, r14 */
    s[2] = (uint64_t)(uintptr_t)thread_main; /* r13 */
    s[3] = (uint64_t)(uintptr_t)t;           /* r12 */
    s[4] = s[5] = 0;                         /* rbx, rbp */
    s[6] = (uint64_t)(uintptr_t)tgl_emu_start;
    t->sp = s;
#else
    getcontext(&t->uc);
    t->uc.uc_stack.ss_sp = t->stack;
    t->uc.uc_stack.ss_size = STACK_BYTES;
    t->uc.uc_link = NULL;
    uintptr_t a = (uintptr_t)t;
    makecontext(&t->uc, (void (*)(void))thread_main_uc, 2, (int)(unsigned)(a >> 32),
                (int)(unsigned)a);
#endif
}

/* At least n threads with stacks; false when out of memory. */
static bool threads_reserve(unsigned n)
{
    if (n <= E.nthreads)
        return true;
    emu_thread **ts = realloc(E.threads, n * sizeof *ts);
    if (!ts)
        return false;
    E.threads = ts;
    long page = sysconf(_SC_PAGESIZE);
    for (; E.nthreads < n; E.nthreads++) {
        emu_thread *t = calloc(1, sizeof *t);
        char *m = t ? mmap(NULL, STACK_BYTES + (size_t)page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                    : MAP_FAILED;
        if (m == MAP_FAILED) {
            free(t);
            return false;
        }
        mprotect(m, (size_t)page, PROT_NONE); /* an overflow faults here */
        t->stack = m + page;
        /* The threads' stacks lie STACK_BYTES apart, so their hot frames
         * would fall in the same cache sets; each starts 448 bytes (7
         * lines) further down, modulo 4 KiB. */
        t->top = STACK_BYTES - (size_t)E.nthreads * 448u % 4096u;
        E.threads[E.nthreads] = t;
    }
    return true;
}

/* ---- what a kernel calls (through tgl_emu_state) -------------------------------- */

static void emu_syncthreads(void)
{
    emu_thread *t = E.cur;
    t->state = T_AT_BLOCK;
    to_sched(t, false);
}

static void emu_syncwarp(void)
{
    emu_thread *t = E.cur;
    t->state = T_AT_WARP;
    to_sched(t, false);
}

/* Posts v, waits for the whole warp, returns slot p of the lanes' posts in
 * *lanes (the warp's first thread).  Two slots alternate, so a lane that
 * goes on to the next call cannot overwrite a value another lane has not
 * read yet (that lane must reach the next call first). */
static emu_thread *const *warp_meet(unsigned long long v, unsigned *parity)
{
    emu_thread *t = E.cur;
    unsigned p = t->warp_calls++ & 1u;
    t->slot[p] = v;
    t->state = T_AT_WARP;
    to_sched(t, false);
    *parity = p;
    return E.threads + (t->idx.x & ~31u);
}

static unsigned long long emu_shfl(int kind, unsigned long long v, int arg, int width)
{
    unsigned p;
    emu_thread *const *w = warp_meet(v, &p);
    unsigned lane = E.cur->idx.x & 31u;
    if (width <= 0 || width > 32 || (width & (width - 1)))
        width = 32;
    unsigned base = lane & ~(unsigned)(width - 1), src = lane;
    switch (kind) {
    case TGL_EMU_SHFL_IDX: src = base + ((unsigned)arg & (unsigned)(width - 1)); break;
    case TGL_EMU_SHFL_UP:
        src = arg >= 0 && lane >= base + (unsigned)arg ? lane - (unsigned)arg : lane;
        break;
    case TGL_EMU_SHFL_DOWN:
        src = arg >= 0 && lane + (unsigned)arg < base + (unsigned)width ? lane + (unsigned)arg
                                                                        : lane;
        break;
    case TGL_EMU_SHFL_XOR: /* an earlier group may be read, a later one not */
        src = lane ^ (unsigned)arg;
        if (src >= base + (unsigned)width)
            src = lane;
        break;
    default: break;
    }
    return w[src]->slot[p];
}

static unsigned emu_vote(int kind, int pred)
{
    unsigned p;
    emu_thread *const *w = warp_meet((unsigned long long)(pred != 0), &p);
    unsigned ballot = 0;
    for (unsigned l = 0; l < 32; l++)
        ballot |= (unsigned)(w[l]->slot[p] != 0) << l;
    return kind == TGL_EMU_VOTE_BALLOT ? ballot
         : kind == TGL_EMU_VOTE_ANY    ? (unsigned)(ballot != 0)
                                       : (unsigned)(ballot == 0xffffffffu);
}

/* ---- running a launch ------------------------------------------------------------ */

/* Runs the block E.st.block_idx with nthr threads to its end; false (and
 * msg) when a warp's lanes part at a warp-wide call. */
static bool run_block(unsigned nthr, char *msg, size_t msgsz)
{
    emu_thread **T = E.threads;
    for (unsigned i = 0; i < nthr; i++)
        thread_reset(T[i]);
    for (;;) {
        bool at_block = false;
        for (unsigned w = 0; w < nthr / 32; w++) {
            emu_thread **W = T + 32 * w;
            for (;;) {
                for (unsigned l = 0; l < 32; l++)
                    if (W[l]->state == T_RUN)
                        to_thread(W[l]);
                int nw = 0, nb = 0, nd = 0;
                for (unsigned l = 0; l < 32; l++) {
                    nw += W[l]->state == T_AT_WARP;
                    nb += W[l]->state == T_AT_BLOCK;
                    nd += W[l]->state == T_DONE;
                }
                if (nw == 0) {
                    at_block = at_block || nb > 0;
                    break;
                }
                if (nw == 32) {
                    for (unsigned l = 0; l < 32; l++)
                        W[l]->state = T_RUN;
                    continue;
                }
                snprintf(msg, msgsz,
                         "warp %u of block (%u,%u,%u): %d lanes at a warp-wide call "
                         "(shuffle, vote, __syncwarp), %d at __syncthreads, %d exited: every "
                         "lane of the warp must make the call",
                         w, E.st.block_idx.x, E.st.block_idx.y, E.st.block_idx.z, nw, nb, nd);
                for (unsigned i = 0; i < nthr; i++)
                    T[i]->dirty = T[i]->state != T_DONE;
                return false;
            }
        }
        if (!at_block)
            return true;
        for (unsigned i = 0; i < nthr; i++)
            if (T[i]->state == T_AT_BLOCK)
                T[i]->state = T_RUN;
    }
}

/* Dynamic shared memory per block: what an sm_90 block may opt in to
 * (the real driver opts in above the default 48 KiB). */
#define MAX_DYN_SHARED (227 * 1024)

static bool env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static tgl_status check_launch(const tgl_cuda_func *f, const unsigned grid[3], unsigned block,
                               size_t shmem, void **args, tgl_errbuf *err)
{
    if (!f || !grid)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: launch: no kernel or no grid");
    if (block < 32 || block > 1024 || block % 32)
        return tgl_errbuf_set(err, TGL_EINVAL,
                              "cuda emu: launch of %s: %u threads per block (the kernel rules: "
                              "a multiple of 32, at most 1024)",
                              f->symbol, block);
    if (!grid[0] || !grid[1] || !grid[2] || grid[0] > 0x7fffffffu || grid[1] > 65535 ||
        grid[2] > 65535)
        return tgl_errbuf_set(err, TGL_EINVAL,
                              "cuda emu: launch of %s: grid (%u,%u,%u) (each at least 1; y and "
                              "z at most 65535)",
                              f->symbol, grid[0], grid[1], grid[2]);
    if (shmem > MAX_DYN_SHARED)
        return tgl_errbuf_set(err, TGL_EINVAL,
                              "cuda emu: launch of %s: %zu bytes of dynamic shared memory "
                              "(at most %d, an sm_90 block's limit)",
                              f->symbol, shmem, MAX_DYN_SHARED);
    if (f->psizes && f->psizes[0] && !args)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: launch of %s: no parameters",
                              f->symbol);
    return TGL_OK;
}

static tgl_status run_launch(const tgl_cuda_func *f, const unsigned grid[3], unsigned block,
                             size_t shmem, void **args, tgl_errbuf *err)
{
    bool full = env_flag("TGL_CUDA_EMU_FULL");
    unsigned b = full || block < 64 ? block : 64, g[3];
    for (int d = 0; d < 3; d++)
        g[d] = full || grid[d] < 4 ? grid[d] : 4;
    pthread_mutex_lock(&E.mu);
    size_t dyn = shmem ? shmem : 16;
    if (dyn > E.dyn_cap) {
        void *p = NULL;
        if (posix_memalign(&p, 256, dyn)) {
            pthread_mutex_unlock(&E.mu);
            return tgl_errbuf_set(err, TGL_ENOMEM, "cuda emu: launch of %s: out of memory",
                                  f->symbol);
        }
        free(E.dyn);
        E.dyn = p;
        E.dyn_cap = dyn;
    }
    if (!threads_reserve(b)) {
        pthread_mutex_unlock(&E.mu);
        return tgl_errbuf_set(err, TGL_ENOMEM,
                              "cuda emu: launch of %s: out of memory for %u thread stacks",
                              f->symbol, b);
    }
    /* Shared memory is uninitialised on a device: garbage (NaN), not 0. */
    memset(E.dyn, 0xff, shmem);
    E.st.block_dim = (tgl_emu_dim3){b, 1, 1};
    E.st.grid_dim = (tgl_emu_dim3){g[0], g[1], g[2]};
    E.st.dyn_shared = E.dyn;
    E.st.syncthreads = emu_syncthreads;
    E.st.syncwarp = emu_syncwarp;
    E.st.shfl = emu_shfl;
    E.st.vote = emu_vote;
    for (unsigned i = 0; i < b; i++)
        E.threads[i]->idx = (tgl_emu_dim3){i, 0, 0};
    E.fn = f->fn;
    E.params = args;
    char msg[400];
    bool ok = true;
    for (unsigned z = 0; z < g[2] && ok; z++)
        for (unsigned y = 0; y < g[1] && ok; y++)
            for (unsigned x = 0; x < g[0] && ok; x++) {
                E.st.block_idx = (tgl_emu_dim3){x, y, z};
                ok = run_block(b, msg, sizeof msg);
            }
    E.cur = NULL;
    pthread_mutex_unlock(&E.mu);
    if (!ok)
        return tgl_errbuf_set(err, TGL_EINTERNAL, "cuda emu: kernel %s: %s", f->symbol, msg);
    return TGL_OK;
}

/* ---- the stream's operations, run or recorded ------------------------------------- */

typedef enum { N_LAUNCH, N_COPY, N_MEMSET, N_GEMM, N_GEMV, N_GER, N_DOT } node_kind;

typedef struct node {
    node_kind kind;
    union {
        struct {
            const tgl_cuda_func *f;
            unsigned grid[3], block;
            size_t shmem;
            void **args;      /* into blob (recorded), or the caller's */
            unsigned char *blob;
        } l;
        struct {
            void *dst;
            const void *src;
            size_t n;
        } c;
        struct {
            void *p;
            int byte;
            size_t n;
        } s;
        struct { /* gemm and gemm_batched (count 1: gemm) */
            int dtype, m, n, k, lda, ldb, ldc, count;
            bool ta, tb;
            double alpha, beta;
            const void *a, *b;
            void *c;
            int64_t sa, sb, sc;
        } g;
        struct {
            int dtype, rows, cols, lda, incx, incy;
            bool trans;
            double alpha, beta;
            const void *a, *x;
            void *y;
        } v;
        struct {
            int dtype, m, n, incx, incy, lda;
            double alpha;
            const void *x, *y;
            void *a;
        } r;
        struct {
            int dtype, n, incx, incy;
            const void *x, *y;
            void *out;
        } d;
    } u;
} node;

struct tgl_cuda_graph {
    node *nodes;
    int n, cap;
};

/* The capture in progress (under E.mu). */
static struct {
    bool on;
    tgl_status failed;       /* the first error of the capture          */
    char why[TGL_ERRMSG_SIZE];
    tgl_cuda_graph *g;
} C;

static void node_free(node *nd)
{
    if (nd->kind == N_LAUNCH) {
        free(nd->u.l.args);
        free(nd->u.l.blob);
    }
}

static void emu_graph_free(tgl_cuda_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++)
        node_free(&g->nodes[i]);
    free(g->nodes);
    free(g);
}

/* Fails the capture in progress (under E.mu) with err's message. */
static tgl_status capture_fail(tgl_status st, tgl_errbuf *err)
{
    if (!C.failed) {
        C.failed = st;
        snprintf(C.why, sizeof C.why, "%s", err->msg);
    }
    return st;
}

/* Records nd (a launch: its parameters copied) when a capture is on:
 * returns 1 with *st, else 0 (run it). */
static int try_record(const node *nd, tgl_errbuf *err, tgl_status *st)
{
    pthread_mutex_lock(&E.mu);
    if (!C.on) {
        pthread_mutex_unlock(&E.mu);
        return 0;
    }
    node rec = *nd;
    *st = TGL_OK;
    if (nd->kind == N_LAUNCH) {
        const unsigned long long *ps = nd->u.l.f->psizes;
        if (!ps) {
            *st = capture_fail(tgl_errbuf_set(err, TGL_EINVAL,
                                              "cuda emu: graph capture: kernel %s has no "
                                              "parameter sizes (%s__emu_psizes), so its launch "
                                              "cannot be recorded",
                                              nd->u.l.f->symbol, nd->u.l.f->symbol),
                               err);
            pthread_mutex_unlock(&E.mu);
            return 1;
        }
        int np = 0;
        size_t bytes = 0;
        while (ps[np])
            bytes += (ps[np++] + 15) & ~(size_t)15;
        rec.u.l.args = calloc((size_t)np + 1, sizeof(void *));
        rec.u.l.blob = malloc(bytes + 16);
        if (!rec.u.l.args || !rec.u.l.blob) {
            free(rec.u.l.args);
            free(rec.u.l.blob);
            *st = capture_fail(tgl_errbuf_set(err, TGL_ENOMEM, "cuda emu: graph capture: out "
                                                               "of memory"),
                               err);
            pthread_mutex_unlock(&E.mu);
            return 1;
        }
        size_t off = 0;
        for (int i = 0; i < np; i++) {
            memcpy(rec.u.l.blob + off, nd->u.l.args[i], ps[i]);
            rec.u.l.args[i] = rec.u.l.blob + off;
            off += (ps[i] + 15) & ~(size_t)15;
        }
    }
    tgl_cuda_graph *g = C.g;
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 16;
        node *ns = realloc(g->nodes, (size_t)cap * sizeof *ns);
        if (!ns) {
            node_free(&rec);
            *st = capture_fail(tgl_errbuf_set(err, TGL_ENOMEM,
                                              "cuda emu: graph capture: out of memory"),
                               err);
            pthread_mutex_unlock(&E.mu);
            return 1;
        }
        g->nodes = ns;
        g->cap = cap;
    }
    g->nodes[g->n++] = rec;
    pthread_mutex_unlock(&E.mu);
    return 1;
}

static const tgl_backend *cpu_blas(tgl_errbuf *err)
{
    const tgl_backend *be = tgl_backend_get(TGL_DEVICE_CPU);
    if (!be || !be->gemm)
        tgl_errbuf_set(err, TGL_EINTERNAL, "cuda emu: no CPU backend for the BLAS calls");
    return be && be->gemm ? be : NULL;
}

static tgl_status run_node(const node *nd, tgl_errbuf *err)
{
    const tgl_backend *be;
    switch (nd->kind) {
    case N_LAUNCH:
        return run_launch(nd->u.l.f, nd->u.l.grid, nd->u.l.block, nd->u.l.shmem, nd->u.l.args,
                          err);
    case N_COPY: memmove(nd->u.c.dst, nd->u.c.src, nd->u.c.n); return TGL_OK;
    case N_MEMSET: memset(nd->u.s.p, nd->u.s.byte, nd->u.s.n); return TGL_OK;
    case N_GEMM: {
        if (!(be = cpu_blas(err)))
            return TGL_EINTERNAL;
        size_t es = nd->u.g.dtype == TGL_FLOAT64 ? 8 : 4;
        for (int i = 0; i < nd->u.g.count; i++) {
            tgl_status st = be->gemm(
                nd->u.g.dtype, nd->u.g.ta, nd->u.g.tb, nd->u.g.m, nd->u.g.n, nd->u.g.k,
                nd->u.g.alpha, (const char *)nd->u.g.a + (size_t)(i * nd->u.g.sa) * es,
                nd->u.g.lda, (const char *)nd->u.g.b + (size_t)(i * nd->u.g.sb) * es,
                nd->u.g.ldb, nd->u.g.beta, (char *)nd->u.g.c + (size_t)(i * nd->u.g.sc) * es,
                nd->u.g.ldc, err);
            if (st)
                return st;
        }
        return TGL_OK;
    }
    case N_GEMV:
        if (!(be = cpu_blas(err)))
            return TGL_EINTERNAL;
        return be->gemv(nd->u.v.dtype, nd->u.v.trans, nd->u.v.rows, nd->u.v.cols,
                        nd->u.v.alpha, nd->u.v.a, nd->u.v.lda, nd->u.v.x, nd->u.v.incx,
                        nd->u.v.beta, nd->u.v.y, nd->u.v.incy, err);
    case N_GER:
        if (!(be = cpu_blas(err)))
            return TGL_EINTERNAL;
        return be->ger(nd->u.r.dtype, nd->u.r.m, nd->u.r.n, nd->u.r.alpha, nd->u.r.x,
                       nd->u.r.incx, nd->u.r.y, nd->u.r.incy, nd->u.r.a, nd->u.r.lda, err);
    case N_DOT:
        if (!(be = cpu_blas(err)))
            return TGL_EINTERNAL;
        return be->dot(nd->u.d.dtype, nd->u.d.n, nd->u.d.x, nd->u.d.incx, nd->u.d.y,
                       nd->u.d.incy, nd->u.d.out, err);
    }
    return tgl_errbuf_set(err, TGL_EINTERNAL, "cuda emu: unknown graph node %d", (int)nd->kind);
}

static tgl_status issue(const node *nd, tgl_errbuf *err)
{
    tgl_status st;
    if (try_record(nd, err, &st))
        return st;
    return run_node(nd, err);
}

/* ---- the driver table's entries ----------------------------------------------------- */

static int emu_device_count(void)
{
    return 1;
}

static const char *dtype_text(int dtype)
{
    return dtype == TGL_FLOAT32 ? "float32" : dtype == TGL_FLOAT64 ? "float64" : NULL;
}

static tgl_status check_dtype(const char *what, int dtype, tgl_errbuf *err)
{
    if (!dtype_text(dtype))
        return tgl_errbuf_set(err, TGL_EDTYPE, "cuda emu: %s: dtype %d (float32 or float64)",
                              what, dtype);
    return TGL_OK;
}

static tgl_status emu_malloc(void **p, size_t n, tgl_errbuf *err)
{
    void *q = NULL;
    if (posix_memalign(&q, 256, n ? n : 1) || !q)
        return tgl_errbuf_set(err, TGL_ENOMEM, "cuda emu: out of memory allocating %zu bytes",
                              n);
    memset(q, 0xff, n); /* NaN in every float dtype: unwritten data shows */
    *p = q;
    return TGL_OK;
}

static void emu_free(void *p)
{
    free(p);
}

static const char *copy_name(tgl_cuda_copy_kind k)
{
    return k == TGL_CUDA_H2D ? "host to device" : k == TGL_CUDA_D2H ? "device to host"
                                                                    : "device to device";
}

static tgl_status emu_memcpy(void *dst, const void *src, size_t n, tgl_cuda_copy_kind kind,
                             tgl_errbuf *err)
{
    if (n == 0)
        return TGL_OK;
    if (!dst || !src)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: copy %s of %zu bytes: NULL pointer",
                              copy_name(kind), n);
    if (kind != TGL_CUDA_D2D) {
        pthread_mutex_lock(&E.mu);
        if (C.on) {
            tgl_status st = capture_fail(
                tgl_errbuf_set(err, TGL_EINVAL,
                               "cuda emu: a copy %s (%zu bytes) during a graph capture (a "
                               "captured graph copies only within the device)",
                               copy_name(kind), n),
                err);
            pthread_mutex_unlock(&E.mu);
            return st;
        }
        pthread_mutex_unlock(&E.mu);
        memcpy(dst, src, n);
        return TGL_OK;
    }
    node nd = {.kind = N_COPY, .u.c = {dst, src, n}};
    return issue(&nd, err);
}

static tgl_status emu_memset(void *p, int byte, size_t n, tgl_errbuf *err)
{
    if (n == 0)
        return TGL_OK;
    if (!p)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: memset of %zu bytes: NULL pointer",
                              n);
    node nd = {.kind = N_MEMSET, .u.s = {p, byte, n}};
    return issue(&nd, err);
}

static tgl_status emu_sync(tgl_errbuf *err)
{
    pthread_mutex_lock(&E.mu);
    tgl_status st = TGL_OK;
    if (C.on)
        st = capture_fail(tgl_errbuf_set(err, TGL_EINVAL,
                                         "cuda emu: synchronize during a graph capture"),
                          err);
    pthread_mutex_unlock(&E.mu);
    /* Kernels run synchronously: a launch reports its own failure. */
    return st;
}

/* ---- the host compiler -------------------------------------------------------------- */

#define MAX_CXX_ARGS 16

static struct {
    pthread_once_t once;
    char *argv[MAX_CXX_ARGS + 1]; /* the compiler and its own arguments */
    char words[512];
    char version[160];            /* its --version's first line         */
    char target[96];
} X = {.once = PTHREAD_ONCE_INIT};

static bool in_path(const char *exe)
{
    const char *path = getenv("PATH");
    while (path && *path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        char full[1024];
        snprintf(full, sizeof full, "%.*s/%s", (int)len, path, exe);
        if (len && access(full, X_OK) == 0)
            return true;
        path = end ? end + 1 : NULL;
    }
    return false;
}

/* Runs argv with stdout and stderr into the file out; the exit status,
 * or -1 when it could not start. */
static int run_to_file(char *const *argv, const char *out)
{
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa))
        return -1;
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc)
        return -1;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* A file's text, malloc'd (NULL on failure); *len its bytes. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

static const char *tmp_dir(void)
{
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

static bool sanitize_objects(void)
{
    const char *v = getenv("TGL_CUDA_EMU_SANITIZE");
    return EMU_ASAN && !(v && strcmp(v, "0") == 0);
}

static void find_compiler(void)
{
    const char *env = getenv("TGL_CUDA_EMU_CXX");
    int n = 0;
    if (env && *env) {
        snprintf(X.words, sizeof X.words, "%s", env);
        for (char *s = strtok(X.words, " \t"); s && n < MAX_CXX_ARGS; s = strtok(NULL, " \t"))
            X.argv[n++] = s;
    } else {
        static const char *const names[] = {"c++", "g++", "clang++"};
        for (int i = 0; i < 3 && !n; i++)
            if (in_path(names[i])) {
                snprintf(X.words, sizeof X.words, "%s", names[i]);
                X.argv[n++] = X.words;
            }
    }
    X.argv[n] = NULL;
    /* The target: what decides the machine code, so the module cache keeps
     * one object per compiler, emulation prelude and instrumentation. */
    uint32_t h = 2166136261u;
    for (const char *s = TGL_CUDA_TEXT_emu_prelude_h; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    if (n) {
        char path[512];
        snprintf(path, sizeof path, "%s/tgl-emu-version-XXXXXX", tmp_dir());
        int fd = mkstemp(path);
        if (fd >= 0) {
            close(fd);
            char *argv[MAX_CXX_ARGS + 2];
            int k = 0;
            for (; X.argv[k]; k++)
                argv[k] = X.argv[k];
            argv[k++] = (char *)"--version";
            argv[k] = NULL;
            char *text = run_to_file(argv, path) == 0 ? read_file(path, NULL) : NULL;
            if (text) {
                text[strcspn(text, "\n")] = '\0';
                snprintf(X.version, sizeof X.version, "%s", text);
            }
            free(text);
            unlink(path);
        }
        if (!X.version[0])
            snprintf(X.version, sizeof X.version, "%s", X.argv[0]);
    }
    snprintf(X.target, sizeof X.target, "emu%s %08x %.70s", sanitize_objects() ? "-asan" : "", h,
             n ? X.version : "(no host C++ compiler)");
}

static tgl_status emu_init(tgl_cuda_devinfo *info, tgl_errbuf *err)
{
    (void)err;
    pthread_once(&X.once, find_compiler);
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "tgl emulated GPU");
    info->cc_major = 9;
    info->cc_minor = 0;
    info->sm_count = 4;
    info->max_threads_per_block = 1024;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    info->total_mem = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : (size_t)1 << 34;
    snprintf(info->target, sizeof info->target, "%s", X.target);
    return TGL_OK;
}

/* Removes dir and the files the compile made in it. */
static void remove_dir(const char *dir)
{
    static const char *const names[] = {"kernel.cpp", "kernel.so", "compile.log"};
    char path[600];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* The compiler and the flags of every compile into argv (header: the
 * precompiled prelude's, no -shared); returns the count. */
static int compile_args(char **argv, bool header)
{
    int k = 0;
    for (; X.argv[k]; k++)
        argv[k] = X.argv[k];
    static const char *const flags[] = {"-std=c++17", "-O1", "-fPIC", "-fno-strict-aliasing",
                                        "-g0", "-pipe"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        argv[k++] = (char *)flags[i];
    argv[k++] = header ? (char *)"-xc++-header" : (char *)"-shared";
    if (sanitize_objects()) {
        argv[k++] = (char *)"-fsanitize=address,undefined";
        argv[k++] = (char *)"-fno-sanitize-recover=undefined";
        argv[k++] = (char *)"-fno-omit-frame-pointer";
        argv[k++] = (char *)"-g1"; /* a report names the kernel's lines */
    }
    return k;
}

/* What every source opens with. */
static const char *prelude_text(void)
{
    return "#define TGL_CUDA_EMU 1\n#line 1 \"emu_prelude.h\"\n" TGL_CUDA_TEXT_emu_prelude_h
           "\n";
}

/* The prelude precompiled, once per compiler, flags and prelude text
 * (most of a small kernel's compile is the prelude's C++ headers): a
 * header in $TMPDIR/tgl-emu-pch-<uid>/ with its .gch beside it, given to
 * each compile with -include; GCC falls back to the header's text when
 * the .gch does not fit.  NULL (no precompiled prelude: the text is
 * pasted) with clang, with TGL_CUDA_EMU_PCH=0, or when making it failed. */
static struct {
    pthread_mutex_t mu;
    bool tried;
    char path[600];
} P = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static char *prelude_pch(void)
{
    pthread_mutex_lock(&P.mu);
    if (P.tried) {
        pthread_mutex_unlock(&P.mu);
        return P.path[0] ? P.path : NULL;
    }
    P.tried = true;
    const char *env = getenv("TGL_CUDA_EMU_PCH");
    if ((env && strcmp(env, "0") == 0) || strstr(X.version, "clang")) {
        pthread_mutex_unlock(&P.mu);
        return NULL;
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tgl-emu-pch-%u", tmp_dir(), (unsigned)getuid());
    struct stat sb;
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || lstat(dir, &sb) != 0 ||
        !S_ISDIR(sb.st_mode) || sb.st_uid != getuid() || (sb.st_mode & 022)) {
        pthread_mutex_unlock(&P.mu); /* not a directory of ours alone */
        return NULL;
    }
    char *argv[MAX_CXX_ARGS + 24];
    int k = compile_args(argv, true);
    /* the name: the prelude, the compiler and the flags */
    uint64_t h = 1469598103934665603ull;
    const char *text = prelude_text();
    for (const char *t = text; *t; t++)
        h = (h ^ (unsigned char)*t) * 1099511628211ull;
    for (int i = 0; i < k; i++)
        for (const char *t = argv[i]; *t; t++)
            h = (h ^ (unsigned char)*t) * 1099511628211ull;
    for (const char *t = X.version; *t; t++)
        h = (h ^ (unsigned char)*t) * 1099511628211ull;
    char hdr[600], gch[620], tmp[660], log[620];
    snprintf(hdr, sizeof hdr, "%s/emu_%016llx.h", dir, (unsigned long long)h);
    snprintf(gch, sizeof gch, "%s.gch", hdr);
    bool ok = access(hdr, R_OK) == 0 && access(gch, R_OK) == 0;
    if (!ok) {
        /* Made under temporary names and renamed: processes racing to make
         * it each make a whole one. */
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", hdr, (long)getpid());
        ok = write_text(tmp, text) && rename(tmp, hdr) == 0;
        if (ok) {
            snprintf(tmp, sizeof tmp, "%s.%ld.tmp", gch, (long)getpid());
            snprintf(log, sizeof log, "%s.%ld.log", hdr, (long)getpid());
            argv[k++] = (char *)"-o";
            argv[k++] = tmp;
            argv[k++] = hdr;
            argv[k] = NULL;
            ok = run_to_file(argv, log) == 0 && rename(tmp, gch) == 0;
            unlink(tmp);
            unlink(log);
        }
    }
    if (ok)
        snprintf(P.path, sizeof P.path, "%s", hdr);
    pthread_mutex_unlock(&P.mu);
    return ok ? P.path : NULL;
}

static tgl_status emu_compile(const char *source, const char *name, void **image, size_t *len,
                              char **log, tgl_errbuf *err)
{
    if (log)
        *log = NULL;
    *image = NULL;
    *len = 0;
    if (!source)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: compile: no source");
    name = name ? name : "kernel";
    pthread_once(&X.once, find_compiler);
    if (!X.argv[0])
        return tgl_errbuf_set(err, TGL_EIO,
                              "cuda emu: compiling %s: no host C++ compiler (c++, g++ or clang++ "
                              "on PATH, or $TGL_CUDA_EMU_CXX)",
                              name);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tgl-emu-XXXXXX", tmp_dir());
    if (!mkdtemp(dir))
        return tgl_errbuf_set(err, TGL_EIO, "cuda emu: compiling %s: cannot make a directory "
                                            "in %s: %s",
                              name, tmp_dir(), strerror(errno));
    char src[600], obj[600], logp[600];
    snprintf(src, sizeof src, "%s/kernel.cpp", dir);
    snprintf(obj, sizeof obj, "%s/kernel.so", dir);
    snprintf(logp, sizeof logp, "%s/compile.log", dir);
    /* The prelude comes precompiled (-include) where it can, else as text. */
    char *pch = prelude_pch();
    FILE *f = fopen(src, "w");
    char shown[200]; /* the name as a #line directive can carry it */
    snprintf(shown, sizeof shown, "%s", name);
    for (char *c = shown; *c; c++)
        if (*c == '"' || *c == '\\' || *c == '\n' || *c == '\r')
            *c = '_';
    bool wrote = f && fprintf(f, "%s#line 1 \"%s\"\n%s\n", pch ? "" : prelude_text(), shown,
                              source) > 0;
    if (f && fclose(f))
        wrote = false;
    if (!wrote) {
        remove_dir(dir);
        return tgl_errbuf_set(err, TGL_EIO, "cuda emu: compiling %s: cannot write %s", name,
                              src);
    }
    char *argv[MAX_CXX_ARGS + 24];
    int k = compile_args(argv, false);
    if (pch) {
        argv[k++] = (char *)"-include";
        argv[k++] = pch;
    }
    argv[k++] = (char *)"-o";
    argv[k++] = obj;
    argv[k++] = src;
    argv[k] = NULL;
    int rc = run_to_file(argv, logp);
    char *text = read_file(logp, NULL);
    tgl_status st = TGL_OK;
    if (rc != 0) {
        st = tgl_errbuf_set(err, TGL_EINTERNAL,
                            "cuda emu: compiling %s with %s failed (%s %d): %.600s", name,
                            X.argv[0], rc < 0 ? "could not run it" : "exit status", rc,
                            text ? text : "(no log)");
    } else {
        *image = read_file(obj, len);
        if (!*image)
            st = tgl_errbuf_set(err, TGL_EIO, "cuda emu: compiling %s: cannot read %s", name,
                                obj);
    }
    if (log && text && *text)
        *log = text;
    else
        free(text);
    remove_dir(dir);
    return st;
}

static bool write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        len -= (size_t)w;
    }
    return true;
}

static tgl_status emu_load(const void *image, size_t len, tgl_cuda_module **m, tgl_errbuf *err)
{
    *m = NULL;
    if (!image || !len)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: load: empty image");
    char path[512];
    snprintf(path, sizeof path, "%s/tgl-emu-module-XXXXXX", tmp_dir());
    int fd = mkstemp(path);
    if (fd < 0)
        return tgl_errbuf_set(err, TGL_EIO, "cuda emu: load: cannot make a file in %s: %s",
                              tmp_dir(), strerror(errno));
    bool wrote = write_all(fd, image, len);
    close(fd);
    if (!wrote) {
        unlink(path);
        return tgl_errbuf_set(err, TGL_EIO, "cuda emu: load: cannot write %s", path);
    }
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    char why[400];
    snprintf(why, sizeof why, "%s", dl ? "" : dlerror());
    /* A sanitizer's report reads the object's file for its symbols: kept
     * until unload (or exit) there. */
    bool keep = dl && sanitize_objects();
    if (!keep)
        unlink(path);
#ifdef MFD_CLOEXEC
    if (!dl) {
        /* A directory mounted noexec: the bytes in memory instead. */
        int mfd = memfd_create("tgl-emu-module", MFD_CLOEXEC);
        if (mfd >= 0) {
            char fdpath[64];
            snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", mfd);
            if (write_all(mfd, image, len))
                dl = dlopen(fdpath, RTLD_NOW | RTLD_LOCAL);
            close(mfd); /* the mapping stays */
        }
    }
#endif
    if (!dl)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: load: not a module for this emulator: %s",
                              why[0] ? why : "dlopen failed");
    int (*bind)(tgl_emu_state *, unsigned, unsigned long long) =
        (int (*)(tgl_emu_state *, unsigned, unsigned long long))dlsym(dl, "tgl_emu_bind");
    if (!bind || bind(&E.st, TGL_EMU_ABI, sizeof(tgl_emu_state)) != 0) {
        dlclose(dl);
        if (keep)
            unlink(path);
        return tgl_errbuf_set(err, TGL_EINVAL,
                              "cuda emu: load: the module was %s (emulator ABI %d)",
                              bind ? "built for another emulator" : "not built by the emulator",
                              TGL_EMU_ABI);
    }
    tgl_cuda_module *mod = calloc(1, sizeof *mod);
    if (!mod) {
        dlclose(dl);
        if (keep)
            unlink(path);
        return tgl_errbuf_set(err, TGL_ENOMEM, "cuda emu: load: out of memory");
    }
    mod->dl = dl;
    if (keep) {
        snprintf(mod->path, sizeof mod->path, "%s", path);
        pthread_once(&kept_once, kept_register);
        pthread_mutex_lock(&kept_mu);
        mod->next_kept = kept;
        mod->prev_kept = &kept;
        if (kept)
            kept->prev_kept = &mod->next_kept;
        kept = mod;
        pthread_mutex_unlock(&kept_mu);
    }
    *m = mod;
    return TGL_OK;
}

static tgl_status emu_func(tgl_cuda_module *m, const char *symbol, tgl_cuda_func **f,
                           tgl_errbuf *err)
{
    *f = NULL;
    if (!m || !symbol)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: func: no module or no symbol");
    pthread_mutex_lock(&E.mu);
    for (tgl_cuda_func *q = m->funcs; q; q = q->next)
        if (strcmp(q->symbol, symbol) == 0) {
            *f = q;
            pthread_mutex_unlock(&E.mu);
            return TGL_OK;
        }
    size_t n = strlen(symbol);
    char *name = malloc(n + 16);
    tgl_cuda_func *q = malloc(sizeof *q + n + 1);
    if (!name || !q) {
        free(name);
        free(q);
        pthread_mutex_unlock(&E.mu);
        return tgl_errbuf_set(err, TGL_ENOMEM, "cuda emu: func: out of memory");
    }
    snprintf(name, n + 16, "%s__emu", symbol);
    void *fn = dlsym(m->dl, name);
    snprintf(name, n + 16, "%s__emu_psizes", symbol);
    q->psizes = dlsym(m->dl, name);
    free(name);
    if (!fn) {
        free(q);
        pthread_mutex_unlock(&E.mu);
        return tgl_errbuf_set(err, TGL_EINVAL,
                              "cuda emu: the module has no kernel %s (no %s__emu in it)", symbol,
                              symbol);
    }
    *(void **)&q->fn = fn;
    memcpy(q->symbol, symbol, n + 1);
    q->next = m->funcs;
    m->funcs = q;
    *f = q;
    pthread_mutex_unlock(&E.mu);
    return TGL_OK;
}

static void emu_unload(tgl_cuda_module *m)
{
    if (!m)
        return;
    while (m->funcs) {
        tgl_cuda_func *q = m->funcs;
        m->funcs = q->next;
        free(q);
    }
    dlclose(m->dl);
    if (m->path[0]) {
        pthread_mutex_lock(&kept_mu);
        *m->prev_kept = m->next_kept;
        if (m->next_kept)
            m->next_kept->prev_kept = m->prev_kept;
        pthread_mutex_unlock(&kept_mu);
        unlink(m->path);
    }
    free(m);
}

static tgl_status emu_launch(tgl_cuda_func *f, const unsigned grid[3], unsigned block,
                             size_t shmem, void **args, tgl_errbuf *err)
{
    tgl_status st = check_launch(f, grid, block, shmem, args, err);
    if (st)
        return st;
    node nd = {.kind = N_LAUNCH, .u.l = {f, {grid[0], grid[1], grid[2]}, block, shmem, args, NULL}};
    return issue(&nd, err);
}

static tgl_status emu_gemm(int dtype, bool trans_a, bool trans_b, int m, int n, int k,
                           double alpha, const void *a, int lda, const void *b, int ldb,
                           double beta, void *c, int ldc, bool tf32, tgl_errbuf *err)
{
    (void)tf32;
    tgl_status st = check_dtype("gemm", dtype, err);
    if (st)
        return st;
    node nd = {.kind = N_GEMM,
               .u.g = {dtype, m, n, k, lda, ldb, ldc, 1, trans_a, trans_b, alpha, beta, a, b, c,
                       0, 0, 0}};
    return issue(&nd, err);
}

static tgl_status emu_gemm_batched(int dtype, bool trans_a, bool trans_b, int m, int n, int k,
                                   double alpha, const void *a, int lda, int64_t stride_a,
                                   const void *b, int ldb, int64_t stride_b, double beta, void *c,
                                   int ldc, int64_t stride_c, int count, bool tf32,
                                   tgl_errbuf *err)
{
    (void)tf32;
    tgl_status st = check_dtype("gemm_batched", dtype, err);
    if (st)
        return st;
    if (count < 0)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: gemm_batched: count %d", count);
    node nd = {.kind = N_GEMM,
               .u.g = {dtype, m, n, k, lda, ldb, ldc, count, trans_a, trans_b, alpha, beta, a, b,
                       c, stride_a, stride_b, stride_c}};
    return issue(&nd, err);
}

static tgl_status emu_gemv(int dtype, bool trans, int rows, int cols, double alpha,
                           const void *a, int lda, const void *x, int incx, double beta, void *y,
                           int incy, tgl_errbuf *err)
{
    tgl_status st = check_dtype("gemv", dtype, err);
    if (st)
        return st;
    node nd = {.kind = N_GEMV,
               .u.v = {dtype, rows, cols, lda, incx, incy, trans, alpha, beta, a, x, y}};
    return issue(&nd, err);
}

static tgl_status emu_ger(int dtype, int m, int n, double alpha, const void *x, int incx,
                          const void *y, int incy, void *a, int lda, tgl_errbuf *err)
{
    tgl_status st = check_dtype("ger", dtype, err);
    if (st)
        return st;
    node nd = {.kind = N_GER, .u.r = {dtype, m, n, incx, incy, lda, alpha, x, y, a}};
    return issue(&nd, err);
}

static tgl_status emu_dot(int dtype, int n, const void *x, int incx, const void *y, int incy,
                          void *out, tgl_errbuf *err)
{
    tgl_status st = check_dtype("dot", dtype, err);
    if (st)
        return st;
    node nd = {.kind = N_DOT, .u.d = {dtype, n, incx, incy, x, y, out}};
    return issue(&nd, err);
}

static tgl_status emu_capture_begin(tgl_errbuf *err)
{
    pthread_mutex_lock(&E.mu);
    if (C.on) {
        pthread_mutex_unlock(&E.mu);
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: a graph capture is already on");
    }
    C.g = calloc(1, sizeof *C.g);
    if (!C.g) {
        pthread_mutex_unlock(&E.mu);
        return tgl_errbuf_set(err, TGL_ENOMEM, "cuda emu: graph capture: out of memory");
    }
    C.on = true;
    C.failed = TGL_OK;
    C.why[0] = '\0';
    pthread_mutex_unlock(&E.mu);
    return TGL_OK;
}

static tgl_status emu_capture_end(tgl_cuda_graph **g, tgl_errbuf *err)
{
    *g = NULL;
    pthread_mutex_lock(&E.mu);
    if (!C.on) {
        pthread_mutex_unlock(&E.mu);
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: capture_end without capture_begin");
    }
    tgl_cuda_graph *graph = C.g;
    tgl_status failed = C.failed;
    char why[TGL_ERRMSG_SIZE];
    snprintf(why, sizeof why, "%s", C.why);
    C.on = false;
    C.g = NULL;
    C.failed = TGL_OK;
    pthread_mutex_unlock(&E.mu);
    if (failed) {
        emu_graph_free(graph);
        return tgl_errbuf_set(err, failed, "cuda emu: the graph capture failed: %s", why);
    }
    *g = graph;
    return TGL_OK;
}

static tgl_status emu_graph_launch(tgl_cuda_graph *g, tgl_errbuf *err)
{
    if (!g)
        return tgl_errbuf_set(err, TGL_EINVAL, "cuda emu: graph_launch: no graph");
    pthread_mutex_lock(&E.mu);
    bool on = C.on;
    pthread_mutex_unlock(&E.mu);
    if (on)
        return tgl_errbuf_set(err, TGL_EINVAL,
                              "cuda emu: graph_launch during a graph capture (not emulated)");
    for (int i = 0; i < g->n; i++) {
        tgl_status st = run_node(&g->nodes[i], err);
        if (st)
            return st;
    }
    return TGL_OK;
}

const tgl_cuda_driver tgl_cuda_driver_emu = {
    .name = "emu",
    .device_count = emu_device_count,
    .init = emu_init,
    .malloc = emu_malloc,
    .free = emu_free,
    .memcpy = emu_memcpy,
    .memset = emu_memset,
    .sync = emu_sync,
    .compile = emu_compile,
    .load = emu_load,
    .func = emu_func,
    .unload = emu_unload,
    .launch = emu_launch,
    .gemm = emu_gemm,
    .gemm_batched = emu_gemm_batched,
    .gemv = emu_gemv,
    .ger = emu_ger,
    .dot = emu_dot,
    .capture_begin = emu_capture_begin,
    .capture_end = emu_capture_end,
    .graph_launch = emu_graph_launch,
    .graph_free = emu_graph_free,
};
