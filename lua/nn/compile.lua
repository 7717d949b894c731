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
-- learning rate needs no recompile.  An array several modules hold
-- (clone, share) is one parameter: one update, with the sum of every
-- holder's gradient, and one set of optimiser state, as Torch7's flat
-- getParameters gives it; a module's own update of a parameter
-- (LookupTable's maxNorm) is the value the optimiser steps from.  The
-- modules' input checks (b.checks) run before anything.
--
-- distributed = true (data parallelism over tgl.dist, when the job has
-- more than one process): every rank starts from rank 1's parameters,
-- module state and optimiser state (broadcast here), and the step
-- all-reduces each parameter's gradient inside the compiled function
-- (tgl.allreduce, bucketed and overlapped with the backward pass by the
-- compiler), each rank's gradient weighted by its share of the global
-- batch's rows, so that every rank applies the gradient of the global
-- batch's loss and the parameters stay identical.  The weights are
-- scalar inputs: a shard of another size needs no recompile.  In a job
-- of one the step is the plain one.  doc/nn.md describes it.
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

  local ARGS = { model = true, criterion = true, optimizer = true, distributed = true }

  -- What a checkpoint keeps of a module besides its parameters, and what
  -- a distributed step replicates from rank 1: the arrays a module needs
  -- again (batch normalisation's running_mean/running_var), that is
  -- every array field except the parameters, their gradients, the
  -- output/gradInput of the last call, private fields (_...) and
  -- Torch7's per-call buffers.
  local SCRATCH = { output = true, gradInput = true, noise = true, finput = true, fgradInput = true }
  -- {field, is a parameter} of module m, parameters first, in a fixed
  -- order (every rank of a job walks them alike).
  local function module_fields(m)
    local fields, skip = {}, {}
    for _, f in ipairs(m:_paramFields()) do
      fields[#fields + 1] = { f[1], true }
      skip[f[1]], skip[f[2]] = true, true
    end
    local state = {}
    for k, v in pairs(m) do
      if type(k) == 'string' and tgl.is_array(v) and not skip[k] and not SCRATCH[k] and not k:match('^_') then
        state[#state + 1] = k
      end
    end
    table.sort(state)
    for _, k in ipairs(state) do fields[#fields + 1] = { k, false } end
    return fields
  end

  -- name -> {array, module, field, is a parameter} of everything of the
  -- model a checkpoint holds (model.K.FIELD, K the module's position in
  -- model:listModules()); and the names in a fixed order.
  function nn._model_arrays(model)
    local out, names = {}, {}
    for k, m in ipairs(model:listModules()) do
      for _, f in ipairs(module_fields(m)) do
        local name = 'model.' .. k .. '.' .. f[1]
        out[name] = { m[f[1]], m, f[1], f[2] }
        names[#names + 1] = name
      end
    end
    return out, names
  end

  -- Makes every rank's parameters, module state and optimiser state rank
  -- 1's (in place: compiled functions borrowing them see the values).
  -- Collective: every rank calls it at the same point.
  function nn._replicate(model, opt)
    local arrays, names = nn._model_arrays(model)
    local seen = {}
    for _, name in ipairs(names) do
      local a = arrays[name][1]
      if not seen[a] then seen[a] = true; tgl.dist.broadcast(a, 1) end
    end
    local state = opt and opt.state or {}
    for _, k in ipairs(require('tgl.core').sorted_keys(state)) do
      local a = state[k]
      if tgl.is_array(a) and not seen[a] then seen[a] = true; tgl.dist.broadcast(a, 1) end
    end
  end

  -- The model's parameters by array: one entry per distinct array (an
  -- array several modules hold, after clone or share, once), in
  -- model:parameters() order: {i = its first position there, array,
  -- var = its first holder's shared variable, vars = the distinct
  -- variables of its holders (a module added twice has one)}.
  local function param_groups(model)
    local out, at = {}, {}
    for i, s in ipairs(model:_paramSlots()) do
      local a, v = s[1][s[2]], s[1]:_var(s[2])
      local g = at[a]
      if not g then
        g = { i = i, array = a, var = v, vars = {}, seen = {} }
        at[a] = g
        out[#out + 1] = g
      end
      if not g.seen[v] then
        g.seen[v] = true
        g.vars[#g.vars + 1] = v
      end
    end
    return out, at
  end

  local function state_params(groups)
    local out = {}
    for k, g in ipairs(groups) do out[k] = { g.i, g.array } end
    return out
  end

  -- {position, array} of every distinct parameter array of model: what
  -- an optimiser keys its per-parameter state by (nn.Trainer makes the
  -- state with it before restoring a checkpoint).
  function nn._state_params(model) return state_params(param_groups(model)) end

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
        nn._raise(("nn.compile: unknown key '%s' (it takes model, criterion, optimizer, distributed)")
                  :format(tostring(k)))
      end
    end
    -- its type through tgl's options checker (the message nn.Trainer's gives)
    local okd, err = pcall(require('tgl.core').check_options, 'nn.compile', { distributed = args.distributed },
                           { distributed = 'boolean' })
    if not okd then nn._raise(tostring(err):gsub('^[^\n:]*:%d+: ', ''):gsub('^tgl%.', '')) end
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
    opt:_state_for(state_params(param_groups(model)), opt:_config('nn.compile'), 'nn.compile')
    opt._model = model
    -- data parallel only in a job of several processes: alone, the step
    -- is today's (no allreduce in the graph, no broadcast)
    local distributed = false
    if args.distributed then
      if not tgl.dist.initialized() then tgl.dist.init() end
      distributed = tgl.dist.size() > 1
      if distributed then nn._replicate(model, opt) end
    end
    return setmetatable({ model = model, criterion = crit, optimizer = opt, _graphs = {},
                          distributed = distributed, _weights = {} }, Step)
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
    f = { state = {}, values = {} }
    if kind == 'evaluate' then
      f.f = tgl.compile { inputs = { e.x, ts }, outputs = { loss, e.b.y }, name = name }
    else
      -- the modules' state updates, one per array (an error here comes
      -- before the optimiser's state is touched); one on a parameter
      -- (maxNorm's renormalised rows) is what the optimiser steps from,
      -- as Torch7's forward renormalises before the optimiser's step
      local merged, upd_at = nn._merged_updates(self.model, e.b.updates)
      local groups = param_groups(self.model)
      -- distributed: the weights of this rank's gradient (its share of
      -- the global loss's denominator: rows / global rows, or 1 when the
      -- criterion sums) and of its module state (rows / global rows)
      local wl, wr
      local function weighted(v, w)
        return v * (v.dtype == 'float64' and w or tgl.cast(w, v.dtype))
      end
      if self.distributed then
        -- a module that changes a parameter itself from the rows it sees
        -- (LookupTable's maxNorm) would leave the ranks' copies different
        for _, g in ipairs(groups) do
          if upd_at[g.array] then
            nn._raise(('%s: distributed = true cannot train a module that updates its own parameter %s '
                       .. 'from the rows it sees (a LookupTable\'s maxNorm): each rank would change other rows')
                      :format(fname, tostring(g.var.name or '')))
          end
        end
        wl = tgl.tensor { dtype = 'float64', ndim = 0, name = 'dist_loss_weight' }
        wr = tgl.tensor { dtype = 'float64', ndim = 0, name = 'dist_row_weight' }
      end
      opt:_state_for(state_params(groups), c, fname)
      -- the gradient of a shared array: the sum of every holder's part
      local vars = {}
      for _, g in ipairs(groups) do
        for _, v in ipairs(g.vars) do vars[#vars + 1] = v end
      end
      local grads = tgl.grad(loss, vars, { disconnected = 'ignore' })
      local k = 0
      for _, g in ipairs(groups) do
        for j = 1, #g.vars do
          k = k + 1
          if j == 1 then g.grad = grads[k] else g.grad = g.grad + grads[k] end
        end
        -- the global batch's gradient: the ranks' weighted sum, reduced
        -- inside the step (the compiler buckets these and overlaps them
        -- with the rest of the backward pass)
        if wl and g.grad then g.grad = tgl.allreduce(weighted(g.grad, wl), 'sum') end
      end
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
      -- every variable over an array becomes one (its canonical
      -- variable) in the compiled step, so the program reads and updates
      -- one slot per array
      local canon, used = {}, {}
      for _, g in ipairs(groups) do
        local s = {}
        for _, slot in ipairs(def.slots(c)) do s[slot] = svar(slot .. '.' .. g.i) end
        local mu = upd_at[g.array]
        if mu then used[mu] = true end
        for _, u in ipairs(nn.optim._updates(opt.name, c, h, g.var, g.grad, s, mu and mu[2])) do
          updates[#updates + 1] = u
        end
        canon[g.array] = g.var
      end
      for _, u in ipairs(merged) do
        if not used[u] then
          local value = u[2]
          -- a module's state from its rows (running statistics): the
          -- ranks' values averaged by rows, so that every rank keeps the same
          if wr and value.dtype:match('^float') then value = tgl.allreduce(weighted(value, wr), 'sum') end
          updates[#updates + 1] = { u[1], value }
          canon[u.arr] = canon[u.arr] or u[1]
        end
      end
      local givens
      for v, a in pairs(nn._var_arrays(self.model)) do
        local to = canon[a]
        if to and not rawequal(to, v) then
          givens = givens or {}
          givens[v] = to
        end
      end
      local inputs = { e.x, ts }
      for _, v in ipairs(list) do inputs[#inputs + 1] = v end
      -- the global batch's loss: the ranks' weighted losses summed
      if wl then
        loss = tgl.allreduce(weighted(loss, wl), 'sum')
        inputs[#inputs + 1] = wl
        inputs[#inputs + 1] = wr
      end
      -- the model's output too: step:step sets model.output, as the
      -- forward of Torch7's feval leaves it
      f.f = tgl.compile { inputs = inputs, outputs = { loss, e.b.y }, updates = updates, givens = givens,
                          name = name }
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

  -- The modules' checks of the input array (nn._check_input: a
  -- LookupTable's indices), run before anything else, so a bad input is
  -- an error naming the module, its path and the position, and changes
  -- nothing (parameters, optimiser state).
  local function check(e, fname, x)
    for _, chk in ipairs(e.b.checks) do
      local ok, err = pcall(chk, x)
      if not ok then
        nn._raise(('%s: %s'):format(fname, tostring(err):gsub('^[^\n:]*:%d+: ', '')))
      end
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

  -- What step and evaluate do before compiling: the checks of x, the
  -- model's graph for it and the target array; returns the graph entry
  -- and the target.
  local function prepare(self, fname, x, y)
    check_input(fname, x)
    local e = self:_graph(x, fname)
    check(e, fname, x)
    return e, self:_target(e, y, fname)
  end

  -- The loss as a number; model.output and criterion.output set.
  local function outputs(self, loss, out)
    loss = loss:get()
    self.model.output, self.criterion.output = out, loss
    return loss
  end

  -- One training step on input x and target y: the loss before the
  -- update, as a Lua number.  model.output becomes the model's output
  -- and criterion.output the loss (before the update, as Torch7's feval
  -- leaves them); nothing else of the modules is written (the inner
  -- modules' output and gradInput, gradWeight and gradBias).
  --
  -- distributed: x and y are this rank's rows of the global batch (the
  -- examples counted along x's first axis); total, when given, is the
  -- global batch's row count (else one small allreduce of the ranks'
  -- counts finds it).  The loss returned is the global batch's; every
  -- rank must call step together.
  function Step:step(x, y, total)
    local fname = 'step:step'
    if not self.distributed then return self:_step(fname, x, y) end
    check_input(fname, x)
    local n = x:dim() > 0 and x:size(1) or 1
    if n == 0 then
      nn._raise(fname .. ': this rank has no rows (x:size(1) is 0): give every rank at least one row of the batch')
    end
    if total == nil then
      total = tgl.dist.allreduce(tgl.array(n, 'float64'), 'sum'):get()
    elseif type(total) ~= 'number' or total < n or total ~= math.floor(total) then
      nn._raise(('%s: total must be the global batch\'s row count (an integer >= this rank\'s %d rows), got %s')
                :format(fname, n, tostring(total)))
    end
    return self:_step(fname, x, y, n / total)
  end

  -- The step with this rank's share w of the global batch's rows
  -- (distributed steps only; 0 for a rank that holds no rows of it and
  -- steps a stand-in row that must not count).
  function Step:_step(fname, x, y, w)
    local e, t = prepare(self, fname, x, y)
    local c = self.optimizer:_config(fname)
    local f = self:_function('step', e, t, c, fname)
    local vals = nn.optim._value_arrays(self.optimizer.name, c, f.values)
    if self.distributed then
      local ws = self._weights
      if not ws.loss then ws.loss, ws.rows = tgl.array(0, 'float64'), tgl.array(0, 'float64') end
      ws.loss:set(self.criterion.sizeAverage == false and (w > 0 and 1 or 0) or w)
      ws.rows:set(w)
      vals = { unpack(vals) }
      vals[#vals + 1] = ws.loss
      vals[#vals + 1] = ws.rows
    end
    return outputs(self, run(self, e, fname, f, x, t, unpack(vals)))
  end

  -- The loss (a number) and the model's output on x, y: nothing is
  -- updated (parameters, optimiser state, module state); model.output
  -- and criterion.output are set as by step.
  function Step:evaluate(x, y)
    local fname = 'step:evaluate'
    local e, t = prepare(self, fname, x, y)
    local f = self:_function('evaluate', e, t, nil, fname)
    local loss, out = run(self, e, fname, f, x, t)
    return outputs(self, loss, out), out
  end
end
