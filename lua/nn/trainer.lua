-- nn.Trainer — the training loop around one compiled step:
--
--   local trainer = nn.Trainer{model = m, criterion = c, optimizer = nn.optim.sgd{lr = 0.1}}
--   local history = trainer:fit({x = X, y = Y}, {epochs = 5, batch_size = 60,
--                                validation = {x = Xv, y = Yv}, checkpoint = 'ckpt.npz'})
--
-- Minibatches go through nn.compile's step (forward, loss, gradients,
-- update and module state updates in one compiled call); fit draws the
-- epoch's order from tgl's generator, shows a progress bar, validates
-- after each epoch, keeps a history, writes a checkpoint and stops early
-- when the validation loss stops improving.  A checkpoint is one .npz
-- (tgl.save, which writes to a temporary file and renames it) holding
-- everything the next step depends on: the parameters, the modules' own
-- state (running statistics), the optimiser's state, the counters and
-- tgl's generator, so that resuming gives exactly the step the
-- uninterrupted run would have taken.
--
-- distributed = true (data parallelism over tgl.dist): batch_size is the
-- global batch; every rank takes rank 1's epoch order and its shard
-- (tgl.dist.shard) of each global batch, the step all-reduces the
-- gradients (nn.compile's distributed step), validation is sharded and
-- its sums reduced, so every rank reports, stops and checkpoints alike;
-- rank 1 alone prints and writes the checkpoint, which holds nothing of
-- one rank (a job of any size resumes it).  doc/nn.md "nn.Trainer".
-- Loaded by nn/init.lua.
local tgl = require 'tgl'
local core = require 'tgl.core'
local ffi = require 'ffi'

return function(nn)
  local raise = nn._raise
  local Trainer = nn.class('Trainer')

  -- Checks an options table with tgl's checker (unknown keys name the
  -- nearest known one) and raises its message as nn's, at the user's line.
  local function options(fname, opts, known)
    local ok, res = pcall(core.check_options, fname, opts, known)
    if not ok then raise(tostring(res):gsub('^[^\n:]*:%d+: ', ''):gsub('^tgl%.', '')) end
    return res
  end

  local function count(fname, opts, key, default, min)
    local v = opts[key]
    if v == nil then return default end
    if v ~= math.floor(v) or v < min then
      raise(('%s: option %s must be an integer >= %d, got %s'):format(fname, key, min, tostring(v)))
    end
    return v
  end

  local function is_module(m)
    return type(m) == 'table' and type(m.graph) == 'function' and type(m.listModules) == 'function'
  end

  function Trainer:__init(args)
    args = options('nn.Trainer', args, { model = 'table', criterion = 'table', optimizer = 'table',
                                         distributed = 'boolean' })
    if not is_module(args.model) then
      raise('nn.Trainer: model must be an nn module (nn.Sequential(), ...), got '
            .. (args.model == nil and 'nothing' or nn.type(args.model)))
    end
    if type(args.criterion) ~= 'table' or type(args.criterion.graph) ~= 'function' then
      raise('nn.Trainer: criterion must be an nn criterion (nn.ClassNLLCriterion(), ...), got '
            .. (args.criterion == nil and 'nothing' or nn.type(args.criterion)))
    end
    if args.optimizer == nil then
      raise('nn.Trainer: optimizer is missing (nn.optim.sgd{lr = 0.01}, nn.optim.adam{}, ...)')
    end
    self.model, self.criterion, self.optimizer = args.model, args.criterion, args.optimizer
    self.step = nn.compile { model = self.model, criterion = self.criterion, optimizer = self.optimizer,
                             distributed = args.distributed }
    -- true in a job of several processes only (alone: today's loop)
    self.distributed = self.step.distributed
    self.epoch = 0          -- epochs completed
    self.iteration = 0      -- steps taken
    self.history = {}
    self.best_val_loss, self.best_epoch, self.bad_epochs = math.huge, 0, 0
  end

  function Trainer:__tostring__()
    return ('nn.Trainer(%s, %s, epoch %d)'):format(nn.type(self.model), nn.type(self.criterion), self.epoch)
  end

  -- -------------------------------------------------------------------------
  -- Datasets: {x = array, y = array} (first axis: the examples), or a
  -- Torch7 dataset (dataset:size(), dataset[i] = {input, target}) copied
  -- into such a pair once.

  local function shape_text(a) return table.concat(a:shape(), 'x') end

  local function from_torch7(fname, what, d)
    local n = d:size()
    if type(n) ~= 'number' or n < 1 or n ~= math.floor(n) then
      raise(('%s: %s:size() must be a positive integer, got %s'):format(fname, what, tostring(n)))
    end
    local function example(i)
      local e = d[i]
      if type(e) ~= 'table' or not tgl.is_array(e[1]) or (e[2] == nil) then
        raise(('%s: %s[%d] must be {input array, target (array or number)}, got %s')
              :format(fname, what, i, type(e)))
      end
      return e[1], e[2]
    end
    local x1, y1 = example(1)
    local xs = x1:shape()
    local function with_n(shape) return { n, unpack(shape) } end
    local X = tgl.zeros(with_n(xs), { dtype = x1.dtype })
    local Y
    if type(y1) == 'number' then
      Y = tgl.zeros(n, { dtype = y1 == math.floor(y1) and 'int64' or 'float64' })
    elseif tgl.is_array(y1) then
      Y = tgl.zeros(with_n(y1:shape()), { dtype = y1.dtype })
    else
      raise(('%s: %s[1][2] (the target) must be an array or a number, got %s'):format(fname, what, type(y1)))
    end
    for i = 1, n do
      local xi, yi = example(i)
      if table.concat(xi:shape(), 'x') ~= table.concat(xs, 'x') then
        raise(('%s: %s[%d]\'s input is %s, %s[1]\'s is %s'):format(fname, what, i, shape_text(xi), what,
                                                                  shape_text(x1)))
      end
      X[{ i }]:copy(xi)
      if type(yi) == 'number' then Y:set(yi, i) else Y[{ i }]:copy(yi) end
    end
    return X, Y
  end

  local function as_dataset(fname, what, d)
    if type(d) ~= 'table' then
      raise(('%s: %s must be a table {x = inputs, y = targets}, got %s'):format(fname, what, type(d)))
    end
    local x, y = d.x, d.y
    if x == nil and y == nil and type(d.size) == 'function' then
      x, y = from_torch7(fname, what, d)
    else
      for _, k in ipairs { 'x', 'y' } do
        if not tgl.is_array(d[k]) then
          raise(('%s: %s.%s must be an array (the %s, first axis = examples), got %s')
                :format(fname, what, k, k == 'x' and 'inputs' or 'targets',
                        d[k] == nil and 'nothing' or type(d[k])))
        end
        if d[k]:dim() == 0 then
          raise(('%s: %s.%s is a scalar; its first axis must count the examples'):format(fname, what, k))
        end
      end
      if x:size(1) ~= y:size(1) then
        raise(('%s: %s.x has %d examples (shape %s) but %s.y has %d (shape %s): the first axis counts the examples')
              :format(fname, what, x:size(1), shape_text(x), what, y:size(1), shape_text(y)))
      end
      if x:size(1) == 0 then raise(('%s: %s has no examples'):format(fname, what)) end
    end
    return { x = x, y = y, n = x:size(1) }
  end

  -- A random order of 1..n (Fisher-Yates) drawn from tgl's generator, so
  -- that tgl.manual_seed fixes it and a checkpoint's generator state
  -- gives the same next order.
  local function permutation(n)
    local u = tgl.rand(n, { dtype = 'float64' }):totable()
    local order = {}
    for i = 1, n do order[i] = i end
    for i = n, 2, -1 do
      local j = math.floor(u[i] * i) + 1
      order[i], order[j] = order[j], order[i]
    end
    return tgl.array(order, 'int64')
  end

  -- Distributed: this rank's rows of the rows s..e (a global batch), its
  -- shard, and the share of the rows it holds (0 when it holds none: it
  -- then steps row s, weighted 0, since every rank must take part in
  -- each step's reductions).
  local function my_rows(s, e)
    local first, last = tgl.dist.shard(e - s + 1)
    if last < first then return s, s, 0 end
    return s + first - 1, s + last - 1, (last - first + 1) / (e - s + 1)
  end

  -- Rows s..e of the dataset, in the epoch's order when there is one.
  local function batch(d, perm, s, e)
    if perm then
      local idx = perm[{ { s, e } }]
      return d.x[{ idx }], d.y[{ idx }]
    end
    return d.x[{ { s, e } }], d.y[{ { s, e } }]
  end

  -- The criterions whose targets are class labels: validation reports
  -- the accuracy of the output's argmax.
  local CLASSIFIERS = { ['nn.ClassNLLCriterion'] = true, ['nn.CrossEntropyCriterion'] = true }

  -- A step's loss as a sum over its examples (the criterion averages
  -- unless sizeAverage is false), so epochs report the mean per example.
  local function loss_sum(crit, loss, n)
    if crit.sizeAverage == false then return loss end
    return loss * n
  end

  -- -------------------------------------------------------------------------
  -- Progress: one line redrawn in place on a terminal; plain lines (one
  -- per epoch) when stdout is not one.

  pcall(ffi.cdef, 'int isatty(int fd);')
  local function stdout_is_tty()
    local ok, r = pcall(function() return ffi.C.isatty(1) end)
    return ok and r == 1
  end

  -- Where fit's lines go; the spec replaces it to read them.
  Trainer._write = function(s) io.stdout:write(s); io.stdout:flush() end

  local function clock(s)
    if s ~= s or s == math.huge then return '?' end
    s = math.floor(s + 0.5)
    if s >= 3600 then return ('%d:%02d:%02d'):format(math.floor(s / 3600), math.floor(s / 60) % 60, s % 60) end
    return ('%d:%02d'):format(math.floor(s / 60), s % 60)
  end

  local function bar_line(epoch, epochs, done, n, rate, loss)
    local width = 20
    local fill = math.floor(done / n * width + 0.5)
    return ('\r\27[Kepoch %d/%d [%s%s] %3d%%  %.0f ex/s  loss %.4f  ETA %s'):format(
      epoch, epochs, ('#'):rep(fill), ('.'):rep(width - fill), math.floor(100 * done / n),
      rate, loss, clock((n - done) / rate))
  end

  local function epoch_line(r, epochs, tty)
    local s = ('epoch %d/%d  loss %.4f'):format(r.epoch, epochs, r.loss)
    if r.val_loss then s = s .. ('  val_loss %.4f'):format(r.val_loss) end
    if r.val_accuracy then s = s .. ('  val_acc %.2f%%'):format(100 * r.val_accuracy) end
    s = s .. ('  %.0f ex/s  %.1f s'):format(r.examples_per_second, r.seconds)
    return (tty and '\r\27[K' or '') .. s .. '\n'
  end

  -- -------------------------------------------------------------------------
  -- Validation: the mean loss per example and, for a classifier, the
  -- accuracy, with every module in evaluation mode (Dropout off); the
  -- modules' train flags are put back afterwards.  Distributed, each
  -- rank scores its shard of the examples and the sums are reduced (then
  -- rank 1's taken, so that every rank decides alike to the last bit).

  function Trainer:_validate(d, B)
    local flags = {}
    local mods = self.model:listModules()
    for i, m in ipairs(mods) do flags[i] = m.train end
    self.model:evaluate()
    local ok, sum, hits = pcall(function()
      local sum, hits = 0, 0
      local classify = CLASSIFIERS[nn.type(self.criterion)]
      local first, last = 1, d.n
      if self.distributed then first, last = tgl.dist.shard(d.n) end
      for s = first, last, B do
        local e = math.min(s + B - 1, last)
        local xb, yb = batch(d, nil, s, e)
        local loss, out = self.step:evaluate(xb, yb)
        sum = sum + loss_sum(self.criterion, loss, e - s + 1)
        if classify and out:dim() == 2 then
          hits = hits + tgl.sum(tgl.eq(tgl.argmax(out, 2), yb:astype('int64'))):get()
        end
      end
      return sum, classify and hits or nil
    end)
    for i, m in ipairs(mods) do m.train = flags[i] end
    if not ok then raise(sum) end
    if self.distributed then
      local t = tgl.array({ sum, hits or 0 }, 'float64')
      tgl.dist.broadcast(tgl.dist.allreduce(t, 'sum'), 1)
      sum, hits = t:get(1), hits and t:get(2)
    end
    return sum / d.n, hits and hits / d.n or nil
  end

  -- trainer:evaluate(dataset [, {batch_size = 256}]) -> loss, accuracy
  -- (the mean loss per example; the accuracy for a classification
  -- criterion, else nil), the modules in evaluation mode, nothing updated.
  function Trainer:evaluate(dataset, opts)
    local fname = 'nn.Trainer:evaluate'
    opts = options(fname, opts, { batch_size = 'number' })
    local B = count(fname, opts, 'batch_size', 256, 1)
    return self:_validate(as_dataset(fname, 'dataset', dataset), B)
  end

  -- -------------------------------------------------------------------------
  -- Checkpoints.  Names in the .npz:
  --   model.K.FIELD     module K of model:listModules() (parameters and state)
  --   optim.KEY         the optimiser's state (opt.state[KEY])
  --   optim_config.learningRate   (opt.config.learningRate: a schedule's value)
  --   trainer.counters  int64 {epoch, iteration, best_epoch, bad_epochs}
  --   trainer.best_val_loss
  --   trainer.rng       tgl's generator: {seed, offset}, each as two 32-bit halves
  --   history.loss, history.val_loss, history.val_accuracy, history.seconds,
  --   history.examples_per_second   one entry per epoch (NaN: not measured)

  -- The model's arrays are module K's parameters and the arrays it keeps
  -- besides them that it needs again (batch normalisation's
  -- running_mean/running_var): nn._model_arrays (lua/nn/compile.lua).

  -- name -> {array, module, field, is a parameter} of everything of the
  -- model a checkpoint holds (nn.compile's, which a distributed step
  -- replicates from rank 1).
  local function model_arrays(model)
    return (nn._model_arrays(model))
  end

  local TWO32 = 4294967296ULL
  local function u64_halves(v) return tonumber(v / TWO32), tonumber(v % TWO32) end
  local function u64_join(hi, lo) return (0ULL + hi) * TWO32 + lo end

  local HISTORY = { 'loss', 'val_loss', 'val_accuracy', 'seconds', 'examples_per_second' }

  function Trainer:_state_arrays()
    local out = {}
    for name, e in pairs(model_arrays(self.model)) do out[name] = e[1] end
    for k, v in pairs(self.optimizer.state or {}) do out['optim.' .. k] = v end
    local lr = self.optimizer.config and self.optimizer.config.learningRate
    if type(lr) == 'number' then out['optim_config.learningRate'] = tgl.array(lr, 'float64') end
    out['trainer.counters'] = tgl.array({ self.epoch, self.iteration, self.best_epoch, self.bad_epochs }, 'int64')
    out['trainer.best_val_loss'] = tgl.array(self.best_val_loss, 'float64')
    local s = tgl.get_rng_state()
    local sh, sl = u64_halves(s.seed)
    local oh, ol = u64_halves(s.offset)
    out['trainer.rng'] = tgl.array({ sh, sl, oh, ol }, 'int64')
    if #self.history > 0 then
      for _, k in ipairs(HISTORY) do
        local t = {}
        for i, r in ipairs(self.history) do t[i] = r[k] or 0 / 0 end
        out['history.' .. k] = tgl.array(t, 'float64')
      end
    end
    return out
  end

  -- Distributed, rank 1 writes (the state is every rank's) and tells the
  -- others whether it could, which also holds them until the file is
  -- whole: a failed write is an error on every rank.
  function Trainer:save(path)
    if type(path) ~= 'string' then raise('nn.Trainer:save: path must be a string, got ' .. type(path)) end
    local ok, err = true, nil
    if not self.distributed or tgl.dist.is_root() then ok, err = pcall(tgl.save, path, self:_state_arrays()) end
    if self.distributed then
      local flag = tgl.dist.broadcast(tgl.array(ok and 1 or 0, 'int32'), 1)
      if not ok then
        raise(('nn.Trainer: cannot write the checkpoint %s: %s'):format(path, err))
      elseif flag:get() == 0 then
        raise(('nn.Trainer: cannot write the checkpoint %s: rank 1 failed to write it'):format(path))
      end
      return
    end
    if not ok then raise(('nn.Trainer: cannot write the checkpoint %s: %s'):format(path, err)) end
  end

  -- Puts a checkpoint back: every array is checked against this model
  -- and optimiser first (a checkpoint of another model changes nothing),
  -- then copied in place, so compiled functions that borrow the arrays
  -- see the new values.
  function Trainer:load(path)
    if type(path) ~= 'string' then raise('nn.Trainer:load: path must be a string, got ' .. type(path)) end
    local ok, ck = pcall(tgl.load, path)
    if not ok then raise(('nn.Trainer: cannot read the checkpoint %s: %s'):format(path, ck)) end
    if tgl.is_array(ck) or not ck['trainer.counters'] then
      raise(('nn.Trainer: %s is not a checkpoint written by nn.Trainer'):format(path))
    end
    local function mismatch(fmt, ...)
      raise(('nn.Trainer: the checkpoint %s does not fit this %s'):format(path, fmt:format(...)))
    end
    local copies = {}
    local function match(name, here, there, what)
      if there == nil then mismatch('%s: it has no %s', what, name) end
      if table.concat(here:shape(), 'x') ~= table.concat(there:shape(), 'x') or here.dtype ~= there.dtype then
        mismatch('%s: %s is %s %s there, %s %s here', what, name, there.dtype, shape_text(there),
                 here.dtype, shape_text(here))
      end
      copies[#copies + 1] = { here, there }
    end
    local sorted = core.sorted_keys
    -- parameters must all be there; a state array is matched when both
    -- sides have it, and one the fresh module has not made yet (a buffer
    -- made by its first forward) is given to it
    local mine = model_arrays(self.model)
    for _, name in ipairs(sorted(mine)) do
      if mine[name][4] or ck[name] ~= nil then match(name, mine[name][1], ck[name], 'model') end
    end
    local modules, assign = self.model:listModules(), {}
    for _, name in ipairs(sorted(ck)) do
      if name:match('^model%.') and not mine[name] then
        local k, field = name:match('^model%.(%d+)%.(.+)$')
        local m = k and modules[tonumber(k)]
        if not m or m[field] ~= nil then mismatch('model: this model has no %s', name) end
        assign[#assign + 1] = { m, field, ck[name] }
      end
    end
    -- the optimiser makes its state arrays at the first step: make them
    -- now, so that a resumed run's first step finds them filled in
    local opt = self.optimizer
    if type(opt._state_for) == 'function' then
      opt:_state_for(nn._state_params(self.model), opt:_config('nn.Trainer'), 'nn.Trainer')
    end
    local state = opt.state or {}
    for _, k in ipairs(sorted(state)) do match('optim.' .. k, state[k], ck['optim.' .. k], 'optimizer') end
    for _, name in ipairs(sorted(ck)) do
      local k = name:match('^optim%.(.*)$')
      if k and not state[k] then mismatch('optimizer: this optimizer has no state %s', k) end
    end
    local counters, rng = ck['trainer.counters']:totable(), ck['trainer.rng']:totable()
    -- everything checked: now change things
    for _, c in ipairs(copies) do c[1]:copy(c[2]) end
    for _, a in ipairs(assign) do a[1][a[2]] = a[3] end
    local lr = ck['optim_config.learningRate']
    if lr and self.optimizer.config then self.optimizer.config.learningRate = lr:get() end
    self.epoch, self.iteration, self.best_epoch, self.bad_epochs = unpack(counters)
    self.best_val_loss = ck['trainer.best_val_loss']:get()
    tgl.set_rng_state { seed = u64_join(rng[1], rng[2]), offset = u64_join(rng[3], rng[4]) }
    local h = {}
    if ck['history.loss'] then
      local cols = {}
      for _, k in ipairs(HISTORY) do cols[k] = ck['history.' .. k]:totable() end
      for i = 1, #cols.loss do
        local r = { epoch = i }
        for _, k in ipairs(HISTORY) do
          local v = cols[k][i]
          if v == v then r[k] = v end
        end
        h[i] = r
      end
    end
    self.history = h
    return self
  end

  -- -------------------------------------------------------------------------
  -- trainer:fit(dataset, options) -> history

  local FIT_OPTIONS = {
    epochs = 'number', batch_size = 'number', shuffle = 'boolean', validation = 'table',
    checkpoint = 'string', resume = 'string|boolean', patience = 'number', progress = 'boolean',
    drop_last = 'boolean',
  }

  local function file_exists(path)
    local f = io.open(path, 'rb')
    if f then f:close() end
    return f ~= nil
  end

  function Trainer:fit(dataset, opts)
    local fname = 'nn.Trainer:fit'
    opts = options(fname, opts, FIT_OPTIONS)
    local epochs = count(fname, opts, 'epochs', 1, 0)
    local B = count(fname, opts, 'batch_size', 32, 1)
    local patience = count(fname, opts, 'patience', nil, 1)
    local shuffle = opts.shuffle ~= false
    local d = as_dataset(fname, 'dataset', dataset)
    local val = opts.validation and as_dataset(fname, 'validation', opts.validation)
    if patience and not val then
      raise(fname .. ': patience (early stopping) needs a validation set (option validation)')
    end
    local resume = opts.resume
    if resume == true then
      if not opts.checkpoint then raise(fname .. ': resume = true needs the option checkpoint (the file to resume)') end
      resume = file_exists(opts.checkpoint) and opts.checkpoint or nil
    elseif resume == false then
      resume = nil
    end
    local write = Trainer._write
    -- distributed: rank 1 prints (every rank has the same figures)
    local dist = self.distributed
    local progress = opts.progress ~= false and (not dist or tgl.dist.is_root())
    local tty = progress and stdout_is_tty()
    if resume then
      self:load(resume)
      if progress then
        write(('resumed from %s after epoch %d (step %d)\n'):format(resume, self.epoch, self.iteration))
      end
    end

    -- the last partial batch is a step of its own (a second compiled
    -- shape) unless drop_last
    local nb = opts.drop_last and math.floor(d.n / B) or math.ceil(d.n / B)
    if nb == 0 then
      raise(('%s: batch_size %d is larger than the dataset (%d examples) and drop_last is set')
            :format(fname, B, d.n))
    end
    local n_epoch = math.min(nb * B, d.n)
    local h = self.history
    h.stopped_early = false
    self.model:training()
    while self.epoch < epochs do
      if patience and self.bad_epochs >= patience then h.stopped_early = true; break end
      local epoch = self.epoch + 1
      local perm = shuffle and permutation(d.n) or nil
      -- every rank draws it (its generator moves as rank 1's) and takes
      -- rank 1's, which the checkpoint's generator state gives again
      if perm and dist then tgl.dist.broadcast(perm, 1) end
      local t0 = tgl.time()
      local last_draw = t0      -- the first draw after 0.2 s: the first step compiles
      local sum, done = 0, 0
      for b = 1, nb do
        local s = (b - 1) * B + 1
        local e = math.min(s + B - 1, d.n)
        local loss
        if dist then
          local ms, me, w = my_rows(s, e)
          local xb, yb = batch(d, perm, ms, me)
          loss = self.step:_step('step:step', xb, yb, w)
        else
          local xb, yb = batch(d, perm, s, e)
          loss = self.step:step(xb, yb)
        end
        self.iteration = self.iteration + 1
        sum = sum + loss_sum(self.criterion, loss, e - s + 1)
        done = done + (e - s + 1)
        if tty then
          local now = tgl.time()
          if now - last_draw > 0.2 or b == nb then
            last_draw = now
            write(bar_line(epoch, epochs, done, n_epoch, done / math.max(now - t0, 1e-9), sum / done))
          end
        end
      end
      local seconds = tgl.time() - t0
      local r = { epoch = epoch, loss = sum / done, seconds = seconds, examples_per_second = done / seconds }
      if val then
        -- in batches of at least 256: no update, so the size changes nothing but the speed
        r.val_loss, r.val_accuracy = self:_validate(val, math.max(B, 256))
        if r.val_loss < self.best_val_loss then
          self.best_val_loss, self.best_epoch, self.bad_epochs = r.val_loss, epoch, 0
        else
          self.bad_epochs = self.bad_epochs + 1
        end
      end
      h[#h + 1] = r
      self.epoch = epoch
      if progress then write(epoch_line(r, epochs, tty)) end
      if opts.checkpoint then self:save(opts.checkpoint) end
      if patience and self.bad_epochs >= patience then
        h.stopped_early = true
        if progress then
          write(('stopping early: val_loss has not improved for %d epochs (best %.4f at epoch %d)\n')
                :format(self.bad_epochs, self.best_val_loss, self.best_epoch))
        end
        break
      end
    end
    h.best_epoch = self.best_epoch > 0 and self.best_epoch or nil
    h.best_val_loss = self.best_epoch > 0 and self.best_val_loss or nil
    return h
  end
end
