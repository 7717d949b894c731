-- nn.compile{model=, criterion=, optimizer=}: a model's whole training
-- step as ONE compiled function — forward, the criterion's loss, the
-- gradients of every parameter, the optimiser's update of the parameters
-- and of its state, and the modules' own state updates (batch
-- normalisation's running statistics, nn._build's b.updates) — built
-- once per input and target shape and dtype (and the modules' train
-- flags) and reused.  The parameters stay the modules' arrays (the
-- shared variables borrow them, Module:_var), so model:forward after
-- steps sees the new weights and getParameters' flat arrays stay shared.
-- The optimiser's numeric config is an input of the function: a new
-- learning rate needs no recompile.  doc/nn.md describes it.
local tgl = require 'tgl'

return function(nn)
  local Step = {}
  Step.__index = Step
  Step.__tostring = function(s)
    return ('nn.compile{model = %s, criterion = %s, optimizer = %s}')
        :format(nn.type(s.model), nn.type(s.criterion), tostring(s.optimizer))
  end

  local function shape_key(a)
    return a.dtype .. '(' .. table.concat(a:shape(), 'x') .. ')'
  end

  -- The modules' train flags: their graphs may differ (Dropout).
  local function mode_key(model)
    local s = {}
    for i, m in ipairs(model:listModules()) do s[i] = m.train == false and 'e' or 't' end
    return table.concat(s)
  end

  local ARGS = { model = true, criterion = true, optimizer = true }

  -- A number per object (a criterion's weights array), for cache keys:
  -- tostring of an array prints its values.
  local ids, next_id = setmetatable({}, { __mode = 'k' }), 0
  local function id(o)
    if o == nil then return 'nil' end
    if not ids[o] then next_id = next_id + 1; ids[o] = next_id end
    return tostring(ids[o])
  end

  function nn.compile(args)
    if type(args) ~= 'table' then
      nn._raise(('nn.compile: expected a table {model=, criterion=, optimizer=}, got %s'):format(type(args)))
    end
    for k in pairs(args) do
      if not ARGS[k] then
        nn._raise(("nn.compile: unknown key '%s' (it takes model, criterion, optimizer)"):format(tostring(k)))
      end
    end
    local model, crit, opt = args.model, args.criterion, args.optimizer
    if type(model) ~= 'table' or type(model.graph) ~= 'function' or type(model.listModules) ~= 'function' then
      nn._raise(('nn.compile: model must be an nn module, got %s'):format(nn.type(model)))
    end
    if type(crit) ~= 'table' or type(crit.graph) ~= 'function' or type(crit._target) ~= 'function' then
      nn._raise(('nn.compile: criterion must be an nn criterion, got %s'):format(nn.type(crit)))
    end
    if not nn.optim.is_optimizer(opt) then
      nn._raise(('nn.compile: optimizer must be made by nn.optim (nn.optim.sgd{...}, adam, rmsprop, adagrad), got %s')
                :format(nn.type(opt)))
    end
    if not model:parameters() then
      nn._raise(('nn.compile: the model (%s) has no parameters to train'):format(nn.type(model)))
    end
    -- the state's per-parameter arrays are named by position: one model each
    if opt._model and not rawequal(opt._model, model) then
      nn._raise('nn.compile: this optimizer already trains another model (make one optimizer per model)')
    end
    -- the state exists from here on (a trainer may save or restore it
    -- before the first step); a momentum turned on later adds its buffers
    -- at the next step
    local arrays = {}
    for i, s in ipairs(model:_paramSlots()) do arrays[i] = s[1][s[2]] end
    opt:_state_for(arrays, opt:_config('nn.compile'), 'nn.compile')
    opt._model = model
    return setmetatable({ model = model, criterion = crit, optimizer = opt, _graphs = {} }, Step)
  end

  -- The model's graph for input x: {x = symbolic input, b = nn._build's
  -- result, dummy = an array of the output's shape and dtype (for the
  -- criterion's target check), params = {module, field, array}, fns =
  -- the compiled functions built on it}.  Rebuilt when a parameter field
  -- holds another array (getParameters, type) or a module was reconfigured.
  local function still_valid(e)
    if e.gen ~= nn._generation then return false end
    for _, p in ipairs(e.params) do
      if not rawequal(p[1][p[2]], p[3]) then return false end
    end
    return true
  end

  function Step:_graph(x, fname)
    local key = shape_key(x) .. ':' .. mode_key(self.model)
    local e = self._graphs[key]
    if e and still_valid(e) then return e end
    local model = self.model
    local xs = tgl.tensor { dtype = x.dtype, ndim = x:dim(), name = 'input' }
    local b = nn._build(model, xs, x)
    e = { x = xs, b = b, gen = nn._generation, params = {}, fns = {}, rec = b.rec }
    for _, s in ipairs(model:_paramSlots()) do e.params[#e.params + 1] = { s[1], s[2], s[1][s[2]] } end
    local ok, shape = pcall(function()
      return tgl.compile { inputs = { xs }, outputs = b.y:shape(), mode = 'FAST_COMPILE',
                           name = 'nn_shape' }(x):totable()
    end)
    if not ok then model:_failed(e, fname, x, shape) end
    e.dummy = tgl.zeros(shape, { dtype = b.y.dtype })
    self._graphs[key] = e
    return e
  end

  -- The target as the criterion takes it, checked against the model's
  -- output: a wrong one is an error naming the step and the shapes.
  function Step:_target(e, y, fname)
    local ok, t = pcall(self.criterion._target, self.criterion, e.dummy, y)
    if not ok then
      local msg = tostring(t):gsub('^[^\n:]*:%d+: ', '')
      nn._raise(('%s: the target does not fit the model\'s output (%s): %s')
                :format(fname, shape_key(e.dummy), msg))
    end
    return t
  end

  -- The compiled function of kind 'step' or 'evaluate' for graph e and
  -- converted target t (c: the optimiser's resolved config for 'step').
  function Step:_function(kind, e, t, c, fname)
    local crit, opt = self.criterion, self.optimizer
    local def = nn.optim._defs[opt.name]
    local key = kind .. ':' .. shape_key(t) .. ':' .. tostring(crit.sizeAverage) .. ':'
                .. id(rawget(crit, 'weights'))
    if kind == 'step' then key = key .. ':' .. opt.name .. ':' .. def.shape(c) end
    local f = e.fns[key]
    if f and kind == 'step' then
      -- the state arrays the function borrows must still be opt.state's
      for k, a in pairs(f.state) do
        if not rawequal(opt.state[k], a) then f = nil; break end
      end
    end
    if f then return f end
    local ts = tgl.tensor { dtype = t.dtype, ndim = t:dim(), name = 'target' }
    -- the criterion's graph reads what _target remembered of the shapes
    local loss = crit:graph(e.b.y, ts)
    local name = nn.type(self.model):gsub('^nn%.', 'nn_') .. '_' .. kind
    f = { state = {} }
    if kind == 'evaluate' then
      f.f = tgl.compile { inputs = { e.x, ts }, outputs = { loss, e.b.y }, name = name }
    else
      local slots = self.model:_paramSlots()
      local arrays, vars = {}, {}
      for i, s in ipairs(slots) do
        arrays[i] = s[1][s[2]]
        vars[i] = s[1]:_var(s[2])
      end
      opt:_state_for(arrays, c, fname)
      local grads = tgl.grad(loss, vars, { disconnected = 'ignore' })
      local list, h = nn.optim._inputs(opt.name)
      local updates = {}
      local svar = function(k)
        local a = opt.state[k]
        f.state[k] = a
        local dev = tgl.config.device
        tgl.config.device = 'cpu'
        local ok, v = pcall(tgl.shared, a, 'optim.' .. k, { borrow = true })
        tgl.config.device = dev
        if not ok then error(v, 0) end
        return v
      end
      local tv
      if def.counter then
        tv = svar(def.counter)
        h.t = tv
        updates[#updates + 1] = { tv, tv + 1 }
      end
      if tv then h.fresh = tgl.eq(tv, 0) end
      for i, v in ipairs(vars) do
        local s = {}
        for _, slot in ipairs(def.slots(c)) do s[slot] = svar(slot .. '.' .. i) end
        for _, u in ipairs(nn.optim._updates(opt.name, c, h, v, grads[i], s)) do updates[#updates + 1] = u end
      end
      for _, u in ipairs(e.b.updates) do updates[#updates + 1] = u end
      local inputs = { e.x, ts }
      for _, v in ipairs(list) do inputs[#inputs + 1] = v end
      f.f = tgl.compile { inputs = inputs, outputs = loss, updates = updates, name = name }
    end
    nn.compiled_count = nn.compiled_count + 1
    e.fns[key] = f
    return f
  end

  local function check_input(fname, x)
    if not tgl.is_array(x) then
      nn._raise(('%s: the input must be an array, got %s'):format(fname, type(x)))
    end
  end

  -- Runs f on the arrays; a failure names the module whose output cannot
  -- be computed (Module:_failed) or passes the error on at the user's line.
  local function run(self, e, fname, f, x, ...)
    for _, hook in ipairs(e.b.hooks) do hook() end
    local res = { pcall(f.f, x, ...) }
    if not res[1] then self.model:_failed(e, fname, x, res[2]) end
    return unpack(res, 2)
  end

  -- One training step on input x and target y: the loss before the
  -- update, as a Lua number.
  function Step:step(x, y)
    local fname = 'step:step'
    check_input(fname, x)
    local e = self:_graph(x, fname)
    local t = self:_target(e, y, fname)
    local c = self.optimizer:_config(fname)
    local f = self:_function('step', e, t, c, fname)
    local loss = run(self, e, fname, f, x, t, unpack(nn.optim._values(self.optimizer.name, c)))
    return loss:get()
  end

  -- The loss (a number) and the model's output on x, y: nothing is
  -- updated (parameters, optimiser state, module state).
  function Step:evaluate(x, y)
    local fname = 'step:evaluate'
    check_input(fname, x)
    local e = self:_graph(x, fname)
    local t = self:_target(e, y, fname)
    local f = self:_function('evaluate', e, t, nil, fname)
    local loss, out = run(self, e, fname, f, x, t)
    return loss:get(), out
  end
end
