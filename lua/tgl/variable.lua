-- tgl.variable — what a symbolic variable looks like from Lua: operators
-- (+ - * / ^ % and unary -), indexing x[...], fields (dtype, ndim,
-- broadcastable, name) and methods (x:dot(y), x:sum(1), x:T(), ...).
-- The same operators and math methods are installed on arrays, so eager
-- code reads like symbolic code.
local core = require 'tgl.core'
local array = require 'tgl.array'
local G = require 'tgl.graph'
local ffi, C = core.ffi, core.C
local check, argerror = core.check, core.argerror

local M = {}
local vmethods = {}
M.methods = vmethods

local out_array = core.out_array_t
local DTYPE_NAME = array.DTYPE_NAME
local KIND = G.KIND
local KIND_NAME = {}  -- id -> 'input', 'constant', 'shared', 'apply'
for name, id in pairs(KIND) do KIND_NAME[id] = name end

local function is_var(x) return G.is_var(x) end

-- ---------------------------------------------------------------------------
-- methods shared by variables and arrays

local shared_math = {
  dot = G.dot, sum = G.sum, mean = G.mean, max = G.max, min = G.min, prod = G.prod,
  argmax = G.argmax, argmin = G.argmin, var = G.var, std = G.std,
  exp = G.exp, log = G.log, log1p = G.log1p, expm1 = G.expm1, sqrt = G.sqrt, abs = G.abs,
  sign = G.sign, tanh = G.tanh, sigmoid = G.sigmoid, softplus = G.softplus, relu = G.relu,
  sin = G.sin, cos = G.cos, floor = G.floor, ceil = G.ceil, round = G.round, sqr = G.sqr,
  clip = G.clip, flatten = G.flatten, dimshuffle = G.dimshuffle, softmax = G.softmax,
  log_softmax = G.log_softmax, maximum = G.maximum, minimum = G.minimum, pow = G.pow,
  eq = G.eq, neq = G.neq, lt = G.lt, le = G.le, gt = G.gt, ge = G.ge,
}
for name, f in pairs(shared_math) do
  vmethods[name] = f
  if array.methods[name] == nil then array.methods[name] = f end
end

-- ---------------------------------------------------------------------------
-- variable-only methods

vmethods.T = G.transpose
vmethods.transpose = G.transpose
vmethods.reshape = G.reshape
vmethods.shape = G.shape
vmethods.size = G.size
vmethods.astype = G.cast
function vmethods.type(x)
  local t = C.tgl_node_type(x.n)
  local bc = {}
  for i = 1, t.ndim do bc[i] = bit.band(t.bcast, 2 ^ (i - 1)) ~= 0 end
  return { dtype = DTYPE_NAME[t.dtype], ndim = t.ndim, broadcastable = bc }
end

local function kind(x) return C.tgl_node_kind_of(x.n) end

local function need_shared(fname, x)
  if kind(x) ~= KIND.shared then argerror(fname, 'only shared variables have a value') end
end

-- W:get_value() -> a copy (on the host); W:get_value{borrow=true} -> the
-- array itself (on the variable's device).
local BORROW = { borrow = 'boolean' }
function vmethods.get_value(x, opts)
  need_shared('get_value', x)
  local out = out_array()
  check(C.tgl_shared_get(core.ctx, x.n, out), 'get_value')
  local a = core.wrap(out[0])
  opts = core.check_options('get_value', opts, BORROW)
  if opts.borrow then return a end
  if a.p.device ~= C.TGL_DEVICE_CPU then return a:cpu() end
  return a:clone()
end

-- W:set_value(a [, {borrow=true}]): a must have W's dtype and rank.
function vmethods.set_value(x, v, opts)
  need_shared('set_value', x)
  opts = core.check_options('set_value', opts, BORROW)
  if not core.is_array(v) then
    if type(v) == 'number' or type(v) == 'table' then
      v = array.array(v, DTYPE_NAME[C.tgl_node_type(x.n).dtype])
    else
      argerror('set_value', 'expected an array, got %s', type(v))
    end
  end
  -- The same shape is copied into the variable's storage by C; a new
  -- shape replaces the storage, with a copy unless borrowed.
  local out = out_array()
  check(C.tgl_shared_get(core.ctx, x.n, out), 'set_value')
  local cur = core.wrap(out[0])
  local same = cur:dim() == v:dim()
  for d = 1, same and cur:dim() or 0 do same = same and cur:size(d) == v:size(d) end
  if not same and not (opts and opts.borrow) then v = v:clone() end
  check(C.tgl_shared_set(core.ctx, x.n, v.p), 'set_value')
end

-- The constant's value (a copy), for constants.
function vmethods.value(x)
  local a = C.tgl_node_value(x.n)
  if a == nil then argerror('value', 'only constants have a fixed value') end
  C.tgl_array_retain(a)
  return core.wrap(a):clone()
end

-- x:eval{[x] = array, ...}: compiles and runs once (a new function each
-- call: for repeated use, tgl.compile once).
function vmethods.eval(x, inputs)
  local compile = require('tgl.function').compile
  inputs = inputs or {}
  local ins, vals = {}, {}
  for k, v in pairs(inputs) do ins[#ins + 1] = k; vals[#vals + 1] = v end
  local f = compile { inputs = ins, outputs = x }
  return f(unpack(vals))
end

-- ---------------------------------------------------------------------------
-- the variable ctype

local fields = {
  dtype = function(x) return DTYPE_NAME[C.tgl_node_type(x.n).dtype] end,
  ndim = function(x) return C.tgl_node_type(x.n).ndim end,
  broadcastable = function(x) return vmethods.type(x).broadcastable end,
  name = function(x)
    local s = ffi.string(C.tgl_node_name(x.n))
    return s ~= '' and s or nil
  end,
  kind = function(x) return KIND_NAME[kind(x)] end,
  op = function(x)
    if kind(x) ~= KIND.apply then return nil end
    return ffi.string(C.tgl_op_name(C.tgl_node_op(x.n)))
  end,
}

local function tostring_var(x)
  local t = vmethods.type(x)
  local bc = {}
  for i = 1, t.ndim do bc[i] = t.broadcastable[i] and '1' or '?' end
  local name = fields.name(x) or (fields.op(x) and fields.op(x) .. '(...)') or fields.kind(x)
  return string.format('%s: %s (%s%s)', name, t.dtype, table.concat(bc, ','), t.ndim == 1 and ',' or '')
end

-- The fields, for REPL completion after '.' (tgl.repl).
M.fields = fields

local binop = {
  __add = G.add, __sub = G.sub, __mul = G.mul, __div = G.div, __pow = G.pow, __mod = G.mod,
}

local mt = {
  __index = function(x, k)
    local m = vmethods[k]
    if m ~= nil then return m end
    local f = fields[k]
    if f then return f(x) end
    if type(k) == 'string' then
      error("tgl: variables have no field or method '" .. k .. "'", 2)
    end
    return G.index(x, k)
  end,
  __newindex = function(x, k, v)
    if k == 'name' then
      check(C.tgl_node_set_name(core.ctx, x.n, v), 'name')
      return
    end
    error("tgl: variables are immutable; use tgl.set_subtensor(x[...], v) to build an updated copy", 2)
  end,
  __tostring = tostring_var,
  __unm = G.neg,
  __len = function() error('tgl: the length of a variable is symbolic: use x:size(1)', 2) end,
  __lt = array.no_order('variables'), __le = array.no_order('variables'),
}
for k, f in pairs(binop) do mt[k] = f end
ffi.metatype('tgl_vref', mt)

-- Arrays get the same operators through array.lua's hooks; indexing an
-- array with a number or table gives a view (or a number when every axis
-- is indexed by a number).
for k, f in pairs(binop) do array.hooks[k] = f end
array.hooks.__unm = G.neg
array.hooks.__index = function(a, k)
  if type(k) == 'string' then error("tgl: arrays have no field or method '" .. k .. "'", 2) end
  if type(k) == 'number' and a.p.ndim == 1 then return a:get(k) end
  if type(k) == 'table' and not core.is_array(k) and #k == a.p.ndim then
    local all = true
    for _, v in ipairs(k) do if type(v) ~= 'number' then all = false end end
    if all then return a:get(unpack(k)) end
  end
  return G.index(a, k)
end
array.hooks.__newindex = function(a, k, v)
  local view = G.index(a, k)
  if type(view) == 'number' then
    if type(k) == 'number' then a:set(v, k) else a:set(v, unpack(k)) end
    return
  end
  if core.is_array(v) then view:copy(v) else view:fill(v) end
end

return M
