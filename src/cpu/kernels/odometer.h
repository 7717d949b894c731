/*
 * odometer.h — the CPU kernels' walk over the outer axes of a loop nest
 * (reduce.c, nnet.c): the index of each axis, and the element offsets of
 * two arrays (s0/off0: the input, s1/off1: the output or accumulator),
 * advanced one position at a time in C order, so a kernel runs its inner
 * loop over the remaining axis with the two base offsets.
 */
#ifndef TGL_CPU_ODOMETER_H
#define TGL_CPU_ODOMETER_H

#include "tgl.h"

#include <stdint.h>

typedef struct tgl_odometer {
    int n;
    int64_t shape[TGL_MAX_DIMS], s0[TGL_MAX_DIMS], s1[TGL_MAX_DIMS], idx[TGL_MAX_DIMS];
    int64_t off0, off1;
} tgl_odometer;

/* The next position: the last axis moves fastest. */
static inline void tgl_odometer_next(tgl_odometer *o)
{
    for (int d = o->n - 1; d >= 0; d--) {
        o->off0 += o->s0[d];
        o->off1 += o->s1[d];
        if (++o->idx[d] < o->shape[d])
            return;
        o->off0 -= o->s0[d] * o->shape[d];
        o->off1 -= o->s1[d] * o->shape[d];
        o->idx[d] = 0;
    }
}

#endif /* TGL_CPU_ODOMETER_H */
