/*
 * dtype.c — the six element types: names, sizes, the promotion order
 * every op and the Lua layer share, and the conversions to and from double
 * that the reference paths (fill, get/set, cast) use.
 */
#include "engine/engine.h"

#include <math.h>
#include <string.h>

/* One row per dtype, in tgl_dtype order.  rank orders promotion as NumPy
 * does among these six, except that an integer with a float gives that
 * float (int64 + float32 is float32). */
static const struct {
    const char *name;
    size_t size;
    int rank;
} dtype_table[] = {
    [TGL_FLOAT32] = {"float32", 4, 4},
    [TGL_FLOAT64] = {"float64", 8, 5},
    [TGL_INT32] = {"int32", 4, 2},
    [TGL_INT64] = {"int64", 8, 3},
    [TGL_UINT8] = {"uint8", 1, 1},
    [TGL_BOOL] = {"bool", 1, 0},
};
_Static_assert(sizeof dtype_table / sizeof dtype_table[0] == TGL_NDTYPES,
               "dtype_table must list every dtype");

/* Other spellings users type (Torch7 and NumPy names). */
static const struct {
    const char *alias;
    tgl_dtype dtype;
} dtype_aliases[] = {
    {"float", TGL_FLOAT32}, {"double", TGL_FLOAT64}, {"int", TGL_INT32},
    {"long", TGL_INT64},    {"byte", TGL_UINT8},     {"boolean", TGL_BOOL},
};

const char *tgl_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < TGL_NDTYPES ? dtype_table[dtype].name : NULL;
}

int tgl_dtype_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < TGL_NDTYPES; i++)
        if (strcmp(name, dtype_table[i].name) == 0)
            return i;
    for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; i++)
        if (strcmp(name, dtype_aliases[i].alias) == 0)
            return (int)dtype_aliases[i].dtype;
    return -1;
}

size_t tgl_dtype_size(int dtype)
{
    return dtype >= 0 && dtype < TGL_NDTYPES ? dtype_table[dtype].size : 0;
}

int tgl_dtype_promote(int a, int b)
{
    if (a < 0 || a >= TGL_NDTYPES || b < 0 || b >= TGL_NDTYPES)
        return -1;
    return dtype_table[a].rank >= dtype_table[b].rank ? a : b;
}

double tgl_load_as_double(int dtype, const void *p, int64_t i)
{
    switch (dtype) {
    case TGL_FLOAT32: return ((const float *)p)[i];
    case TGL_FLOAT64: return ((const double *)p)[i];
    case TGL_INT32: return ((const int32_t *)p)[i];
    case TGL_INT64: return (double)((const int64_t *)p)[i];
    case TGL_UINT8: return ((const uint8_t *)p)[i];
    case TGL_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0.0;
    }
}

/* Integer conversion from double: truncates toward zero as C and NumPy do,
 * but saturates out-of-range values and maps NaN to 0 instead of invoking
 * undefined behaviour. */
static int64_t clamp_to_int(double v, double lo, double hi)
{
    if (isnan(v))
        return 0;
    if (v <= lo)
        return (int64_t)lo;
    if (v >= hi)
        return (int64_t)hi;
    return (int64_t)v;
}

void tgl_store_from_double(int dtype, void *p, int64_t i, double v)
{
    switch (dtype) {
    case TGL_FLOAT32: ((float *)p)[i] = (float)v; break;
    case TGL_FLOAT64: ((double *)p)[i] = v; break;
    case TGL_INT32: ((int32_t *)p)[i] = (int32_t)clamp_to_int(v, -2147483648.0, 2147483647.0); break;
    case TGL_INT64:
        /* 2^63 is not representable: anything at or above it saturates. */
        if (isnan(v))
            ((int64_t *)p)[i] = 0;
        else if (v >= 9223372036854775808.0)
            ((int64_t *)p)[i] = INT64_MAX;
        else if (v <= -9223372036854775808.0)
            ((int64_t *)p)[i] = INT64_MIN;
        else
            ((int64_t *)p)[i] = (int64_t)v;
        break;
    case TGL_UINT8: ((uint8_t *)p)[i] = (uint8_t)clamp_to_int(v, 0.0, 255.0); break;
    case TGL_BOOL: ((uint8_t *)p)[i] = v != 0.0; break;
    default: break;
    }
}
