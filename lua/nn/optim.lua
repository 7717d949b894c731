-- nn.optim — Torch7's optimisers (sgd, adam, rmsprop, adagrad) as
-- symbolic update rules, and nn.optim.hf (tgl.optim.hf, re-exported).
--
-- Each optimiser is defined once, here: its config fields with Torch7's
-- names and defaults, its state (a step counter, per-parameter arrays)
-- and a rule that, given a parameter (a shared variable), its symbolic
-- gradient and the state as shared variables, returns the new value of
-- the parameter and of each state array, with Torch7's formulas
-- (optim/sgd.lua, adam.lua, rmsprop.lua, adagrad.lua).  Two drivers run
-- the same rule: nn.compile puts it inside the compiled training step
-- (lua/nn/compile.lua), and Torch7's closure API `require 'optim'`
-- (lua/optim/init.lua) compiles it over the flat parameters and their
-- gradient.  The numeric config fields are inputs of the compiled
-- functions (float64 scalars, as Torch7 computes them in Lua numbers),
-- so changing the learning rate between steps needs no recompile; only
-- what changes the graph's structure (a weight decay, a momentum or
-- Nesterov turned on or off) builds the step again.  doc/nn.md and
-- doc/optim.md describe the API.
local tgl = require 'tgl'

return function(nn)
  local optim = {}
  nn.optim = optim

  -- Hessian-free optimisation is tgl's own (doc/optim.md).
  optim.hf = tgl.optim.hf

  -- -------------------------------------------------------------------------
  -- The definitions.  For each optimiser:
  --   fields   config field -> default (nil default: see `resolve`)
  --   numeric  the numeric fields, in the order the compiled function takes
  --            them as inputs
  --   counter  the step counter's name in the state (Torch7's), or nil
  --   slots(c) the per-parameter state arrays' names for config c
  --   torch_state  names Torch7 keeps in its state table (with the config
  --            when no state table is given), accepted there
  --   shape(c) what of config c changes the graph (a string)
  --   rule(c, h, x, g, s, cast) -> new x, {slot = new value}; h: the
  --            symbolic scalars (float64) of the numeric fields, h.t the
  --            counter before this step, h.fresh (sgd) true when the
  --            momentum buffer has never been written; s: slot -> shared
  --            variable; cast(v) converts a float64 scalar to x's dtype,
  --            as Torch7's x:add(-clr, dfdx) converts clr.
  local DEFS = {}

  DEFS.sgd = {
    fields = { learningRate = 1e-3, learningRateDecay = 0, weightDecay = 0, momentum = 0,
               dampening = false, nesterov = false },
    numeric = { 'learningRate', 'learningRateDecay', 'weightDecay', 'momentum', 'dampening' },
    counter = 'evalCounter',
    slots = function(c) return c.momentum ~= 0 and { 'dfdx' } or {} end,
    torch_state = { evalCounter = true, dfdx = true, decayParameters = true, deltaParameters = true },
    shape = function(c)
      return ('wd%s:mom%s:nag%s'):format(tostring(c.weightDecay ~= 0), tostring(c.momentum ~= 0),
                                          tostring(c.nesterov))
    end,
    check = function(c, fname)
      if c.nesterov and (c.momentum <= 0 or c.dampening ~= 0) then
        nn._raise(fname .. ': Nesterov momentum requires a momentum and zero dampening (got momentum '
                  .. c.momentum .. ', dampening ' .. c.dampening .. ')')
      end
    end,
    rule = function(c, h, x, g, s, cast)
      if c.weightDecay ~= 0 then g = g + cast(h.weightDecay) * x end
      local new = {}
      if c.momentum ~= 0 then
        -- Torch7: the buffer starts as a copy of the first gradient, then
        -- buf = momentum * buf + (1 - dampening) * dfdx
        local buf = tgl.switch(h.fresh, g, s.dfdx * cast(h.momentum) + cast(1 - h.dampening) * g)
        new.dfdx = buf
        if c.nesterov then g = g + cast(h.momentum) * buf else g = buf end
      end
      local clr = h.learningRate / (1 + h.t * h.learningRateDecay)
      return x - cast(clr) * g, new
    end,
  }

  DEFS.adam = {
    fields = { learningRate = 1e-3, learningRateDecay = 0, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8,
               weightDecay = 0 },
    numeric = { 'learningRate', 'learningRateDecay', 'beta1', 'beta2', 'epsilon', 'weightDecay' },
    counter = 't',
    slots = function() return { 'm', 'v' } end,
    torch_state = { t = true, m = true, v = true, denom = true },
    shape = function(c) return 'wd' .. tostring(c.weightDecay ~= 0) end,
    rule = function(c, h, x, g, s, cast)
      if c.weightDecay ~= 0 then g = g + cast(h.weightDecay) * x end
      local clr = h.learningRate / (1 + h.t * h.learningRateDecay)
      local t = h.t + 1
      local m = s.m * cast(h.beta1) + cast(1 - h.beta1) * g
      local v = s.v * cast(h.beta2) + cast(1 - h.beta2) * g * g
      local denom = tgl.sqrt(v) + cast(h.epsilon)
      local bc1 = 1 - tgl.pow(h.beta1, t)
      local bc2 = 1 - tgl.pow(h.beta2, t)
      local stepSize = clr * tgl.sqrt(bc2) / bc1
      return x - cast(stepSize) * (m / denom), { m = m, v = v }
    end,
  }

  DEFS.rmsprop = {
    fields = { learningRate = 1e-2, alpha = 0.99, epsilon = 1e-8, weightDecay = 0, initialMean = 0 },
    numeric = { 'learningRate', 'alpha', 'epsilon', 'weightDecay' },
    slots = function() return { 'm' } end,
    -- the running mean of the squared gradient starts at initialMean
    init = { m = 'initialMean' },
    torch_state = { m = true, tmp = true },
    shape = function(c) return 'wd' .. tostring(c.weightDecay ~= 0) end,
    rule = function(c, h, x, g, s, cast)
      if c.weightDecay ~= 0 then g = g + cast(h.weightDecay) * x end
      local m = s.m * cast(h.alpha) + cast(1 - h.alpha) * g * g
      local tmp = tgl.sqrt(m) + cast(h.epsilon)
      return x - cast(h.learningRate) * (g / tmp), { m = m }
    end,
  }

  DEFS.adagrad = {
    fields = { learningRate = 1e-3, learningRateDecay = 0, weightDecay = 0 },
    numeric = { 'learningRate', 'learningRateDecay', 'weightDecay' },
    counter = 'evalCounter',
    slots = function() return { 'paramVariance' } end,
    torch_state = { evalCounter = true, paramVariance = true, paramStd = true },
    shape = function(c) return 'wd' .. tostring(c.weightDecay ~= 0) end,
    rule = function(c, h, x, g, s, cast)
      if c.weightDecay ~= 0 then g = g + cast(h.weightDecay) * x end
      local clr = h.learningRate / (1 + h.t * h.learningRateDecay)
      local var = s.paramVariance + g * g
      local std = tgl.sqrt(var) + cast(tgl.constant(1e-10, 'float64'))
      return x - cast(clr) * (g / std), { paramVariance = var }
    end,
  }

  optim._defs = DEFS

  -- Torch7's per-element vectors, which tgl's optimisers do not take.
  local UNSUPPORTED = {
    learningRates = 'per-element learning rates (config.learningRates) are not supported',
    weightDecays = 'per-element weight decays (config.weightDecays) are not supported',
  }

  local sorted_keys = require('tgl.core').sorted_keys     -- a table's keys, sorted

  -- The config with every field present (Torch7's defaults; `lr` is
  -- learningRate), checked: an unknown key, a wrong type or a NaN is an
  -- error naming it.  extra: more keys allowed (Torch7's state names
  -- when the state lives in the config table), ignored.
  function optim._resolve(name, cfg, fname, extra)
    local def = DEFS[name]
    if type(cfg) ~= 'table' then
      nn._raise(('%s: the config must be a table, got %s'):format(fname, type(cfg)))
    end
    local out = {}
    for k, v in pairs(cfg) do
      if k == 'lr' then
        if cfg.learningRate ~= nil and cfg.learningRate ~= v then
          nn._raise(('%s: both lr (%s) and learningRate (%s) are given'):format(fname, tostring(v),
                                                                             tostring(cfg.learningRate)))
        end
        k = 'learningRate'
      end
      if UNSUPPORTED[k] then nn._raise(fname .. ': ' .. UNSUPPORTED[k]) end
      if def.fields[k] == nil then
        if not (extra and extra[k]) then
          nn._raise(("%s: unknown config key '%s' (%s takes %s)"):format(fname, tostring(k), name,
                                                                     table.concat(sorted_keys(def.fields), ', ')))
        end
      elseif type(def.fields[k]) == 'boolean' and k ~= 'dampening' then
        if type(v) ~= 'boolean' then
          nn._raise(('%s: config.%s must be a boolean, got %s'):format(fname, k, type(v)))
        end
        out[k] = v
      else
        if type(v) ~= 'number' or v ~= v then
          nn._raise(('%s: config.%s must be a number, got %s'):format(fname, k, tostring(v)))
        end
        out[k] = v
      end
    end
    for k, d in pairs(def.fields) do
      if out[k] == nil and d ~= false then out[k] = d end
    end
    -- Torch7: the dampening defaults to the momentum
    if name == 'sgd' then
      if out.dampening == nil then out.dampening = out.momentum end
      out.nesterov = out.nesterov or false
    end
    if def.check then def.check(out, fname) end
    return out
  end

  -- The symbolic scalar inputs of a compiled step for optimiser name:
  -- a list of float64 0-d variables in def.numeric's order, and the table
  -- field -> variable.
  function optim._inputs(name)
    local list, h = {}, {}
    for i, k in ipairs(DEFS[name].numeric) do
      list[i] = tgl.tensor { dtype = 'float64', ndim = 0, name = k }
      h[k] = list[i]
    end
    return list, h
  end

  -- The values of those inputs for the resolved config c.
  function optim._values(name, c)
    local out = {}
    for i, k in ipairs(DEFS[name].numeric) do out[i] = c[k] end
    return out
  end

  -- The same values as 0-d float64 arrays, kept in `keep` (the caller's
  -- table, one per compiled step) and written only when a value changed:
  -- a Lua number passed to a compiled function becomes a new array on
  -- every call (about 2 us each: the five of sgd cost more than the
  -- step of a small model), an array is passed as it is.  A value that
  -- is not a number (a caller's mistake) is passed on for the compiled
  -- function to name.
  function optim._value_arrays(name, c, keep)
    local out = keep.out
    if not out then out = {}; keep.out, keep.last = out, {} end
    local last = keep.last
    for i, k in ipairs(DEFS[name].numeric) do
      local v = c[k]
      if type(v) ~= 'number' then
        out[i], last[i] = v, nil
      else
        if not tgl.is_array(out[i]) then out[i], last[i] = tgl.array(v, 'float64'), v end
        if last[i] ~= v then out[i]:set(v); last[i] = v end
      end
    end
    return out
  end

  -- The updates of one parameter: {{x, new x}, {s[slot], new}...}.
  -- value (default x): the parameter's value the step starts from, when
  -- a module's own update changes it first (a LookupTable's maxNorm
  -- renormalises its rows in forward; Torch7's optimiser then steps the
  -- renormalised weight).
  function optim._updates(name, c, h, x, g, s, value)
    local dtype = x.dtype
    local function cast(v)
      if v.dtype == dtype then return v end
      return tgl.cast(v, dtype)
    end
    local nx, ns = DEFS[name].rule(c, h, value or x, g, s, cast)
    local ups = { { x, nx } }
    for _, slot in ipairs(DEFS[name].slots(c)) do ups[#ups + 1] = { s[slot], ns[slot] } end
    return ups
  end

  -- -------------------------------------------------------------------------
  -- nn.optim.sgd{...} etc.: an optimiser object for nn.compile (and
  -- nn.Trainer): opt.config (every field, Torch7's names; change it
  -- between steps), opt.state (string key -> array, filled by nn.compile:
  -- the counter as a 0-d float64 array, per-parameter arrays named
  -- slot.i with i the parameter's position in model:parameters(); an
  -- array several modules hold (clone, share) has one, at its first
  -- position).
  local Optimizer = {}
  Optimizer.__index = Optimizer
  Optimizer.__tostring = function(o)
    local parts = {}
    for _, k in ipairs(sorted_keys(o.config)) do parts[#parts + 1] = k .. '=' .. tostring(o.config[k]) end
    return ('nn.optim.%s{%s}'):format(o.name, table.concat(parts, ', '))
  end

  for name in pairs(DEFS) do
    optim[name] = function(cfg)
      local fname = 'nn.optim.' .. name
      local c = optim._resolve(name, cfg or {}, fname)
      -- config keeps what the user gave under Torch7's names, with the
      -- defaults filled in (sgd's dampening stays absent when it follows
      -- the momentum)
      local config = {}
      for k, v in pairs(c) do config[k] = v end
      if name == 'sgd' and (cfg or {}).dampening == nil then config.dampening = nil end
      return setmetatable({ name = name, config = config, state = {} }, Optimizer)
    end
  end

  function optim.is_optimizer(o) return getmetatable(o) == Optimizer end

  -- The resolved config now (the user may have changed opt.config).
  function Optimizer:_config(fname)
    return optim._resolve(self.name, self.config, fname)
  end

  -- The state arrays for parameters params ({i, array}: one per distinct
  -- array, i its first position in model:parameters()), made when
  -- missing; an array of another shape or dtype than its parameter is an
  -- error naming the key.
  function Optimizer:_state_for(params, c, fname)
    local def = DEFS[self.name]
    if def.counter then
      local t = self.state[def.counter]
      if t == nil then
        self.state[def.counter] = tgl.array(0, 'float64')
      elseif not tgl.is_array(t) or t:dim() ~= 0 or t.dtype ~= 'float64' then
        nn._raise(('%s: optimizer.state.%s must be a 0-d float64 array (the step counter)')
                  :format(fname, def.counter))
      end
    end
    for _, ip in ipairs(params) do
      local i, p = ip[1], ip[2]
      for _, slot in ipairs(def.slots(c)) do
        local key = slot .. '.' .. i
        local a = self.state[key]
        if a == nil then
          a = tgl.zeros(p:shape(), { dtype = p.dtype })
          if def.init and def.init[slot] and c[def.init[slot]] ~= 0 then a:fill(c[def.init[slot]]) end
          self.state[key] = a
        elseif not tgl.is_array(a) or a.dtype ~= p.dtype or table.concat(a:shape(), 'x') ~= table.concat(p:shape(), 'x') then
          nn._raise(('%s: optimizer.state[%q] must be a %s array of shape %s (its parameter\'s), got %s')
                    :format(fname, key, p.dtype, table.concat(p:shape(), 'x'),
                            tgl.is_array(a) and (a.dtype .. ' ' .. table.concat(a:shape(), 'x')) or type(a)))
        end
      end
    end
  end
end
