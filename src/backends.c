/*
 * backends.c — the backends this build has, by device: the table behind
 * tgl_backend_get (engine/backend.h).  It lives outside src/engine because
 * it is the one file that names every backend; the engine sees only the
 * table (scripts/check-layers.sh keeps it so).  A const table fixed at
 * build time rather than a registration call at start-up: nothing to
 * forget to call, and no mutable global state.
 */
#include "cpu/backend_cpu.h"
#include "sim/backend_sim.h"
#ifdef TGL_WITH_CUDA
#include "cuda/backend_cuda.h"
#endif

/* The CUDA backend is in its slot when built (TGL_WITH_CUDA); sim (a
 * device for tests) is in every build. */
const tgl_backend *const tgl_backends[TGL_NDEVICES] = {
    [TGL_DEVICE_CPU] = &tgl_backend_cpu,
    [TGL_DEVICE_SIM] = &tgl_backend_sim,
#ifdef TGL_WITH_CUDA
    [TGL_DEVICE_CUDA] = &tgl_backend_cuda,
#endif
};
