-- optim — Torch7's optim package over tgl arrays: `require 'optim'`.
--
-- optim.sgd(feval, x, config, state) -> x, {f(x)}, and adam, rmsprop,
-- adagrad, with Torch7's closure API: feval(x) returns the loss and the
-- gradient dfdx (an array of x's shape, typically getParameters' flat
-- arrays); x is updated in place.  The update is not a second copy of
-- the formulas: it compiles nn.optim's symbolic rule (lua/nn/optim.lua)
-- over x and the state arrays as borrowed shared variables and dfdx as
-- an input, once per x (and state arrays, and config structure), and
-- runs it.  The state lives in `state` (or in `config` when no state is
-- given), as Torch7 keeps it: the counters (evalCounter, t) are Lua
-- numbers, the per-element state (dfdx, m, v, paramVariance) arrays.
-- doc/optim.md describes it.
local tgl = require 'tgl'
-- as Torch7's optim: its scripts use torch's tensor methods (gradParams:zero())
require 'torch'
local nn = require 'nn'

local optim = {}

-- x -> {key -> compiled entry}; weak: an entry dies with its array.
local cache = setmetatable({}, { __mode = 'k' })

local function shape_of(a) return table.concat(a:shape(), 'x') end

-- A shared variable borrowing array a, on the host (as nn's parameters).
local borrow = require 'nn.host_shared'

-- The compiled update of optimiser name for x, the state's slot arrays
-- and config c: inputs (dfdx, t, fresh, numeric config...), updates x and
-- the slots in place.
local function compiled(name, x, state, c)
  local def = nn.optim._defs[name]
  local slots = def.slots(c)
  local key = name .. ':' .. def.shape(c) .. ':' .. x.dtype .. '(' .. shape_of(x) .. ')'
  local per = cache[x]
  if not per then per = {}; cache[x] = per end
  local e = per[key]
  if e then
    for _, s in ipairs(slots) do
      if not rawequal(e.slots[s], state[s]) then e = nil; break end
    end
  end
  if e then return e end
  e = { slots = {} }
  local xv = borrow(x, 'x')
  local g = tgl.tensor { dtype = x.dtype, ndim = x:dim(), name = 'dfdx' }
  local t = tgl.tensor { dtype = 'float64', ndim = 0, name = 't' }
  local fresh = tgl.tensor { dtype = 'bool', ndim = 0, name = 'fresh' }
  local list, h = nn.optim._inputs(name)
  h.t, h.fresh = t, fresh
  local s = {}
  for _, slot in ipairs(slots) do
    e.slots[slot] = state[slot]
    s[slot] = borrow(state[slot], slot)
  end
  local inputs = { g, t, fresh }
  for _, v in ipairs(list) do inputs[#inputs + 1] = v end
  e.f = tgl.compile { inputs = inputs, updates = nn.optim._updates(name, c, h, xv, g, s),
                      name = 'optim_' .. name }
  -- counted with nn's compiled functions (the specs read it)
  nn.compiled_count = nn.compiled_count + 1
  per[key] = e
  return e
end

local function run(name, feval, x, config, state)
  local fname = 'optim.' .. name
  config = config or {}
  state = state or config
  if type(feval) ~= 'function' then
    nn._raise(('%s: expected a function feval(x) -> f, df/dx as the first argument, got %s')
              :format(fname, type(feval)))
  end
  if not tgl.is_array(x) or not x.dtype:match('^float') then
    nn._raise(('%s: x must be a floating-point array, got %s'):format(fname,
              tgl.is_array(x) and x.dtype .. ' array' or type(x)))
  end
  if type(state) ~= 'table' then
    nn._raise(('%s: the state must be a table, got %s'):format(fname, type(state)))
  end
  local def = nn.optim._defs[name]
  local c = nn.optim._resolve(name, config, fname, rawequal(state, config) and def.torch_state or nil)
  -- the state before feval, so that a bad one changes nothing
  if def.counter then
    local n = state[def.counter]
    if n ~= nil and (type(n) ~= 'number' or n < 0 or n ~= math.floor(n)) then
      nn._raise(('%s: state.%s must be a count (a non-negative integer), got %s'):format(fname, def.counter,
                                                                                     tostring(n)))
    end
  end
  local fresh = {}
  for _, slot in ipairs(def.slots(c)) do
    local a = state[slot]
    if a == nil then
      fresh[slot] = true
    elseif not tgl.is_array(a) or a.dtype ~= x.dtype or shape_of(a) ~= shape_of(x) then
      nn._raise(('%s: state.%s must be a %s array of x\'s shape %s, got %s'):format(fname, slot, x.dtype,
                shape_of(x), tgl.is_array(a) and (a.dtype .. ' ' .. shape_of(a)) or type(a)))
    end
  end
  local fx, dfdx = feval(x)
  if not tgl.is_array(dfdx) or dfdx.dtype ~= x.dtype or shape_of(dfdx) ~= shape_of(x) then
    nn._raise(('%s: feval must return f(x) and df/dx, a %s array of x\'s shape %s; got %s'):format(fname,
              x.dtype, shape_of(x), tgl.is_array(dfdx) and (dfdx.dtype .. ' ' .. shape_of(dfdx)) or type(dfdx)))
  end
  for slot in pairs(fresh) do
    local a = tgl.zeros(x:shape(), { dtype = x.dtype })
    local init = def.init and def.init[slot]
    if init and c[init] ~= 0 then a:fill(c[init]) end
    state[slot] = a
  end
  local okc, e = pcall(compiled, name, x, state, c)
  if not okc then
    for slot in pairs(fresh) do state[slot] = nil end
    nn._raise(e)
  end
  local n = def.counter and (state[def.counter] or 0) or 0
  -- sgd's momentum buffer starts as a copy of the first gradient (Torch7:
  -- when state.dfdx does not exist yet)
  e.values = e.values or {}
  local ok, err = pcall(e.f, dfdx, n, fresh.dfdx == true, unpack(nn.optim._value_arrays(name, c, e.values)))
  if not ok then
    for slot in pairs(fresh) do state[slot] = nil end
    nn._raise(fname .. ': ' .. tostring(err))
  end
  if def.counter then state[def.counter] = n + 1 end
  return x, { fx }
end

for _, name in ipairs({ 'sgd', 'adam', 'rmsprop', 'adagrad' }) do
  optim[name] = function(feval, x, config, state) return run(name, feval, x, config, state) end
end

-- The rest of Torch7's optim package: a script that uses one of these
-- names learns that tgl's optim does not have it yet, rather than
-- "attempt to call a nil value".  Other names read as nil.
local NOT_YET = {}
for _, n in ipairs({ 'adadelta', 'adamax', 'asgd', 'cg', 'checkgrad', 'cmaes', 'de', 'fista', 'lbfgs',
                      'lswolfe', 'nag', 'polyinterp', 'rprop', 'ConfusionMatrix', 'Logger' }) do
  NOT_YET[n] = true
end
setmetatable(optim, {
  __index = function(_, k)
    if NOT_YET[k] then
      nn._raise(("optim.%s is Torch7's but not in tgl's optim yet (it has sgd, adam, rmsprop, adagrad; "
                 .. 'doc/optim.md)'):format(k))
    end
  end,
})

-- Torch7's `require 'optim'` defines the global optim; scripts use it.
_G.optim = optim

return optim
