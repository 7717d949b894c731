/*
 * comm.c — the transport of tgl.dist: Open MPI when tgl is built with it
 * (TGL_HAVE_MPI), else a job of one process.  Only this file includes
 * mpi.h.
 *
 * Joining: a process a launcher started (mpirun: OMPI_COMM_WORLD_SIZE;
 * PMI/PMIx or srun's variables) calls MPI_Init_thread; a process started
 * alone never touches MPI and is rank 0 of 1, so a script runs unchanged
 * outside mpirun.  Two duplicates of MPI_COMM_WORLD keep apart the
 * collectives a caller waits for ("eager") and the gradient buckets the
 * progress thread runs ("async"): each communicator sees its collectives
 * in the same order on every process, which is all MPI asks.
 *
 * Every collective first reduces its description's hash and the hash
 * negated with MPI_MAX: the two agree exactly when every process has the
 * same description, and every process sees the same answer, so all fail
 * together; they then gather the descriptions to name each side.  The
 * payload is only sent once the descriptions agree (a collective whose
 * counts differ between processes is undefined in MPI).  The check polls
 * MPI_Test under a deadline instead of blocking in MPI_Wait, so a process
 * whose peer died or stopped calling collectives fails with TGL_EDIST
 * after the timeout instead of hanging; the job is then broken (a
 * collective left half done cannot be resumed) and tgl_dist_shutdown
 * aborts the whole job, which is how the other processes stop.  Once the
 * check has passed, every process is in the collective and the payload is
 * one blocking call (see collective()).
 *
 * The progress thread takes the buckets a compiled step starts, in order,
 * and runs each (check, then payload) while the step computes; the
 * bucket's wait blocks on its completion.  With MPI_THREAD_MULTIPLE both
 * threads call MPI freely; under a lesser grant (SERIALIZED) every MPI
 * call is made under one mutex.  In a job of one, buckets are the
 * identity and nothing is queued.
 */
#include "dist/dist.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef TGL_HAVE_MPI
#include <mpi.h>
#endif

#define DEFAULT_TIMEOUT 300.0
#define DEFAULT_BUCKET_BYTES (1 << 20)
/* Elements per MPI call: MPI counts are int. */
#define CHUNK ((int64_t)1 << 30)

typedef struct job {
    struct job *next;        /* the registry: buckets not yet waited for */
    struct job *qnext;       /* the progress thread's queue              */
    const void *key;
    void *buf;
    int64_t count;
    int dtype, op;
    tgl_dist_desc desc;
    tgl_array *hold;
    int done;                /* under qlock                              */
    tgl_status st;
    char msg[TGL_ERRMSG_SIZE];
} job;

static struct {
    pthread_mutex_t lock;    /* init/shutdown, and every MPI call         */
    atomic_int state;        /* 0 not joined, 1 joined alone, 2 joined over MPI, 3 left */
    int rank, size;
    _Atomic double timeout;
    _Atomic int64_t bucket_bytes;
    atomic_int overlap, overlap_set;
    atomic_int broken;
    char broken_why[TGL_ERRMSG_SIZE];
    /* the progress thread's queue (FIFO) and the buckets not yet waited for */
    pthread_mutex_t qlock;
    pthread_cond_t work, done;
    job *qhead, *qtail;
    job *jobs;               /* every bucket started and not yet waited for */
    bool thread_on, stop;
    bool multiple;           /* the library grants MPI_THREAD_MULTIPLE    */
    pthread_t thread;
#ifdef TGL_HAVE_MPI
    MPI_Comm eager, async;
#endif
} D = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .qlock = PTHREAD_MUTEX_INITIALIZER,
    .work = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .size = 1,
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double env_double(const char *name, double dflt)
{
    const char *s = getenv(name);
    char *end;
    double v = s ? strtod(s, &end) : 0;
    return s && *s && !*end && v > 0 ? v : dflt;
}

int tgl_dist_world_rank(void) { return D.rank; }
int tgl_dist_world_size(void) { return D.size; }
TGL_API int tgl_dist_rank(void) { return D.rank; }
TGL_API int tgl_dist_size(void) { return D.size; }
TGL_API int tgl_dist_initialized(void)
{
    int s = atomic_load(&D.state);
    return s == 1 || s == 2;
}

TGL_API int tgl_dist_available(void)
{
#ifdef TGL_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

#ifdef TGL_HAVE_MPI
static char library_text[MPI_MAX_LIBRARY_VERSION_STRING];
static void library_fill(void)
{
    int len = 0;
    if (MPI_Get_library_version(library_text, &len) != MPI_SUCCESS)
        snprintf(library_text, sizeof library_text, "MPI (version unknown)");
    library_text[strcspn(library_text, ",\n")] = 0; /* "Open MPI v4.1.4" */
}
#endif

TGL_API const char *tgl_dist_library(void)
{
#ifdef TGL_HAVE_MPI
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, library_fill);
    return library_text;
#else
    return "";
#endif
}

TGL_API int tgl_dist_launched_size(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE",
                                       "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *s = getenv(vars[i]);
        if (s && *s) {
            long v = strtol(s, NULL, 10);
            if (v > 0 && v < (1L << 30))
                return (int)v;
        }
    }
    return 0;
}

TGL_API double tgl_dist_timeout(void)
{
    double t = atomic_load(&D.timeout);
    return t > 0 ? t : env_double("TGL_DIST_TIMEOUT", DEFAULT_TIMEOUT);
}

TGL_API void tgl_dist_set_overlap(int mode)
{
    atomic_store(&D.overlap, mode > 0 ? 1 : mode == 0 ? 0 : -1);
    atomic_store(&D.overlap_set, 1);
}

TGL_API int tgl_dist_overlap_setting(void)
{
    if (atomic_load(&D.overlap_set))
        return atomic_load(&D.overlap);
    const char *s = getenv("TGL_DIST_OVERLAP");
    if (s && (!strcmp(s, "on") || !strcmp(s, "1")))
        return 1;
    if (s && (!strcmp(s, "off") || !strcmp(s, "0")))
        return 0;
    return -1;
}

/* Processes of this job on this machine: the launcher's count. */
static int local_size(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                       "SLURM_NTASKS_PER_NODE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *s = getenv(vars[i]);
        long v = s ? strtol(s, NULL, 10) : 0;
        if (v > 0 && v < (1L << 30))
            return (int)v;
    }
    return tgl_dist_launched_size() > 0 ? tgl_dist_launched_size() : 1;
}

TGL_API int tgl_dist_overlaps(int threads)
{
    int mode = tgl_dist_overlap_setting();
    if (mode >= 0)
        return mode;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    if (tgl_dist_launched_size() <= 1)
        return 1; /* nothing to send: the rewrite only shapes the program */
    long busy = (long)local_size() * (threads > 0 ? threads : cores);
    return busy < cores;
}

TGL_API void tgl_dist_set_bucket_bytes(int64_t bytes)
{
    atomic_store(&D.bucket_bytes, bytes > 0 ? bytes : 0);
}

TGL_API int64_t tgl_dist_bucket_bytes(void)
{
    int64_t b = atomic_load(&D.bucket_bytes);
    return b > 0 ? b : (int64_t)env_double("TGL_DIST_BUCKET_BYTES", DEFAULT_BUCKET_BYTES);
}

const char *tgl_dist_op_name(int op)
{
    static const char *const names[] = {"sum", "mean", "max", "min", "prod"};
    return op >= 0 && op <= TGL_DIST_PROD ? names[op] : NULL;
}

tgl_status tgl_dist_check_reduce(tgl_ctx *ctx, const char *fname, int op, int dtype)
{
    TGL_CHECK(tgl_dist_op_name(op), TGL_EINVAL,
              "%s: op must be 'sum', 'mean', 'max', 'min' or 'prod'", fname);
    TGL_CHECK(dtype == TGL_FLOAT32 || dtype == TGL_FLOAT64 || dtype == TGL_INT32 ||
                  dtype == TGL_INT64,
              TGL_EDTYPE, "%s: reduces float32, float64, int32 and int64 arrays, got %s", fname,
              tgl_dtype_name(dtype));
    TGL_CHECK(op != TGL_DIST_MEAN || dtype == TGL_FLOAT32 || dtype == TGL_FLOAT64, TGL_EDTYPE,
              "%s: 'mean' needs a float array (got %s): reduce with 'sum' and divide", fname,
              tgl_dtype_name(dtype));
    return TGL_OK;
}

void tgl_dist_describe(tgl_dist_desc *d, const char *what, int dtype, int ndim,
                       const int64_t *shape)
{
    int n = snprintf(d->text, sizeof d->text, "%s of %s (", what,
                     dtype >= 0 ? tgl_dtype_name(dtype) : "bytes");
    for (int i = 0; i < ndim && n > 0 && n < (int)sizeof d->text; i++)
        n += snprintf(d->text + n, sizeof d->text - (size_t)n, "%s%lld", i ? "," : "",
                      (long long)shape[i]);
    if (n > 0 && n < (int)sizeof d->text)
        snprintf(d->text + n, sizeof d->text - (size_t)n, ")");
}

/* Divides the sum by the number of processes (MEAN). */
static void divide(void *buf, int64_t count, int dtype, int size)
{
    if (dtype == TGL_FLOAT32) {
        float *p = buf, n = (float)size;
        for (int64_t i = 0; i < count; i++)
            p[i] /= n;
    } else if (dtype == TGL_FLOAT64) {
        double *p = buf, n = (double)size;
        for (int64_t i = 0; i < count; i++)
            p[i] /= n;
    }
}

static tgl_status broken_error(tgl_ctx *ctx)
{
    return tgl_ctx_set_error(ctx, TGL_EDIST, "%s", D.broken_why);
}

/* The first failure breaks the job; its message is the one kept. */
static void set_broken(const char *msg)
{
    pthread_mutex_lock(&D.qlock);
    if (!atomic_load(&D.broken)) {
        snprintf(D.broken_why, sizeof D.broken_why,
                 "tgl.dist: the job is broken since an earlier collective failed (%.*s); "
                 "restart it (every process)", (int)(sizeof D.broken_why - 160), msg);
        atomic_store(&D.broken, 1);
    }
    pthread_mutex_unlock(&D.qlock);
}

/* Whether collectives may run: after tgl_dist_init; before it only in a
 * process started alone (a job of one), so that a process of a larger
 * job that forgot to join fails instead of training on its own. */
static tgl_status joined(tgl_ctx *ctx, const char *fname)
{
    int state = atomic_load(&D.state);
    TGL_CHECK(state != 3, TGL_EDIST, "%s: this process has left the job (tgl.dist.shutdown)",
              fname);
    TGL_CHECK(state != 0 || tgl_dist_launched_size() <= 1, TGL_EDIST,
              "%s: this process is one of %d that a launcher (mpirun) started: call "
              "tgl.dist.init() first",
              fname, tgl_dist_launched_size());
    if (atomic_load(&D.broken))
        return broken_error(ctx);
    return TGL_OK;
}

#ifdef TGL_HAVE_MPI

static MPI_Datatype mpi_type(int dtype)
{
    switch (dtype) {
    case TGL_FLOAT32: return MPI_FLOAT;
    case TGL_FLOAT64: return MPI_DOUBLE;
    case TGL_INT32: return MPI_INT32_T;
    case TGL_INT64: return MPI_INT64_T;
    default: return MPI_BYTE;
    }
}

static MPI_Op mpi_op(int op)
{
    switch (op) {
    case TGL_DIST_MAX: return MPI_MAX;
    case TGL_DIST_MIN: return MPI_MIN;
    case TGL_DIST_PROD: return MPI_PROD;
    default: return MPI_SUM;
    }
}

/* Every MPI call goes through these: a library granting
 * MPI_THREAD_MULTIPLE takes calls from both threads at once; a lesser
 * one (SERIALIZED) gets them one at a time. */
static void mpi_lock(void)
{
    if (!D.multiple)
        pthread_mutex_lock(&D.lock);
}
static void mpi_unlock(void)
{
    if (!D.multiple)
        pthread_mutex_unlock(&D.lock);
}

static void mpi_message(int code, char *out, size_t n)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error %d", code);
    snprintf(out, n, "%s", s);
}

/* Waits for r under the deadline, polling (so that progress is made and a
 * dead peer is noticed).  0: done; 1: the deadline passed; 2: interrupted;
 * else an MPI error code + 3 (what = its message). */
static int wait_req(MPI_Request *r, double deadline, tgl_ctx *ctx, char *what, size_t n)
{
    /* Spin (yielding) for the first millisecond, when the others are
     * about to arrive; then sleep, longer and longer, up to 100 us: a
     * process waiting for a slow peer leaves the cores to the work. */
    double t0 = now();
    long ns = 1000;
    for (;;) {
        int flag = 0;
        mpi_lock();
        int rc = MPI_Test(r, &flag, MPI_STATUS_IGNORE);
        mpi_unlock();
        if (rc != MPI_SUCCESS) {
            mpi_message(rc, what, n);
            return 3;
        }
        if (flag)
            return 0;
        if (ctx && tgl_ctx_interrupted(ctx))
            return 2;
        double t = now();
        if (t > deadline)
            return 1;
        if (t - t0 < 1e-3) {
            sched_yield();
        } else {
            struct timespec ts = {0, ns};
            nanosleep(&ts, NULL);
            if (ns < 100000)
                ns *= 2;
        }
    }
}

/* A failure (w: 1 the deadline passed, 2 interrupted, 3 MPI failed with
 * why) as msg; it breaks the job. */
static tgl_status failed(int w, const char *what, const char *why, char *msg, size_t n)
{
    if (w == 1)
        snprintf(msg, n,
                 "tgl.dist: %s: rank %d of %d waited %.0f s for the other processes: one of "
                 "them failed, was killed, or stopped calling collectives in the same order "
                 "(the timeout is tgl.dist.init{timeout=} or TGL_DIST_TIMEOUT)",
                 what, D.rank + 1, D.size, tgl_dist_timeout());
    else if (w == 2)
        snprintf(msg, n, "tgl.dist: %s: interrupted while waiting for the other processes",
                 what);
    else
        snprintf(msg, n, "tgl.dist: %s: MPI failed: %s", what, why);
    set_broken(msg);
    return w == 2 ? TGL_EINTERRUPT : TGL_EDIST;
}

/* A blocking MPI call's result: TGL_OK, or the failure (it breaks the job). */
static tgl_status mpi_result(int rc, const char *what, char *msg, size_t n)
{
    if (rc == MPI_SUCCESS)
        return TGL_OK;
    char why[MPI_MAX_ERROR_STRING];
    mpi_message(rc, why, sizeof why);
    return failed(3, what, why, msg, n);
}

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h >> 2; /* positive as an int64, and so is its negation */
}

/* The description check (see the file's comment): a non-blocking
 * reduction polled under the deadline, the one place a process whose
 * peer died or went elsewhere finds out.  On a mismatch every process is
 * here too: they gather every description and fail with all of them
 * named, and the job may go on. */
static tgl_status check_desc(tgl_ctx *ctx, MPI_Comm comm, const tgl_dist_desc *d,
                             double deadline, char *msg, size_t n)
{
    /* On the heap: a reduction abandoned at the deadline stays pending,
     * and MPI may still write its result; the buffer is then left to it. */
    int64_t h = (int64_t)fnv(d->text), *v = malloc(2 * sizeof *v);
    if (!v) {
        snprintf(msg, n, "tgl.dist: %s: out of memory", d->text);
        return TGL_ENOMEM;
    }
    v[0] = h;
    v[1] = -h;
    MPI_Request r = MPI_REQUEST_NULL;
    char why[MPI_MAX_ERROR_STRING + 64] = "";
    mpi_lock();
    int rc = MPI_Iallreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_MAX, comm, &r);
    mpi_unlock();
    int w = rc != MPI_SUCCESS ? (mpi_message(rc, why, sizeof why), 3)
                              : wait_req(&r, deadline, ctx, why, sizeof why);
    if (w) {
        if (w == 3)
            free(v);
        return failed(w, d->text, why, msg, n);
    }
    bool same = v[0] == -v[1];
    free(v);
    if (same)
        return TGL_OK;
    tgl_dist_desc *each = malloc((size_t)D.size * sizeof *d);
    if (!each) {
        snprintf(msg, n, "tgl.dist: %s: the processes disagree (out of memory naming them)",
                 d->text);
        set_broken(msg);
        return TGL_EDIST;
    }
    mpi_lock();
    rc = MPI_Allgather(d, (int)sizeof *d, MPI_BYTE, each, (int)sizeof *d, MPI_BYTE, comm);
    mpi_unlock();
    tgl_status st = mpi_result(rc, d->text, msg, n);
    if (!st) {
        int k = snprintf(msg, n, "tgl.dist: the processes called different collectives (ranks "
                                 "from 1):");
        for (int i = 0; i < D.size && k > 0 && (size_t)k < n; i++) {
            each[i].text[sizeof each[i].text - 1] = 0;
            k += snprintf(msg + k, n - (size_t)k, "%s rank %d: %s", i ? ";" : "", i + 1,
                          each[i].text);
        }
        st = TGL_EDIST;
    }
    free(each);
    return st;
}

/* One collective: the description check, then the payload.  Once the
 * check has passed every process is inside this collective, and the
 * payload is a blocking call: Open MPI advances a large non-blocking
 * collective only while it is polled, segment by segment, and polling
 * with sleeps made a 4 MB allreduce ten times slower than the blocking
 * call, which runs the library's own tuned algorithm.  (A peer that dies
 * during the payload ends the job: mpirun kills the others.)  A barrier
 * is the check alone: it completes only when every process has arrived.
 * Reductions and broadcasts go in pieces of at most CHUNK elements (MPI
 * counts are int). */
enum coll_kind { COLL_BARRIER, COLL_ALLREDUCE, COLL_BCAST, COLL_ALLGATHER };
struct coll {
    enum coll_kind kind;
    const void *in;        /* allgather: this process's part               */
    void *out;             /* allreduce, broadcast: in place; allgather: all */
    int64_t count;         /* elements of type (allgather: bytes of in)     */
    size_t elem;           /* bytes per element                             */
    MPI_Datatype type;
    MPI_Op op;
    int root;
};
static tgl_status collective(tgl_ctx *ctx, MPI_Comm comm, const tgl_dist_desc *d,
                             const struct coll *c, char *msg, size_t n)
{
    double deadline = now() + tgl_dist_timeout();
    tgl_status st = check_desc(ctx, comm, d, deadline, msg, n);
    if (st || c->kind == COLL_BARRIER)
        return st;
    if (c->kind == COLL_ALLGATHER) {
        mpi_lock();
        int rc = MPI_Allgather(c->in, (int)c->count, MPI_BYTE, c->out, (int)c->count, MPI_BYTE,
                               comm);
        mpi_unlock();
        return mpi_result(rc, d->text, msg, n);
    }
    char *out = c->out;
    for (int64_t at = 0; at < c->count && !st; at += CHUNK) {
        int k = (int)(c->count - at < CHUNK ? c->count - at : CHUNK);
        void *p = out + (size_t)at * c->elem;
        mpi_lock();
        int rc = c->kind == COLL_ALLREDUCE
                     ? MPI_Allreduce(MPI_IN_PLACE, p, k, c->type, c->op, comm)
                     : MPI_Bcast(p, k, c->type, c->root, comm);
        mpi_unlock();
        st = mpi_result(rc, d->text, msg, n);
    }
    return st;
}

static tgl_status fail(tgl_ctx *ctx, tgl_status st, const char *msg)
{
    return tgl_ctx_set_error(ctx, st, "%s", msg);
}

/* ---- the progress thread ---- */

static void *progress(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&D.qlock);
    for (;;) {
        while (!D.qhead && !D.stop)
            pthread_cond_wait(&D.work, &D.qlock);
        if (!D.qhead && D.stop)
            break;
        job *j = D.qhead;
        D.qhead = j->qnext;
        if (!D.qhead)
            D.qtail = NULL;
        j->qnext = NULL;
        pthread_mutex_unlock(&D.qlock);
        tgl_status st = TGL_OK;
        char msg[TGL_ERRMSG_SIZE] = "";
        if (atomic_load(&D.broken)) {
            st = TGL_EDIST;
            snprintf(msg, sizeof msg, "%s", D.broken_why);
        } else {
            struct coll c = {.kind = COLL_ALLREDUCE, .out = j->buf, .count = j->count,
                             .elem = tgl_dtype_size(j->dtype), .type = mpi_type(j->dtype),
                             .op = mpi_op(j->op)};
            st = collective(NULL, D.async, &j->desc, &c, msg, sizeof msg);
            if (!st && j->op == TGL_DIST_MEAN)
                divide(j->buf, j->count, j->dtype, D.size);
        }
        pthread_mutex_lock(&D.qlock);
        j->st = st;
        snprintf(j->msg, sizeof j->msg, "%s", msg);
        j->done = 1;
        pthread_cond_broadcast(&D.done);
    }
    pthread_mutex_unlock(&D.qlock);
    return NULL;
}

#endif /* TGL_HAVE_MPI */

/* ---- joining and leaving ---- */

static void at_exit(void)
{
    tgl_dist_shutdown(0);
}

/* The environment's settings, checked where they are first used: a bad
 * value is an error naming it, never silently the default. */
static tgl_status check_env(tgl_ctx *ctx)
{
    static const struct {
        const char *name, *expect;
        int kind; /* 0 a number > 0, 1 on|off|auto */
    } vars[] = {{"TGL_DIST_TIMEOUT", "seconds > 0", 0},
                {"TGL_DIST_BUCKET_BYTES", "a number of bytes > 0", 0},
                {"TGL_DIST_OVERLAP", "on, off or auto", 1}};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i].name);
        if (!v)
            continue;
        bool ok;
        if (vars[i].kind == 0) {
            char *end;
            double d = strtod(v, &end);
            ok = *v && !*end && d > 0;
        } else {
            ok = !strcmp(v, "on") || !strcmp(v, "off") || !strcmp(v, "auto") || !strcmp(v, "1") ||
                 !strcmp(v, "0");
        }
        TGL_CHECK(ok, TGL_EINVAL,
                  "tgl.dist.init: environment variable %s='%.64s' is not valid: expected %s",
                  vars[i].name, v, vars[i].expect);
    }
    return TGL_OK;
}

TGL_API tgl_status tgl_dist_init(tgl_ctx *ctx, double timeout_s)
{
    TGL_CHECK_CTX(ctx);
    tgl_status est = check_env(ctx);
    if (est)
        return est;
    if (timeout_s > 0)
        atomic_store(&D.timeout, timeout_s);
    int launched = tgl_dist_launched_size();
    pthread_mutex_lock(&D.lock);
    int state = atomic_load(&D.state);
    pthread_mutex_unlock(&D.lock);
    if (state == 1 || state == 2)
        return TGL_OK;
    TGL_CHECK(state == 0, TGL_EDIST,
              "tgl.dist.init: this process already left the job (tgl.dist.shutdown); it "
              "cannot join again");
#ifndef TGL_HAVE_MPI
    TGL_CHECK(launched <= 1, TGL_EDIST,
              "tgl.dist.init: this process was started by a launcher (mpirun or srun) as one "
              "of %d, but this tgl was built without MPI: install Open MPI "
              "(scripts/install-deps.sh) and rebuild with -DTGL_MPI=ON "
              "(tgl.dist.available() tells)",
              launched);
    atomic_store(&D.state, 1);
    return TGL_OK;
#else
    if (launched == 0) {
        /* Started alone: a job of one, without MPI. */
        atomic_store(&D.state, 1);
        return TGL_OK;
    }
    pthread_mutex_lock(&D.lock);
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    int rc = inited ? MPI_Query_thread(&provided)
                    : MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc == MPI_SUCCESS) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &D.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &D.size);
        rc = MPI_Comm_dup(MPI_COMM_WORLD, &D.eager);
        if (rc == MPI_SUCCESS)
            rc = MPI_Comm_dup(MPI_COMM_WORLD, &D.async);
        if (rc == MPI_SUCCESS) {
            MPI_Comm_set_errhandler(D.eager, MPI_ERRORS_RETURN);
            MPI_Comm_set_errhandler(D.async, MPI_ERRORS_RETURN);
        }
    }
    pthread_mutex_unlock(&D.lock);
    if (rc != MPI_SUCCESS) {
        char why[MPI_MAX_ERROR_STRING];
        mpi_message(rc, why, sizeof why);
        return tgl_ctx_set_error(ctx, TGL_EDIST, "tgl.dist.init: MPI could not start: %s", why);
    }
    D.multiple = provided >= MPI_THREAD_MULTIPLE;
    if (provided < MPI_THREAD_SERIALIZED) {
        return tgl_ctx_set_error(ctx, TGL_EDIST,
                                 "tgl.dist.init: the MPI library grants thread level %d; tgl "
                                 "needs MPI_THREAD_SERIALIZED or more",
                                 provided);
    }
    pthread_mutex_lock(&D.qlock);
    D.stop = false;
    int trc = pthread_create(&D.thread, NULL, progress, NULL);
    D.thread_on = trc == 0;
    pthread_mutex_unlock(&D.qlock);
    TGL_CHECK(trc == 0, TGL_EDIST, "tgl.dist.init: cannot start the progress thread (%s)",
              strerror(trc));
    atomic_store(&D.state, 2);
    atexit(at_exit);
    return TGL_OK;
#endif
}

TGL_API void tgl_dist_shutdown(int status)
{
    pthread_mutex_lock(&D.lock);
    int state = atomic_load(&D.state);
    if (state != 2) {
        if (state == 1)
            atomic_store(&D.state, 3);
        pthread_mutex_unlock(&D.lock);
        return;
    }
    atomic_store(&D.state, 3);
    pthread_mutex_unlock(&D.lock);
#ifdef TGL_HAVE_MPI
    if (status != 0 || atomic_load(&D.broken)) {
        /* The others may be waiting for this process: end them all. */
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
        _exit(status ? status : 1);
    }
    pthread_mutex_lock(&D.qlock);
    D.stop = true;
    pthread_cond_broadcast(&D.work);
    bool on = D.thread_on;
    D.thread_on = false;
    pthread_mutex_unlock(&D.qlock);
    if (on)
        pthread_join(D.thread, NULL);
    pthread_mutex_lock(&D.lock);
    MPI_Comm_free(&D.eager);
    MPI_Comm_free(&D.async);
    MPI_Finalize();
    pthread_mutex_unlock(&D.lock);
#else
    (void)status;
#endif
}

/* ---- blocking collectives ---- */

tgl_status tgl_dist_comm_allreduce(tgl_ctx *ctx, const tgl_dist_desc *d, void *buf,
                                   int64_t count, int dtype, int op)
{
    tgl_status st = joined(ctx, "tgl.dist.allreduce");
    if (st || D.size == 1)
        return st;
#ifdef TGL_HAVE_MPI
    char msg[TGL_ERRMSG_SIZE];
    struct coll c = {.kind = COLL_ALLREDUCE, .out = buf, .count = count,
                     .elem = tgl_dtype_size(dtype), .type = mpi_type(dtype), .op = mpi_op(op)};
    st = collective(ctx, D.eager, d, &c, msg, sizeof msg);
    if (st)
        return fail(ctx, st, msg);
    if (op == TGL_DIST_MEAN)
        divide(buf, count, dtype, D.size);
#else
    (void)d, (void)buf, (void)count, (void)dtype, (void)op;
#endif
    return TGL_OK;
}

tgl_status tgl_dist_comm_broadcast(tgl_ctx *ctx, const tgl_dist_desc *d, void *buf,
                                   int64_t nbytes, int root)
{
    tgl_status st = joined(ctx, "tgl.dist.broadcast");
    if (st)
        return st;
    TGL_CHECK(root >= 0 && root < D.size, TGL_EINVAL,
              "tgl.dist.broadcast: root must be a rank from 1 to %d, got %d", D.size, root + 1);
    if (D.size == 1)
        return TGL_OK;
#ifdef TGL_HAVE_MPI
    char msg[TGL_ERRMSG_SIZE];
    struct coll c = {.kind = COLL_BCAST, .out = buf, .count = nbytes, .elem = 1,
                     .type = MPI_BYTE, .root = root};
    st = collective(ctx, D.eager, d, &c, msg, sizeof msg);
    if (st)
        return fail(ctx, st, msg);
#else
    (void)d, (void)buf, (void)nbytes;
#endif
    return TGL_OK;
}

tgl_status tgl_dist_comm_allgather(tgl_ctx *ctx, const tgl_dist_desc *d, const void *in,
                                   void *out, int64_t nbytes)
{
    tgl_status st = joined(ctx, "tgl.dist.allgather");
    if (st)
        return st;
    if (D.size == 1) {
        if (nbytes)
            memcpy(out, in, (size_t)nbytes);
        return TGL_OK;
    }
#ifdef TGL_HAVE_MPI
    TGL_CHECK(nbytes <= INT32_MAX, TGL_ESHAPE,
              "tgl.dist.allgather: each process's array may hold at most 2 GiB, got %lld bytes",
              (long long)nbytes);
    char msg[TGL_ERRMSG_SIZE];
    struct coll c = {.kind = COLL_ALLGATHER, .in = in, .out = out, .count = nbytes, .elem = 1};
    st = collective(ctx, D.eager, d, &c, msg, sizeof msg);
    if (st)
        return fail(ctx, st, msg);
#else
    (void)d;
#endif
    return TGL_OK;
}

tgl_status tgl_dist_comm_barrier(tgl_ctx *ctx)
{
    tgl_status st = joined(ctx, "tgl.dist.barrier");
    if (st || D.size == 1)
        return st;
#ifdef TGL_HAVE_MPI
    char msg[TGL_ERRMSG_SIZE];
    tgl_dist_desc d;
    snprintf(d.text, sizeof d.text, "barrier");
    struct coll c = {.kind = COLL_BARRIER};
    st = collective(ctx, D.eager, &d, &c, msg, sizeof msg);
    if (st)
        return fail(ctx, st, msg);
#endif
    return TGL_OK;
}

/* ---- buckets ---- */

static void job_free(job *j)
{
    tgl_array_release(j->hold);
    free(j);
}

tgl_status tgl_dist_async_start(tgl_ctx *ctx, const tgl_dist_desc *d, const void *key,
                                void *buf, int64_t count, int dtype, int op, tgl_array *hold,
                                bool reduced)
{
    tgl_status st = joined(ctx, "allreduce");
    if (st || D.size == 1)
        return st; /* a job of one: the buffer is the sum; nothing to wait for */
    job *j = calloc(1, sizeof *j);
    TGL_CHECK(j, TGL_ENOMEM, "allreduce: out of memory");
    j->key = key;
    j->buf = buf;
    j->count = count;
    j->dtype = dtype;
    j->op = op;
    j->desc = *d;
    j->hold = hold;
    tgl_array_retain(hold);
    job *abandoned = NULL;
    pthread_mutex_lock(&D.qlock);
    /* Buckets of a step that failed before waiting for them: done, and
     * nothing but the bucket holds their buffer any more (or this one
     * reuses it). */
    for (job **p = &D.jobs; *p;) {
        job *o = *p;
        if (o->done && (o->key == key || TGL_REFS(o->hold) == 1)) {
            *p = o->next;
            o->next = abandoned;
            abandoned = o;
        } else {
            p = &o->next;
        }
    }
    j->next = D.jobs;
    D.jobs = j;
    if (!reduced) {
        if (D.qtail)
            D.qtail->qnext = j;
        else
            D.qhead = j;
        D.qtail = j;
        pthread_cond_signal(&D.work);
    } else {
        j->done = 1;
    }
    pthread_mutex_unlock(&D.qlock);
    while (abandoned) {
        job *o = abandoned;
        abandoned = o->next;
        job_free(o);
    }
    return TGL_OK;
}

tgl_status tgl_dist_async_wait(tgl_ctx *ctx, const void *key)
{
    pthread_mutex_lock(&D.qlock);
    job *j = D.jobs;
    while (j && j->key != key)
        j = j->next;
    if (!j) {
        pthread_mutex_unlock(&D.qlock);
        if (D.size == 1)
            return TGL_OK; /* a job of one registers nothing */
        return tgl_ctx_set_error(ctx, TGL_EINTERNAL, "allreduce: no bucket was started here");
    }
    /* The progress thread bounds each collective by the timeout; this
     * wait is bounded too, for the buckets queued behind a stuck one. */
    double t0 = now(), deadline = t0 + 2 * tgl_dist_timeout() + 5;
    bool late = false;
    while (!j->done && !late) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&D.done, &D.qlock, &ts);
        if (!j->done && tgl_ctx_interrupted(ctx)) {
            pthread_mutex_unlock(&D.qlock);
            set_broken("interrupted while a gradient bucket was being reduced");
            return tgl_ctx_set_error(ctx, TGL_EINTERRUPT,
                                     "allreduce: interrupted while waiting for the other "
                                     "processes");
        }
        late = now() > deadline;
    }
    if (!j->done) {
        pthread_mutex_unlock(&D.qlock);
        char msg[TGL_ERRMSG_SIZE];
        snprintf(msg, sizeof msg, "tgl.dist: %s: not reduced after %.0f s", j->desc.text,
                 now() - t0);
        set_broken(msg);
        return tgl_ctx_set_error(ctx, TGL_EDIST, "%s", msg);
    }
    for (job **p = &D.jobs; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            break;
        }
    pthread_mutex_unlock(&D.qlock);
    tgl_status st = j->st;
    if (st)
        tgl_ctx_set_error(ctx, st, "%s", j->msg);
    job_free(j);
    return st;
}
