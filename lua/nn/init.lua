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
-- (convolution and pooling) modules in nn/spatial.lua, the optimisers
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

-- Every gradient array set to 0, and weight <- weight - lr * gradWeight in
-- place (views stay views): compiled functions with updates (built on
-- first use and cached like forward's), whose generated kernels run in
-- the arrays' own storage; an eager expression per parameter costs
-- several times more for a large layer.
function Module:zeroGradParameters()
  if not self:parameters() then return end
  self:_paramFunction('zero').f()
end

function Module:updateParameters(lr)
  if type(lr) ~= 'number' then
    nn._raise(('%s:updateParameters: the learning rate must be a number, got %s'):format(nn.type(self), type(lr)))
  end
  if not self:parameters() then return end
  self:_paramFunction('update').f(lr)
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

-- Records each module inside a container while a model's graph is built
-- (containers call nn._record with the module's symbolic input and
-- output and its path, e.g. 'modules[2].modules[1]'), so forward can
-- fill every module's output field and backward every gradInput, as
-- Torch7 does, and a failure can name the module.
local recording = nil
local path = {}
function nn._record(m, y, x)
  if recording then recording[#recording + 1] = { m, y, x, table.concat(path, '.') } end
end
function nn._enter(i) path[#path + 1] = 'modules[' .. i .. ']' end
function nn._leave() path[#path] = nil end

-- While forward or backward builds a model's graph for a concrete input,
-- the symbolic input and that array: nn._shape_of(v) evaluates the shape
-- of an inner variable v once, at build time, for the modules whose
-- graph depends on it as Torch7's does (Reshape's batch rule counts the
-- input's elements).  Outside such a build (a user's model:graph(x)) it
-- returns nil and the module falls back on the number of dimensions.
local building = nil
function nn._shape_of(v)
  if not building then return nil end
  local f = tgl.compile { inputs = { building.x }, outputs = v:shape(), mode = 'FAST_COMPILE',
                          name = 'nn_shape' }
  return f(building.input):totable()
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
-- it and its position, not a wrong row) registers fn(input) while the
-- graph is built, when its symbolic input is the model's input
-- (nn._is_model_input(x)); forward, backward, updateGradInput,
-- accGradParameters and accUpdateGradParameters run them.
function nn._check_input(fn)
  if not building then return end
  -- the module's path in the model, for the error ('modules[1] ...')
  local at = table.concat(path, '.')
  building.checks[#building.checks + 1] = function(input)
    local ok, err = pcall(fn, input)
    if not ok then error((at ~= '' and at .. ' ' or '') .. tostring(err), 0) end
  end
end
function nn._is_model_input(x) return building ~= nil and rawequal(building.x, x) end

-- Every field a build borrows through Module:_var (parameters, and state
-- such as batch normalisation's running statistics): a compiled function
-- is rebuilt when one of them holds another array (still_valid), as it is
-- for parameters.
function nn._borrowed(m, field, a)
  if building then building.borrowed[#building.borrowed + 1] = { m, field, a } end
end

-- Builds model's graph for the symbolic input x (input: the concrete
-- array it stands for, or nil): returns {y = symbolic output,
-- rec = the inner modules' records (nn._record), hooks = functions to
-- run before each forward call, updates = the modules' state updates,
-- checks = functions of the input array to run before each call,
-- borrowed = {module, field, array} of every field borrowed}.
-- Every compiled function of a model (forward, backward, nn.compile's
-- step) builds its graph here.  Errors are raised at the user's line.
function nn._build(model, x, input)
  recording, path = {}, {}
  building = { x = x, input = input, hooks = {}, updates = {}, checks = {}, borrowed = {} }
  local ok, y = pcall(model.graph, model, x)
  local b = { y = y, rec = recording, hooks = building.hooks, updates = building.updates,
              checks = building.checks, borrowed = building.borrowed }
  recording, building, path = nil, nil, {}
  if not ok then nn._raise(y) end
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

-- True when every parameter a cached function was built on is still the
-- array the module holds.
local function still_valid(c)
  for _, p in ipairs(c.params) do
    if not rawequal(p[1][p[2]], p[3]) then return false end
  end
  return true
end

-- Index of variable v in list (rawequal), or nil.
local function find(list, v)
  for i, w in ipairs(list) do if rawequal(w, v) then return i end end
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

-- kind: 'forward', 'backward' (gradInput and accumulation), 'gradInput',
-- 'acc' (accumulation only) or 'accupdate' (weight -= lr * gradient).
function Module:_function(kind, input, gradOutput)
  local key = kind .. ':' .. shape_key(input) .. (gradOutput and ':' .. shape_key(gradOutput) or '')
              .. ':' .. mode_key(self)
  self._compiled = self._compiled or {}
  local c = self._compiled[key]
  if c and still_valid(c) and c.gen == nn._generation then return c end
  local x = tgl.tensor { dtype = input.dtype, ndim = input:dim(), name = 'input' }
  local b = nn._build(self, x, input)
  local y, rec, hooks = b.y, b.rec, b.hooks
  local slots = self:_paramSlots()
  local params = {}
  for _, s in ipairs(slots) do params[#params + 1] = { s[1], s[2], s[1][s[2]] } end
  for _, s in ipairs(b.borrowed) do params[#params + 1] = s end
  c = { params = params, rec = rec, x = x, hooks = hooks, checks = b.checks, gen = nn._generation }
  local name = nn.type(self):gsub('^nn%.', 'nn_') .. '_' .. kind
  if kind == 'forward' then
    -- mods[i] = {module, k}: the module's output is output k (an output
    -- is not returned twice)
    local outs, mods = { y }, {}
    for _, r in ipairs(rec) do
      local k = find(outs, r[2])
      if not k then outs[#outs + 1] = r[2]; k = #outs end
      mods[#mods + 1] = { r[1], k }
    end
    -- one update per array (modules sharing one chain theirs)
    local updates = {}
    for i, u in ipairs(nn._merged_updates(self, b.updates)) do updates[i] = { u[1], u[2] } end
    c.f = tgl.compile { inputs = { x }, outputs = outs, updates = updates, name = name }
    c.mods = mods
  else
    local g = tgl.tensor { dtype = gradOutput.dtype, ndim = gradOutput:dim(), name = 'gradOutput' }
    -- backward's scale, or accUpdateGradParameters' learning rate
    local sdtype = input.dtype:match('^float') and input.dtype
                   or (#slots > 0 and slots[1][1][slots[1][2]].dtype) or tgl.config.floatX
    local scale = tgl.tensor { dtype = sdtype,
                               ndim = 0, name = kind == 'accupdate' and 'lr' or 'scale' }
    local wrt, vars = {}, {}
    -- the gradInput of each module inside: the gradient at its input.
    -- An integer input (LookupTable's indices) has no gradient: its
    -- gradInput is zeros of its shape and dtype, as Torch7's.
    local mods, ins, zero = {}, { x }, {}
    if kind ~= 'acc' and kind ~= 'accupdate' then
      for _, r in ipairs(rec) do
        local k = find(ins, r[3])
        if not k then ins[#ins + 1] = r[3]; k = #ins end
        mods[#mods + 1] = { r[1], k }
      end
    end
    local nout = #ins
    for i, v in ipairs(ins) do
      if v.dtype:match('^float') then wrt[#wrt + 1] = v; ins[i] = #wrt else zero[i] = v * 0 end
    end
    local nwrt = #wrt
    if kind ~= 'gradInput' then
      for _, s in ipairs(slots) do
        vars[#vars + 1] = s[1]:_var(s[2])
        wrt[#wrt + 1] = vars[#vars]
      end
    end
    local grads = #wrt > 0 and tgl.grad(tgl.sum(y * g), wrt, { disconnected = 'ignore' }) or {}
    -- a module met twice in the tree (added twice) has one variable,
    -- whose gradient already holds both uses: counted once
    local seen, dup = {}, {}
    for i, v in ipairs(vars) do
      if seen[v] then dup[i] = true end
      seen[v] = true
    end
    local function part(i) return dup[i] and 0 or grads[nwrt + i] end
    -- One update per array: modules that share an array (clone, share)
    -- each give their own contribution, summed into the array once.
    local updates = {}
    if kind == 'accupdate' then
      for _, u in ipairs(nn._grouped(slots, 2, part)) do
        updates[#updates + 1] = { u.var, u.var - scale * u.sum }
      end
      for _, s in ipairs(slots) do params[#params + 1] = { s[1], s[2], s[1][s[2]] } end
    elseif kind ~= 'gradInput' then
      for _, u in ipairs(nn._grouped(slots, 3, part)) do
        updates[#updates + 1] = { u.var, u.var + scale * u.sum }
      end
      for _, s in ipairs(slots) do params[#params + 1] = { s[1], s[3], s[1][s[3]] } end
    end
    local outs = {}
    if kind ~= 'acc' and kind ~= 'accupdate' then
      for i = 1, nout do outs[i] = zero[i] or grads[ins[i]] end
    end
    c.f = tgl.compile { inputs = { x, g, scale }, outputs = outs, updates = updates, name = name }
    c.mods = mods
  end
  nn.compiled_count = nn.compiled_count + 1
  self._compiled[key] = c
  return c
end

-- kind 'zero' (no inputs) or 'update' (input: the learning rate).
function Module:_paramFunction(kind)
  self._compiled = self._compiled or {}
  local c = self._compiled[kind]
  if c and still_valid(c) then return c end
  local slots = self:_paramSlots()
  local params, updates = {}, {}
  local lr = tgl.tensor { dtype = slots[1][1][slots[1][2]].dtype, ndim = 0, name = 'lr' }
  for _, s in ipairs(slots) do
    local m, wf, gf = s[1], s[2], s[3]
    params[#params + 1] = { m, wf, m[wf] }
    params[#params + 1] = { m, gf, m[gf] }
  end
  -- one update per array (shared arrays appear in several modules)
  if kind == 'zero' then
    for _, u in ipairs(nn._grouped(slots, 3, function() return 0 end)) do
      -- exactly 0 even where the gradient is NaN or infinite (g * 0 is not)
      updates[#updates + 1] = { u.var, tgl.switch(tgl.eq(u.var, u.var), 0.0, 0.0):astype(u.var.dtype) }
    end
  else
    -- w - lr * (the sum of the gradients of every module holding w): as
    -- Torch7's updateParameters, which steps a shared weight once per
    -- module holding it
    for _, u in ipairs(nn._grouped(slots, 2, function(i) return slots[i][1]:_var(slots[i][3]) end)) do
      updates[#updates + 1] = { u.var, u.var - lr * u.sum }
    end
  end
  local name = nn.type(self):gsub('^nn%.', 'nn_') .. '_' .. kind
  c = { params = params,
        f = tgl.compile { inputs = kind == 'update' and { lr } or {}, updates = updates, name = name } }
  nn.compiled_count = nn.compiled_count + 1
  self._compiled[kind] = c
  return c
end

-- A compiled call that failed: finds the first module inside whose
-- output cannot be computed for this input (each one's output shape,
-- evaluated in order) and names it, with its path, in the error.
function Module:_failed(c, what, input, err)
  for _, r in ipairs(c.rec) do
    local ok = pcall(function()
      tgl.compile { inputs = { c.x }, outputs = r[2]:shape(), mode = 'FAST_COMPILE', name = 'nn_shape' }(input)
    end)
    if not ok then
      local msg = tostring(err):gsub('^[^\n:]*:%d+: ', ''):gsub('^tgl%.nn_[%w_]+: ', '')
      raise(('%s:%s: %s %s fails on this input (%s): %s'):format(nn.type(self), what, r[4],
                                                               tostring(r[1]):gsub('\n.*', ''),
                                                               shape_key(input), msg))
    end
  end
  raise(err)
end

-- Runs c.f; on failure names the module (Module:_failed).
local function run(self, what, c, input, ...)
  for _, check in ipairs(c.checks) do
    local ok, err = pcall(check, input)
    if not ok then
      local msg = tostring(err):gsub('^[^\n:]*:%d+: ', '')
      local own = nn.type(self) .. ': '
      if msg:sub(1, #own) == own then msg = msg:sub(#own + 1) end
      raise(('%s:%s: %s'):format(nn.type(self), what, msg))
    end
  end
  if what == 'forward' then for _, h in ipairs(c.hooks) do h() end end
  local res = { pcall(c.f, input, ...) }
  if not res[1] then self:_failed(c, what, input, res[2]) end
  return unpack(res, 2)
end

local function check_array(fname, what, a)
  if not tgl.is_array(a) then raise(('%s: %s must be an array, got %s'):format(fname, what, type(a))) end
end

function Module:updateOutput(input)
  check_array(nn.type(self) .. ':forward', 'the input', input)
  local c = self:_function('forward', input)
  local outs = { run(self, 'forward', c, input) }
  self.output = outs[1]
  for _, m in ipairs(c.mods) do m[1].output = outs[m[2]] end
  return self.output
end

function Module:forward(input) return self:updateOutput(input) end

local function grad_inputs(self, c, outs)
  self.gradInput = outs[1]
  for _, m in ipairs(c.mods) do m[1].gradInput = outs[m[2]] end
  return self.gradInput
end

function Module:updateGradInput(input, gradOutput)
  check_array(nn.type(self) .. ':updateGradInput', 'the input', input)
  check_array(nn.type(self) .. ':updateGradInput', 'gradOutput', gradOutput)
  local c = self:_function('gradInput', input, gradOutput)
  return grad_inputs(self, c, { run(self, 'updateGradInput', c, input, gradOutput, 1) })
end

function Module:accGradParameters(input, gradOutput, scale)
  check_array(nn.type(self) .. ':accGradParameters', 'the input', input)
  check_array(nn.type(self) .. ':accGradParameters', 'gradOutput', gradOutput)
  if not self:parameters() then return end
  local c = self:_function('acc', input, gradOutput)
  run(self, 'accGradParameters', c, input, gradOutput, scale or 1)
end

-- gradInput (also of every module inside), and scale * the parameter
-- gradients added to gradWeight and gradBias, in one compiled function.
function Module:backward(input, gradOutput, scale)
  check_array(nn.type(self) .. ':backward', 'the input', input)
  check_array(nn.type(self) .. ':backward', 'gradOutput', gradOutput)
  local c = self:_function('backward', input, gradOutput)
  return grad_inputs(self, c, { run(self, 'backward', c, input, gradOutput, scale or 1) })
end

-- weight <- weight - lr * dL/dweight for every parameter (L =
-- sum(output * gradOutput)), gradWeight and gradBias untouched: Torch7's
-- accUpdateGradParameters, one compiled function.  A weight held by
-- several modules moves by the sum of their contributions.
function Module:accUpdateGradParameters(input, gradOutput, lr)
  check_array(nn.type(self) .. ':accUpdateGradParameters', 'the input', input)
  check_array(nn.type(self) .. ':accUpdateGradParameters', 'gradOutput', gradOutput)
  if type(lr) ~= 'number' then
    raise(('%s:accUpdateGradParameters: the learning rate must be a number, got %s'):format(nn.type(self), type(lr)))
  end
  if not self:parameters() then return end
  local c = self:_function('accupdate', input, gradOutput)
  run(self, 'accUpdateGradParameters', c, input, gradOutput, lr)
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
require('nn.optim')(nn)
require('nn.compile')(nn)
require('nn.recurrent')(nn)
require('nn.normalization')(nn)
require('nn.stochastic_gradient')(nn)

-- As Torch7's: `require 'nn'` loads torch (the global `torch`) and sets
-- the global `nn`, which Torch7 scripts use without a local.
require 'torch'
_G.nn = nn
return nn
