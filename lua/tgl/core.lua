-- tgl.core — the FFI binding of include/tgl.h and the helpers every other
-- tgl module uses: the engine namespace (C), this Lua state's context (ctx),
-- error raising (check) and array ownership (wrap).
--
-- The declarations below mirror include/tgl.h; keep them in the same order.
-- The array descriptor's fields data/shape/strides/size carry a leading
-- underscore here (same layout): struct fields shadow methods on cdata, and
-- users call a:data(), a:shape(), a:size(d).
local ffi = require 'ffi'

ffi.cdef [[
typedef enum tgl_status {
    TGL_OK = 0, TGL_EINVAL, TGL_ESHAPE, TGL_EDTYPE, TGL_ENOMEM, TGL_EIO,
    TGL_EFORMAT, TGL_EINTERRUPT, TGL_EINTERNAL
} tgl_status;

typedef struct tgl_ctx tgl_ctx;
tgl_ctx *tgl_ctx_new(void);
void tgl_ctx_free(tgl_ctx *ctx);
const char *tgl_ctx_error(const tgl_ctx *ctx);
void tgl_ctx_clear_error(tgl_ctx *ctx);
void tgl_ctx_manual_seed(tgl_ctx *ctx, uint64_t seed);
void tgl_ctx_rng_state(const tgl_ctx *ctx, uint64_t *seed, uint64_t *offset);
void tgl_ctx_set_rng_state(tgl_ctx *ctx, uint64_t seed, uint64_t offset);
void tgl_ctx_set_interrupt_flag(tgl_ctx *ctx, volatile int *flag);

const char *tgl_dtype_name(int dtype);
int tgl_dtype_from_name(const char *name);
size_t tgl_dtype_size(int dtype);

const char *tgl_device_name(int device);
typedef struct tgl_storage tgl_storage;
typedef struct tgl_array {
    void *_data;
    int64_t _shape[8];
    int64_t _strides[8];
    int64_t _size;
    int32_t ndim;
    int32_t dtype_id;
    int32_t refcount;
    int32_t flags;
    tgl_storage *storage;
    int32_t device;
    int32_t reserved;
} tgl_array;
/* What Lua holds: a box around the pointer.  Pointer cdata would turn
   a + 1 and a - b into pointer arithmetic; a struct gets the metamethods. */
typedef struct tgl_aref { tgl_array *p; } tgl_aref;

tgl_status tgl_array_empty(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape, tgl_array **out);
tgl_status tgl_array_zeros(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape, tgl_array **out);
tgl_status tgl_array_full(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape, double value, tgl_array **out);
tgl_status tgl_array_arange(tgl_ctx *ctx, int dtype, double start, double stop, double step, tgl_array **out);
tgl_status tgl_array_rand(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape, double lo, double hi, tgl_array **out);
tgl_status tgl_array_randn(tgl_ctx *ctx, int dtype, int ndim, const int64_t *shape, double mean, double std, tgl_array **out);
void tgl_array_retain(tgl_array *a);
void tgl_array_release(tgl_array *a);
tgl_status tgl_array_view(tgl_ctx *ctx, tgl_array *a, int ndim, const int64_t *shape, const int64_t *strides, int64_t offset, tgl_array **out);
tgl_status tgl_array_reshape(tgl_ctx *ctx, tgl_array *a, int ndim, const int64_t *shape, tgl_array **out);
tgl_status tgl_array_transpose(tgl_ctx *ctx, tgl_array *a, const int *perm, tgl_array **out);
tgl_status tgl_array_copy(tgl_ctx *ctx, const tgl_array *a, int dtype, tgl_array **out);
tgl_status tgl_array_assign(tgl_ctx *ctx, tgl_array *dst, const tgl_array *src);
tgl_status tgl_array_get(tgl_ctx *ctx, const tgl_array *a, const int64_t *idx, double *out);
tgl_status tgl_array_set(tgl_ctx *ctx, tgl_array *a, const int64_t *idx, double value);
int tgl_array_is_contiguous(const tgl_array *a);
int tgl_array_equal_bits(const tgl_array *a, const tgl_array *b);
int64_t tgl_memory_live_bytes(void);

tgl_status tgl_npy_save(tgl_ctx *ctx, const char *path, const tgl_array *a);
tgl_status tgl_npy_load(tgl_ctx *ctx, const char *path, tgl_array **out);
tgl_status tgl_npz_save(tgl_ctx *ctx, const char *path, int n, const char *const *names,
                        const tgl_array *const *arrays, int compress);
typedef struct tgl_npz { int n; char **names; tgl_array **arrays; } tgl_npz;
tgl_status tgl_npz_load(tgl_ctx *ctx, const char *path, tgl_npz **out);
void tgl_npz_free(tgl_npz *npz);
tgl_status tgl_idx_load(tgl_ctx *ctx, const char *path, tgl_array **out);

typedef struct tgl_type { int32_t dtype; int32_t ndim; uint32_t bcast; } tgl_type;
typedef struct tgl_params { int32_t n; int32_t flags; int64_t i[40]; double f[2]; } tgl_params;
typedef struct tgl_node tgl_node;
/* What Lua holds for a graph node (nodes live as long as the context). */
typedef struct tgl_vref { tgl_node *n; } tgl_vref;
int tgl_op_lookup(const char *name);
const char *tgl_op_name(int op);
int tgl_op_count(void);
tgl_status tgl_node_input(tgl_ctx *ctx, tgl_type type, const char *name, tgl_node **out);
tgl_status tgl_node_constant(tgl_ctx *ctx, tgl_array *value, tgl_node **out);
tgl_status tgl_node_shared(tgl_ctx *ctx, tgl_array *value, uint32_t bcast, const char *name, tgl_node **out);
tgl_status tgl_shared_get(tgl_ctx *ctx, const tgl_node *s, tgl_array **out);
tgl_status tgl_shared_set(tgl_ctx *ctx, tgl_node *s, tgl_array *value);
tgl_status tgl_apply(tgl_ctx *ctx, int op, int nin, tgl_node *const *in, const tgl_params *p,
                     const char *source, tgl_node **out);
tgl_type tgl_node_type(const tgl_node *n);
int tgl_node_kind_of(const tgl_node *n);
int tgl_node_op(const tgl_node *n);
int tgl_node_ninputs(const tgl_node *n);
tgl_node *tgl_node_input_at(const tgl_node *n, int i);
const tgl_params *tgl_node_params(const tgl_node *n);
uint32_t tgl_node_id(const tgl_node *n);
const char *tgl_node_name(const tgl_node *n);
tgl_status tgl_node_set_name(tgl_ctx *ctx, tgl_node *n, const char *name);
const char *tgl_node_source(const tgl_node *n);
tgl_array *tgl_node_value(const tgl_node *n);
tgl_status tgl_eval(tgl_ctx *ctx, int op, int nin, tgl_array *const *in, const tgl_params *p, tgl_array **out);
tgl_status tgl_clone_replace(tgl_ctx *ctx, int n, tgl_node *const *outs, int nrep,
                             tgl_node *const *from, tgl_node *const *to, tgl_node **result);
tgl_status tgl_grad(tgl_ctx *ctx, tgl_node *cost, int nwrt, tgl_node *const *wrt, int nknown,
                    tgl_node *const *known_vars, tgl_node *const *known_grads, int disconnected,
                    tgl_node **grads);
typedef struct tgl_function tgl_function;
typedef struct tgl_compile_options { int linker; int profile; const char *name; int mode; } tgl_compile_options;
tgl_status tgl_config_set(tgl_ctx *ctx, const char *key, const char *value);
const char *tgl_config_get(tgl_ctx *ctx, const char *key);
tgl_status tgl_optimize(tgl_ctx *ctx, int level, int n, tgl_node *const *in, tgl_node **out);
tgl_status tgl_cache_clear(tgl_ctx *ctx);
tgl_status tgl_cache_info(tgl_ctx *ctx, char **text);
int tgl_rule_count(void);
const char *tgl_rule_name(int i);
const char *tgl_rule_stage(int i);
const char *tgl_rule_synopsis(int i);
tgl_status tgl_function_new(tgl_ctx *ctx, int nin, tgl_node *const *inputs, int nout,
                            tgl_node *const *outputs, int nupd, tgl_node *const *upd_vars,
                            tgl_node *const *upd_exprs, const tgl_compile_options *opt,
                            tgl_function **out);
void tgl_function_free(tgl_function *fn);
tgl_status tgl_function_call(tgl_ctx *ctx, tgl_function *fn, tgl_array *const *in, tgl_array **out, int trust);
tgl_status tgl_function_run(tgl_ctx *ctx, tgl_function *fn, int64_t n_calls);
tgl_status tgl_function_output(tgl_ctx *ctx, tgl_function *fn, int i, tgl_array **out);
tgl_status tgl_function_wait_compiled(tgl_ctx *ctx, tgl_function *fn);
tgl_node *tgl_function_root(const tgl_function *fn, int i);
int tgl_function_inplace(const tgl_function *fn, const tgl_node *n);
int tgl_function_ninputs(const tgl_function *fn);
int tgl_function_noutputs(const tgl_function *fn);
tgl_status tgl_function_program(tgl_ctx *ctx, const tgl_function *fn, char **text);
tgl_status tgl_function_profile(tgl_ctx *ctx, const tgl_function *fn, char **text);
void tgl_free(void *p);

const char *tgl_version(void);
double tgl_wall_time(void);
const char *tgl_blas_info(void);
int tgl_cuda_built(void);
int tgl_cuda_device_count(void);
const char *tgl_cuda_version(void);
]]

local core = { ffi = ffi }

-- The engine: the host links libtgl, so its symbols are in ffi.C; plain
-- luajit loads the shared library instead.
local C = ffi.C
if not pcall(function() return C.tgl_version end) then
  local ok, lib = pcall(ffi.load, os.getenv('TGL_LIBRARY') or 'tgl')
  if not ok then
    error('tgl: cannot find the tgl engine library (run scripts with the tgl host, '
          .. 'or set TGL_LIBRARY to the path of libtgl.so): ' .. tostring(lib), 0)
  end
  C = lib
end
core.C = C

-- One context per Lua state: error text and the random generator.
core.ctx = ffi.gc(C.tgl_ctx_new(), C.tgl_ctx_free)
assert(core.ctx ~= nil, 'tgl: out of memory creating the context')

-- The host's Ctrl-C flag, when running inside the tgl host.
do
  local ok = pcall(ffi.cdef, 'volatile int *tgl_host_interrupt_flag(void);')
  local okf, flag = pcall(function() return ffi.C.tgl_host_interrupt_flag() end)
  if ok and okf and flag ~= nil then
    C.tgl_ctx_set_interrupt_flag(core.ctx, flag)
    core.interrupt_flag = flag
  end
end

local aref_t = ffi.typeof('tgl_aref')
local out_array = ffi.typeof('tgl_array *[1]')
core.aref_t = aref_t
core.out_array_t = out_array

local function release_ref(r) C.tgl_array_release(r.p) end

-- The stack level of the first function outside tgl's own Lua files, so
-- errors point at the user's line whatever depth tgl raised them from.
local function user_level()
  local level = 3  -- the caller of the function that calls error()
  while true do
    local info = debug.getinfo(level, 'S')
    if not info then return 1 end
    if not info.source:find('[/\\]tgl[/\\][%w_]+%.lua$') then return level - 1 end
    level = level + 1
  end
end
core.user_level = user_level

-- Raises a Lua error for a failed status.  The engine's message starts with
-- the C function's name; users see the Lua function's name instead.
function core.check(status, fname)
  if status == 0 then return end
  local msg = ffi.string(C.tgl_ctx_error(core.ctx))
  msg = msg:gsub('^tgl_[%w_]+: ', '')
  if msg == '' then msg = 'failed with status ' .. tonumber(status) end
  C.tgl_ctx_clear_error(core.ctx)
  error(('tgl.%s: %s'):format(fname, msg), user_level())
end

-- Raises a Lua error naming the function, pointing at the user's line.
function core.argerror(fname, fmt, ...)
  error(('tgl.%s: ' .. fmt):format(fname, ...), user_level())
end

-- Live array bytes above which the next allocation runs a full collection:
-- LuaJIT's collector cannot see C-side memory, so we tell it (as Torch7 did).
local gc_threshold = 256 * 1024 * 1024

-- Takes ownership of a fresh tgl_array* (one reference) and returns the
-- garbage-collected box (tgl_aref) users hold; C calls take box.p.
function core.wrap(p)
  local live = tonumber(C.tgl_memory_live_bytes())
  if live > gc_threshold then
    collectgarbage()
    live = tonumber(C.tgl_memory_live_bytes())
    if live * 2 > gc_threshold then gc_threshold = live * 2 end
  end
  return ffi.gc(aref_t(p), release_ref)
end

function core.is_array(x)
  return ffi.istype(aref_t, x)
end

-- Dtype name -> id, accepting the aliases tgl_dtype_from_name knows.
function core.dtype_id(name, fname)
  if type(name) ~= 'string' then
    core.argerror(fname or 'dtype', 'dtype must be a string, got %s', type(name))
  end
  local id = C.tgl_dtype_from_name(name)
  if id < 0 then
    core.argerror(fname or 'dtype', "unknown dtype '%s' (expected float32, float64, "
                  .. 'int32, int64, uint8 or bool)', name)
  end
  return id
end

function core.dtype_name(id)
  return ffi.string(C.tgl_dtype_name(id))
end

return core
