-- nn's spatial modules: SpatialConvolution, SpatialMaxPooling and
-- SpatialAveragePooling, Torch7's names, arguments, defaults and printed
-- text, on tgl.conv2d, tgl.max_pool2d and tgl.avg_pool2d (NCHW).  Each
-- takes one image (C, H, W) or a batch (N, C, H, W), as Torch7's do.
-- Loaded by nn/init.lua.
local tgl = require 'tgl'

return function(nn)
  local function is_int(v) return type(v) == 'number' and v == math.floor(v) end

  -- Checks that each named argument is an integer >= its minimum; args is
  -- a list of {name, value, minimum}.
  local function check_ints(fname, args)
    for _, a in ipairs(args) do
      if not is_int(a[2]) or a[2] < a[3] then
        nn._raise(('%s: %s must be an integer >= %d, got %s'):format(fname, a[1], a[3], tostring(a[2])))
      end
    end
  end

  -- The input must be one image (C, H, W) or a batch (N, C, H, W).
  local function check_input(self, x)
    if x.ndim ~= 3 and x.ndim ~= 4 then
      error(('%s: expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got a %d-d input')
            :format(tostring(self), x.ndim), 0)
    end
  end

  -- Torch7 prints the padding only when it is not 0.
  local function pad_text(self)
    if self.padW ~= 0 or self.padH ~= 0 then return ', ' .. self.padW .. ',' .. self.padH end
    return ''
  end

  -- -------------------------------------------------------------------------
  -- nn.SpatialConvolution(nInputPlane, nOutputPlane, kW, kH [, dW=1, dH=1,
  -- padW=0, padH=0]): weight nOutputPlane x nInputPlane x kH x kW, bias
  -- nOutputPlane, y = conv2d(x, weight) + bias per output plane.
  local Conv = nn.class('SpatialConvolution', nn.Module)

  function Conv:__init(nInputPlane, nOutputPlane, kW, kH, dW, dH, padW, padH)
    nn.Module.__init(self)
    dW, dH, padW, padH = dW or 1, dH or 1, padW or 0, padH or 0
    check_ints('nn.SpatialConvolution', {
      { 'nInputPlane', nInputPlane, 1 }, { 'nOutputPlane', nOutputPlane, 1 },
      { 'kW', kW, 1 }, { 'kH', kH, 1 }, { 'dW', dW, 1 }, { 'dH', dH, 1 },
      { 'padW', padW, 0 }, { 'padH', padH, 0 } })
    self.nInputPlane, self.nOutputPlane = nInputPlane, nOutputPlane
    self.kW, self.kH, self.dW, self.dH, self.padW, self.padH = kW, kH, dW, dH, padW, padH
    local o = { dtype = self._dtype }
    self.weight = tgl.zeros(nOutputPlane, nInputPlane, kH, kW, o)
    self.gradWeight = tgl.zeros(nOutputPlane, nInputPlane, kH, kW, o)
    self.bias = tgl.zeros(nOutputPlane, o)
    self.gradBias = tgl.zeros(nOutputPlane, o)
    self:reset()
  end

  -- Torch7's reset: uniform in [-stdv, stdv], stdv = 1/sqrt(kW*kH*nInputPlane),
  -- or stdv*sqrt(3) when stdv is given (a uniform of that standard
  -- deviation), from tgl's generator (tgl.manual_seed).
  function Conv:reset(stdv)
    if stdv then stdv = stdv * math.sqrt(3)
    else stdv = 1 / math.sqrt(self.kW * self.kH * self.nInputPlane) end
    local o = { dtype = self.weight.dtype, low = -stdv, high = stdv }
    self.weight:copy(tgl.rand(self.nOutputPlane, self.nInputPlane, self.kH, self.kW, o))
    if self.bias then self.bias:copy(tgl.rand(self.nOutputPlane, o)) end
    return self
  end

  -- Torch7's noBias: the module keeps no bias from now on.
  function Conv:noBias()
    self.bias, self.gradBias = nil, nil
    nn._reconfigured()
    return self
  end

  function Conv:graph(x)
    check_input(self, x)
    local one = x.ndim == 3
    if one then x = x:dimshuffle { 'x', 1, 2, 3 } end
    local y = tgl.conv2d(x, self:_var('weight'),
                         { stride = { self.dH, self.dW }, padding = { self.padH, self.padW } })
    if self.bias then y = y + self:_var('bias'):dimshuffle { 'x', 1, 'x', 'x' } end
    if one then y = y[1] end
    return y
  end

  function Conv:__tostring__()
    local s = ('%s(%d -> %d, %dx%d'):format(nn.type(self), self.nInputPlane, self.nOutputPlane,
                                            self.kW, self.kH)
    if self.dW ~= 1 or self.dH ~= 1 or self.padW ~= 0 or self.padH ~= 0 then
      s = s .. (', %d,%d'):format(self.dW, self.dH)
    end
    s = s .. pad_text(self)
    return s .. (self.bias and ')' or ') without bias')
  end

  -- -------------------------------------------------------------------------
  -- The pooling modules: kernel kW x kH, stride dW x dH, padding padW x
  -- padH; ceil() / floor() choose the rounding of the output size.
  local function pool_init(self, fname, kW, kH, dW, dH, padW, padH)
    nn.Module.__init(self)
    check_ints(fname, { { 'kW', kW, 1 }, { 'kH', kH, 1 }, { 'dW', dW, 1 }, { 'dH', dH, 1 },
                        { 'padW', padW, 0 }, { 'padH', padH, 0 } })
    if 2 * padW > kW or 2 * padH > kH then
      nn._raise(('%s: padding %dx%d must be at most half the kernel %dx%d (Torch7\'s rule)')
            :format(fname, padW, padH, kW, kH))
    end
    self.kW, self.kH, self.dW, self.dH, self.padW, self.padH = kW, kH, dW, dH, padW, padH
    self.ceil_mode = false
  end

  local function pool_opts(self)
    return { kernel = { self.kH, self.kW }, stride = { self.dH, self.dW },
             padding = { self.padH, self.padW }, ceil_mode = self.ceil_mode }
  end

  local function pool_tostring(self)
    return ('%s(%dx%d, %d,%d'):format(nn.type(self), self.kW, self.kH, self.dW, self.dH)
           .. pad_text(self) .. ')'
  end

  -- A setter that changes how the graph is built invalidates the compiled
  -- functions, this module's and its containers' (the cache key is the
  -- input's shape alone).
  local function setter(cls, name, field, value)
    cls[name] = function(self)
      self[field] = value
      nn._reconfigured()
      return self
    end
  end

  -- nn.SpatialMaxPooling(kW, kH [, dW=kW, dH=kH, padW=0, padH=0])
  local MaxPool = nn.class('SpatialMaxPooling', nn.Module)
  function MaxPool:__init(kW, kH, dW, dH, padW, padH)
    pool_init(self, 'nn.SpatialMaxPooling', kW, kH, dW or kW, dH or kH, padW or 0, padH or 0)
  end
  setter(MaxPool, 'ceil', 'ceil_mode', true)
  setter(MaxPool, 'floor', 'ceil_mode', false)
  function MaxPool:graph(x)
    check_input(self, x)
    return tgl.max_pool2d(x, pool_opts(self))
  end
  MaxPool.__tostring__ = pool_tostring

  -- nn.SpatialAveragePooling(kW, kH [, dW=1, dH=1, padW=0, padH=0]): the
  -- stride defaults to 1, as in Torch7 (not to the kernel, as max
  -- pooling's); the padding counts in the divisor (count_include_pad)
  -- unless setCountExcludePad().
  local AvgPool = nn.class('SpatialAveragePooling', nn.Module)
  function AvgPool:__init(kW, kH, dW, dH, padW, padH)
    pool_init(self, 'nn.SpatialAveragePooling', kW, kH, dW or 1, dH or 1, padW or 0, padH or 0)
    self.count_include_pad = true
  end
  setter(AvgPool, 'ceil', 'ceil_mode', true)
  setter(AvgPool, 'floor', 'ceil_mode', false)
  setter(AvgPool, 'setCountIncludePad', 'count_include_pad', true)
  setter(AvgPool, 'setCountExcludePad', 'count_include_pad', false)
  function AvgPool:graph(x)
    check_input(self, x)
    local o = pool_opts(self)
    o.count_include_pad = self.count_include_pad
    return tgl.avg_pool2d(x, o)
  end
  AvgPool.__tostring__ = pool_tostring
end
