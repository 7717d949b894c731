-- nn — Torch7's nn on tgl's compiler: `local nn = require 'nn'`.
--
-- A module keeps Torch7's fields and calls (output, gradInput, forward,
-- backward(input, gradOutput, scale), parameters, getParameters, ...), but
-- computes nothing itself: each module builds its part of a symbolic graph
-- (module:graph(x) returns the symbolic output), and forward/backward on
-- arrays compile the whole model's graph once per input shape and dtype,
-- keep the compiled function on the module and reuse it.  Parameters are
-- tgl shared variables that borrow the module's own arrays (weight, bias,
-- gradWeight, gradBias), so what the user reads and writes in those fields
-- is what the compiled functions read and update.  doc/nn.md says what is
-- covered.
--
-- This file: the class helper, nn.Module (the compile cache) and
-- nn.Criterion.  The layers are in nn/layers.lua and nn/layers2.lua (shape
-- modules and LookupTable), the containers in
-- nn/containers.lua, the criterions in nn/criterions.lua, the spatial
-- (convolution and pooling) modules in nn/spatial.lua, the table modules
-- (JoinTable, SplitTable, CAddTable, ...) in nn/tables.lua, the optimisers
-- in nn/optim.lua, nn.compile (the compiled training step) in
-- nn/compile.lua, the sequence
-- modules (LSTM, GRU, RNN) in nn/recurrent.lua.
local tgl = require 'tgl'
local core = require 'tgl.core'

local nn = {}

-- Compiled functions built so far by nn (forward, backward and criterion
-- functions together): the specs read it to see that a second call with
-- the same shape reuses the function.
nn.compiled_count = 0

-- Raised (nn._reconfigured()) by a setter that changes how a module's
-- graph is built (pooling's ceil(), noBias()): a container caches its
-- children's graphs in its own compiled functions, so every forward and
-- backward function built before is rebuilt at its next use.
nn._generation = 0
function nn._reconfigured() nn._generation = nn._generation + 1 end

-- nn.class('Linear', nn.Module) -> the class table, callable as a
-- constructor (nn.Linear(2, 3) calls __init).  Methods are inherited
-- through __index; Torch7's __tostring__ method gives print's text.
function nn.class(name, parent)
  local cls = {}
  cls.__index = cls
  cls.__typename = 'nn.' .. name
  cls.__tostring = function(self) return self:__tostring__() end
  setmetatable(cls, {
    __index = parent,
    __call = function(c, ...)
      local o = setmetatable({}, c)
      o:__init(...)
      return o
    end,
  })
  nn[name] = cls
  return cls
end

-- The class name of a module or criterion ('nn.Linear'), as torch.type.
function nn.type(obj)
  local mt = getmetatable(obj)
  return mt and mt.__typename or type(obj)
end

local function shape_key(a)
  return a.dtype .. '(' .. table.concat(a:shape(), 'x') .. ')'
end


-- ---------------------------------------------------------------------------
-- nn.Module

local Module = nn.class('Module')

function Module:__init()
  self._dtype = tgl.config.floatX
  self.output = tgl.zeros(0, { dtype = self._dtype })
  self.gradInput = tgl.zeros(0, { dtype = self._dtype })
  self.train = true
end

function Module:__tostring__() return nn.type(self) end

-- The symbolic output for the symbolic input x.  Every module defines it.
function Module:graph()
  nn._raise(nn.type(self) .. ':graph is not defined (every module must build its graph)')
end

-- Parameter fields of this module (not of its children), as pairs
-- {value field, gradient field}, for those present.
function Module:_paramFields()
  local out = {}
  if self.weight then out[#out + 1] = { 'weight', 'gradWeight' } end
  if self.bias then out[#out + 1] = { 'bias', 'gradBias' } end
  return out
end

-- The shared variable that borrows self[field].  Made again when the
-- field holds another array than the one borrowed (after type(),
-- getParameters or a user's assignment).  Parameters live in host memory,
-- as Torch7's do: they are made with the cpu device, and a function
-- compiled for another device copies them in for each call and writes
-- its updates back (doc/devices.md), so the fields stay the truth.
-- key (default: field) names the cache entry: a module that also needs a
-- variable over the same array that no gradient is taken for (the
-- LookupTable's padding rows) asks for it under another key.
function Module:_var(field, key)
  local a = self[field]
  if not tgl.is_array(a) then
    nn._raise(('%s: field %s must be an array, got %s'):format(nn.type(self), field, type(a)))
  end
  self._vars = self._vars or {}
  key = key or field
  nn._borrowed(self, field, a)
  local s = self._vars[key]
  if s and rawequal(s.arr, a) then return s.var end
  local dev = tgl.config.device
  tgl.config.device = 'cpu'
  local ok, v = pcall(tgl.shared, a, nn.type(self) .. '.' .. field, { borrow = true })
  tgl.config.device = dev
  if not ok then error(v, 0) end
  self._vars[key] = { arr = a, var = v }
  return v
end

-- Every module in depth-first order, this one first (Torch7's listModules).
function Module:listModules()
  local out = { self }
  for _, m in ipairs(self.modules or {}) do
    for _, c in ipairs(m:listModules()) do out[#out + 1] = c end
  end
  return out
end

-- {weights}, {gradients} over the whole tree, in listModules order; nothing
-- when there are no parameters (as Torch7).
function Module:parameters()
  local w, g = {}, {}
  for _, m in ipairs(self:listModules()) do
    for _, f in ipairs(m:_paramFields()) do
      w[#w + 1] = m[f[1]]
      g[#g + 1] = m[f[2]]
    end
  end
  if #w == 0 then return nil end
  return w, g
end

-- (module, value field, gradient field) of every parameter.
function Module:_paramSlots()
  local out = {}
  for _, m in ipairs(self:listModules()) do
    for _, f in ipairs(m:_paramFields()) do out[#out + 1] = { m, f[1], f[2] } end
  end
  return out
end

-- Flat parameters and gradients: the weights and gradients are copied into
-- one flat array each and the modules' fields become views into them (as
-- Torch7's getParameters does), so writing the flat array changes the
-- modules, updateParameters changes the flat array, and the compiled
-- functions (rebuilt on the new arrays at their next call) see both.
-- An array held by several modules (clone('weight', 'bias', 'gradWeight',
-- 'gradBias'), share) gets one place in the flat arrays, and every module
-- holding it gets the same view, so the sharing survives, as Torch7 keeps
-- shared storages once.
function Module:getParameters()
  local slots = self:_paramSlots()
  local dtype = #slots > 0 and slots[1][1][slots[1][2]].dtype or self._dtype
  -- places: w array -> {offset, g array}; g array -> w array
  local wplace, gowner, order, n = {}, {}, {}, 0
  for _, s in ipairs(slots) do
    local m, wf, gf = s[1], s[2], s[3]
    local w, g = m[wf], m[gf]
    if w.dtype ~= dtype then
      nn._raise(('getParameters: %s.%s is %s, the others %s (convert the model with :type first)')
            :format(nn.type(m), wf, w.dtype, dtype))
    end
    local p = wplace[w]
    if p then
      if not rawequal(p.g, g) then
        nn._raise(('getParameters: %s.%s is shared with another module but its %s is not (share both, e.g. clone(\'weight\', \'bias\', \'gradWeight\', \'gradBias\'))')
              :format(nn.type(m), wf, gf))
      end
    else
      if gowner[g] then
        nn._raise(('getParameters: %s.%s is shared with another module but its %s is not (share both)')
              :format(nn.type(m), gf, wf))
      end
      wplace[w] = { off = n, g = g }
      gowner[g] = w
      order[#order + 1] = w
      n = n + w:nelement()
    end
  end
  local flat = tgl.zeros(n, { dtype = dtype })
  local gflat = tgl.zeros(n, { dtype = dtype })
  local views = {}
  for _, w in ipairs(order) do
    local p, k = wplace[w], w:nelement()
    if k > 0 then
      local wv = flat[{ { p.off + 1, p.off + k } }]:reshape(w:shape())
      local gv = gflat[{ { p.off + 1, p.off + k } }]:reshape(p.g:shape())
      wv:copy(w)
      gv:copy(p.g)
      views[w], views[p.g] = wv, gv
    end
  end
  for _, s in ipairs(slots) do
    local m, wf, gf = s[1], s[2], s[3]
    local wv, gv = views[m[wf]], views[m[gf]]
    if wv then m[wf], m[gf] = wv, gv end
  end
  -- the compiled functions borrow the old arrays: drop them now rather
  -- than when each is next asked for
  for _, m in ipairs(self:listModules()) do m._compiled = nil end
  return flat, gflat
end

-- True when every parameter a cached function was built on is still the
-- array the module holds.
local function still_valid(c)
  for _, p in ipairs(c.params) do
    if not rawequal(p[1][p[2]], p[3]) then return false end
  end
  return true
end

-- Every gradient array set to 0, and weight <- weight - lr * gradWeight in
-- place (views stay views).  The update is a compiled function with
-- updates (built on first use and cached like forward's), whose generated
-- kernels run over the arrays' own storage; an eager expression per
-- parameter costs several times more for a large layer.
--
-- zeroGradParameters writes zero bytes over each gradient's memory (a
-- memset: all-zero bytes are 0 in every dtype tgl has), one call per run
-- of gradients lying end to end in memory: after getParameters they are
-- views of one flat array, so the whole model is one memset, as Torch7's
-- gradParameters:zero().  Only writes, no reads: about half the memory
-- traffic of a copy from a zero array and a third of a compiled
-- function's (its fused kernel writes a new buffer that is then copied
-- in); exactly 0 even where the gradient was NaN.  A gradient that is not
-- a contiguous host array (a strided view the user assigned) is copied
-- from a zero array instead (nn._zeros).  The addresses are read at each
-- call, never cached: a resize may move an array's data.
local zero_src = {}
function nn._zeros(dtype, shape)
  local n = 1
  for _, v in ipairs(shape) do n = n * v end
  local z = zero_src[dtype]
  if not z or z:nelement() < n then
    z = tgl.zeros(math.max(n, 1), { dtype = dtype })
    zero_src[dtype] = z
  end
  return z[{ { 1, n } }]:reshape(shape)
end

local ffi = core.ffi
local CPU, CONTIGUOUS = core.C.TGL_DEVICE_CPU, 1
local function addr(p) return tonumber(ffi.cast('uintptr_t', p)) end

function Module:zeroGradParameters()
  self._compiled = self._compiled or {}
  local c = self._compiled.zero
  if not (c and still_valid(c)) then
    -- (the walk over the tree only when the cached list does not hold)
    if not self:parameters() then return end
    c = { params = {}, grads = {} }
    -- a gradient array held by several modules (clone, share) is zeroed once
    local seen = {}
    for _, s in ipairs(self:_paramSlots()) do
      local g = s[1][s[3]]
      c.params[#c.params + 1] = { s[1], s[3], g }
      if g:nelement() > 0 and not seen[g] then
        seen[g] = true
        c.grads[#c.grads + 1] = g
      end
    end
    self._compiled.zero = c
  end
  -- runs of contiguous host memory, merged while each gradient starts
  -- where the last one ended
  local start, stop = nil, nil
  for _, g in ipairs(c.grads) do
    local p = g.p
    if p.device == CPU and bit.band(p.flags, CONTIGUOUS) ~= 0 then
      local a = addr(p._data)
      local n = tonumber(p._size) * tonumber(core.C.tgl_dtype_size(p.dtype_id))
      if start and a == stop then
        stop = a + n
      else
        if start then ffi.fill(ffi.cast('void *', start), stop - start) end
        start, stop = a, a + n
      end
    else
      g:copy(nn._zeros(g.dtype, g:shape()))
    end
  end
  if start then ffi.fill(ffi.cast('void *', start), stop - start) end
end

-- True when every n x 1 view the update was built on (Module:_paramFunction)
-- still covers its array's memory: an array resized in place (torch's
-- resize) has moved, and the update is built again.
local function views_hold(c)
  for _, v in ipairs(c.views) do
    local a, w = v[1].p, v[2].p
    if addr(a._data) ~= addr(w._data) or a._size ~= w._size then return false end
  end
  return true
end

function Module:updateParameters(lr)
  if type(lr) ~= 'number' then
    nn._raise(('%s:updateParameters: the learning rate must be a number, got %s'):format(nn.type(self), type(lr)))
  end
  local c = self._compiled and self._compiled.update
  if not (c and still_valid(c) and views_hold(c)) then
    if c then self._compiled.update = nil end
    if not self:parameters() then return end
    c = self:_paramFunction('update')
  end
  c.lr:set(lr)
  c.s:set(-lr, 1, 1)
  c.f(c.lr, c.s)
end

function Module:training()
  for _, m in ipairs(self:listModules()) do m.train = true end
  return self
end

function Module:evaluate()
  for _, m in ipairs(self:listModules()) do m.train = false end
  return self
end

function Module:get(i) return self.modules and self.modules[i] end
function Module:size() return self.modules and #self.modules or 0 end

-- Converts every array field to dtype ('torch.FloatTensor' and
-- 'torch.DoubleTensor' are accepted as Torch7 names them).  The compiled
-- functions are dropped.
local TORCH_TYPES = { ['torch.FloatTensor'] = 'float32', ['torch.DoubleTensor'] = 'float64' }
function Module:type(dtype)
  if dtype == nil then
    for name, d in pairs(TORCH_TYPES) do if d == self._dtype then return name end end
    return self._dtype
  end
  dtype = TORCH_TYPES[dtype] or dtype
  if dtype == 'float' then dtype = 'float32' elseif dtype == 'double' then dtype = 'float64' end
  if dtype ~= 'float32' and dtype ~= 'float64' then
    nn._raise(("%s:type: expected 'float32', 'float64' or a Torch7 tensor type, got %s")
          :format(nn.type(self), tostring(dtype)))
  end
  -- an array held by several modules (clone, share) is converted once
  -- and stays shared, as Torch7's tensorCache keeps it
  local converted = {}
  for _, m in ipairs(self:listModules()) do
    for k, v in pairs(m) do
      if tgl.is_array(v) and v.dtype ~= dtype and (v.dtype == 'float32' or v.dtype == 'float64') then
        converted[v] = converted[v] or v:astype(dtype)
        m[k] = converted[v]
      end
    end
    m._dtype = dtype
    m._compiled = nil
  end
  return self
end

-- Torch7's reset([stdv]): new random parameters.  A module without
-- parameters has nothing to do; containers reset each child.
function Module:reset() return self end

-- A deep copy of v: arrays cloned (an array met twice is cloned once, so
-- the copy keeps the sharing inside the tree), tables copied with their
-- metatable (the class of a module), other values kept.  Fields whose
-- names start with '_' and hold tables other than arrays are caches
-- (compiled functions, shared variables borrowing the original's
-- arrays) and are left out: the copy builds its own.
local function deep_copy(v, memo)
  if tgl.is_array(v) then
    if memo[v] == nil then memo[v] = v:clone() end
    return memo[v]
  end
  if type(v) ~= 'table' then return v end
  if memo[v] ~= nil then return memo[v] end
  local mt = getmetatable(v)
  if mt ~= nil and not (type(mt) == 'table' and mt.__typename and nn[mt.__typename:match('^nn%.(.*)$') or ''] == mt) then
    return v   -- an object of tgl's own (a variable): kept, not copied
  end
  local c = {}
  memo[v] = c
  for k, x in pairs(v) do
    if not (type(k) == 'string' and k:sub(1, 1) == '_' and type(x) == 'table' and not tgl.is_array(x)) then
      c[deep_copy(k, memo)] = deep_copy(x, memo)
    end
  end
  return setmetatable(c, mt)
end

-- clone(...): a deep copy of the module (new arrays), in which the fields
-- named, e.g. clone('weight', 'bias', 'gradWeight', 'gradBias'), are
-- shared with the original in every module of the tree (share).
function Module:clone(...)
  local c = deep_copy(self, {})
  if select('#', ...) > 0 then c:share(self, ...) end
  return c
end

-- share(mlp, ...): each field named that this module has becomes mlp's
-- array itself (the same array, not a copy), so a write through either
-- module is seen by both, and the compiled functions of both (rebuilt at
-- their next call) read and update that one array.  Containers share
-- child by child.
function Module:share(mlp, ...)
  if type(mlp) ~= 'table' or getmetatable(mlp) == nil then
    nn._raise(('%s:share: expected a module to share with, got %s'):format(nn.type(self), type(mlp)))
  end
  for i = 1, select('#', ...) do
    local f = select(i, ...)
    if type(f) ~= 'string' then
      nn._raise(('%s:share: field names must be strings, got %s'):format(nn.type(self), type(f)))
    end
    if self[f] ~= nil then
      if not tgl.is_array(mlp[f]) then
        nn._raise(('%s:share: the module to share with (%s) has no array %s'):format(nn.type(self), nn.type(mlp), f))
      end
      self[f] = mlp[f]
      self.shared, mlp.shared = true, true
    end
  end
  self._compiled = nil
  -- a container's compiled functions notice a parameter field that holds
  -- another array (still_valid); any other field shared makes them rebuild
  local params = {}
  for _, f in ipairs(self:_paramFields()) do params[f[1]], params[f[2]] = true, true end
  for i = 1, select('#', ...) do
    if not params[select(i, ...)] then nn._reconfigured(); break end
  end
  return self
end

function Module:float() return self:type('float32') end
function Module:double() return self:type('float64') end

-- ---------------------------------------------------------------------------
-- tables of arrays
--
-- Torch7's modules take and give a tensor or a (nested) Lua table of
-- tensors.  Here a value is flattened into its leaves (depth-first) and
-- its structure: true for a leaf, a list of structures for a table.  The
-- compiled functions take and give the leaves; the structure rebuilds
-- the tables.

local is_var = tgl.is_variable
local C = core.C
local node_list = core.ffi.typeof('tgl_node *[?]')
local G = require 'tgl.graph'

local function node_id(v) return tonumber(C.tgl_node_id(v.n)) end
local function is_float(v) return v.dtype:match('^float') ~= nil end

-- The leaves of v appended to leaves; returns v's structure.  what names
-- v in errors ('the input', then 'the input[2]' inside).
local function flatten(v, is_leaf, leaves, what)
  if is_leaf(v) then leaves[#leaves + 1] = v; return true end
  if type(v) ~= 'table' or getmetatable(v) ~= nil then
    error(('%s must be an array, got %s'):format(what, nn.type(v)), 0)
  end
  if #v == 0 then error(what .. ' is an empty table (expected an array or a table of arrays)', 0) end
  local s = {}
  for i = 1, #v do s[i] = flatten(v[i], is_leaf, leaves, what .. '[' .. i .. ']') end
  return s
end

-- The value of structure s from list[pos], list[pos + 1], ...; returns
-- it and the next position.
local function unflatten(s, list, pos)
  pos = pos or 1
  if s == true then return list[pos], pos + 1 end
  local t = {}
  for i = 1, #s do t[i], pos = unflatten(s[i], list, pos) end
  return t, pos
end

local function same_structure(a, b)
  if a == true or b == true then return a == b end
  if #a ~= #b then return false end
  for i = 1, #a do if not same_structure(a[i], b[i]) then return false end end
  return true
end

-- 'an array', 'a table of 2 (an array, a table of 3 (...))'.
local function describe(s)
  if s == true then return 'an array' end
  local parts = {}
  for i = 1, #s do parts[i] = describe(s[i]) end
  return ('a table of %d (%s)'):format(#s, table.concat(parts, ', '))
end

-- The cache key of an array or a table of arrays: every leaf's dtype
-- and shape, in the table's structure.
local function value_key(v)
  if tgl.is_array(v) then return shape_key(v) end
  local parts = {}
  for i = 1, #v do parts[i] = value_key(v[i]) end
  return '{' .. table.concat(parts, ',') .. '}'
end

-- exprs (a list of variables) with every from[k] replaced by to[k], all
-- at once (a replacement is not searched again).
local function replace(exprs, from, to)
  local n, nr = #exprs, #from
  if n == 0 or nr == 0 then return exprs end
  local src, res = node_list(n), node_list(n)
  for i = 1, n do src[i - 1] = exprs[i].n end
  local f, t = node_list(nr), node_list(nr)
  for i = 1, nr do f[i - 1] = from[i].n; t[i - 1] = to[i].n end
  core.check(C.tgl_clone_replace(core.ctx, n, src, nr, f, t, res), 'nn')
  local out = {}
  for i = 1, n do out[i] = G.wrap_node(res[i - 1]) end
  return out
end

-- v (a variable or a table of them) with the replacements made.
local function replace_value(v, from, to)
  if #from == 0 then return v end
  local l = {}
  local s = flatten(v, is_var, l, 'the value')
  return (unflatten(s, replace(l, from, to)))
end

-- ---------------------------------------------------------------------------
-- the compile cache

-- Where the user called nn from: the first stack level outside tgl's rooms
-- (tgl.core.is_internal: lua/tgl, lua/nn, lua/torch)
-- ("script.lua:12: "), so errors point at the user's line as tgl's do.
local function where()
  for level = 3, 40 do
    local info = debug.getinfo(level, 'Sl')
    if not info then break end
    if info.currentline > 0 and not core.is_internal(info.source) then
      return info.short_src .. ':' .. info.currentline .. ': '
    end
  end
  return ''
end

-- Raises msg at the user's line, without the location an inner error()
-- put in front of it.
function nn._raise(msg)
  msg = tostring(msg):gsub('^[^\n:]*:%d+: ', '')
  error(where() .. msg, 0)
end
local raise = nn._raise

-- What a module's graph takes: 'array' (most modules), 'table' (the
-- table modules) or 'any' (containers, Identity).  nn._graph checks it
-- before calling graph, so a table given where an array is expected is
-- an error that names the module.
Module._takes = 'array'

local function first_line(m) return (tostring(m):gsub('\n.*', '')) end

-- m:graph(x), after checking that x is what m takes.
function nn._graph(m, x)
  local takes = m._takes or 'array'
  if takes == 'array' and type(x) == 'table' then
    error(('%s: expected an array, got a table of %d'):format(first_line(m), #x), 0)
  elseif takes == 'table' and type(x) ~= 'table' then
    error(('%s: expected a table of arrays, got %s'):format(first_line(m),
          is_var(x) and 'an array (' .. x.ndim .. '-d)' or type(x)), 0)
  end
  return m:graph(x)
end

-- Records each module inside a container while a model's graph is built
-- (containers call nn._record with the module's symbolic output and
-- input, each a variable or a table of them, and its path, e.g.
-- 'modules[2].modules[1]'), so forward can fill every module's output
-- field and backward every gradInput, as Torch7 does, and a failure can
-- name the module.
local recording = nil
local path = {}
function nn._record(m, y, x)
  if recording then recording[#recording + 1] = { m, y, x, table.concat(path, '.') } end
end
function nn._enter(i) path[#path + 1] = 'modules[' .. i .. ']' end
function nn._leave() path[#path] = nil end

-- While forward or backward builds a model's graph for a concrete input,
-- the symbolic input's leaves and the arrays they stand for:
-- nn._shape_of(v) evaluates the shape of an inner variable v once, at
-- build time, for the modules whose graph depends on it as Torch7's does
-- (Reshape's batch rule counts the input's elements, SplitTable makes one
-- output per slice).  Outside such a build (a user's model:graph(x)) it
-- returns nil and the module falls back on the number of dimensions.
local building = nil
function nn._shape_of(v)
  if not building then return nil end
  v = replace({ v }, building.afrom, building.ato)[1]
  local f = tgl.compile { inputs = building.xs, outputs = v:shape(), mode = 'FAST_COMPILE',
                          name = 'nn_shape' }
  return f(unpack(building.inputs)):totable()
end

-- A container that gives one input to several modules (Concat,
-- ConcatTable) gives each a fresh variable standing for it (an alias),
-- so that each module's gradInput is the gradient through that module
-- alone, as in Torch7, and not the sum over all of them (the gradient at
-- a variable counts every use).  nn._alias(v) returns the alias of v (a
-- variable or a table of them); the build replaces each alias by what it
-- stands for before anything is compiled.  Outside a build it returns v.
function nn._alias(v)
  if not building then return v end
  local leaves = {}
  local s = flatten(v, is_var, leaves, 'the input')
  local out = {}
  for i, t in ipairs(leaves) do
    local ty = t:type()
    local a = tgl.tensor { dtype = ty.dtype, ndim = ty.ndim, broadcastable = ty.broadcastable,
                           name = 'alias' }
    -- what the alias stands for, free of earlier aliases
    local r = replace({ t }, building.afrom, building.ato)[1]
    building.aliases[#building.aliases + 1] = { a = a, t = t }
    building.afrom[#building.afrom + 1] = a
    building.ato[#building.ato + 1] = r
    out[i] = a
  end
  return (unflatten(s, out))
end

-- A module whose forward needs host work before each call of the
-- compiled function (Dropout draws its noise) registers it while the
-- forward graph is built; the function is kept with the compiled one.
function nn._before_forward(fn)
  if building then building.hooks[#building.hooks + 1] = fn end
end

-- A module whose forward changes its own state (batch normalisation's
-- running statistics) registers the update {shared variable, new value}
-- while the graph is built; the forward function applies it after each
-- call (backward's functions do not: Torch7 updates the statistics in
-- updateOutput only).  compose(prev), when given, is the same update
-- made on top of prev, a new value of the same array that another
-- module's update gave: modules sharing an array (LookupTables sharing a
-- weight, each renormalising its rows) must update it once per compiled
-- call, so nn._merged_updates chains them in order.
function nn._add_update(var, value, compose)
  if building then building.updates[#building.updates + 1] = { var, value, compose = compose } end
end

-- Shared variable -> the array it borrows, for every variable the
-- modules of model have made (Module:_var; several per array when
-- modules share it, or when one module asks under another key).
function nn._var_arrays(model)
  local map = {}
  for _, m in ipairs(model:listModules()) do
    for _, s in pairs(rawget(m, '_vars') or {}) do map[s.var] = s.arr end
  end
  return map
end

-- The modules' state updates (nn._build's b.updates) with one entry per
-- array, in order, {var, value, arr = the array}: the updates of
-- variables over one array are chained through their compose functions
-- (two updates of one array in a compiled call would each overwrite
-- the other's).  An update that cannot be chained is an error naming it.
function nn._merged_updates(model, updates)
  local arrays = nn._var_arrays(model)
  local out, at = {}, {}
  for _, u in ipairs(updates) do
    local a = arrays[u[1]] or u[1]
    local e = at[a]
    if not e then
      e = { u[1], u[2], arr = a }
      at[a] = e
      out[#out + 1] = e
    elseif u.compose then
      e[2] = u.compose(e[2])
    else
      nn._raise(('%s: two modules update the same array (%s) in one call, and the second update cannot '
                 .. 'be chained after the first'):format(nn.type(model), tostring(u[1].name or 'a state array')))
    end
  end
  return out, at
end

-- A module that can check the model's input array on the host before
-- each compiled call (LookupTable's indices: a bad one is an error naming
-- it and its position, not a wrong row) registers fn(array) while the
-- graph is built, when its symbolic input x is one of the model's input
-- leaves (nn._is_model_input(x)); fn gets that leaf's array.  forward,
-- backward, updateGradInput, accGradParameters and
-- accUpdateGradParameters run them.  Each check in b.checks takes the
-- model's input (an array, or a table of arrays, or the list of its
-- leaves).
local function model_leaf(x)
  if not building or not is_var(x) then return nil end
  -- an alias (Concat, ConcatTable) stands for what it was made from
  local r = #building.afrom > 0 and replace({ x }, building.afrom, building.ato)[1] or x
  local id = node_id(r)
  for i, v in ipairs(building.xs) do if node_id(v) == id then return i end end
  return nil
end
function nn._check_input(fn, x)
  if not building then return end
  -- which leaf of the model's input (x omitted: the first)
  local k = x ~= nil and model_leaf(x) or 1
  -- the module's path in the model, for the error ('modules[1] ...')
  local at = table.concat(path, '.')
  building.checks[#building.checks + 1] = function(input)
    local a = input
    if not tgl.is_array(input) then
      local l = {}
      flatten(input, tgl.is_array, l, 'the input')
      a = l[k]
    end
    local ok, err = pcall(fn, a)
    if not ok then error((at ~= '' and at .. ' ' or '') .. tostring(err), 0) end
  end
end
function nn._is_model_input(x) return model_leaf(x) ~= nil end

-- Every field a build borrows through Module:_var (parameters, and state
-- such as batch normalisation's running statistics): a compiled function
-- is rebuilt when one of them holds another array (still_valid), as it is
-- for parameters.
function nn._borrowed(m, field, a)
  if building then building.borrowed[#building.borrowed + 1] = { m, field, a } end
end

-- Builds model's graph for the symbolic input x (a variable or a nested
-- table of them; input: the concrete array or table of arrays it stands
-- for, or nil): returns {y = symbolic output (a variable or a table of
-- them), rec = the inner modules' records (nn._record), hooks =
-- functions to run before each forward call, updates = the modules'
-- state updates, checks = functions of the input (an array or a
-- table of arrays) to run before each call, raw = the same before the
-- aliases were replaced (nn._alias; backward differentiates there),
-- borrowed = {module, field, array} of every field borrowed}.
-- Every compiled function of a model (forward, backward, nn.compile's
-- step) builds its graph here.  Errors are raised at the user's line.
function nn._build(model, x, input)
  local xs, inputs = {}, {}
  local ok, e = pcall(function()
    flatten(x, is_var, xs, 'the input')
    if input ~= nil then flatten(input, tgl.is_array, inputs, 'the input') end
  end)
  if not ok then raise(e) end
  recording, path = {}, {}
  building = { xs = xs, inputs = inputs, hooks = {}, updates = {},
               aliases = {}, afrom = {}, ato = {}, checks = {},
               borrowed = {} }
  local y
  ok, y = pcall(nn._graph, model, x)
  if ok then
    local ok2, e2 = pcall(flatten, y, is_var, {}, 'the output')
    if not ok2 then ok, y = false, first_line(model) .. ':graph: ' .. e2 end
  end
  local rec, bd = recording, building
  recording, building, path = nil, nil, {}
  if not ok then raise(y) end
  local b = { y = y, rec = rec, hooks = bd.hooks, updates = bd.updates, checks = bd.checks,
              borrowed = bd.borrowed,
              raw = { y = y, rec = rec, updates = bd.updates, aliases = bd.aliases,
                      afrom = bd.afrom, ato = bd.ato } }
  if #bd.afrom > 0 then
    local from, to = bd.afrom, bd.ato
    b.y = replace_value(y, from, to)
    b.rec = {}
    for i, r in ipairs(rec) do
      b.rec[i] = { r[1], replace_value(r[2], from, to), replace_value(r[3], from, to), r[4] }
    end
    b.updates = {}
    for i, u in ipairs(bd.updates) do
      b.updates[i] = { u[1], replace({ u[2] }, from, to)[1], compose = u.compose }
    end
  end
  return b
end

-- The train flags of the modules in the tree: part of a compiled
-- function's key, since a module's graph may differ (Dropout); a module
-- whose graph depends on a plain field the user sets (the sequence
-- modules' batchfirst) adds it through m:_graphKey().
local function mode_key(self)
  local s = {}
  for i, m in ipairs(self:listModules()) do
    s[i] = (m.train == false and 'e' or 't') .. (m._graphKey and m:_graphKey() or '')
  end
  return table.concat(s)
end


-- Adds variable v to list unless a variable of the same node is there
-- (ids: node id -> position); returns its position.
local function add_once(list, ids, v)
  local id = node_id(v)
  local k = ids[id]
  if not k then list[#list + 1] = v; k = #list; ids[id] = k end
  return k
end

-- For each module record, {module, structure, positions}: its value
-- (field 2 of the record: output, 3: input) is made of the variables at
-- those positions of list (added when not there).
local function record_slots(rec, field, list, ids, map)
  local mods = {}
  for _, r in ipairs(rec) do
    local l = {}
    local s = flatten(r[field], is_var, l, 'a value')
    local idx = {}
    for i, v in ipairs(l) do idx[i] = map and map(v) or add_once(list, ids, v) end
    mods[#mods + 1] = { r[1], s, idx }
  end
  return mods
end

-- Groups parameter slots ({module, value field, gradient field}) by the
-- array in field f (2: the values, 3: the gradients): one entry per
-- distinct array, in order, {var = the first holder's shared variable,
-- sum = the sum of term(i) over the slots i holding it}.  Modules that
-- share an array (clone, share) must update it once, with every
-- holder's contribution.
function nn._grouped(slots, f, term)
  local out, at = {}, {}
  for i, s in ipairs(slots) do
    local a = s[1][s[f]]
    local u = at[a]
    local t = term(i)
    if u then u.sum = u.sum + t
    else
      u = { var = s[1]:_var(s[f]), sum = t }
      at[a] = u
      out[#out + 1] = u
    end
  end
  return out
end

-- The gradients of L at wrt (a list), through the aliases: each alias's
-- gradient is the gradient through the module it was given to, and it
-- flows on to what the alias stands for (known_grads), so the gradients
-- at everything else are the whole model's.  Aliases are made in order
-- (an alias stands for values made before it), so going backwards each
-- one's gradient is complete when it is needed.  An integer alias
-- (indices given to several modules) has no gradient.  Returns the
-- gradients at wrt and the alias gradients (by alias node id).
local function alias_grads(L, wrt, aliases)
  local acc, order = {}, {}   -- node id of a target -> {var, sum of its known gradients}
  local function known()
    local k = {}
    for _, id in ipairs(order) do k[acc[id][1]] = acc[id][2] end
    return k
  end
  local ga = {}
  for k = #aliases, 1, -1 do
    local al = aliases[k]
    if is_float(al.a) then
      local g = tgl.grad(L, al.a, { disconnected = 'ignore', known_grads = known() })
      ga[node_id(al.a)] = g
      local id = node_id(al.t)
      if acc[id] then acc[id][2] = acc[id][2] + g
      else acc[id] = { al.t, g }; order[#order + 1] = id end
    end
  end
  if #wrt == 0 then return {}, ga end
  local opts = { disconnected = 'ignore' }
  if #order > 0 then opts.known_grads = known() end
  return tgl.grad(L, wrt, opts), ga
end

-- v, or dot(b', a') when v is the transpose of dot(a, b) (a weight's
-- gradient comes out of tgl.grad so, for y = x W'): the specializer folds
-- an untransposed product into the accumulation around it.
local function untransposed(v)
  if v.op ~= 'dimshuffle' or v.ndim ~= 2 then return v end
  local p = C.tgl_node_params(v.n)
  if p.n ~= 2 or p.i[0] ~= 1 or p.i[1] ~= 0 then return v end
  local d = G.wrap_node(C.tgl_node_input_at(v.n, 0))
  if d.op ~= 'dot' then return v end
  local a = G.wrap_node(C.tgl_node_input_at(d.n, 0))
  local b = G.wrap_node(C.tgl_node_input_at(d.n, 1))
  if a.ndim ~= 2 or b.ndim ~= 2 then return v end
  return tgl.dot(b:T(), a:T())
end

-- The model's parameters, each {module, field, the array it holds now}.
local function param_list(slots)
  local params = {}
  for _, s in ipairs(slots) do params[#params + 1] = { s[1], s[2], s[1][s[2]] } end
  return params
end

-- Compiles a backward function ('backward': gradInput and accumulation,
-- 'gradInput', 'acc': accumulation only, or 'accupdate': weight -= lr *
-- gradient) of the built graph b (its
-- symbolic input leaves xs, structure in_s) for gradOutput.  With fwd
-- (the forward function built on the same graph), the function takes the
-- forward's results as inputs too, after the input's leaves, and reads
-- every module's output from them instead of computing it again.
local function compile_grad(self, kind, b, xs, in_s, gradOutput, fwd, scale_one)
  local y_leaves = {}
  local y_s = flatten(b.y, is_var, y_leaves, 'the output')
  local g_leaves = {}
  local g_s = flatten(gradOutput, tgl.is_array, g_leaves, 'gradOutput')
  if not same_structure(g_s, y_s) then
    local what = kind == 'gradInput' and 'updateGradInput' or kind == 'acc' and 'accGradParameters'
                 or kind == 'accupdate' and 'accUpdateGradParameters' or 'backward'
    raise(('%s:%s: gradOutput must have the output\'s structure, %s; got %s')
          :format(nn.type(self), what, describe(y_s), describe(g_s)))
  end
  local slots = self:_paramSlots()
  local c = { params = param_list(slots), rec = b.rec, x = xs, hooks = b.hooks, checks = b.checks,
              gen = nn._generation }
  for _, s in ipairs(b.borrowed) do c.params[#c.params + 1] = s end
  local gs = {}
  for i, a in ipairs(g_leaves) do
    gs[i] = tgl.tensor { dtype = a.dtype, ndim = a:dim(), name = g_s == true and 'gradOutput' or 'gradOutput' .. i }
  end
  -- backward's scale, or accUpdateGradParameters' learning rate, in the
  -- parameters' dtype (an input may be integer: labels, indices)
  local sdt = #slots > 0 and slots[1][1][slots[1][2]].dtype or g_leaves[1].dtype
  local scale = tgl.tensor { dtype = sdt, ndim = 0, name = kind == 'accupdate' and 'lr' or 'scale' }
  -- differentiate the graph with its aliases (b.raw): L = sum_i sum(y_i g_i)
  local raw = b.raw
  local ry = {}
  flatten(raw.y, is_var, ry, 'the output')
  local L
  for i, v in ipairs(ry) do
    local t = tgl.sum(v * gs[i])
    L = L and L + t or t
  end
  local alias_ids = {}
  for _, al in ipairs(raw.aliases) do alias_ids[node_id(al.a)] = true end
  -- wrt: the input's leaves, the modules' inputs (those not aliases),
  -- the parameters.  An integer value (LookupTable's indices) has no
  -- gradient: its gradInput is zeros of its shape and dtype, as Torch7's
  -- ({zero = the value} in place of a position).
  local wrt, ids = {}, {}
  local function source(v)
    if not is_float(v) then return { zero = v } end
    local id = node_id(v)
    if alias_ids[id] then return -id - 1 end   -- an alias: its own gradient
    return add_once(wrt, ids, v)
  end
  local in_src = {}
  for i, v in ipairs(xs) do in_src[i] = source(v) end
  local gi_mods = {}
  local grad_in = kind ~= 'acc' and kind ~= 'accupdate'
  if grad_in then gi_mods = record_slots(raw.rec, 3, wrt, ids, source) end
  local nwrt = #wrt
  local vars = {}
  if kind ~= 'gradInput' then
    for _, s in ipairs(slots) do
      vars[#vars + 1] = s[1]:_var(s[2])
      wrt[#wrt + 1] = vars[#vars]
    end
  end
  local grads, ga = alias_grads(L, wrt, raw.aliases)
  -- the outputs: gradient of each leaf of the input, then of each
  -- module's input (positions < 0 name an alias's gradient)
  local outs, oids, zeros = {}, {}, {}
  local function out_of(p)
    if type(p) == 'table' then
      local id = node_id(p.zero)
      zeros[id] = zeros[id] or p.zero * 0
      return add_once(outs, oids, zeros[id])
    end
    return add_once(outs, oids, p > 0 and grads[p] or ga[-p - 1])
  end
  c.out = { false, in_s, {} }
  c.mods = {}
  if grad_in then
    for i = 1, #xs do c.out[3][i] = out_of(in_src[i]) end
    for i, m in ipairs(gi_mods) do
      local idx = {}
      for j, p in ipairs(m[3]) do idx[j] = out_of(p) end
      c.mods[i] = { m[1], m[2], idx }
    end
  end
  local nout = #outs
  -- a module met twice in the tree (added twice) has one variable,
  -- whose gradient already holds both uses: counted once
  local seen, dup = {}, {}
  for i, v in ipairs(vars) do
    if seen[v] then dup[i] = true end
    seen[v] = true
  end
  local function part(i) return dup[i] and 0 or untransposed(grads[nwrt + i]) end
  -- One update per array: modules that share an array (clone, share)
  -- each give their own contribution, summed into the array once.
  -- gradWeight + dot(...): one gemm accumulating into gradWeight's own
  -- buffer (a deferred update, doc/internals.md) when the scale is the
  -- constant 1 and the product is not transposed.
  local uvars = {}
  if kind == 'accupdate' then
    for _, u in ipairs(nn._grouped(slots, 2, part)) do
      uvars[#uvars + 1] = u.var
      outs[#outs + 1] = scale_one and u.var - u.sum or u.var - scale * u.sum
    end
  elseif kind ~= 'gradInput' then
    for _, u in ipairs(nn._grouped(slots, 3, part)) do
      uvars[#uvars + 1] = u.var
      outs[#outs + 1] = scale_one and u.var + u.sum or u.var + scale * u.sum
    end
  end
  -- everything in terms of the model's input (aliases replaced)
  outs = replace(outs, raw.afrom, raw.ato)
  local inputs = {}
  for _, v in ipairs(xs) do inputs[#inputs + 1] = v end
  if fwd then
    -- the forward's results stand for the values they hold (computed
    -- values only: an input or a parameter passed on is itself)
    local from, to = {}, {}
    for k, v in ipairs(fwd.outs) do
      local ty = v:type()
      local p = tgl.tensor { dtype = ty.dtype, ndim = ty.ndim, broadcastable = ty.broadcastable,
                             name = 'output' .. k }
      inputs[#inputs + 1] = p
      if v.kind == 'apply' then from[#from + 1] = v; to[#to + 1] = p end
    end
    outs = replace(outs, from, to)
  end
  local updates = {}
  for i, v in ipairs(uvars) do updates[i] = { v, outs[nout + i] } end
  for i = #outs, nout + 1, -1 do outs[i] = nil end
  if kind ~= 'gradInput' and kind ~= 'accupdate' then
    for _, s in ipairs(slots) do c.params[#c.params + 1] = { s[1], s[3], s[1][s[3]] } end
  end
  for _, v in ipairs(gs) do inputs[#inputs + 1] = v end
  inputs[#inputs + 1] = scale
  local name = nn.type(self):gsub('^nn%.', 'nn_') .. '_' .. kind
  c.f = tgl.compile { inputs = inputs, outputs = outs, updates = updates, name = name }
  -- nn checked the arrays (check_value) and the function was built for
  -- their dtypes and ranks, which the engine checks again: no Lua-side
  -- conversion per call.  The scale is passed as c.scale, a 0-d array.
  c.f.trust_input = true
  c.scale = tgl.zeros({}, { dtype = sdt })
  nn.compiled_count = nn.compiled_count + 1
  return c
end

local function fwd_key(self, input) return 'forward:' .. value_key(input) .. ':' .. mode_key(self) end

-- kind: 'forward', 'backward' (gradInput and accumulation), 'gradInput',
-- 'acc' (accumulation only) or 'accupdate' (weight -= lr * gradient,
-- Torch7's accUpdateGradParameters).  input and gradOutput: arrays or tables
-- of arrays (checked by the caller).
function Module:_function(kind, input, gradOutput, scale_one, fkey)
  local key = kind == 'forward' and (fkey or fwd_key(self, input))
              or kind .. (scale_one and '1' or '') .. ':' .. value_key(input) .. ':' .. value_key(gradOutput)
                 .. ':' .. mode_key(self)
  self._compiled = self._compiled or {}
  local c = self._compiled[key]
  if c and still_valid(c) and c.gen == nn._generation then return c end
  local in_leaves = {}
  local in_s = flatten(input, tgl.is_array, in_leaves, 'the input')
  local xs = {}
  for i, a in ipairs(in_leaves) do
    xs[i] = tgl.tensor { dtype = a.dtype, ndim = a:dim(), name = in_s == true and 'input' or 'input' .. i }
  end
  local b = nn._build(self, (unflatten(in_s, xs)), input)
  if kind == 'forward' then
    local params = param_list(self:_paramSlots())
    for _, s in ipairs(b.borrowed) do params[#params + 1] = s end
    c = { params = params, rec = b.rec, x = xs, hooks = b.hooks,
          checks = b.checks, gen = nn._generation, b = b, in_s = in_s, bwd = {} }
    -- outs: the model's output leaves, then every module's (a variable
    -- is returned once); c.mods[i] = {module, structure, positions}
    local y_leaves = {}
    local y_s = flatten(b.y, is_var, y_leaves, 'the output')
    local outs, ids = {}, {}
    local y_idx = {}
    for i, v in ipairs(y_leaves) do y_idx[i] = add_once(outs, ids, v) end
    c.mods = record_slots(b.rec, 2, outs, ids)
    c.out = { true, y_s, y_idx }
    c.outs = outs
    -- one update per array (modules sharing one chain theirs)
    local updates = {}
    for i, u in ipairs(nn._merged_updates(self, b.updates)) do updates[i] = { u[1], u[2] } end
    c.f = tgl.compile { inputs = xs, outputs = outs, updates = updates,
                        name = nn.type(self):gsub('^nn%.', 'nn_') .. '_forward' }
    c.f.trust_input = true
    nn.compiled_count = nn.compiled_count + 1
  else
    c = compile_grad(self, kind, b, xs, in_s, gradOutput, nil, scale_one)
  end
  self._compiled[key] = c
  return c
end

-- The backward function that reads the last forward's results, when the
-- last forward was on this very input (the same arrays, of the same
-- shapes) with the function in use now; nil otherwise.  As Torch7's
-- backward uses the outputs its forward left in the modules.
function Module:_reuse(kind, input, in_leaves, gradOutput, scale_one)
  local last = self._lastForward
  if not last or #last.inputs ~= #in_leaves then return nil end
  for i, a in ipairs(in_leaves) do
    if not rawequal(a, last.inputs[i]) then return nil end
  end
  local fkey = fwd_key(self, input)
  local fc = self._compiled and self._compiled[fkey]
  if fkey ~= last.key or fc ~= last.c or not still_valid(fc) or fc.gen ~= nn._generation then
    return nil
  end
  local key = kind .. (scale_one and '1' or '') .. ':' .. value_key(gradOutput)
  local c = fc.bwd[key]
  if c and still_valid(c) then return c, last.results end
  c = compile_grad(self, kind, fc.b, fc.x, fc.in_s, gradOutput, fc, scale_one)
  fc.bwd[key] = c
  return c, last.results
end

-- The compiled update weight <- weight - lr * gradWeight of every
-- parameter (kind 'update'; input: the learning rate).
--
-- Each weight that is a contiguous host array with one gradient (the
-- usual case) is updated as a column: W(n x 1) + G(n x 1) . s, s the 1 x 1
-- matrix holding -lr, over variables that borrow n x 1 views of the
-- weight and gradient arrays.  That is a gemm accumulating into W's own
-- buffer (a deferred update, doc/internals.md), which the gemm kernel
-- runs as BLAS's rank-1 update over one column, an axpy: W is read and
-- written once, G read once, and no new buffer is written and copied
-- back as W - lr * G (a fused elementwise kernel) would be.  Other
-- weights (shared by several modules, strided) keep that elementwise
-- form: w - lr * (the sum of the gradients of every module holding w),
-- as Torch7's updateParameters, which steps a shared weight once per
-- module holding it.
local function column(a)
  local p = a.p
  if p.device ~= CPU or bit.band(p.flags, CONTIGUOUS) == 0 or a:nelement() == 0 then return nil end
  local v = a:reshape(a:nelement(), 1)
  -- a view over the same memory, never a copy (the update must land in a)
  if addr(v.p._data) ~= addr(p._data) then return nil end
  return v
end

function Module:_paramFunction(kind)
  self._compiled = self._compiled or {}
  local c = self._compiled[kind]
  if c and still_valid(c) then return c end
  local slots = self:_paramSlots()
  local params, updates = {}, {}
  local dtype = slots[1][1][slots[1][2]].dtype
  local lr = tgl.tensor { dtype = dtype, ndim = 0, name = 'lr' }
  local s = tgl.tensor { dtype = dtype, ndim = 2, name = 'minus_lr' }
  for _, sl in ipairs(slots) do
    local m, wf, gf = sl[1], sl[2], sl[3]
    params[#params + 1] = { m, wf, m[wf] }
    params[#params + 1] = { m, gf, m[gf] }
  end
  -- the holders of each weight array, in order
  local groups, at = {}, {}
  for i, sl in ipairs(slots) do
    local w = sl[1][sl[2]]
    if not at[w] then at[w] = { w = w, idx = {} }; groups[#groups + 1] = at[w] end
    local idx = at[w].idx
    idx[#idx + 1] = i
  end
  local views, dev = {}, tgl.config.device
  for _, grp in ipairs(groups) do
    local sl = slots[grp.idx[1]]
    local m, wf, gf = sl[1], sl[2], sl[3]
    local g = m[gf]
    local wv = #grp.idx == 1 and g.dtype == grp.w.dtype and column(grp.w)
    local gv = wv and column(g)
    if wv and gv and gv:nelement() == wv:nelement() then
      views[#views + 1] = { grp.w, wv }
      views[#views + 1] = { g, gv }
      local name = nn.type(m) .. '.'
      tgl.config.device = 'cpu'
      local ok, W, G = pcall(function()
        return tgl.shared(wv, name .. wf, { borrow = true }), tgl.shared(gv, name .. gf, { borrow = true })
      end)
      tgl.config.device = dev
      if not ok then error(W, 0) end
      updates[#updates + 1] = { W, W + tgl.dot(G, s) }
    else
      local v = m:_var(wf)
      local sum
      for _, i in ipairs(grp.idx) do
        local t = slots[i][1]:_var(slots[i][3])
        sum = sum and sum + t or t
      end
      updates[#updates + 1] = { v, v - lr * sum }
    end
  end
  local name = nn.type(self):gsub('^nn%.', 'nn_') .. '_' .. kind
  c = { params = params, views = views, f = tgl.compile { inputs = { lr, s }, updates = updates, name = name } }
  c.f.trust_input = true
  c.lr = tgl.zeros({}, { dtype = dtype })
  c.s = tgl.zeros({ 1, 1 }, { dtype = dtype })
  nn.compiled_count = nn.compiled_count + 1
  self._compiled[kind] = c
  return c
end

-- A compiled call that failed: finds the first module inside whose
-- output cannot be computed for this input (each one's output shape,
-- evaluated in order) and names it, with its path, in the error.
function Module:_failed(c, what, in_leaves, err)
  -- nn.compile passes its graph's single input variable and array
  local xs = is_var(c.x) and { c.x } or c.x
  if tgl.is_array(in_leaves) then in_leaves = { in_leaves } end
  for _, r in ipairs(c.rec) do
    local ok = pcall(function()
      local l = {}
      flatten(r[2], is_var, l, 'the output')
      local shapes = {}
      for i, v in ipairs(l) do shapes[i] = v:shape() end
      tgl.compile { inputs = xs, outputs = shapes, mode = 'FAST_COMPILE', name = 'nn_shape' }(unpack(in_leaves))
    end)
    if not ok then
      local keys = {}
      for i, a in ipairs(in_leaves) do keys[i] = shape_key(a) end
      local msg = tostring(err):gsub('^[^\n:]*:%d+: ', ''):gsub('^tgl%.nn_[%w_]+: ', '')
      raise(('%s:%s: %s %s fails on this input (%s): %s'):format(nn.type(self), what, r[4],
                                                               first_line(r[1]),
                                                               table.concat(keys, ', '), msg))
    end
  end
  raise(err)
end

-- Runs c.f on the arguments (a list), after the input checks
-- (nn._check_input) and, for forward, the hooks (nn._before_forward); on
-- failure names the module (Module:_failed).
local function run(self, what, c, in_leaves, args)
  for _, check in ipairs(c.checks) do
    local ok, err = pcall(check, in_leaves)
    if not ok then
      local msg = tostring(err):gsub('^[^\n:]*:%d+: ', '')
      local own = nn.type(self) .. ': '
      if msg:sub(1, #own) == own then msg = msg:sub(#own + 1) end
      raise(('%s:%s: %s'):format(nn.type(self), what, msg))
    end
  end
  if what == 'forward' then for _, h in ipairs(c.hooks) do h() end end
  local res = { pcall(c.f, unpack(args)) }
  if not res[1] then self:_failed(c, what, in_leaves, res[2]) end
  return { unpack(res, 2) }
end

-- The leaves of an array or a (nested) table of arrays; an error at the
-- user's line for anything else.
local function check_value(fname, what, v)
  local l = {}
  local ok, e = pcall(flatten, v, tgl.is_array, l, what)
  if not ok then raise(fname .. ': ' .. e) end
  return l
end

local function pick(list, idx)
  local out = {}
  for i, k in ipairs(idx) do out[i] = list[k] end
  return out
end

-- The compiled function's results into the model's field (output or
-- gradInput) and every inner module's; returns the model's.
local function fill(self, c, field, outs)
  local top = c.out
  for _, m in ipairs(c.mods) do m[1][field] = (unflatten(m[2], pick(outs, m[3]))) end
  self[field] = (unflatten(top[2], pick(outs, top[3])))
  return self[field]
end

function Module:updateOutput(input)
  local leaves = check_value(nn.type(self) .. ':forward', 'the input', input)
  local fkey = fwd_key(self, input)
  local c = self:_function('forward', input, nil, nil, fkey)
  self._lastForward = nil
  local results = run(self, 'forward', c, leaves, leaves)
  -- kept for backward (Module:_reuse): what this forward was on and gave
  self._lastForward = { inputs = leaves, key = fkey, c = c, results = results }
  return fill(self, c, 'output', results)
end

function Module:forward(input) return self:updateOutput(input) end

-- Runs the backward function of this kind on (input, gradOutput, scale):
-- the one reading the last forward's results when it applies
-- (Module:_reuse), else the one computing the forward again.
local function run_backward(self, kind, what, input, gradOutput, scale)
  local fname = nn.type(self) .. ':' .. what
  local leaves = check_value(fname, 'the input', input)
  local gleaves = check_value(fname, 'gradOutput', gradOutput)
  -- scale 1 (the usual) is built in as a constant: see compile_grad
  local one = scale == 1
  local c, results = self:_reuse(kind, input, leaves, gradOutput, one)
  if not c then c = self:_function(kind, input, gradOutput, one) end
  local args = {}
  for i, v in ipairs(leaves) do args[i] = v end
  for _, v in ipairs(results or {}) do args[#args + 1] = v end
  for _, v in ipairs(gleaves) do args[#args + 1] = v end
  c.scale:set(scale)
  args[#args + 1] = c.scale
  return c, run(self, what, c, leaves, args)
end

function Module:updateGradInput(input, gradOutput)
  local c, res = run_backward(self, 'gradInput', 'updateGradInput', input, gradOutput, 1)
  return fill(self, c, 'gradInput', res)
end

function Module:accGradParameters(input, gradOutput, scale)
  if not self:parameters() then
    check_value(nn.type(self) .. ':accGradParameters', 'the input', input)
    check_value(nn.type(self) .. ':accGradParameters', 'gradOutput', gradOutput)
    return
  end
  run_backward(self, 'acc', 'accGradParameters', input, gradOutput, scale or 1)
end

-- gradInput (also of every module inside), and scale * the parameter
-- gradients added to gradWeight and gradBias, in one compiled function.
function Module:backward(input, gradOutput, scale)
  local c, res = run_backward(self, 'backward', 'backward', input, gradOutput, scale or 1)
  return fill(self, c, 'gradInput', res)
end

local function check_array(fname, what, a)
  if not tgl.is_array(a) then raise(('%s: %s must be an array, got %s'):format(fname, what, type(a))) end
end

-- weight <- weight - lr * dL/dweight for every parameter (L =
-- sum(output * gradOutput)), gradWeight and gradBias untouched: Torch7's
-- accUpdateGradParameters, one compiled function.  A weight held by
-- several modules moves by the sum of their contributions.
function Module:accUpdateGradParameters(input, gradOutput, lr)
  local fname = nn.type(self) .. ':accUpdateGradParameters'
  check_value(fname, 'the input', input)
  check_value(fname, 'gradOutput', gradOutput)
  if type(lr) ~= 'number' then
    raise(('%s: the learning rate must be a number, got %s'):format(fname, type(lr)))
  end
  if not self:parameters() then return end
  run_backward(self, 'accupdate', 'accUpdateGradParameters', input, gradOutput, lr)
end

-- ---------------------------------------------------------------------------
-- nn.Criterion: forward(input, target) -> the loss (a number),
-- backward(input, target) -> gradInput.  graph(input, target) is the
-- symbolic loss; _target(input, target) checks and converts the target.

local Criterion = nn.class('Criterion')

function Criterion:__init()
  self._dtype = tgl.config.floatX
  self.output = 0
  self.gradInput = tgl.zeros(0, { dtype = self._dtype })
  self.sizeAverage = true
end

function Criterion:__tostring__() return nn.type(self) end

-- A deep copy (new arrays: the class weights too), as Torch7's clone.
function Criterion:clone() return deep_copy(self, {}) end

function Criterion:_target(input, target)
  check_array(nn.type(self) .. ':forward', 'the target', target)
  return target
end

function Criterion:_function(kind, input, target)
  local key = kind .. ':' .. shape_key(input) .. ':' .. shape_key(target) .. ':'
              .. tostring(self.sizeAverage)
  self._compiled = self._compiled or {}
  local c = self._compiled[key]
  if c then return c end
  local x = tgl.tensor { dtype = input.dtype, ndim = input:dim(), name = 'input' }
  local t = tgl.tensor { dtype = target.dtype, ndim = target:dim(), name = 'target' }
  local loss = self:graph(x, t)
  local out = kind == 'forward' and loss or tgl.grad(loss, x)
  c = tgl.compile { inputs = { x, t }, outputs = out, name = nn.type(self):gsub('^nn%.', 'nn_') .. '_' .. kind }
  c.trust_input = true   -- both arrays, checked by nn, of the dtypes the key names
  nn.compiled_count = nn.compiled_count + 1
  self._compiled[key] = c
  return c
end

function Criterion:updateOutput(input, target)
  check_array(nn.type(self) .. ':forward', 'the input', input)
  target = self:_target(input, target)
  self.output = self:_function('forward', input, target)(input, target):get()
  return self.output
end
function Criterion:forward(input, target) return self:updateOutput(input, target) end

function Criterion:updateGradInput(input, target)
  check_array(nn.type(self) .. ':backward', 'the input', input)
  target = self:_target(input, target)
  self.gradInput = self:_function('backward', input, target)(input, target)
  return self.gradInput
end
function Criterion:backward(input, target) return self:updateGradInput(input, target) end

Criterion.type = function(self, dtype)
  self._dtype = TORCH_TYPES[dtype] or dtype
  self._compiled = nil
  return self
end
function Criterion:float() return self:type('float32') end
function Criterion:double() return self:type('float64') end

require('nn.containers')(nn)
require('nn.layers')(nn)
require('nn.layers2')(nn)
require('nn.criterions')(nn)
require('nn.spatial')(nn)
require('nn.tables')(nn)
require('nn.optim')(nn)
require('nn.compile')(nn)
require('nn.recurrent')(nn)
require('nn.normalization')(nn)
require('nn.stochastic_gradient')(nn)
require('nn.trainer')(nn)

-- As Torch7's: `require 'nn'` loads torch (the global `torch`) and sets
-- the global `nn`, which Torch7 scripts use without a local.
require 'torch'
_G.nn = nn
return nn
