-- tgl.graph — symbolic variables and the operations on them.
--
-- A variable is a `tgl_vref` cdata (a box around a `tgl_node *`, owned by
-- the context).  Every operation here works on variables (building graph
-- nodes through tgl_apply), and also eagerly on arrays (running the op's
-- reference kernel through tgl_eval, returning an array at once).  Lua
-- numbers mixed with tensors take the tensor's dtype where it can hold
-- them ("weak" scalars), so `x * 2` stays float32.
--
-- Axes and indices are 1-based here; the C API is 0-based.
local core = require 'tgl.core'
local config = require 'tgl.config'
local array = require 'tgl.array'
local ffi, C = core.ffi, core.C
local check, argerror = core.check, core.argerror

local M = {}

local vref_t = ffi.typeof('tgl_vref')
local out_node = ffi.typeof('tgl_node *[1]')
local node_list = ffi.typeof('tgl_node *[?]')
local array_list = ffi.typeof('tgl_array *[?]')
local params_t = ffi.typeof('tgl_params')
local out_array = core.out_array_t

local DTYPE, DTYPE_NAME = array.DTYPE, array.DTYPE_NAME
-- What a node is (tgl_node_kind): the names Lua shows (x.kind), the
-- engine's ids.
local KIND = { input = C.TGL_NODE_INPUT, constant = C.TGL_NODE_CONSTANT,
               shared = C.TGL_NODE_SHARED, apply = C.TGL_NODE_APPLY }
M.KIND = KIND

-- The op catalog as the engine lists it (tgl_op_count, tgl_op_name,
-- tgl_op_synopsis): {name=, synopsis=} in id order.  tgl's exports are
-- built from it (init.lua).
local OPS = {}
for id = 0, C.tgl_op_count() - 1 do
  OPS[id + 1] = { name = ffi.string(C.tgl_op_name(id)), synopsis = ffi.string(C.tgl_op_synopsis(id)) }
end
M.OPS = OPS

-- The catalog's ops that are not functions of tgl, each with where users
-- get at it instead: the one list of them.  Every other op is exported
-- under its catalog name as the function of this module of that name
-- (init.lua), and spec/cdef_spec.lua fails for an op that is neither.
M.INTERNAL_OPS = {
  axes_size = 'built by x:size(d), tgl.mean and tgl.var',
  gemm = 'a rewrite of dot (compile.md, "The rules")',
  gemv = 'a rewrite of dot',
  ger = 'a rewrite of an outer product added to a matrix',
  fill_like = 'built by gradients (zeros of a shape)',
  subtensor = 'x[...] and tgl.index',
  adv_subtensor = 'x[...] with integer tensors, and tgl.index',
  adv_inc_subtensor = 'tgl.inc_subtensor and tgl.set_subtensor with integer tensors',
  softmax_crossentropy = 'a rewrite of categorical_crossentropy(softmax(x), labels)',
  softmax_crossentropy_dx = "softmax_crossentropy's pullback",
  class_xent = 'tgl.lm.class_xent (lua/tgl/lm.lua)',
  class_xent_delta = "class_xent's pullback",
  class_xent_sgd = 'tgl.lm.class_xent_sgd (lua/tgl/lm.lua)',
  conv2d_grad_input = "conv2d's pullback to its input",
  conv2d_grad_weight = "conv2d's pullback to its weight",
  arange = 'tgl.arange (init.lua: arrays, or a variable when a bound is one)',
  scan = 'tgl.scan (lua/tgl/scan.lua)',
  output = 'the values of multi-output nodes',
  fused = 'the fuse stage of the compiler',
  rop_direction = 'tgl.Rop puts it in front of each direction',
  allreduce_start = 'the bucket stage of the compiler (tgl.allreduce in a FAST_RUN function)',
  allreduce_wait = 'the bucket stage of the compiler (tgl.allreduce in a FAST_RUN function)',
  max_pool2d_grad = "max_pool2d's pullback (and the gather's)",
  avg_pool2d_grad = "avg_pool2d's pullback",
  max_pool2d_gather = "max_pool2d's tangent: the pullback of max_pool2d_grad",
  batch_norm_grad = "batch_norm's pullback in the training form (tgl.grad of tgl.batch_norm)",
}

-- Op ids by name, looked up once.
local OP = setmetatable({}, { __index = function(t, name)
  local id = C.tgl_op_lookup(name)
  if id < 0 then error('tgl: unknown op ' .. tostring(name), 2) end
  t[name] = id
  return id
end })
M.OP = OP

local function is_var(x) return ffi.istype(vref_t, x) end
local is_array = core.is_array
M.is_var = is_var

local function floatX() return config.floatX end
M.floatX = floatX

local DT_FLOAT32, DT_FLOAT64 = DTYPE.float32, DTYPE.float64
local function is_float_id(dt) return dt == DT_FLOAT32 or dt == DT_FLOAT64 end
local function is_int(v) return type(v) == 'number' and v == math.floor(v) and v > -2^53 and v < 2^53 end

-- "file:line" of the first stack frame outside tgl's own Lua files (the
-- tgl, nn and torch rooms: core.is_internal): where the user built a node.
-- Kept in the node for error messages.
local function user_source()
  local level = 3
  while true do
    local info = debug.getinfo(level, 'Sl')
    if not info then return nil end
    if not core.is_internal(info.source) and info.what ~= 'C' then
      return info.short_src .. ':' .. (info.currentline or 0)
    end
    level = level + 1
  end
end

-- ---------------------------------------------------------------------------
-- nodes

-- A box for node n: it holds a reference to the node (and so to the
-- context) until the garbage collector takes the box.  Nodes nothing
-- holds are reclaimed by tgl_graph_collect, which `apply` runs when the
-- graph has doubled since the last collection (at that point every node
-- Lua knows is boxed).
local ctx_raw = core.ctx
local function release_vref(v) C.tgl_node_release(ctx_raw, v.n) end
local function wrap_node(n)
  C.tgl_node_retain(ctx_raw, n)
  return ffi.gc(vref_t(n), release_vref)
end
M.wrap_node = wrap_node
M.user_source = user_source
M.DTYPE, M.DTYPE_NAME = DTYPE, DTYPE_NAME

local function node_type(x) return C.tgl_node_type(x.n) end

-- dtype id, ndim of a variable or array
local function dt_of(x)
  if is_var(x) then return node_type(x).dtype end
  return x.p.dtype_id
end
local function nd_of(x)
  if is_var(x) then return node_type(x).ndim end
  return x.p.ndim
end
M.dt_of, M.nd_of = dt_of, nd_of

local scratch_params = params_t()

-- Flags in op parameters (tgl.h): reductions keeping their axes, and
-- inc_subtensor assigning instead of adding.
local KEEPDIMS_FLAG, INC_SET_FLAG = core.defines.TGL_REDUCE_KEEPDIMS, core.defines.TGL_INC_SET

-- Fills the shared params struct from {i = {...}, flags = k, f = {...}}.
local function make_params(p)
  if not p then return nil end
  local P = scratch_params
  ffi.fill(P, ffi.sizeof(params_t))
  local ints = p.i or {}
  if #ints > core.MAX_PARAMS then error('tgl: too many op parameters', 3) end
  P.n = #ints
  for k = 1, #ints do P.i[k - 1] = ints[k] end
  P.flags = p.flags or 0
  if p.f then P.f[0] = p.f[1] or 0; P.f[1] = p.f[2] or 0 end
  return P
end

-- A constant node holding an array (copied by the engine).
local function constant_node(a)
  local out = out_node()
  check(C.tgl_node_constant(core.ctx, a.p, out), 'constant')
  return wrap_node(out[0])
end

-- A 0-d array of the given dtype id holding v.
local function scalar_array(v, dt)
  if type(v) == 'boolean' then v = v and 1 or 0 end
  return array.full({}, v, { dtype = DTYPE_NAME[dt] })
end

-- The dtype id a Lua number takes next to tensors of promoted dtype dt.
local function weak_dtype(v, dt)
  if dt == nil then
    if type(v) == 'boolean' then return DTYPE.bool end
    return DTYPE[floatX()]
  end
  if type(v) == 'boolean' then return dt == DTYPE.bool and dt or dt end
  if is_float_id(dt) then return dt end
  if is_int(v) then
    if dt == DTYPE.bool then return DTYPE.int64 end
    if dt == DTYPE.uint8 and (v < 0 or v > 255) then dt = DTYPE.int32 end
    if dt == DTYPE.int32 and (v < -2^31 or v >= 2^31) then dt = DTYPE.int64 end
    return dt
  end
  return DTYPE[floatX()]
end

-- Promoted dtype id of the tensor arguments (nil when there are none),
-- by the engine's rule (tgl_dtype_promote).
local function tensor_dtype(args, n)
  local dt
  for i = 1, n do
    local a = args[i]
    if is_var(a) or is_array(a) then
      local d = dt_of(a)
      dt = dt == nil and d or C.tgl_dtype_promote(dt, d)
    end
  end
  return dt
end

-- Converts one argument to an array (eager) or node (symbolic).
local function as_array(fname, x, dt)
  if is_array(x) then return x end
  if type(x) == 'number' or type(x) == 'boolean' then return scalar_array(x, weak_dtype(x, dt)) end
  if type(x) == 'table' then return array.array(x) end
  argerror(fname, 'expected an array, a variable or a number, got %s', type(x))
end

local function as_node(fname, x, dt)
  if is_var(x) then return x end
  return constant_node(as_array(fname, x, dt))
end
M.as_node = function(x, fname) return as_node(fname or 'constant', x, nil) end

-- Applies op to args: symbolically if any argument is a variable,
-- eagerly otherwise.  p is a params table (see make_params).
local function apply(fname, opname, args, n, p)
  n = n or #args
  local dt = tensor_dtype(args, n)
  local symbolic = false
  for i = 1, n do if is_var(args[i]) then symbolic = true break end end
  if symbolic then
    C.tgl_graph_maybe_collect(ctx_raw)
    local ins = node_list(n)
    local keep = {}
    for i = 1, n do
      local v = as_node(fname, args[i], dt)
      keep[i] = v
      ins[i - 1] = v.n
    end
    local out = out_node()
    check(C.tgl_apply(core.ctx, OP[opname], n, ins, make_params(p), user_source(), out), fname)
    return wrap_node(out[0])
  end
  local ins = array_list(n)
  local keep = {}
  for i = 1, n do
    local a = as_array(fname, args[i], dt)
    keep[i] = a
    ins[i - 1] = a.p
  end
  local out = out_array()
  check(C.tgl_eval(core.ctx, OP[opname], n, ins, make_params(p), out), fname)
  return core.wrap(out[0])
end
M.apply = apply

-- Casts integer tensors to floatX (math functions of integers are floats).
local function floaty(fname, x)
  if type(x) == 'number' then return x end
  if not (is_var(x) or is_array(x)) then
    if type(x) == 'table' then x = array.array(x) else
      argerror(fname, 'expected an array, a variable or a number, got %s', type(x)) end
  end
  if is_float_id(dt_of(x)) then return x end
  return M.cast(x, floatX())
end

-- ---------------------------------------------------------------------------
-- constructors of variables

local function make_input(dtype, ndim, bcast, name)
  local t = ffi.new('tgl_type')
  t.dtype = core.dtype_id(dtype, 'tensor')
  t.ndim = ndim
  local bits = 0
  for i = 1, ndim do if bcast and bcast[i] then bits = bits + 2 ^ (i - 1) end end
  t.bcast = bits
  local out = out_node()
  check(C.tgl_node_input(core.ctx, t, name, out), 'tensor')
  return wrap_node(out[0])
end

-- tgl.tensor{dtype=, ndim=, broadcastable={...}, name=}
local TENSOR_OPTIONS = { dtype = 'string', ndim = 'number', broadcastable = 'table', name = 'string' }
function M.tensor(spec)
  spec = spec or {}
  if type(spec) ~= 'table' then argerror('tensor', 'expected a table {dtype=, ndim=, name=}') end
  core.check_options('tensor', spec, TENSOR_OPTIONS)
  local bc = spec.broadcastable
  local ndim = spec.ndim or (bc and #bc) or 0
  if not is_int(ndim) or ndim < 0 or ndim > core.MAX_DIMS then
    argerror('tensor', 'ndim must be an integer from 0 to %d, got %s', core.MAX_DIMS,
             tostring(ndim))
  end
  if bc ~= nil and (type(bc) ~= 'table' or #bc ~= ndim) then
    argerror('tensor', 'broadcastable must be a table of %d booleans', ndim)
  end
  if spec.name ~= nil and type(spec.name) ~= 'string' then argerror('tensor', 'name must be a string') end
  return make_input(spec.dtype or floatX(), ndim, bc, spec.name)
end

-- tgl.scalar/vector/matrix/tensor3/tensor4 and the typed forms
-- (f: float32, d: float64, i: int32, l: int64, b: bool).
local RANKS = { scalar = 0, vector = 1, row = 2, col = 2, matrix = 2, tensor3 = 3, tensor4 = 4 }
local PREFIX = { f = 'float32', d = 'float64', i = 'int32', l = 'int64', b = 'bool' }
for kind, nd in pairs(RANKS) do
  local bc = kind == 'row' and { true, false } or kind == 'col' and { false, true } or nil
  M[kind] = function(name, dtype)
    if name ~= nil and type(name) ~= 'string' then argerror(kind, 'name must be a string') end
    return make_input(dtype or floatX(), nd, bc, name)
  end
  for p, dt in pairs(PREFIX) do
    M[p .. kind] = function(name)
      if name ~= nil and type(name) ~= 'string' then argerror(p .. kind, 'name must be a string') end
      return make_input(dt, nd, bc, name)
    end
  end
end

-- tgl.constant(value [, dtype])
function M.constant(v, dtype)
  local a
  if is_array(v) then a = dtype and v:astype(dtype) or v
  elseif type(v) == 'number' or type(v) == 'boolean' then
    a = scalar_array(v, dtype and core.dtype_id(dtype, 'constant') or weak_dtype(v, nil))
  elseif type(v) == 'table' then a = array.array(v, dtype)
  else argerror('constant', 'expected a number, a table or an array, got %s', type(v)) end
  return constant_node(a)
end

-- tgl.shared(value, name, {broadcastable=, borrow=})
local SHARED_OPTIONS = { borrow = 'boolean', broadcastable = 'table', name = 'string' }
function M.shared(value, name, opts)
  if type(name) == 'table' then name, opts = nil, name end
  opts = core.check_options('shared', opts, SHARED_OPTIONS)
  if name == nil then name = opts.name end
  if type(value) == 'number' then value = scalar_array(value, DTYPE[floatX()])
  elseif type(value) == 'table' and not is_array(value) then value = array.array(value) end
  if not is_array(value) then argerror('shared', 'value must be an array or a number, got %s', type(value)) end
  if name ~= nil and type(name) ~= 'string' then argerror('shared', 'name must be a string') end
  local bits = 0
  for i, b in ipairs(opts.broadcastable or {}) do if b then bits = bits + 2 ^ (i - 1) end end
  local out = out_node()
  if opts.borrow then
    check(C.tgl_node_shared(core.ctx, value.p, bits, name, out), 'shared')
  else
    -- The variable's own copy, held by the variable alone (no Lua box
    -- waiting for the collector): updates can then run in place in its
    -- storage instead of computing elsewhere and copying in.
    local copy = out_array()
    check(C.tgl_array_copy(core.ctx, value.p, value.p.dtype_id, copy), 'shared')
    local st = C.tgl_node_shared(core.ctx, copy[0], bits, name, out)
    C.tgl_array_release(copy[0])
    check(st, 'shared')
  end
  return wrap_node(out[0])
end

-- ---------------------------------------------------------------------------
-- operations

local function unary(opname, float)
  return function(x)
    if float then x = floaty(opname, x) end
    return apply(opname, opname, { x }, 1)
  end
end

for _, name in ipairs({ 'exp', 'log', 'log1p', 'expm1', 'sqrt', 'tanh', 'sigmoid', 'softplus',
                        'sin', 'cos', 'recip' }) do
  M[name] = unary(name, true)
end
for _, name in ipairs({ 'neg', 'abs', 'sign', 'sqr', 'relu', 'floor', 'ceil', 'round', 'not_' }) do
  M[name] = unary(name, false)
end

local function binary(opname)
  return function(a, b) return apply(opname, opname, { a, b }, 2) end
end
for _, name in ipairs({ 'add', 'sub', 'mul', 'pow', 'mod', 'maximum', 'minimum',
                        'eq', 'neq', 'lt', 'le', 'gt', 'ge', 'and_', 'or_' }) do
  M[name] = binary(name)
end

-- True division: integers divide as floatX.
function M.div(a, b)
  local dt = tensor_dtype({ a, b }, 2)
  if dt and not is_float_id(dt) then
    if type(a) ~= 'number' then a = floaty('div', a) end
    if type(b) ~= 'number' then b = floaty('div', b) end
  end
  return apply('div', 'div', { a, b }, 2)
end

function M.switch(c, a, b) return apply('switch', 'switch', { c, a, b }, 3) end
function M.clip(x, lo, hi) return apply('clip', 'clip', { x, lo, hi }, 3) end

-- tgl.ifelse(cond, a, b): lazy in compiled functions (only the branch
-- taken is computed); on arrays, the chosen one.
function M.ifelse(c, a, b)
  if is_var(c) or is_var(a) or is_var(b) then
    local dt = tensor_dtype({ a, b }, 2)
    return apply('ifelse', 'ifelse', { c, M.cast(as_node('ifelse', a, dt), DTYPE_NAME[dt]),
                                        M.cast(as_node('ifelse', b, dt), DTYPE_NAME[dt]) }, 3)
  end
  local cv = c
  if is_array(c) then cv = c:get() end
  if cv and cv ~= 0 then return as_array('ifelse', a) end
  return as_array('ifelse', b)
end

function M.cast(x, dtype)
  local id = core.dtype_id(dtype, 'cast')
  if (is_var(x) or is_array(x)) and dt_of(x) == id then return x end
  return apply('cast', 'cast', { x }, 1, { i = { id } })
end

-- ---------------------------------------------------------------------------
-- reductions

-- Raises for an axis outside x's axes, reminding that they count from 1.
local function axis_range_error(fname, a, x, nd)
  argerror(fname, 'axis %s is out of range for a %d-d %s (axes count from 1; -1 is the last)',
           tostring(a), nd or nd_of(x), is_array(x) and 'array' or 'tensor')
end
M.axis_range_error = axis_range_error

-- 1-based axis spec (number, table, nil = all) -> sorted 0-based list.
local function axes_of(fname, x, axis)
  local nd = nd_of(x)
  local list = {}
  if axis == nil then
    for d = 0, nd - 1 do list[#list + 1] = d end
    return list
  end
  local t = type(axis) == 'table' and axis or { axis }
  local seen = {}
  for _, a in ipairs(t) do
    if not is_int(a) then argerror(fname, 'axis must be an integer, got %s', tostring(a)) end
    local d = a < 0 and nd + a or a - 1
    if d < 0 or d >= nd then axis_range_error(fname, a, x) end
    if seen[d] then argerror(fname, 'axis %d is given twice', a) end
    seen[d] = true
    list[#list + 1] = d
  end
  table.sort(list)
  return list
end
M.axes_of = axes_of

local function tensorize(fname, x)
  if is_var(x) or is_array(x) then return x end
  if type(x) == 'number' then return scalar_array(x, DTYPE[floatX()]) end
  if type(x) == 'table' then return array.array(x) end
  argerror(fname, 'expected an array or a variable, got %s', type(x))
end

-- tgl.sum(x, axis, opts) and tgl.sum(x, opts): a table with named keys in
-- the axis position is the options.  The options are checked against known.
local KEEPDIMS = { keepdims = 'boolean' }
local function axis_opts(fname, axis, opts, known)
  if type(axis) == 'table' and opts == nil and not is_array(axis) then
    for k in pairs(axis) do
      if type(k) == 'string' then axis, opts = nil, axis; break end
    end
  end
  return axis, core.check_options(fname, opts, known or KEEPDIMS)
end
M.axis_opts = axis_opts

local function reduction(opname)
  return function(x, axis, opts)
    axis, opts = axis_opts(opname, axis, opts)
    x = tensorize(opname, x)
    return apply(opname, opname, { x }, 1,
                 { i = axes_of(opname, x, axis), flags = opts.keepdims and KEEPDIMS_FLAG or 0 })
  end
end
M.sum = reduction('sum')
M.prod = reduction('prod')
M.max = reduction('max')
M.min = reduction('min')

-- Number of elements over the axes, as a 0-d int64.
local function axes_size(x, list)
  return apply('mean', 'axes_size', { x }, 1, { i = list })
end

function M.mean(x, axis, opts)
  axis, opts = axis_opts('mean', axis, opts)
  x = floaty('mean', tensorize('mean', x))
  local list = axes_of('mean', x, axis)
  local s = apply('mean', 'sum', { x }, 1, { i = list, flags = (opts and opts.keepdims) and KEEPDIMS_FLAG or 0 })
  return M.div(s, M.cast(axes_size(x, list), DTYPE_NAME[dt_of(x)]))
end

-- Variance (ddof = 0 by default, as NumPy) and standard deviation.
local VAR_OPTIONS = { keepdims = 'boolean', ddof = 'number' }
local function variance(fname, x, axis, opts)
  axis, opts = axis_opts(fname, axis, opts, VAR_OPTIONS)
  x = floaty(fname, tensorize(fname, x))
  local list = axes_of(fname, x, axis)
  local mu = apply('var', 'sum', { x }, 1, { i = list, flags = KEEPDIMS_FLAG })
  local n = M.cast(axes_size(x, list), DTYPE_NAME[dt_of(x)])
  mu = M.div(mu, n)
  local d = M.sqr(M.sub(x, mu))
  local s = apply('var', 'sum', { d }, 1, { i = list, flags = opts.keepdims and KEEPDIMS_FLAG or 0 })
  local ddof = opts.ddof or 0
  if ddof ~= 0 then n = M.sub(n, ddof) end
  return M.div(s, n)
end

function M.var(x, axis, opts) return variance('var', x, axis, opts) end
function M.std(x, axis, opts) return M.sqrt(variance('std', x, axis, opts)) end

local function arg_reduction(opname)
  return function(x, axis, opts)
    axis, opts = axis_opts(opname, axis, opts)
    x = tensorize(opname, x)
    if axis == nil then
      -- over every axis: the position in the flattened tensor; keepdims
      -- keeps every axis (size 1), as NumPy does
      local nd = nd_of(x)
      local r = apply(opname, opname, { M.reshape(x, -1) }, 1, { i = { 0 }, flags = 0 })
      if opts.keepdims then
        local ones = {}
        for k = 1, nd do ones[k] = 1 end
        return M.reshape(r, ones)
      end
      return r
    end
    if type(axis) ~= 'number' then argerror(opname, 'axis must be one integer') end
    local list = axes_of(opname, x, axis)
    return apply(opname, opname, { x }, 1, { i = list, flags = opts.keepdims and KEEPDIMS_FLAG or 0 })
  end
end
M.argmax = arg_reduction('argmax')
M.argmin = arg_reduction('argmin')

-- ---------------------------------------------------------------------------
-- linear algebra

function M.dot(a, b) return apply('dot', 'dot', { tensorize('dot', a), tensorize('dot', b) }, 2) end
function M.batched_dot(a, b)
  return apply('batched_dot', 'batched_dot', { tensorize('batched_dot', a), tensorize('batched_dot', b) }, 2)
end
function M.outer(a, b)
  a, b = tensorize('outer', a), tensorize('outer', b)
  if nd_of(a) ~= 1 or nd_of(b) ~= 1 then
    argerror('outer', 'needs two vectors, got %d-d and %d-d tensors', nd_of(a), nd_of(b))
  end
  return M.mul(M.dimshuffle(a, { 1, 'x' }), M.dimshuffle(b, { 'x', 1 }))
end

-- ---------------------------------------------------------------------------
-- shape

-- tgl.dimshuffle(x, {2, 'x', 1}): 1-based axes, 'x' adds a broadcastable one.
function M.dimshuffle(x, order)
  x = tensorize('dimshuffle', x)
  if type(order) ~= 'table' then argerror('dimshuffle', 'order must be a table such as {2, "x", 1}') end
  local nd = nd_of(x)
  local list = {}
  for k, a in ipairs(order) do
    if a == 'x' then list[k] = -1
    elseif is_int(a) then
      local d = a < 0 and nd + a or a - 1
      if d < 0 or d >= nd then axis_range_error('dimshuffle', a, x) end
      list[k] = d
    else argerror('dimshuffle', "entries must be axes or 'x', got %s", tostring(a)) end
  end
  return apply('dimshuffle', 'dimshuffle', { x }, 1, { i = list })
end

-- Reverses the axes (the transpose of a matrix).
function M.transpose(x, perm)
  x = tensorize('transpose', x)
  if perm then return M.dimshuffle(x, perm) end
  local order = {}
  local nd = nd_of(x)
  for k = 1, nd do order[k] = nd - k + 1 end
  return M.dimshuffle(x, order)
end

-- tgl.reshape(x, {2, 3}) / x:reshape(2, 3); one size may be -1; a
-- symbolic shape is an integer vector variable plus its length:
-- x:reshape(v, n).
function M.reshape(x, ...)
  x = tensorize('reshape', x)
  local first, second = ...
  if is_var(first) then
    if not is_int(second) then argerror('reshape', 'a symbolic shape needs its length: x:reshape(v, n)') end
    local list = {}
    for k = 1, second do list[k] = -1 end
    return apply('reshape', 'reshape', { x, first }, 2, { i = list })
  end
  local dims = type(first) == 'table' and first or { ... }
  if is_array(x) then return x:reshape(dims) end
  for k, v in ipairs(dims) do
    if not is_int(v) or v < -1 then argerror('reshape', 'size %s of dimension %d is not valid', tostring(v), k) end
  end
  return apply('reshape', 'reshape', { x }, 1, { i = dims })
end

-- Keeps the first ndim-1 axes and merges the rest.
function M.flatten(x, ndim)
  x = tensorize('flatten', x)
  ndim = ndim or 1
  local nd = nd_of(x)
  if not is_int(ndim) or ndim < 1 or ndim > math.max(nd, 1) then
    argerror('flatten', 'ndim must be from 1 to %d, got %s', math.max(nd, 1), tostring(ndim))
  end
  local list = {}
  for k = 1, ndim - 1 do list[k] = -2 - (k - 1) end
  list[ndim] = -1
  if is_array(x) then
    local dims = {}
    for k = 1, ndim - 1 do dims[k] = x:size(k) end
    dims[ndim] = -1
    return x:reshape(dims)
  end
  return apply('flatten', 'reshape', { x }, 1, { i = list })
end

function M.concatenate(list, axis)
  if type(list) ~= 'table' or #list == 0 then argerror('concatenate', 'expected a non-empty table of tensors') end
  axis = axis or 1
  local xs = {}
  for k, t in ipairs(list) do xs[k] = tensorize('concatenate', t) end
  local d = axes_of('concatenate', xs[1], axis)[1]
  return apply('concatenate', 'concatenate', xs, #xs, { i = { d } })
end

-- Stacks tensors of one shape along a new axis (1-based position).
function M.stack(list, axis)
  if type(list) ~= 'table' or #list == 0 then argerror('stack', 'expected a non-empty table of tensors') end
  axis = axis or 1
  local parts = {}
  local first
  for k, t in ipairs(list) do
    t = tensorize('stack', t)
    if is_array(t) then
      local sh = '(' .. table.concat(t:shape(), ',') .. (t:dim() == 1 and ',)' or ')')
      first = first or sh
      if sh ~= first then argerror('stack', 'tensors of different shapes %s and %s', first, sh) end
    end
    local nd = nd_of(t)
    local pos = axis < 0 and nd + 2 + axis or axis
    if pos < 1 or pos > nd + 1 then argerror('stack', 'axis %d is out of range for stacking %d-d tensors (axes count from 1; -1 is the last)', axis, nd) end
    local order = {}
    for d = 1, nd do order[#order + 1] = d end
    table.insert(order, pos, 'x')
    parts[k] = M.dimshuffle(t, order)
  end
  local pos = axis < 0 and nd_of(parts[1]) + 1 + axis or axis
  return M.concatenate(parts, pos)
end

-- The shape as a symbolic int64 vector (arrays: a Lua table).
function M.shape(x)
  if is_array(x) then return x:shape() end
  return apply('shape', 'shape', { x }, 1)
end

-- tgl.arange(stop), tgl.arange(start, stop [, step]): symbolic when any
-- bound is a variable (an int64 vector; float bounds give floatX).
function M.symbolic_arange(a, b, step, opts)
  if b == nil then a, b = 1, a end
  step = step or 1
  local args = { a, b, step }
  local anyfloat = false
  for i = 1, 3 do
    local v = args[i]
    if type(v) == 'number' then
      if not is_int(v) then anyfloat = true end
    elseif is_var(v) or is_array(v) then
      if is_float_id(dt_of(v)) then anyfloat = true end
      if nd_of(v) ~= 0 then argerror('arange', 'bounds must be scalars') end
    else argerror('arange', 'bounds must be numbers or scalar variables, got %s', type(v)) end
  end
  opts = core.check_options('arange', opts, { dtype = 'string' })
  local dt = opts.dtype or (anyfloat and floatX() or 'int64')
  local nodes = {}
  for i = 1, 3 do
    local v = args[i]
    if type(v) == 'number' then v = M.constant(v, anyfloat and 'float64' or 'int64') end
    nodes[i] = v
  end
  return apply('arange', 'arange', nodes, 3, { i = { core.dtype_id(dt, 'arange') } })
end

-- ---------------------------------------------------------------------------
-- nnet

local function last_axis(fname, x, axis)
  return axes_of(fname, x, axis or -1)[1]
end

function M.softmax(x, axis)
  x = floaty('softmax', tensorize('softmax', x))
  return apply('softmax', 'softmax', { x }, 1, { i = { last_axis('softmax', x, axis) } })
end

-- tgl.allreduce(x, {op = 'sum' | 'mean' | 'max' | 'min' | 'prod'}) (or the
-- op's name alone): x reduced over every process of the job (tgl.dist),
-- as a graph op, so a compiled step reduces its gradients without leaving
-- the CVM; on arrays it runs at once.  Its gradient is the same allreduce
-- of the incoming gradient (sum and mean).  doc/distributed.md.
local ALLREDUCE_OPTIONS = { op = 'string' }
function M.allreduce(x, opts)
  if type(opts) == 'string' then opts = { op = opts } end
  opts = core.check_options('allreduce', opts, ALLREDUCE_OPTIONS)
  local OPS = require('tgl.dist').OPS
  local op = OPS[opts.op or 'sum']
  if not op then
    argerror('allreduce', "op must be 'sum', 'mean', 'max', 'min' or 'prod', got '%s'", opts.op)
  end
  x = tensorize('allreduce', x)
  return apply('allreduce', 'allreduce', { x }, 1, { i = { op } })
end

function M.log_softmax(x, axis)
  x = floaty('log_softmax', tensorize('log_softmax', x))
  return apply('log_softmax', 'log_softmax', { x }, 1, { i = { last_axis('log_softmax', x, axis) } })
end

-- tgl.one_hot(labels, n [, dtype]): 1-based labels.
function M.one_hot(y, n, dtype)
  y = tensorize('one_hot', y)
  if not is_int(n) or n < 1 then argerror('one_hot', 'n must be a positive integer, got %s', tostring(n)) end
  return apply('one_hot', 'one_hot', { y }, 1, { i = { n, core.dtype_id(dtype or floatX(), 'one_hot') } })
end

-- tgl.conv2d(x, w [, {stride=, padding=, dilation=, groups=}]): x (N, C, H,
-- W) cross-correlated with w (O, C/groups, kH, kW); each of stride,
-- padding, dilation a number or an {h, w} pair.  engine/ops/conv.c.
local CONV_OPTS = { stride = 'number|table', padding = 'number|table',
                    dilation = 'number|table', groups = 'number' }
local function conv_pair(fname, name, v, default, least)
  if v == nil then v = default end
  local h, w
  if type(v) == 'number' then h, w = v, v
  else h, w = v[1] or v.h, v[2] or v.w end
  if not (is_int(h) and is_int(w) and h >= least and w >= least) then
    argerror(fname, '%s must be an integer >= %d or a pair {h, w} of them, got %s', name, least,
             type(v) == 'table' and ('{' .. tostring(h) .. ', ' .. tostring(w) .. '}') or tostring(v))
  end
  return h, w
end
function M.conv2d(x, w, opts)
  opts = core.check_options('conv2d', opts, CONV_OPTS)
  x = floaty('conv2d', tensorize('conv2d', x))
  w = floaty('conv2d', tensorize('conv2d', w))
  if nd_of(x) ~= 4 or nd_of(w) ~= 4 then
    argerror('conv2d', 'takes a 4-d input (N, C, H, W) and a 4-d weight (O, C/groups, kH, kW), '
             .. 'got %d-d and %d-d', nd_of(x), nd_of(w))
  end
  -- Mixed float dtypes compute in float64, as arithmetic promotes.
  if dt_of(x) ~= dt_of(w) then
    if dt_of(x) ~= DTYPE.float64 then x = M.cast(x, 'float64') end
    if dt_of(w) ~= DTYPE.float64 then w = M.cast(w, 'float64') end
  end
  local sh, sw = conv_pair('conv2d', 'stride', opts.stride, 1, 1)
  local ph, pw = conv_pair('conv2d', 'padding', opts.padding, 0, 0)
  local dh, dw = conv_pair('conv2d', 'dilation', opts.dilation, 1, 1)
  local groups = opts.groups or 1
  if not is_int(groups) or groups < 1 then
    argerror('conv2d', 'groups must be a positive integer, got %s', tostring(groups))
  end
  return apply('conv2d', 'conv2d', { x, w }, 2, { i = { sh, sw, ph, pw, dh, dw, groups } })
end
-- tgl.max_pool2d(x, opts) and tgl.avg_pool2d(x, opts): pooling over the
-- last two axes of an NCHW (or CHW) float x, as Torch7's
-- SpatialMaxPooling / SpatialAveragePooling.  opts: kernel (a number or
-- {kH, kW}; required), stride (default: the kernel), padding (default 0),
-- ceil_mode (default false), and for avg_pool2d count_include_pad
-- (default true, as Torch7's).  The flag values are tgl.h's TGL_POOL_*.
local POOL_CEIL, POOL_EXCLUDE_PAD = core.defines.TGL_POOL_CEIL, core.defines.TGL_POOL_EXCLUDE_PAD
local function pool_pair(fname, key, v)
  if type(v) == 'number' then v = { v, v } end
  if #v ~= 2 or not is_int(v[1]) or not is_int(v[2]) then
    argerror(fname, "option '%s' must be an integer or {h, w}, got %s", key,
             type(v) == 'table' and ('a table of ' .. #v .. ' values') or tostring(v))
  end
  return v[1], v[2]
end
local function pool2d(opname, avg)
  local known = { kernel = 'number|table', stride = 'number|table', padding = 'number|table',
                  ceil_mode = 'boolean' }
  if avg then known.count_include_pad = 'boolean' end
  return function(x, opts)
    opts = core.check_options(opname, opts, known)
    if opts.kernel == nil then argerror(opname, "needs the option 'kernel' (a number or {h, w})") end
    local kh, kw = pool_pair(opname, 'kernel', opts.kernel)
    local dh, dw = kh, kw
    if opts.stride ~= nil then dh, dw = pool_pair(opname, 'stride', opts.stride) end
    local ph, pw = pool_pair(opname, 'padding', opts.padding or 0)
    local flags = (opts.ceil_mode and POOL_CEIL or 0)
                + (avg and opts.count_include_pad == false and POOL_EXCLUDE_PAD or 0)
    x = floaty(opname, tensorize(opname, x))
    return apply(opname, opname, { x }, 1, { i = { kh, kw, dh, dw, ph, pw }, flags = flags })
  end
end
M.max_pool2d = pool2d('max_pool2d', false)
M.avg_pool2d = pool2d('avg_pool2d', true)

-- Batch normalisation (engine/ops/batch_norm.c): x is (N, C) or (N, C, ...)
-- up to 5-d, channels on axis 2 (1-based), statistics over every other
-- axis.
local function bn_x(fname, x)
  x = floaty(fname, tensorize(fname, x))
  local nd = nd_of(x)
  if nd < 2 or nd > 5 then
    argerror(fname, 'takes a 2-d (N, C) to 5-d (N, C, D, H, W) input, got %d-d', nd)
  end
  return x
end

-- tgl.batch_norm_stats(x) -> mean, var: each channel's mean and biased
-- variance, two (C) vectors of x's dtype, from one pass over x.  On arrays
-- it runs a small compiled function, kept per dtype, rank and device
-- setting: the op has two outputs, and an eager call of one op gives one.
local stats_fns = {}
function M.batch_norm_stats(x)
  x = bn_x('batch_norm_stats', x)
  if not is_var(x) then
    -- on the array's device, as every eager op runs (its results stay there)
    local dev = x.device
    local key = dt_of(x) .. ':' .. nd_of(x) .. ':' .. dev
    local f = stats_fns[key]
    if not f then
      local v = M.tensor{ dtype = DTYPE_NAME[dt_of(x)], ndim = nd_of(x), name = 'x' }
      local m, s = M.batch_norm_stats(v)
      local was = config.device
      config.device = dev
      local ok, res = pcall(require('tgl.function').compile, { inputs = { v }, outputs = { m, s } })
      config.device = was
      if not ok then error(res, 0) end
      f = res
      stats_fns[key] = f
    end
    local m, s = f(x)
    local function back(a)  -- the function returns host arrays: to x's device
      if a.p.device == x.p.device then return a end
      local o = out_array()
      check(C.tgl_array_to_device(core.ctx, a.p, x.p.device, o), 'batch_norm_stats')
      return core.wrap(o[0])
    end
    return back(m), back(s)
  end
  C.tgl_graph_maybe_collect(ctx_raw)
  local ins = node_list(1)
  ins[0] = x.n
  local out = out_node()
  check(C.tgl_apply(core.ctx, OP.batch_norm_stats, 1, ins, nil, user_source(), out),
        'batch_norm_stats')
  local node = wrap_node(out[0])
  local r = {}
  for k = 0, 1 do
    local o = out_node()
    check(C.tgl_node_output(core.ctx, node.n, k, o), 'batch_norm_stats')
    r[k + 1] = wrap_node(o[0])
  end
  return r[1], r[2]
end

-- tgl.batch_norm(x [, weight, bias] [, {eps=1e-5, mean=, var=}]):
-- y = (x - mean) / sqrt(var + eps) * weight + bias, the (C) vectors along
-- axis 2.  Without mean and var (training): the batch's statistics, and
-- the result is y, mean, var (var biased).  With them (evaluation, e.g.
-- running statistics): y alone.  weight and bias go together (both or
-- neither).  Vectors of another float dtype are cast to x's, and a
-- float64 vector makes everything float64, as arithmetic promotes.
local BN_OPTS = { eps = 'number', mean = 'any', var = 'any' }
function M.batch_norm(x, w, b, opts)
  if opts == nil and type(w) == 'table' and not is_var(w) and not is_array(w) and b == nil then
    w, opts = nil, w
  end
  opts = core.check_options('batch_norm', opts, BN_OPTS)
  x = bn_x('batch_norm', x)
  if (w == nil) ~= (b == nil) then
    argerror('batch_norm', 'takes weight and bias together (both or neither), got %s',
             w == nil and 'a bias alone' or 'a weight alone')
  end
  local eps = opts.eps == nil and 1e-5 or opts.eps
  if not (eps >= 0) then argerror('batch_norm', 'eps must be >= 0, got %s', tostring(eps)) end
  if (opts.mean == nil) ~= (opts.var == nil) then
    argerror('batch_norm', 'takes the options mean and var together (both or neither)')
  end
  local args = { x, opts.mean, opts.var, w, b }
  local names = { 'x', 'mean', 'var', 'weight', 'bias' }
  for k = 2, 5 do
    if args[k] ~= nil then
      args[k] = floaty('batch_norm', tensorize('batch_norm', args[k]))
      if nd_of(args[k]) ~= 1 then
        argerror('batch_norm', '%s must be a 1-d vector (one entry per channel), got %d-d',
                 names[k], nd_of(args[k]))
      end
    end
  end
  local dt = dt_of(x)
  for k = 2, 5 do if args[k] ~= nil and dt_of(args[k]) == DT_FLOAT64 then dt = DT_FLOAT64 end end
  for k = 1, 5 do
    if args[k] ~= nil and dt_of(args[k]) ~= dt then args[k] = M.cast(args[k], DTYPE_NAME[dt]) end
  end
  local mean, var = args[2], args[3]
  local given = mean ~= nil
  if not given then mean, var = M.batch_norm_stats(args[1]) end
  local ins = { args[1], mean, var }
  if w ~= nil then ins[4], ins[5] = args[4], args[5] end
  local y = apply('batch_norm', 'batch_norm', ins, #ins, { f = { eps } })
  if given then return y end
  return y, mean, var
end

-- Cross-entropy of probabilities p (rows) against integer labels
-- (1-based, one per row) or one-hot/probability targets of p's shape.
function M.categorical_crossentropy(p, y)
  p = tensorize('categorical_crossentropy', p)
  y = tensorize('categorical_crossentropy', y)
  if not is_float_id(dt_of(y)) then
    if nd_of(p) ~= 2 or nd_of(y) ~= 1 then
      argerror('categorical_crossentropy', 'integer labels need a matrix of probabilities and a '
               .. 'vector of labels, one per row (got %d-d labels, %d-d probabilities)', nd_of(y), nd_of(p))
    end
    if is_array(p) and is_array(y) then
      if y:size(1) ~= p:size(1) then
        argerror('categorical_crossentropy', '%d labels for %d rows', y:size(1), p:size(1))
      end
      for i = 1, y:size(1) do
        local l = y:get(i)
        if l < 1 or l > p:size(2) then
          argerror('categorical_crossentropy', 'label %d (row %d) is not in 1..%d', l, i, p:size(2))
        end
      end
    end
    local rows
    if is_var(p) or is_var(y) then
      rows = M.symbolic_arange(1, M.size(p, 1))
    else
      rows = array.arange(p:size(1))
    end
    return M.neg(M.log(M.index(p, { rows, y })))
  end
  if is_array(p) and is_array(y) and table.concat(p:shape(), ',') ~= table.concat(y:shape(), ',') then
    argerror('categorical_crossentropy', 'targets of shape (%s) for probabilities of shape (%s)',
             table.concat(y:shape(), ','), table.concat(p:shape(), ','))
  end
  return M.neg(M.sum(M.mul(y, M.log(p)), -1))
end

function M.binary_crossentropy(p, t)
  if is_array(p) and is_array(t) and table.concat(p:shape(), ',') ~= table.concat(t:shape(), ',') then
    argerror('binary_crossentropy', 'targets of shape (%s) for probabilities of shape (%s)',
             table.concat(t:shape(), ',') .. (t:dim() == 1 and ',' or ''),
             table.concat(p:shape(), ',') .. (p:dim() == 1 and ',' or ''))
  end
  return M.neg(M.add(M.mul(t, M.log(p)), M.mul(M.sub(1, t), M.log(M.sub(1, p)))))
end

-- ---------------------------------------------------------------------------
-- indexing: x[i], x[{i, {from, to [, step]}, {}}], x[{int_tensor, ...}]

-- The parameter flags of subtensor and inc_subtensor (tgl.h, TGL_IDX_*).
local D = core.defines
local IDX_INDEX, IDX_SLICE = D.TGL_IDX_INDEX, D.TGL_IDX_SLICE
local IDX_START_INPUT, IDX_STOP_INPUT, IDX_STEP_INPUT =
  D.TGL_IDX_START_INPUT, D.TGL_IDX_STOP_INPUT, D.TGL_IDX_STEP_INPUT
local IDX_NO_START, IDX_NO_STOP, IDX_LUA = D.TGL_IDX_NO_START, D.TGL_IDX_NO_STOP, D.TGL_IDX_LUA

local function is_index_tensor(v)
  return (is_var(v) or is_array(v)) and nd_of(v) >= 1
end

-- A 0-d integer node for a symbolic bound, converted by f.
local function int_scalar(fname, v)
  if nd_of(v) ~= 0 or is_float_id(dt_of(v)) then
    argerror(fname, 'symbolic indices must be integer scalars')
  end
  return v
end

-- Builds the basic-indexing params and extra inputs.
local function basic_index(fname, x, spec)
  local nd = nd_of(x)
  if #spec > nd then argerror(fname, '%d indices for a %d-d tensor', #spec, nd) end
  local ints, extras = {}, {}
  for k, s in ipairs(spec) do
    local kind, start, stop, step = IDX_INDEX, 0, 0, 1
    if type(s) == 'number' then
      if not is_int(s) or s == 0 then argerror(fname, 'index %s on axis %d is not valid (indices start at 1)', tostring(s), k) end
      start = s > 0 and s - 1 or s
    elseif is_var(s) or is_array(s) then
      -- symbolic: the engine converts the 1-based value at run time
      kind = IDX_START_INPUT + IDX_LUA
      extras[#extras + 1] = int_scalar(fname, s)
    elseif type(s) == 'table' and not is_var(s) then
      kind = IDX_SLICE
      local from, to, st = s[1], s[2], s[3]
      if st ~= nil then
        if is_var(st) then
          kind = kind + IDX_STEP_INPUT
          -- the step's sign is known only at run time: so is the meaning of
          -- the bounds, which then go to the engine too
          if type(from) == 'number' then from = M.constant(from, 'int64') end
          if type(to) == 'number' then to = M.constant(to, 'int64') end
        elseif not is_int(st) or st == 0 then argerror(fname, 'step on axis %d must be a nonzero integer', k)
        else step = st end
      end
      local neg = type(st) == 'number' and st < 0
      if from == nil then kind = kind + IDX_NO_START
      elseif is_var(from) then
        kind = kind + IDX_START_INPUT
      elseif is_int(from) and from ~= 0 then start = from > 0 and from - 1 or from
      else argerror(fname, 'slice start on axis %d is not valid', k) end
      if to == nil then kind = kind + IDX_NO_STOP
      elseif is_var(to) then
        kind = kind + IDX_STOP_INPUT
      elseif is_int(to) and to ~= 0 then
        -- inclusive 1-based -> exclusive 0-based
        if not neg then
          if to == -1 then kind = kind + IDX_NO_STOP else stop = to > 0 and to or to + 1 end
        else
          local e = to > 0 and to - 2 or to - 1
          if to == 1 then kind = kind + IDX_NO_STOP else stop = e end
        end
      else argerror(fname, 'slice stop on axis %d is not valid', k) end
      -- extras in order: start, stop, step (symbolic ones stay 1-based
      -- and inclusive: the engine converts them at run time)
      if is_var(from) or is_var(to) then kind = kind + IDX_LUA end
      local ex = {}
      if is_var(from) then ex[#ex + 1] = int_scalar(fname, from) end
      if is_var(to) then ex[#ex + 1] = int_scalar(fname, to) end
      if is_var(st) then ex[#ex + 1] = int_scalar(fname, st) end
      for _, e in ipairs(ex) do extras[#extras + 1] = e end
    else
      argerror(fname, 'index %d must be a number, a slice table or a tensor, got %s', k, type(s))
    end
    ints[#ints + 1] = kind
    ints[#ints + 1] = start
    ints[#ints + 1] = stop
    ints[#ints + 1] = step
  end
  return ints, extras
end

local function adv_index(fname, x, spec)
  local nd = nd_of(x)
  if #spec > nd then argerror(fname, '%d indices for a %d-d tensor', #spec, nd) end
  local flags, idx = {}, {}
  for d = 1, nd do
    local s = spec[d]
    if s == nil or (type(s) == 'table' and not is_var(s) and next(s) == nil) then
      flags[d] = 0
    elseif is_index_tensor(s) then
      flags[d] = 1
      if is_float_id(dt_of(s)) then argerror(fname, 'index tensors must be integers') end
      if dt_of(s) ~= DTYPE.int32 and dt_of(s) ~= DTYPE.int64 then s = M.cast(s, 'int64') end
      idx[#idx + 1] = s
    else
      argerror(fname, 'mixing integer tensors with numbers or partial slices is not supported (axis %d); use {} for whole axes', d)
    end
  end
  return flags, idx
end

-- Views made by indexing arrays remember what they index, so that
-- set_subtensor / inc_subtensor apply to arrays too (weak keys: no leak).
local view_origin = setmetatable({}, { __mode = 'k' })

-- x[spec] for variables and arrays.
function M.index(x, spec)
  local r = M.index_raw(x, spec)
  if is_array(x) and is_array(r) then view_origin[r] = { x, spec } end
  return r
end

function M.index_raw(x, spec)
  if type(spec) ~= 'table' or is_var(spec) or is_array(spec) then spec = { spec } end
  local adv = false
  for _, s in ipairs(spec) do if is_index_tensor(s) then adv = true end end
  if adv then
    local flags, idx = adv_index('index', x, spec)
    local args = { x }
    for _, v in ipairs(idx) do args[#args + 1] = v end
    return apply('index', 'adv_subtensor', args, #args, { i = flags })
  end
  local ints, extras = basic_index('index', x, spec)
  local args = { x }
  for _, v in ipairs(extras) do args[#args + 1] = v end
  return apply('index', 'subtensor', args, #args, { i = ints })
end

-- x:size(d): a symbolic int64 scalar.
function M.size(x, d)
  if is_array(x) then return x:size(d) end
  local nd = nd_of(x)
  if not is_int(d) then argerror('size', 'axis must be an integer') end
  local k = d < 0 and nd + d or d - 1
  if k < 0 or k >= nd then axis_range_error('size', d, x) end
  return apply('size', 'axes_size', { x }, 1, { i = { k } })
end

-- set_subtensor(x[{...}], v) / inc_subtensor(x[{...}], v)
local function inc_like(fname, sub, v, set)
  if is_array(sub) and view_origin[sub] then
    -- eager: a copy of the indexed array with the region set or added to
    local base, spec = unpack(view_origin[sub])
    local adv = false
    for _, s in ipairs(type(spec) == 'table' and not is_array(spec) and spec or { spec }) do
      if is_index_tensor(s) then adv = true end
    end
    if adv then
      local flags, idx = adv_index(fname, base, type(spec) == 'table' and not is_array(spec) and spec or { spec })
      local args = { base, v }
      for _, t in ipairs(idx) do args[#args + 1] = t end
      return apply(fname, 'adv_inc_subtensor', args, #args, { i = flags, flags = set and INC_SET_FLAG or 0 })
    end
    local r = base:clone()
    local region = M.index_raw(r, spec)
    if set then
      if is_array(v) then region:copy(v) else region:fill(v) end
    else
      region:copy(M.add(region, v))
    end
    return r
  end
  if not is_var(sub) then
    argerror(fname, 'the first argument must be an indexing expression of a variable, e.g. x[{1, {2, 3}}]')
  end
  local op = C.tgl_node_op(sub.n)
  local isadv = op == OP.adv_subtensor
  if op ~= OP.subtensor and not isadv then
    argerror(fname, 'the first argument must be an indexing expression such as x[{1, {2, 3}}]')
  end
  local n = C.tgl_node_ninputs(sub.n)
  local x = wrap_node(C.tgl_node_input_at(sub.n, 0))
  local args = { x, v }
  for k = 1, n - 1 do args[#args + 1] = wrap_node(C.tgl_node_input_at(sub.n, k)) end
  local P = C.tgl_node_params(sub.n)
  local ints = {}
  for k = 0, P.n - 1 do ints[k + 1] = tonumber(P.i[k]) end
  if not (is_var(v)) then v = as_node(fname, v, dt_of(x)); args[2] = v end
  return apply(fname, isadv and 'adv_inc_subtensor' or 'inc_subtensor', args, #args,
               { i = ints, flags = set and INC_SET_FLAG or 0 })
end
function M.set_subtensor(sub, v) return inc_like('set_subtensor', sub, v, true) end
function M.inc_subtensor(sub, v) return inc_like('inc_subtensor', sub, v, false) end

return M
