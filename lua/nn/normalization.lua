-- nn's batch normalisation modules: BatchNormalization (N x C input) and
-- SpatialBatchNormalization (N x C x H x W), Torch7's names, arguments,
-- fields, defaults and printed text, on tgl.batch_norm (the batch's
-- statistics and the normalise-scale-shift as engine ops).  Loaded by
-- nn/init.lua.
--
-- Training (module.train): the batch's mean and biased variance
-- normalise, and each forward moves the running statistics toward the
-- batch's, as Torch7 keeps them:
--   running_mean = (1 - momentum) running_mean + momentum mean
--   running_var  = (1 - momentum) running_var + momentum var * M / (M - 1)
-- (M elements per channel: the unbiased variance).  The running arrays
-- are borrowed by the compiled forward function, which writes them in
-- place (nn._add_update); backward's functions never touch them.  A
-- batch of one sample normalises with the running statistics and leaves
-- them alone (Torch7's rule: one sample has no variance).
-- Evaluation (evaluate()): the running statistics normalise, and one
-- sample without the batch axis (C, or C x H x W) is taken too.
local tgl = require 'tgl'

return function(nn)
  local BN = nn.class('BatchNormalization', nn.Module)
  -- the rank of a batch: 2 (N, C) here, 4 for the spatial module
  BN.nDim = 2

  -- nn.BatchNormalization(nOutput [, eps = 1e-5, momentum = 0.1, affine = true])
  function BN:__init(nOutput, eps, momentum, affine)
    nn.Module.__init(self)
    local name = nn.type(self)
    if type(nOutput) ~= 'number' or nOutput ~= math.floor(nOutput) or nOutput < 1 then
      nn._raise(('%s: nOutput must be a positive integer (the number of channels), got %s')
                :format(name, tostring(nOutput)))
    end
    if eps ~= nil and (type(eps) ~= 'number' or not (eps >= 0)) then
      nn._raise(('%s: eps must be a number >= 0, got %s'):format(name, tostring(eps)))
    end
    if momentum ~= nil and (type(momentum) ~= 'number' or not (momentum >= 0 and momentum <= 1)) then
      nn._raise(('%s: momentum must be a number in [0, 1], got %s'):format(name, tostring(momentum)))
    end
    if affine ~= nil and type(affine) ~= 'boolean' then
      nn._raise(('%s: affine has to be true or false, got %s'):format(name, tostring(affine)))
    end
    self.affine = affine ~= false
    self.eps = eps or 1e-5
    self.momentum = momentum or 0.1
    local o = { dtype = self._dtype }
    self.running_mean = tgl.zeros(nOutput, o)
    self.running_var = tgl.ones(nOutput, o)
    if self.affine then
      self.weight = tgl.zeros(nOutput, o)
      self.bias = tgl.zeros(nOutput, o)
      self.gradWeight = tgl.zeros(nOutput, o)
      self.gradBias = tgl.zeros(nOutput, o)
    end
    self:reset()
  end

  -- Torch7's reset: weight uniform in [0, 1) (tgl's generator:
  -- tgl.manual_seed), bias 0, running_mean 0, running_var 1.
  function BN:reset()
    local n = self.running_mean:size(1)
    if self.weight then self.weight:copy(tgl.rand(n, { dtype = self.weight.dtype })) end
    if self.bias then self.bias:fill(0) end
    self.running_mean:fill(0)
    self.running_var:fill(1)
    return self
  end

  -- x: a batch (nDim axes), or in evaluation one sample (nDim - 1).
  local function check_input(self, x)
    local nd = self.nDim
    if x.ndim ~= nd and not (x.ndim == nd - 1 and self.train == false) then
      local layout = nd == 2 and '(N, C)' or '(N, C, H, W)'
      error(('%s: expected a %d-d input %s (%d-d: one sample, in evaluation), got a %d-d input')
            :format(tostring(self), nd, layout, nd - 1, x.ndim), 0)
    end
  end

  function BN:graph(x)
    check_input(self, x)
    local one = x.ndim == self.nDim - 1
    if one then
      local order = { 'x' }
      for d = 1, x.ndim do order[d + 1] = d end
      x = x:dimshuffle(order)
    end
    local C = self.running_mean:size(1)
    -- the input's shape, known while forward or backward builds the graph
    -- (nn._shape_of): the channel check, and Torch7's batch-of-one rule.
    -- When a module before this one fails on the input, the shape is
    -- unknown here and the compiled call's failure names that module.
    local ok, shape = pcall(nn._shape_of, x)
    if not ok then shape = nil end
    if shape and shape[2] ~= C then
      error(('%s: expected %d channels (axis 2 of the input), got %d (input %s)')
            :format(tostring(self), C, shape[2], table.concat(shape, 'x')), 0)
    end
    local w, b
    if self.affine then w, b = self:_var('weight'), self:_var('bias') end
    local rm, rv = self:_var('running_mean'), self:_var('running_var')
    local y
    if self.train ~= false and not one and not (shape and shape[1] == 1) then
      local mean, var
      y, mean, var = tgl.batch_norm(x, w, b, { eps = self.eps })
      -- M / (M - 1): the biased variance to the unbiased
      local m = 1
      if shape then
        for d = 1, #shape do if d ~= 2 then m = m * shape[d] end end
      else
        for d = 1, x.ndim do if d ~= 2 then m = m * x:size(d) end end
        m = tgl.cast(m, var.dtype)
      end
      local mom = self.momentum
      nn._add_update(rm, (rm * (1 - mom) + mean * mom):astype(rm.dtype))
      nn._add_update(rv, (rv * (1 - mom) + var * (m / (m - 1) * mom)):astype(rv.dtype))
    else
      y = tgl.batch_norm(x, w, b, { eps = self.eps, mean = rm, var = rv })
    end
    if one then y = y[1] end
    return y
  end

  -- Torch7's text: "nn.BatchNormalization (2D) (10)"
  function BN:__tostring__()
    return ('%s (%dD) (%d)'):format(nn.type(self), self.nDim, self.running_mean:size(1))
  end

  -- nn.SpatialBatchNormalization(nOutput [, eps, momentum, affine]): the
  -- same over (N, C, H, W), statistics per channel over N, H and W.
  local SBN = nn.class('SpatialBatchNormalization', BN)
  SBN.nDim = 4
end
