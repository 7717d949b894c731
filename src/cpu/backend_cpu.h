/*
 * backend_cpu.h — the CPU backend's table (backend_cpu.c), for the file
 * that lists the backends by device (src/backends.c) and for src/cgen,
 * whose kernels name the backend that made them.  The engine reaches it
 * only through tgl_backend_get.
 */
#ifndef TGL_BACKEND_CPU_H
#define TGL_BACKEND_CPU_H

#include "engine/backend.h"

extern const tgl_backend tgl_backend_cpu;

/* The backend's tune entry (calibrate.c). */
void tgl_cpu_tune(const tgl_backend_opts *o, bool force);

#endif /* TGL_BACKEND_CPU_H */
