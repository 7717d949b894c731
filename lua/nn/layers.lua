-- nn's layers: Linear, Identity, the activations (Tanh, Sigmoid, ReLU,
-- SoftMax, LogSoftMax, LeakyReLU, ELU, SoftPlus, Abs), MulConstant,
-- AddConstant, Dropout and the shape modules (Reshape, View).  Each one
-- is its graph: graph(x) builds the symbolic output from the symbolic
-- input and the module's shared parameters.  Loaded by nn/init.lua.
local tgl = require 'tgl'

return function(nn)
  local function is_int(v) return type(v) == 'number' and v == math.floor(v) end

  -- nn.Linear(inputSize, outputSize [, bias = true]): y = x W^T + b, with
  -- W outputSize x inputSize as in Torch7.
  local Linear = nn.class('Linear', nn.Module)

  function Linear:__init(inputSize, outputSize, bias)
    nn.Module.__init(self)
    if not is_int(inputSize) or inputSize < 1 or not is_int(outputSize) or outputSize < 1 then
      nn._raise(('nn.Linear: expected nn.Linear(inputSize, outputSize) with positive integers, got %s, %s')
            :format(tostring(inputSize), tostring(outputSize)))
    end
    self.weight = tgl.zeros(outputSize, inputSize, { dtype = self._dtype })
    self.gradWeight = tgl.zeros(outputSize, inputSize, { dtype = self._dtype })
    if bias ~= false then
      self.bias = tgl.zeros(outputSize, { dtype = self._dtype })
      self.gradBias = tgl.zeros(outputSize, { dtype = self._dtype })
    end
    self:reset()
  end

  -- Torch7's default: uniform in [-stdv, stdv], stdv = 1/sqrt(inputSize),
  -- from tgl's generator (tgl.manual_seed makes it reproducible).
  function Linear:reset(stdv)
    stdv = stdv or 1 / math.sqrt(self.weight:size(2))
    local o = { dtype = self.weight.dtype, low = -stdv, high = stdv }
    self.weight:copy(tgl.rand(self.weight:size(1), self.weight:size(2), o))
    if self.bias then self.bias:copy(tgl.rand(self.bias:size(1), o)) end
    return self
  end

  function Linear:graph(x)
    local W = self:_var('weight')
    local y
    if x.ndim == 1 then y = W:dot(x)
    elseif x.ndim == 2 then y = x:dot(W:T())
    else
      error(('%s: expected a vector or a matrix (batch x %d), got a %d-d input')
            :format(tostring(self), self.weight:size(2), x.ndim), 0)
    end
    if self.bias then y = y + self:_var('bias') end
    return y
  end

  function Linear:__tostring__()
    return ('%s(%d -> %d)%s'):format(nn.type(self), self.weight:size(2), self.weight:size(1),
                                     self.bias and '' or ' without bias')
  end

  -- Modules with no parameters whose output is a function of the input.
  local function pointwise(name, f)
    local cls = nn.class(name, nn.Module)
    cls.graph = function(_, x) return f(x) end
    return cls
  end
  -- Identity passes anything on, a table too
  pointwise('Identity', function(x) return x end)._takes = 'any'
  pointwise('Tanh', tgl.tanh)
  pointwise('Sigmoid', tgl.sigmoid)
  pointwise('ReLU', tgl.relu)
  pointwise('SoftMax', function(x) return tgl.softmax(x) end)
  pointwise('LogSoftMax', function(x) return tgl.log_softmax(x) end)

  -- Sizes from (s1, s2, ...) or a table; -1 allowed once when allow_infer.
  local function sizes(fname, allow_infer, ...)
    local first = ...
    local s = type(first) == 'table' and first or { ... }
    local last = s[#s]
    if type(last) == 'boolean' then s = { unpack(s, 1, #s - 1) } else last = nil end
    if #s == 0 then nn._raise(fname .. ': expected at least one size') end
    for i, v in ipairs(s) do
      if not is_int(v) or (v < 1 and not (allow_infer and v == -1)) then
        nn._raise(('%s: size %d must be a positive integer%s, got %s')
              :format(fname, i, allow_infer and ' or -1' or '', tostring(v)))
      end
    end
    return s, last
  end

  -- Reshape's and View's batch rule, Torch7's: the input is a batch
  -- (its first axis kept) when its number of elements is not the
  -- product of the sizes; batchMode = true/false says it explicitly.
  -- In a graph built outside forward/backward (no concrete shape), the
  -- input is a batch when it has more dimensions than the sizes.
  local function reshape_graph(self, x, nd)
    local batch = self.batchMode
    if batch == nil then
      local shape = nn._shape_of(x)
      if shape then
        local n, want = 1, 1
        for _, v in ipairs(shape) do n = n * v end
        for _, v in ipairs(self.size) do want = want * v end
        batch = n ~= want
      else
        batch = x.ndim > nd
      end
    end
    -- a batch's size comes from the input: -1 is inferred
    local s = batch and { -1 } or {}
    for _, v in ipairs(self.size) do s[#s + 1] = v end
    return x:reshape(s)
  end

  -- nn.Reshape(s1, s2, ... [, batchMode])
  local Reshape = nn.class('Reshape', nn.Module)
  function Reshape:__init(...)
    nn.Module.__init(self)
    self.size, self.batchMode = sizes('nn.Reshape', false, ...)
  end
  function Reshape:graph(x) return reshape_graph(self, x, #self.size) end
  function Reshape:__tostring__()
    return nn.type(self) .. '(' .. table.concat(self.size, 'x') .. ')'
  end

  -- nn.View(s1, s2, ...): one size may be -1; setNumInputDims(n) says how
  -- many trailing input dimensions one example has.
  local View = nn.class('View', nn.Module)
  function View:__init(...)
    nn.Module.__init(self)
    self.size = sizes('nn.View', true, ...)
  end
  function View:setNumInputDims(n)
    self.numInputDims = n
    nn._reconfigured()  -- the containers' compiled functions hold this graph too
    return self
  end
  function View:graph(x)
    if self.numInputDims then
      if x.ndim > self.numInputDims then
        local s = { -1 }
        local infer = false
        for _, v in ipairs(self.size) do infer = infer or v == -1 end
        if infer then
          error(('%s: with setNumInputDims and a batch, give every size (no -1)'):format(tostring(self)), 0)
        end
        for _, v in ipairs(self.size) do s[#s + 1] = v end
        return x:reshape(s)
      end
      return x:reshape(self.size)
    end
    for _, v in ipairs(self.size) do
      if v == -1 then return x:reshape(self.size) end
    end
    return reshape_graph(self, x, #self.size)
  end
  function View:__tostring__()
    return nn.type(self) .. '(' .. table.concat(self.size, ', ') .. ')'
  end

  -- Torch7's elementwise modules with arguments.  Torch7's `inplace`
  -- argument is accepted and changes nothing: a compiled function never
  -- overwrites its input array.
  local function number_arg(fname, what, v, default)
    if v == nil then return default end
    if type(v) ~= 'number' then
      nn._raise(('%s: %s must be a number, got %s'):format(fname, what, type(v)))
    end
    return v
  end

  -- nn.MulConstant(constant_scalar [, inplace]): y = x * c.
  local MulConstant = nn.class('MulConstant', nn.Module)
  function MulConstant:__init(c)
    nn.Module.__init(self)
    if type(c) ~= 'number' then nn._raise(('nn.MulConstant: the constant must be a number, got %s'):format(type(c))) end
    self.constant_scalar = c
  end
  function MulConstant:graph(x) return x * self.constant_scalar end

  -- nn.AddConstant(constant_scalar [, inplace]): y = x + c.
  local AddConstant = nn.class('AddConstant', nn.Module)
  function AddConstant:__init(c)
    nn.Module.__init(self)
    if type(c) ~= 'number' then nn._raise(('nn.AddConstant: the constant must be a number, got %s'):format(type(c))) end
    self.constant_scalar = c
  end
  function AddConstant:graph(x) return x + self.constant_scalar end

  -- nn.LeakyReLU([negval = 1/100, inplace]): x where x > 0, negval * x
  -- elsewhere (gradient negval at 0, as Torch7's).
  local LeakyReLU = nn.class('LeakyReLU', nn.Module)
  function LeakyReLU:__init(negval)
    nn.Module.__init(self)
    self.negval = number_arg('nn.LeakyReLU', 'negval', negval, 1 / 100)
  end
  function LeakyReLU:graph(x) return tgl.switch(tgl.gt(x, 0), x, x * self.negval) end

  -- nn.ELU([alpha = 1, inplace]): x where x > 0, alpha (exp(x) - 1)
  -- elsewhere.
  local ELU = nn.class('ELU', nn.Module)
  function ELU:__init(alpha)
    nn.Module.__init(self)
    self.alpha = number_arg('nn.ELU', 'alpha', alpha, 1)
  end
  function ELU:graph(x) return tgl.switch(tgl.le(x, 0), tgl.expm1(x) * self.alpha, x) end

  -- nn.SoftPlus([beta = 1, threshold = 20]): log(1 + exp(beta x)) / beta,
  -- and x itself where beta x > threshold (Torch7's linear tail).  The
  -- exp branch reads min(beta x, threshold), so the branch not taken
  -- gives no inf, and its gradient no NaN.
  local SoftPlus = nn.class('SoftPlus', nn.Module)
  function SoftPlus:__init(beta, threshold)
    nn.Module.__init(self)
    self.beta = number_arg('nn.SoftPlus', 'beta', beta, 1)
    self.threshold = number_arg('nn.SoftPlus', 'threshold', threshold, 20)
  end
  function SoftPlus:graph(x)
    local bx = x * self.beta
    return tgl.switch(tgl.gt(bx, self.threshold), x,
                      tgl.log1p(tgl.exp(tgl.minimum(bx, self.threshold))) / self.beta)
  end

  -- nn.Abs(): |x|, with gradient +1 at 0 as Torch7's (x < 0 ? -1 : 1).
  pointwise('Abs', function(x) return tgl.switch(tgl.lt(x, 0), -x, x) end)

  -- nn.Dropout([p = 0.5]): at training, x * noise with noise Bernoulli(1 - p)
  -- / (1 - p) (Torch7's default, v2), drawn anew by each forward from tgl's
  -- generator (tgl.manual_seed); backward uses the last forward's noise,
  -- as Torch7's.  evaluate(): the identity.  The noise is a shared
  -- variable per input shape and dtype borrowing an array that forward
  -- refills in place before the compiled function runs (nn._before_forward).
  local Dropout = nn.class('Dropout', nn.Module)
  function Dropout:__init(p)
    nn.Module.__init(self)
    p = number_arg('nn.Dropout', 'p', p, 0.5)
    if p < 0 or p >= 1 then
      nn._raise(('nn.Dropout: illegal percentage %s, must be 0 <= p < 1'):format(tostring(p)))
    end
    self.p = p
  end
  function Dropout:setp(p)
    self.p = p
    return self
  end
  local function fill_noise(self, arr)
    local keep = 1 - self.p
    arr:copy(tgl.lt(tgl.rand(unpack(arr:shape())), keep):astype(arr.dtype) / keep)
  end
  function Dropout:graph(x)
    if not self.train then return x end
    local shape = nn._shape_of(x)
    if not shape then
      error(('%s: at training, the graph needs the input\'s shape (call forward, or evaluate() for the identity)')
            :format(tostring(self)), 0)
    end
    self._noise = self._noise or {}
    local key = x.dtype .. '(' .. table.concat(shape, 'x') .. ')'
    local n = self._noise[key]
    if not n then
      -- filled by the hook before each call, not here: building a graph
      -- draws nothing from the generator, so a run resumed from a
      -- checkpoint (which builds its graphs later) draws what the
      -- uninterrupted run drew
      local arr = tgl.zeros(unpack(shape)):astype(x.dtype)
      n = { arr = arr, var = require('nn.host_shared')(arr, 'nn.Dropout.noise') }
      self._noise[key] = n
    end
    self.noise = n.arr
    nn._before_forward(function() fill_noise(self, n.arr); self.noise = n.arr end)
    return x * n.var
  end
  function Dropout:__tostring__() return ('%s(%f)'):format(nn.type(self), self.p) end
end
