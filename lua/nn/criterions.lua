-- nn's criterions: ClassNLLCriterion, CrossEntropyCriterion and
-- MSECriterion, with Torch7's 1-based labels and sizeAverage.  graph(x, t)
-- is the symbolic loss; _target checks and converts the target on the host
-- before the compiled function runs, so a bad label is an error that says
-- which and why.  Loaded by nn/init.lua.
local tgl = require 'tgl'

return function(nn)
  local function is_int(v) return type(v) == 'number' and v == math.floor(v) end

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
    target = target:reshape(n)
    local t = target.dtype == 'int64' and target or target:astype('int64')
    for i = 1, n do
      local l = target:get(i)
      if not is_int(l) or l < 1 or l > C then
        nn._raise(('%s: label %s at position %d is not in 1..%d (labels count from 1, as in Torch7)')
              :format(fname, tostring(l), i, C))
      end
    end
    return t
  end

  -- -sum or -mean over the examples of input[i, target[i]].
  local function nll(self, x, t)
    if x.ndim == 1 then x = x:reshape({ 1, -1 }) end
    local picked = tgl.sum(x * tgl.one_hot(t, self._nclasses, x.dtype))
    if self.sizeAverage then picked = picked / self._nexamples end
    return -picked
  end

  local function remember_shape(self, input)
    self._nclasses = input:size(-1)
    self._nexamples = input:dim() == 2 and input:size(1) or 1
  end

  -- nn.ClassNLLCriterion([weights, sizeAverage]): class weights are not
  -- supported yet (an error says so).
  local ClassNLL = nn.class('ClassNLLCriterion', nn.Criterion)
  function ClassNLL:__init(weights, sizeAverage)
    nn.Criterion.__init(self)
    if weights ~= nil then
      nn._raise(nn.type(self) .. ': class weights are not supported yet (doc/nn.md)')
    end
    if sizeAverage ~= nil then self.sizeAverage = sizeAverage end
  end
  function ClassNLL:_target(input, target)
    remember_shape(self, input)
    return class_target(self, input, target)
  end
  ClassNLL.graph = nll

  -- nn.CrossEntropyCriterion(): LogSoftMax then ClassNLLCriterion.
  local CE = nn.class('CrossEntropyCriterion', nn.Criterion)
  function CE:__init(weights)
    nn.Criterion.__init(self)
    if weights ~= nil then
      nn._raise(nn.type(self) .. ': class weights are not supported yet (doc/nn.md)')
    end
  end
  CE._target = ClassNLL._target
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
end
