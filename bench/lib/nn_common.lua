-- bench/lib/nn_common.lua — what bench/nn.lua and the nn report share: the
-- models of `bench/run nn` (the 2012 paper's three MLPs as
-- bench/lib/mlp_common.lua sizes them, tanh hidden units, and a
-- LeNet-style CNN), built with Torch7's nn names, so that the same
-- function serves tgl's nn (bench/nn.lua) and reads as the Torch7 script
-- bench/peers/nn_torch7.lua, which builds them the same way.
local mlp_common = require 'mlp_common'
local M = {}

M.MODEL_NAMES = { 'logreg', 'mlp1', 'mlp3', 'cnn' }
M.MODEL_LABEL = {
  logreg = mlp_common.MODEL_LABEL.logreg, mlp1 = mlp_common.MODEL_LABEL.mlp1,
  mlp3 = mlp_common.MODEL_LABEL.mlp3,
  cnn = 'CNN conv5x5x20-pool2-conv5x5x50-pool2-500-10',
}
M.N_EXAMPLES = 6000      -- as the Torch7 script's -examples default
M.EVAL_EXAMPLES = 1200   -- the loss check's examples (slices of EVAL_SLICE)
M.EVAL_SLICE = 200
M.X_STD = mlp_common.X_STD

-- The model (nn.Sequential, output LogSoftMax; the criterion is
-- nn.ClassNLLCriterion).  CNN input: batch x 1 x 28 x 28.
function M.build(nn, name)
  local model = nn.Sequential()
  if name == 'cnn' then
    model:add(nn.SpatialConvolution(1, 20, 5, 5))        -- 20 x 24 x 24
    model:add(nn.SpatialMaxPooling(2, 2, 2, 2))          -- 20 x 12 x 12
    model:add(nn.SpatialConvolution(20, 50, 5, 5))       -- 50 x 8 x 8
    model:add(nn.SpatialMaxPooling(2, 2, 2, 2))          -- 50 x 4 x 4
    model:add(nn.View(800):setNumInputDims(3))
    model:add(nn.Linear(800, 500))
    model:add(nn.Tanh())
    model:add(nn.Linear(500, 10))
  else
    local sizes = mlp_common.MODELS[name]
    assert(sizes, 'unknown model ' .. tostring(name))
    for l = 1, #sizes - 1 do
      model:add(nn.Linear(sizes[l], sizes[l + 1]))
      if l < #sizes - 1 then model:add(nn.Tanh()) end
    end
  end
  model:add(nn.LogSoftMax())
  return model
end

-- One example's input shape.
function M.input_shape(name)
  if name == 'cnn' then return { 1, 28, 28 } end
  return { mlp_common.N_IN }
end

return M
