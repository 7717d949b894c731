/*
 * backend_sim.h — the simulated device's table (backend_sim.c), for the
 * file that lists the backends by device (src/backends.c).  The engine
 * reaches it only through tgl_backend_get.
 */
#ifndef TGL_BACKEND_SIM_H
#define TGL_BACKEND_SIM_H

#include "engine/backend.h"

extern const tgl_backend tgl_backend_sim;

#endif /* TGL_BACKEND_SIM_H */
