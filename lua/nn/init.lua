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
-- nn.Criterion.  The layers are in nn/layers.lua, the containers in
-- nn/containers.lua, the criterions in nn/criterions.lua, the spatial
-- (convolution and pooling) modules in nn/spatial.lua, the optimisers
-- in nn/optim.lua, nn.compile (the compiled training step) in
-- nn/compile.lua.
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
function Module:_var(field)
  local a = self[field]
  if not tgl.is_array(a) then
    nn._raise(('%s: field %s must be an array, got %s'):format(nn.type(self), field, type(a)))
  end
  self._vars = self._vars or {}
  local s = self._vars[field]
  if s and rawequal(s.arr, a) then return s.var end
  local dev = tgl.config.device
  tgl.config.device = 'cpu'
  local ok, v = pcall(tgl.shared, a, nn.type(self) .. '.' .. field, { borrow = true })
  tgl.config.device = dev
  if not ok then error(v, 0) end
  self._vars[field] = { arr = a, var = v }
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
function Module:getParameters()
  local slots = self:_paramSlots()
  local n = 0
  for _, s in ipairs(slots) do n = n + s[1][s[2]]:nelement() end
  local dtype = #slots > 0 and slots[1][1][slots[1][2]].dtype or self._dtype
  local flat = tgl.zeros(n, { dtype = dtype })
  local gflat = tgl.zeros(n, { dtype = dtype })
  local off = 0
  for _, s in ipairs(slots) do
    local m, wf, gf = s[1], s[2], s[3]
    local w, g = m[wf], m[gf]
    if w.dtype ~= dtype then
      nn._raise(('getParameters: %s.%s is %s, the others %s (convert the model with :type first)')
            :format(nn.type(m), wf, w.dtype, dtype))
    end
    local k = w:nelement()
    if k > 0 then
      local wv = flat[{ { off + 1, off + k } }]:reshape(w:shape())
      local gv = gflat[{ { off + 1, off + k } }]:reshape(g:shape())
      wv:copy(w)
      gv:copy(g)
      m[wf], m[gf] = wv, gv
    end
    off = off + k
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
  for _, m in ipairs(self:listModules()) do
    for k, v in pairs(m) do
      if tgl.is_array(v) and v.dtype ~= dtype and (v.dtype == 'float32' or v.dtype == 'float64') then
        m[k] = v:astype(dtype)
      end
    end
    m._dtype = dtype
    m._compiled = nil
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
-- updateOutput only).
function nn._add_update(var, value)
  if building then building.updates[#building.updates + 1] = { var, value } end
end

-- Builds model's graph for the symbolic input x (input: the concrete
-- array it stands for, or nil): returns {y = symbolic output,
-- rec = the inner modules' records (nn._record), hooks = functions to
-- run before each forward call, updates = the modules' state updates}.
-- Every compiled function of a model (forward, backward, nn.compile's
-- step) builds its graph here.  Errors are raised at the user's line.
function nn._build(model, x, input)
  recording, path = {}, {}
  building = { x = x, input = input, hooks = {}, updates = {} }
  local ok, y = pcall(model.graph, model, x)
  local b = { y = y, rec = recording, hooks = building.hooks, updates = building.updates }
  recording, building, path = nil, nil, {}
  if not ok then nn._raise(y) end
  return b
end

-- The train flags of the modules in the tree: part of a compiled
-- function's key, since a module's graph may differ (Dropout).
local function mode_key(self)
  local s = {}
  for i, m in ipairs(self:listModules()) do s[i] = m.train == false and 'e' or 't' end
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

-- kind: 'forward', 'backward' (gradInput and accumulation), 'gradInput'
-- or 'acc' (accumulation only).
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
  c = { params = params, rec = rec, x = x, hooks = hooks, gen = nn._generation }
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
    c.f = tgl.compile { inputs = { x }, outputs = outs, updates = b.updates, name = name }
    c.mods = mods
  else
    local g = tgl.tensor { dtype = gradOutput.dtype, ndim = gradOutput:dim(), name = 'gradOutput' }
    local scale = tgl.tensor { dtype = input.dtype, ndim = 0, name = 'scale' }
    local wrt, vars, gvars = { x }, {}, {}
    -- the gradInput of each module inside: the gradient at its input
    local mods = {}
    if kind ~= 'acc' then
      for _, r in ipairs(rec) do
        local k = find(wrt, r[3])
        if not k then wrt[#wrt + 1] = r[3]; k = #wrt end
        mods[#mods + 1] = { r[1], k }
      end
    end
    local nout = #wrt
    if kind ~= 'gradInput' then
      for _, s in ipairs(slots) do
        vars[#vars + 1] = s[1]:_var(s[2])
        gvars[#gvars + 1] = s[1]:_var(s[3])
        wrt[#wrt + 1] = vars[#vars]
      end
    end
    local grads = tgl.grad(tgl.sum(y * g), wrt, { disconnected = 'ignore' })
    local updates = {}
    for i = 1, #vars do updates[i] = { gvars[i], gvars[i] + scale * grads[nout + i] } end
    if kind ~= 'gradInput' then
      for _, s in ipairs(slots) do params[#params + 1] = { s[1], s[3], s[1][s[3]] } end
    end
    local outs = {}
    if kind ~= 'acc' then for i = 1, nout do outs[i] = grads[i] end end
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
    local w, g = m:_var(wf), m:_var(gf)
    if kind == 'zero' then
      -- exactly 0 even where the gradient is NaN or infinite (g * 0 is not)
      updates[#updates + 1] = { g, tgl.switch(tgl.eq(g, g), 0.0, 0.0):astype(g.dtype) }
    else
      updates[#updates + 1] = { w, w - lr * g }
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
  for _, h in ipairs(c.hooks) do h() end
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
require('nn.criterions')(nn)
require('nn.spatial')(nn)
require('nn.optim')(nn)
require('nn.compile')(nn)
require('nn.trainer')(nn)

return nn
