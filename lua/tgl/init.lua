-- tgl — the Lua API of the tgl engine: `local tgl = require 'tgl'`.
--
-- This file assembles the public module from its parts: tgl.core (the FFI
-- binding), tgl.array (concrete arrays), tgl.io (.npy/.npz files).  Names
-- and semantics follow shared/API.md.
local core = require 'tgl.core'
local array = require 'tgl.array'
local io_ = require 'tgl.io'
local graph = require 'tgl.graph'
require 'tgl.variable'
local fun = require 'tgl.function'
local grad = require 'tgl.grad'
local ffi, C = core.ffi, core.C

local tgl = {}

-- Configuration.  floatX (the default float dtype) lives in Lua; the rest
-- are the engine's settings (tgl_config_set), so assigning one checks it
-- at once:
--   exclude = {'rule', ...}  rewrite rules switched off (or TGL_EXCLUDE=a,b)
--   threads, cc, cflags, cache_dir, compile ('tiered'|'sync'|'tcc'|'cc'),
--   cache_max_bytes, exit_wait, whole_step (true|false|'bound': bind
--   straight-line programs to fixed buffers after two calls on the same
--   shapes, and generate their C; 'bound' binds without generating),
--   device ('cpu', or 'sim': a simulated device for testing, doc/devices.md)
local engine_keys = { exclude = true, threads = true, cc = true, cflags = true, cache_dir = true,
                      compile = true, cache_max_bytes = true, exit_wait = true, whole_step = true,
                      device = true }
local config_values = { floatX = os.getenv('TGL_FLOATX') or 'float32' }
-- Every setting, in the order tostring(tgl.config) shows them.
local config_keys = { 'floatX', 'compile', 'threads', 'exclude', 'cc', 'cflags', 'cache_dir',
                      'cache_max_bytes', 'whole_step', 'device' }

-- A setting's value as Lua source: strings quoted, lists in braces.
local function config_literal(v)
  if type(v) == 'string' then return ('%q'):format(v) end
  if type(v) == 'table' then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = ('%q'):format(x) end
    return #parts == 0 and '{}' or '{ ' .. table.concat(parts, ', ') .. ' }'
  end
  return tostring(v)
end

tgl.config = setmetatable({}, {
  -- the settings, for the REPL's Tab completion (tgl.repl)
  __complete = config_keys,
  -- tostring(tgl.config), which the REPL prints: each setting and its value
  __tostring = function(self)
    local lines = { 'tgl.config {' }
    for _, k in ipairs(config_keys) do
      lines[#lines + 1] = ('  %s = %s,'):format(k, config_literal(self[k]))
    end
    lines[#lines + 1] = '}'
    return table.concat(lines, '\n')
  end,
  __index = function(_, k)
    if engine_keys[k] then
      local v = ffi.string(C.tgl_config_get(core.ctx, k))
      if k == 'exclude' then
        local list = {}
        for name in v:gmatch('[^,]+') do list[#list + 1] = name end
        return list
      end
      if k == 'threads' or k == 'cache_max_bytes' or k == 'exit_wait' then return tonumber(v) end
      if k == 'whole_step' then return v == 'bound' and 'bound' or v == 'on' end
      return v
    end
    return config_values[k]
  end,
  __newindex = function(_, k, v)
    if k == 'floatX' then
      if v ~= 'float32' and v ~= 'float64' then
        core.argerror('config', "floatX must be 'float32' or 'float64', got %s", tostring(v))
      end
      config_values.floatX = v
    elseif engine_keys[k] then
      if k == 'exclude' then
        -- unknown names are a typo, not a no-op: refuse them
        local known = {}
        for i = 0, C.tgl_rule_count() - 1 do known[ffi.string(C.tgl_rule_name(i))] = true end
        local names = type(v) == 'table' and v or {}
        if type(v) == 'string' then for nm in v:gmatch('[^,%s]+') do names[#names + 1] = nm end end
        for _, nm in ipairs(names) do
          if not known[nm] then core.argerror('config', "exclude: unknown rewrite rule '%s' (see tgl.rules())", tostring(nm)) end
        end
        if type(v) == 'table' then v = table.concat(v, ',') end
      end
      if k == 'whole_step' then
        if type(v) ~= 'boolean' and v ~= 'bound' then
          core.argerror('config', "whole_step must be true, false or 'bound', got %s", tostring(v))
        end
        v = v == 'bound' and 'bound' or (v and 'on' or 'off')
      end
      if v == nil then v = '' end
      core.check(C.tgl_config_set(core.ctx, k, tostring(v)), 'config')
    else
      core.argerror('config', "unknown setting '%s'", tostring(k))
    end
  end,
})

-- The kernel cache: tgl.cache_info() as a table {directory=, entries=,
-- bytes=, max_bytes=}; tgl.cache_clear() deletes every compiled kernel.
function tgl.cache_info()
  local text = ffi.new('char *[1]')
  core.check(C.tgl_cache_info(core.ctx, text), 'cache_info')
  local s = ffi.string(text[0])
  C.tgl_free(text[0])
  local info = {}
  for k, v in s:gmatch('([%w_]+): ([^\n]*)') do info[k] = tonumber(v) or v end
  return info
end

function tgl.cache_clear()
  core.check(C.tgl_cache_clear(core.ctx), 'cache_clear')
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

-- symbolic variables and operations (eager on arrays)
local graph_exports = {
  'tensor', 'constant', 'shared',
  'neg', 'abs', 'sign', 'exp', 'log', 'log1p', 'expm1', 'sqrt', 'sqr', 'recip', 'tanh',
  'sigmoid', 'softplus', 'relu', 'sin', 'cos', 'floor', 'ceil', 'round', 'not_',
  'add', 'sub', 'mul', 'div', 'pow', 'mod', 'maximum', 'minimum',
  'eq', 'neq', 'lt', 'le', 'gt', 'ge', 'and_', 'or_', 'switch', 'clip', 'ifelse', 'cast',
  'sum', 'prod', 'max', 'min', 'mean', 'var', 'std', 'argmax', 'argmin',
  'dot', 'batched_dot', 'outer',
  'dimshuffle', 'transpose', 'reshape', 'flatten', 'concatenate', 'stack', 'shape', 'size',
  'softmax', 'log_softmax', 'one_hot', 'categorical_crossentropy', 'binary_crossentropy',
  'index', 'set_subtensor', 'inc_subtensor',
}
for _, name in ipairs(graph_exports) do tgl[name] = graph[name] end
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

-- devices
tgl.cuda = {
  built = function() return C.tgl_cuda_built() ~= 0 end,
  is_available = function() return C.tgl_cuda_device_count() > 0 end,
  device_count = function() return tonumber(C.tgl_cuda_device_count()) end,
}

-- Modules the project plans but does not have yet (API.md "nn" and
-- "torch", doc/api.md "Not yet available"): require 'nn' says so in one
-- line instead of Lua's list of every path it searched.  The loader is the
-- last of package.loaders, so it answers only when nothing else found the
-- name: a user's own nn on package.path loads as usual, and the day
-- lua/nn/init.lua (lua/torch/, lua/optim/) exists, tgl's directory (first
-- on package.path) finds it and this loader is never asked.
local PLANNED = {
  nn = "Torch7-style nn (modules, criterions, nn.Trainer, nn.compile) on tgl's compiler",
  torch = "Torch7's tensor names (torch.Tensor, torch.CmdLine, ...) over tgl arrays",
  optim = "Torch7's optim (optim.sgd(feval, params, state), adam, ...) over tgl arrays",
}
local loaders = package.loaders
if type(loaders) == 'table' then
  loaders[#loaders + 1] = function(name)
    local what = PLANNED[name]
    if not what then return nil end
    -- level 3: require's caller (level 2 is require itself)
    error(("module '%s' is not available yet (planned: %s); doc/api.md, \"Not yet "
           .. 'available\", says what tgl offers today'):format(name, what), 3)
  end
end

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
