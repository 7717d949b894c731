-- nn's criterions: ClassNLLCriterion, CrossEntropyCriterion,
-- MSECriterion, BCECriterion, AbsCriterion and SmoothL1Criterion, with
-- Torch7's 1-based labels, sizeAverage, class weights and ignoreIndex.
-- graph(x, t) is the symbolic loss; _target checks and converts the
-- target on the host before the compiled function runs, so a bad label is
-- an error that says which and why.  Loaded by nn/init.lua.
local tgl = require 'tgl'
local ffi = require 'ffi'

return function(nn)
  local function is_int(v) return type(v) == 'number' and v == math.floor(v) end
  local LABEL_CT = { int64 = 'const int64_t *', int32 = 'const int32_t *', float64 = 'const double *',
                     float32 = 'const float *' }

  -- Labels as an int64 vector with one label per row of input, each in
  -- 1..C; input is a vector (one example) or a matrix (batch x C).
  local function class_target(self, input, target)
    local fname = nn.type(self) .. ':forward'
    if input:dim() ~= 1 and input:dim() ~= 2 then
      nn._raise(('%s: expected a vector or a matrix (batch x classes) input, got %d-d')
            :format(fname, input:dim()))
    end
    local n = input:dim() == 2 and input:size(1) or 1
    local C = input:size(-1)
    if type(target) == 'number' then target = tgl.array({ target }, 'int64') end
    if not tgl.is_array(target) then
      nn._raise(('%s: the target must be an array of labels or a number, got %s'):format(fname, type(target)))
    end
    if target:nelement() ~= n or target:dim() > 1 then
      nn._raise(('%s: %d labels for %d examples (the target must be a vector with one label per row)')
            :format(fname, target:nelement(), n))
    end
    -- a vector of n is passed as it is (a compiled step then sees the
    -- same array each call)
    if target:dim() ~= 1 then target = target:reshape(n) end
    local t = target.dtype == 'int64' and target or target:astype('int64')
    local ignore = self.ignoreIndex
    -- int64 labels on the host are read through their pointer (a get per
    -- label costs more than a small model's whole step at batch 256); the
    -- first bad one is then named by the loop below
    local ok = false
    local ct = LABEL_CT[target.dtype]
    if ct and target.device == 'cpu' then
      local p, st = ffi.cast(ct, target:data()), target:strides()[1] or 1
      ok = true
      if target.dtype == 'int64' then
        for i = 0, n - 1 do
          local l = p[i * st]
          if l ~= ignore and (l < 1 or l > C) then ok = false; break end
        end
      else
        for i = 0, n - 1 do
          local l = tonumber(p[i * st])
          -- (NaN fails l == floor(l))
          if l ~= ignore and (l ~= math.floor(l) or l < 1 or l > C) then ok = false; break end
        end
      end
    end
    if not ok then
      for i = 1, n do
        local l = target:get(i)
        if l ~= ignore and (not is_int(l) or l < 1 or l > C) then
          nn._raise(('%s: label %s at position %d is not in 1..%d (labels count from 1, as in Torch7)')
                :format(fname, tostring(l), i, C))
        end
      end
    end
    return t
  end

  -- Torch7's rule: with w_i = weights[target[i]] (1 without weights, 0
  -- where target[i] is ignoreIndex), the loss is -sum_i w_i input[i,
  -- target[i]], divided by sum_i w_i when sizeAverage (and that sum is not
  -- 0).  The label of an ignored example is replaced by 1 before the
  -- gather (its weight is 0).
  local function nll(self, x, t)
    if x.ndim == 1 then x = x:reshape({ 1, -1 }) end
    local valid = tgl.neq(t, self.ignoreIndex)
    local ts = tgl.switch(valid, t, 1)
    local picked = tgl.sum(x * tgl.one_hot(ts, self._nclasses, x.dtype), 2)
    local w = tgl.cast(valid, x.dtype)
    if self.weights then w = w * tgl.cast(nn.Module._var(self, 'weights'), x.dtype)[ts] end
    local loss = -tgl.sum(w * picked)
    if self.sizeAverage then
      local total = tgl.sum(w)
      loss = loss / tgl.switch(tgl.eq(total, 0), 1, total)
    end
    return loss
  end

  local function remember_shape(self, input)
    self._nclasses = input:size(-1)
    self._nexamples = input:dim() == 2 and input:size(1) or 1
  end

  -- Class weights: a vector of one weight per class, borrowed (an in-place
  -- write into crit.weights changes the next call).
  local function class_weights(fname, weights)
    if weights ~= nil and not (tgl.is_array(weights) and weights:dim() == 1) then
      nn._raise(('%s: weights must be a vector (one weight per class), got %s')
            :format(fname, tgl.is_array(weights) and weights:dim() .. '-d array' or type(weights)))
    end
    return weights
  end

  -- Checks the labels and the weights against the input; the compiled
  -- functions are rebuilt when weights or ignoreIndex changed since.
  local function class_check(self, input, target)
    local w = self.weights
    if w ~= nil then
      class_weights(nn.type(self), w)
      if w:nelement() ~= input:size(-1) then
        nn._raise(('%s:forward: %d class weights for an input of %d classes (give one weight per class)')
              :format(nn.type(self), w:nelement(), input:size(-1)))
      end
    end
    local built = self._built
    if not built or not rawequal(built.w, w) or built.ignore ~= self.ignoreIndex then
      self._compiled, self._built = nil, { w = w, ignore = self.ignoreIndex }
    end
    remember_shape(self, input)
    return class_target(self, input, target)
  end

  -- nn.ClassNLLCriterion([weights, sizeAverage = true, ignoreIndex = -100])
  local ClassNLL = nn.class('ClassNLLCriterion', nn.Criterion)
  function ClassNLL:__init(weights, sizeAverage, ignoreIndex)
    nn.Criterion.__init(self)
    self.weights = class_weights('nn.ClassNLLCriterion', weights)
    if sizeAverage ~= nil then self.sizeAverage = sizeAverage end
    if ignoreIndex ~= nil and not is_int(ignoreIndex) then
      nn._raise(('nn.ClassNLLCriterion: ignoreIndex must be an integer, got %s'):format(tostring(ignoreIndex)))
    end
    self.ignoreIndex = ignoreIndex or -100
  end
  ClassNLL._target = class_check
  ClassNLL.graph = nll

  -- nn.CrossEntropyCriterion([weights, sizeAverage = true]): LogSoftMax
  -- then ClassNLLCriterion(weights, sizeAverage).
  local CE = nn.class('CrossEntropyCriterion', nn.Criterion)
  function CE:__init(weights, sizeAverage)
    nn.Criterion.__init(self)
    self.weights = class_weights('nn.CrossEntropyCriterion', weights)
    if sizeAverage ~= nil then self.sizeAverage = sizeAverage end
    self.ignoreIndex = -100
  end
  CE._target = class_check
  function CE:graph(x, t) return nll(self, tgl.log_softmax(x), t) end

  -- nn.MSECriterion([sizeAverage = true]): sum((x - t)^2), divided by the
  -- number of elements when sizeAverage.
  local MSE = nn.class('MSECriterion', nn.Criterion)
  function MSE:__init(sizeAverage)
    nn.Criterion.__init(self)
    if sizeAverage ~= nil then self.sizeAverage = sizeAverage end
  end
  function MSE:_target(input, target)
    local fname = nn.type(self) .. ':forward'
    if not tgl.is_array(target) then
      nn._raise(('%s: the target must be an array, got %s'):format(fname, type(target)))
    end
    if target:nelement() ~= input:nelement() then
      nn._raise(('%s: the target has %d elements, the input %d'):format(fname, target:nelement(),
                                                                     input:nelement()))
    end
    self._nelement = input:nelement()
    if target.dtype ~= input.dtype then target = target:astype(input.dtype) end
    return target:reshape(input:shape())
  end
  function MSE:graph(x, t)
    local s = tgl.sum(tgl.sqr(x - t))
    if self.sizeAverage then s = s / self._nelement end
    return s
  end

  -- nn.BCECriterion([weights, sizeAverage = true]): Torch7's
  -- -sum(w * (t log(x + eps) + (1 - t) log(1 - x + eps))), eps = 1e-12,
  -- divided by the number of elements when sizeAverage.  weights has the
  -- input's shape, or is a vector of the input's last size (one weight
  -- per column of a batch, as Torch7 expands it); it is borrowed, so a
  -- write into crit.weights changes the next call.
  local BCE = nn.class('BCECriterion', nn.Criterion)
  function BCE:__init(weights, sizeAverage)
    nn.Criterion.__init(self)
    if weights ~= nil and not tgl.is_array(weights) then
      nn._raise(('nn.BCECriterion: weights must be an array, got %s'):format(type(weights)))
    end
    self.weights = weights
    if sizeAverage ~= nil then self.sizeAverage = sizeAverage end
  end
  function BCE:_target(input, target)
    local w = self.weights
    if w then
      local same = w:nelement() == input:nelement() and w:dim() == input:dim()
      local row = w:dim() == 1 and w:size(1) == input:size(-1)
      if not same and not row then
        nn._raise(('%s:forward: weights of %d elements do not fit an input of shape %s (give the input\'s shape or a vector of its last size)')
              :format(nn.type(self), w:nelement(), table.concat(input:shape(), 'x')))
      end
    end
    -- the compiled functions borrow the weights array they were built on
    if not rawequal(self._builtWeights, w) then self._compiled, self._builtWeights = nil, w end
    return MSE._target(self, input, target)
  end
  function BCE:graph(x, t)
    local eps = 1e-12
    local l = t * tgl.log(x + eps) + (1 - t) * tgl.log(1 - x + eps)
    if self.weights then l = l * tgl.cast(nn.Module._var(self, 'weights'), x.dtype) end
    local s = -tgl.sum(l)
    if self.sizeAverage then s = s / self._nelement end
    return s
  end

  -- nn.AbsCriterion([sizeAverage = true]): sum(|x - t|), divided by the
  -- number of elements when sizeAverage.  Written as a switch so that the
  -- gradient where x == t is +1, as Torch7's ((x - t) >= 0 ? 1 : -1).
  local Abs = nn.class('AbsCriterion', nn.Criterion)
  Abs.__init = MSE.__init
  Abs._target = MSE._target
  function Abs:graph(x, t)
    local d = x - t
    local s = tgl.sum(tgl.switch(tgl.ge(d, 0), d, -d))
    if self.sizeAverage then s = s / self._nelement end
    return s
  end

  -- nn.SmoothL1Criterion([sizeAverage = true]): with z = |x - t|, the sum
  -- of 0.5 z^2 where z < 1 and z - 0.5 elsewhere, divided by the number
  -- of elements when sizeAverage (Torch7's Huber loss).
  local SmoothL1 = nn.class('SmoothL1Criterion', nn.Criterion)
  SmoothL1.__init = MSE.__init
  SmoothL1._target = MSE._target
  function SmoothL1:graph(x, t)
    local d = x - t
    local z = tgl.abs(d)
    local s = tgl.sum(tgl.switch(tgl.lt(z, 1), 0.5 * d * d, z - 0.5))
    if self.sizeAverage then s = s / self._nelement end
    return s
  end
end
