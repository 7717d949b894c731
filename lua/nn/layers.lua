-- nn's layers: Linear, Identity, the activations (Tanh, Sigmoid, ReLU,
-- SoftMax, LogSoftMax) and the shape modules (Reshape, View).  Each one
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
  pointwise('Identity', function(x) return x end)
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
    self._compiled = nil
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
end
