-- nn's shape and lookup layers: Transpose, Narrow, Select, Squeeze,
-- Replicate and LookupTable, with Torch7's arguments and rules (negative
-- dimensions, offsets and indices; numInputDims for batches).  Each one is
-- its graph, as in nn/layers.lua; the rules that depend on the input's
-- sizes read them once, when forward/backward build the graph for a
-- concrete input (nn._shape_of), so a compiled function is made per input
-- shape, as the cache keys it anyway.  Loaded by nn/init.lua.
local tgl = require 'tgl'

return function(nn)
  local function is_int(v) return type(v) == 'number' and v == math.floor(v) end

  local function int_arg(fname, what, v, default)
    if v == nil and default ~= nil then return default end
    if not is_int(v) then
      nn._raise(('%s: %s must be an integer, got %s'):format(fname, what, tostring(v)))
    end
    return v
  end

  -- The input's sizes while forward/backward build the graph; a module
  -- whose rule needs them says so otherwise (a user's m:graph(x)).
  local function shape_of(self, x)
    local shape = nn._shape_of(x)
    if not shape then
      error(('%s: its graph needs the input\'s sizes (call forward or backward)'):format(nn.type(self)), 0)
    end
    return shape
  end

  -- A dimension d of an nd-dimensional input, negative counting from the
  -- end (-1 the last), checked.
  local function dim_of(self, d, nd)
    local r = d < 0 and nd + d + 1 or d
    if r < 1 or r > nd then
      error(('%s: dimension %d is out of range for a %d-d input'):format(nn.type(self), d, nd), 0)
    end
    return r
  end

  -- Basic indexing of x on axis d by spec (a number or a slice), the other
  -- axes whole.
  local function index_on(x, d, spec)
    local idx = {}
    for i = 1, d - 1 do idx[i] = {} end
    idx[d] = spec
    return x[idx]
  end

  -- nn.Transpose({d1, d2}, {d3, d4}, ...): swaps d1 and d2, then d3 and
  -- d4, ...; setNumInputDims(n): the dimensions count within the last n of
  -- the input (a batch's first axis is left alone).
  local Transpose = nn.class('Transpose', nn.Module)
  function Transpose:__init(...)
    nn.Module.__init(self)
    self.permutations = { ... }
    for i, p in ipairs(self.permutations) do
      if type(p) ~= 'table' or not is_int(p[1]) or not is_int(p[2]) or p[1] < 1 or p[2] < 1 then
        nn._raise(('nn.Transpose: permutation %d must be a pair of positive dimensions {d1, d2}, got %s')
              :format(i, type(p) == 'table' and '{' .. table.concat(p, ', ') .. '}' or tostring(p)))
      end
    end
  end
  function Transpose:setNumInputDims(n)
    self.numInputDims = n
    nn._reconfigured()
    return self
  end
  function Transpose:graph(x)
    local offset = self.numInputDims and x.ndim - self.numInputDims or 0
    local order = {}
    for i = 1, x.ndim do order[i] = i end
    for _, p in ipairs(self.permutations) do
      local a, b = p[1] + offset, p[2] + offset
      if a > x.ndim or b > x.ndim or a < 1 or b < 1 then
        error(('nn.Transpose: cannot swap dimensions %d and %d of a %d-d input'):format(a, b, x.ndim), 0)
      end
      order[a], order[b] = order[b], order[a]
    end
    return x:dimshuffle(order)
  end

  -- nn.Narrow(dimension, offset [, length = 1]): input:narrow(dimension,
  -- offset, length) with Torch7's rules for negative arguments: a negative
  -- dimension counts from the end; a negative length l means size -
  -- offset + l + 2 (so -1 runs to the end); a negative offset means offset
  -- 1 and length size - length.
  local Narrow = nn.class('Narrow', nn.Module)
  function Narrow:__init(dimension, offset, length)
    nn.Module.__init(self)
    if dimension == nil or offset == nil then
      nn._raise('nn.Narrow: expected nn.Narrow(dimension, offset [, length])')
    end
    self.dimension = int_arg('nn.Narrow', 'dimension', dimension)
    self.index = int_arg('nn.Narrow', 'offset', offset)
    self.length = int_arg('nn.Narrow', 'length', length, 1)
    if self.dimension == 0 or self.index == 0 or self.length == 0 then
      nn._raise(('nn.Narrow: dimension, offset and length must not be 0, got %d, %d, %d')
            :format(self.dimension, self.index, self.length))
    end
  end
  function Narrow:graph(x)
    local d = dim_of(self, self.dimension, x.ndim)
    local size = shape_of(self, x)[d]
    local length, index = self.length, self.index
    if length < 0 then length = size - index + length + 2 end
    if index < 0 then
      index = 1
      length = size - length
    end
    if index < 1 or length < 1 or index + length - 1 > size then
      error(('nn.Narrow: offset %d and length %d do not fit dimension %d of size %d')
            :format(index, length, d, size), 0)
    end
    return index_on(x, d, { index, index + length - 1 })
  end

  -- nn.Select(dimension, index): input:select(dimension, index), the
  -- dimension dropped; negative dimension and index count from the end.
  local Select = nn.class('Select', nn.Module)
  function Select:__init(dimension, index)
    nn.Module.__init(self)
    self.dimension = int_arg('nn.Select', 'dimension', dimension)
    self.index = int_arg('nn.Select', 'index', index)
    if self.dimension == 0 or self.index == 0 then
      nn._raise(('nn.Select: dimension and index must not be 0, got %d, %d'):format(self.dimension, self.index))
    end
  end
  function Select:graph(x)
    local d = dim_of(self, self.dimension, x.ndim)
    local size = shape_of(self, x)[d]
    local index = self.index < 0 and size + self.index + 1 or self.index
    if index < 1 or index > size then
      error(('nn.Select: index %d is out of range for dimension %d of size %d'):format(self.index, d, size), 0)
    end
    return index_on(x, d, index)
  end

  -- nn.Squeeze([dim, numInputDims]): drops the dimensions of size 1 (only
  -- dim when given, and only if its size is 1).  With numInputDims and a
  -- batch (numInputDims + 1 dimensions), dim counts within one example,
  -- and a batch of one keeps its first axis.
  local Squeeze = nn.class('Squeeze', nn.Module)
  function Squeeze:__init(dim, numInputDims)
    nn.Module.__init(self)
    if dim ~= nil then self.dim = int_arg('nn.Squeeze', 'dim', dim) end
    if numInputDims ~= nil then self.numInputDims = int_arg('nn.Squeeze', 'numInputDims', numInputDims) end
  end
  function Squeeze:setNumInputDims(n)
    self.numInputDims = n
    nn._reconfigured()
    return self
  end
  function Squeeze:graph(x)
    local shape = shape_of(self, x)
    local dim, keep_first = self.dim, false
    if self.numInputDims and #shape == self.numInputDims + 1 then
      if dim then dim = dim + 1 elseif shape[1] == 1 then keep_first = true end
    end
    local out = {}
    if dim then
      if dim < 1 or dim > #shape then
        error(('nn.Squeeze: dimension %d is out of range for a %d-d input'):format(dim, #shape), 0)
      end
      for i, s in ipairs(shape) do
        if i ~= dim or s ~= 1 then out[#out + 1] = s end
      end
    else
      for _, s in ipairs(shape) do
        if s ~= 1 then out[#out + 1] = s end
      end
    end
    -- Torch7 squeezes a tensor of one element to one dimension
    if #out == 0 then out = { 1 } end
    if keep_first then table.insert(out, 1, 1) end
    return x:reshape(out)
  end

  -- nn.Replicate(nFeature [, dim = 1, ndim]): a new dimension dim of size
  -- nFeature, each slice a copy of the input; with ndim, an input of more
  -- than ndim dimensions is a batch and dim counts after its first axis.
  -- The gradient sums over the copies.
  local Replicate = nn.class('Replicate', nn.Module)
  function Replicate:__init(nf, dim, ndim)
    nn.Module.__init(self)
    self.nfeatures = int_arg('nn.Replicate', 'nFeature', nf)
    self.dim = int_arg('nn.Replicate', 'dim', dim, 1)
    if ndim ~= nil then self.ndim = int_arg('nn.Replicate', 'ndim', ndim) end
    if self.nfeatures < 1 then
      nn._raise(('nn.Replicate: nFeature must be positive, got %d'):format(self.nfeatures))
    end
    if self.dim < 1 then
      nn._raise(('nn.Replicate: can only replicate across positive dimensions, got %d'):format(self.dim))
    end
  end
  function Replicate:graph(x)
    if self.dim > x.ndim + 1 then
      error(('nn.Replicate: not enough input dimensions (%d) to replicate along dimension %d')
            :format(x.ndim, self.dim), 0)
    end
    local rdim = self.dim + ((self.ndim and x.ndim > self.ndim) and 1 or 0)
    if rdim > x.ndim + 1 then
      error(('nn.Replicate: not enough input dimensions (%d, a batch) to replicate along dimension %d')
            :format(x.ndim, self.dim), 0)
    end
    local order, ones = {}, {}
    for i = 1, x.ndim + 1 do
      if i < rdim then order[i] = i elseif i == rdim then order[i] = 'x' else order[i] = i - 1 end
      ones[i] = i == rdim and self.nfeatures or 1
    end
    -- a broadcastable axis times ones of nFeature along it
    return x:dimshuffle(order) * tgl.ones(unpack(ones)):astype(x.dtype)
  end

  -- nn.LookupTable(nIndex, nOutput [, paddingValue, maxNorm, normType]):
  -- weight nIndex x nOutput, reset N(0, stdv = 1) as Torch7's (from tgl's
  -- generator).  Input: indices 1..nIndex (int64, or a float array of
  -- integers), a vector of n giving n x nOutput, or a batch b x n giving b
  -- x n x nOutput.  gradWeight's row i gets the sum of the gradOutput rows
  -- at the positions holding i (repeated indices accumulate); rows looked
  -- up through paddingValue get no gradient.  gradInput is zeros of the
  -- input's shape (indices have no gradient).  maxNorm [, normType = 2]:
  -- forward first scales down, in the weight, the rows looked up whose
  -- normType-norm exceeds maxNorm (Torch7's renorm).
  local LookupTable = nn.class('LookupTable', nn.Module)
  function LookupTable:__init(nIndex, nOutput, paddingValue, maxNorm, normType)
    nn.Module.__init(self)
    if not is_int(nIndex) or nIndex < 1 or not is_int(nOutput) or nOutput < 1 then
      nn._raise(('nn.LookupTable: expected nn.LookupTable(nIndex, nOutput) with positive integers, got %s, %s')
            :format(tostring(nIndex), tostring(nOutput)))
    end
    self.weight = tgl.zeros(nIndex, nOutput, { dtype = self._dtype })
    self.gradWeight = tgl.zeros(nIndex, nOutput, { dtype = self._dtype })
    self.paddingValue = int_arg('nn.LookupTable', 'paddingValue', paddingValue, 0)
    if maxNorm ~= nil then self:setMaxNorm(maxNorm) end
    if normType ~= nil then self:setNormType(normType) end
    self:reset()
  end
  function LookupTable:setPadding(v)
    self.paddingValue = int_arg('nn.LookupTable:setPadding', 'paddingValue', v)
    nn._reconfigured()
    return self
  end
  local function positive(fname, what, v)
    if type(v) ~= 'number' or not (v > 0) then
      nn._raise(('%s: %s must be a positive number, got %s'):format(fname, what, tostring(v)))
    end
    return v
  end
  function LookupTable:setMaxNorm(maxNorm)
    self.maxNorm = positive('nn.LookupTable', 'maxNorm', maxNorm)
    nn._reconfigured()
    return self
  end
  function LookupTable:setNormType(normType)
    self.normType = positive('nn.LookupTable', 'normType', normType)
    nn._reconfigured()
    return self
  end
  -- scaleGradByFreq(): each position's gradient is divided by the number
  -- of times its index occurs in the input.
  function LookupTable:scaleGradByFreq()
    self.shouldScaleGradByFreq = true
    nn._reconfigured()
    return self
  end
  function LookupTable:reset(stdv)
    stdv = stdv or 1
    local w = self.weight
    w:copy(tgl.randn(w:size(1), w:size(2), { dtype = w.dtype }) * stdv)
    return self
  end

  -- The indices of the model's input checked on the host: integers in
  -- 1..nIndex, or the first bad one named with its position.
  local function check_indices(self, input)
    if input:dim() ~= 1 and input:dim() ~= 2 then return end
    local n = self.weight:size(1)
    local a = input.dtype == 'float64' and input or input:astype('float64')
    local lo, hi = tgl.min(a):get(), tgl.max(a):get()
    local fractional = input.dtype:match('^float') and tgl.sum(tgl.neq(tgl.floor(a), a)):get() > 0
    if lo >= 1 and hi <= n and not fractional then return end
    local cols = input:dim() == 2 and input:size(2) or 1
    local flat = a:reshape(a:nelement())
    for i = 1, a:nelement() do
      local v = flat:get(i)
      if v < 1 or v > n or v ~= math.floor(v) then
        local pos = input:dim() == 2 and ('(%d, %d)'):format(math.floor((i - 1) / cols) + 1, (i - 1) % cols + 1)
                    or tostring(i)
        error(('%s: index %s at position %s is not in 1..%d (indices count from 1, as in Torch7)')
              :format(nn.type(self), tostring(v), pos, n), 0)
      end
    end
  end

  function LookupTable:graph(x)
    if x.ndim ~= 1 and x.ndim ~= 2 then
      error(('nn.LookupTable: the input must be a vector or a matrix of indices, got a %d-d input'):format(x.ndim), 0)
    end
    if x.dtype ~= 'int64' and x.dtype ~= 'int32' and not x.dtype:match('^float') then
      error(('nn.LookupTable: the indices must be integers (int64) or floats, got %s'):format(x.dtype), 0)
    end
    local idx = x.dtype:match('^int') and x or x:astype('int64')
    if nn._is_model_input(x) then nn._check_input(function(input) check_indices(self, input) end, x)
    else
      -- indices computed inside the model: a negative one becomes 0, which
      -- the gather refuses when it runs (it would count from the end)
      idx = tgl.switch(tgl.lt(idx, 1), 0, idx)
    end
    local W = self:_var('weight')
    local y = W[idx]
    local pv = self.paddingValue
    local padding = pv >= 1 and pv <= self.weight:size(1)
    if not (self.maxNorm or self.shouldScaleGradByFreq or padding) then return y end
    -- The value comes through a variable over the same array that no
    -- gradient is taken for; y = value + (W[idx] - that) * gscale has
    -- exactly the value (the difference is 0) and the gradient gscale
    -- times the plain lookup's.
    local rows = self:_var('weight', '_weight_nograd')[idx]
    local value, gscale = rows, nil
    local keep = {}
    for i = 1, x.ndim do keep[i] = i end
    keep[#keep + 1] = 'x'
    local flat = x.ndim == 1 and idx or idx:reshape({ -1 })
    if self.maxNorm then
      -- Torch7's renorm, in forward: each row looked up whose norm exceeds
      -- maxNorm is scaled by maxNorm / (norm + 1e-7) in the weight itself
      -- (an update of forward's compiled function), and the output holds
      -- the scaled rows.  The gradient is the plain lookup's, as Torch7's.
      local p, ax, d = self.normType or 2, x.ndim + 1, self.weight:size(2)
      local norm
      if p == 1 then norm = tgl.sum(tgl.abs(rows), ax)
      elseif p == 2 then norm = tgl.sqrt(tgl.sum(rows * rows, ax))
      else norm = tgl.sum(tgl.abs(rows) ^ p, ax) ^ (1 / p) end
      local scale = tgl.switch(tgl.gt(norm, self.maxNorm), self.maxNorm / (norm + 1e-7), 1):astype(rows.dtype)
      value = rows * scale:dimshuffle(keep)
      -- another LookupTable sharing the weight chains its rows after
      -- these (nn._merged_updates): one update of the array per call
      local rows2d = value:reshape({ -1, d })
      nn._add_update(W, tgl.set_subtensor(W[flat], rows2d),
                     function(prev) return tgl.set_subtensor(prev[flat], rows2d) end)
    end
    if self.shouldScaleGradByFreq then
      -- each position's gradient divided by how often its index occurs
      -- in the whole input (Torch7's scaleGradByFreq)
      local zeros = tgl.constant(tgl.zeros(self.weight:size(1), { dtype = rows.dtype }))
      local count = tgl.inc_subtensor(zeros[flat], 1)[idx]
      gscale = (1 / count):dimshuffle(keep)
    end
    local diff = y - rows
    y = value + (gscale and diff * gscale or diff)
    if padding then
      local pad = tgl.eq(idx, pv):dimshuffle(keep)
      y = tgl.switch(pad, value, y)
    end
    return y
  end
end
