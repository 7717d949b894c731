-- tgl — the Lua API of the tgl engine: `local tgl = require 'tgl'`.
--
-- This file assembles the public module from its parts: tgl.core (the FFI
-- binding), tgl.array (concrete arrays), tgl.io (.npy/.npz files).  Names
-- and semantics are those doc/ describes (doc/api.md is the index).
local core = require 'tgl.core'
local array = require 'tgl.array'
local io_ = require 'tgl.io'
local graph = require 'tgl.graph'
require 'tgl.variable'
local fun = require 'tgl.function'
local grad = require 'tgl.grad'
local ffi, C = core.ffi, core.C

local tgl = {}

-- Configuration: floatX and the engine's settings (lua/tgl/config.lua).
tgl.config = require 'tgl.config'

-- The kernel cache: tgl.cache_info() as a table {directory=, entries=,
-- bytes=, max_bytes=}; tgl.cache_clear() deletes every compiled kernel.
function tgl.cache_info()
  local text = ffi.new('char *[1]')
  core.check(C.tgl_cache_info(core.ctx, text), 'cache_info')
  local s = ffi.string(text[0])
  C.tgl_free(text[0])
  -- one block per backend with a kernel cache (cpu, then cuda in a CUDA
  -- build), all in the same directory: their entries and bytes add up
  local info = {}
  for k, v in s:gmatch('([%w_]+): ([^\n]*)') do
    v = tonumber(v) or v
    if (k == 'entries' or k == 'bytes') and info[k] then info[k] = info[k] + v
    elseif info[k] == nil then info[k] = v end
  end
  return info
end

function tgl.cache_clear()
  core.check(C.tgl_cache_clear(core.ctx), 'cache_clear')
end

-- The thresholds measured on this machine (doc/calibration.md):
-- tgl.tune() is a table {cpu=, blas=, record=, [name] = {value=, unit=,
-- source=}} (value math.huge: never), loaded (or measured) as the CPU
-- backend's first use does; tgl.calibrate() measures them again and
-- rewrites the record, then returns tgl.tune().
function tgl.tune()
  local text = ffi.new('char *[1]')
  core.check(C.tgl_tune_info(core.ctx, text), 'tune')
  local s = ffi.string(text[0])
  C.tgl_free(text[0])
  local t = {
    cpu = s:match('cpu: ([^\n]*)'),
    blas = s:match('blas: ([^\n]*)'),
    record = s:match('record: (/[^\n]*)') or false,
  }
  local name, unit, source = ffi.new('const char *[1]'), ffi.new('const char *[1]'),
    ffi.new('const char *[1]')
  local value = ffi.new('int64_t[1]')
  for i = 0, C.tgl_tunable_count() - 1 do
    core.check(C.tgl_tunable(core.ctx, i, name, value, unit, source), 'tune')
    local v = value[0] == 0x7fffffffffffffffLL and math.huge or tonumber(value[0])
    t[ffi.string(name[0])] = { value = v, unit = ffi.string(unit[0]), source = ffi.string(source[0]) }
  end
  return t
end

function tgl.calibrate()
  core.check(C.tgl_calibrate(core.ctx), 'calibrate')
  return tgl.tune()
end

-- The compiled kernels loaded now (one per fused program a live function
-- runs); a kernel goes with the last function that runs it.
function tgl.kernels_live()
  return tonumber(C.tgl_kernels_live())
end

-- The rewrite rules: a list of {name=, stage=, synopsis=}.
function tgl.rules()
  local list = {}
  for i = 0, C.tgl_rule_count() - 1 do
    list[#list + 1] = { name = ffi.string(C.tgl_rule_name(i)), stage = ffi.string(C.tgl_rule_stage(i)),
                        synopsis = ffi.string(C.tgl_rule_synopsis(i)) }
  end
  return list
end

tgl.version = ffi.string(C.tgl_version())

-- Seconds on a monotonic wall clock, for timing.
function tgl.time() return C.tgl_wall_time() end

-- arrays
for _, name in ipairs({ 'array', 'empty', 'zeros', 'ones', 'full', 'arange', 'rand', 'randn',
                        'manual_seed', 'get_rng_state', 'set_rng_state' }) do
  tgl[name] = array[name]
end
tgl.is_array = core.is_array

-- symbolic variables and operations (eager on arrays): every op of the
-- engine's catalog but those graph.INTERNAL_OPS lists (the one list of
-- exclusions, each with what users call instead), then the functions
-- tgl.graph builds from several ops.
for _, op in ipairs(graph.OPS) do
  if not graph.INTERNAL_OPS[op.name] then tgl[op.name] = graph[op.name] end
end
for _, name in ipairs({
  'tensor', 'constant', 'shared',
  'mean', 'var', 'std', 'outer', 'transpose', 'flatten', 'stack', 'size',
  'categorical_crossentropy', 'binary_crossentropy', 'index', 'set_subtensor',
}) do
  tgl[name] = graph[name]
end
for _, kind in ipairs({ 'scalar', 'vector', 'row', 'col', 'matrix', 'tensor3', 'tensor4' }) do
  tgl[kind] = graph[kind]
  for _, p in ipairs({ 'f', 'd', 'i', 'l', 'b' }) do tgl[p .. kind] = graph[p .. kind] end
end
tgl.is_variable = graph.is_var

-- tgl.arange: an array for numbers, a symbolic vector when a bound is a
-- variable.
function tgl.arange(a, b, step, opts)
  if graph.is_var(a) or graph.is_var(b) or graph.is_var(step) then
    return graph.symbolic_arange(a, b, step, opts)
  end
  return array.arange(a, b, step, opts)
end

-- compiling and differentiating
tgl.compile = fun.compile
tgl.debugprint = fun.debugprint
tgl.todot = fun.todot
tgl.optimize = fun.optimize
tgl.grad = grad.grad
tgl.jacobian = grad.jacobian
tgl.hessian = grad.hessian
tgl.verify_grad = grad.verify_grad
local rop = require 'tgl.rop'
tgl.Rop = rop.Rop
tgl.Lop = rop.Lop
tgl.hessian_vector_product = rop.hessian_vector_product
tgl.gauss_newton_product = rop.gauss_newton_product
local scan = require 'tgl.scan'
tgl.scan = scan.scan
tgl.until_ = scan.until_
tgl.optim = require 'tgl.optim'

-- files
tgl.save = io_.save
tgl.load = io_.load
tgl.io = { save = io_.save, load = io_.load, read_idx = require('tgl.idx').read_idx }

-- processes working together (doc/distributed.md)
tgl.dist = require 'tgl.dist'

-- devices (doc/devices.md)
local MEM_STATS = { 'allocated', 'reserved', 'peak', 'n_allocs', 'n_frees', 'n_cache_hits',
                    'n_driver_allocs', 'n_ooms' }
tgl.cuda = {
  built = function() return C.tgl_cuda_built() ~= 0 end,
  is_available = function() return C.tgl_cuda_device_count() > 0 end,
  device_count = function() return tonumber(C.tgl_cuda_device_count()) end,
  -- the caching allocator's figures, in bytes and counts (zeros without CUDA)
  memory_stats = function()
    local s = ffi.new('tgl_cuda_mem_stats')
    C.tgl_cuda_memory_stats(s)
    local t = {}
    for _, k in ipairs(MEM_STATS) do t[k] = tonumber(s[k]) end
    return t
  end,
  -- returns the allocator's cached blocks to the driver
  empty_cache = function() C.tgl_cuda_empty_cache() end,
  -- waits for the GPU; raises its error (a kernel's failure) if any
  synchronize = function() core.check(C.tgl_cuda_synchronize(core.ctx), 'cuda.synchronize') end,
  -- the GPU's name; raises why not when no device can be used
  device_name = function()
    local name = C.tgl_cuda_device_name()
    if name == nil then
      core.argerror('cuda.device_name', '%s', ffi.string(C.tgl_cuda_unavailable()))
    end
    return ffi.string(name)
  end,
}

-- Versions of tgl and what it was built with, as a table.
function tgl.build_info()
  return {
    tgl = tgl.version,
    luajit = jit and jit.version or 'unknown',
    blas = ffi.string(C.tgl_blas_info()),
    cuda = C.tgl_cuda_built() ~= 0 and ffi.string(C.tgl_cuda_version()) or false,
  }
end

return tgl
