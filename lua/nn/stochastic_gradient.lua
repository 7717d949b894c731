-- nn.StochasticGradient(module, criterion): Torch7's simple trainer, with
-- its fields and its dataset protocol: dataset:size() examples, each
-- dataset[i] = {input, target}; one example per step, visited in an order
-- shuffled once before training (shuffleIndices = false: in order); the
-- learning rate decays as learningRate / (1 + iteration * learningRateDecay).
-- Each step is updateGradInput followed by accUpdateGradParameters, as
-- Torch7's.  It prints what Torch7 prints.
return function(nn)
  local tgl = require 'tgl'
  local SG = {}
  SG.__index = SG
  SG.__typename = 'nn.StochasticGradient'
  setmetatable(SG, { __call = function(c, ...) local o = setmetatable({}, c); o:__init(...); return o end })
  nn.StochasticGradient = SG

  function SG:__init(module, criterion)
    if type(module) ~= 'table' or type(module.forward) ~= 'function' then
      nn._raise('nn.StochasticGradient: expected (module, criterion), the module is a ' .. type(module))
    end
    if type(criterion) ~= 'table' or type(criterion.forward) ~= 'function' then
      nn._raise('nn.StochasticGradient: expected (module, criterion), the criterion is a ' .. type(criterion))
    end
    self.learningRate = 0.01
    self.learningRateDecay = 0
    self.maxIteration = 25
    self.shuffleIndices = true
    self.module = module
    self.criterion = criterion
    self.verbose = true
  end

  function SG:train(dataset)
    if type(dataset) ~= 'table' or type(dataset.size) ~= 'function' then
      nn._raise('nn.StochasticGradient:train: the dataset must be a table with a size() method '
                .. 'and dataset[i] = {input, target}')
    end
    local n = dataset:size()
    if type(n) ~= 'number' or n < 1 or n ~= math.floor(n) then
      nn._raise('nn.StochasticGradient:train: dataset:size() must be a positive integer, got ' .. tostring(n))
    end
    local module, criterion = self.module, self.criterion
    local iteration, lr = 1, self.learningRate
    local order = {}
    for t = 1, n do order[t] = t end
    if self.shuffleIndices then
      -- Fisher-Yates over uniforms from tgl's generator (torch.manualSeed)
      local u = tgl.rand(n, { dtype = 'float64' }):totable()
      for i = n, 2, -1 do
        local j = math.min(i, math.floor(u[i] * i) + 1)
        order[i], order[j] = order[j], order[i]
      end
    end
    print('# StochasticGradient: training')
    while true do
      local err = 0
      for t = 1, n do
        local example = dataset[order[t]]
        if type(example) ~= 'table' or example[1] == nil or example[2] == nil then
          nn._raise(('nn.StochasticGradient:train: dataset[%d] must be {input, target}, got %s')
                    :format(order[t], type(example)))
        end
        local input, target = example[1], example[2]
        err = err + criterion:forward(module:forward(input), target)
        module:updateGradInput(input, criterion:updateGradInput(module.output, target))
        module:accUpdateGradParameters(input, criterion.gradInput, lr)
        if self.hookExample then self.hookExample(self, example) end
      end
      err = err / n
      if self.hookIteration then self.hookIteration(self, iteration, err) end
      if self.verbose then print('# current error = ' .. err) end
      iteration = iteration + 1
      lr = self.learningRate / (1 + iteration * self.learningRateDecay)
      if self.maxIteration > 0 and iteration > self.maxIteration then
        print('# StochasticGradient: you have reached the maximum number of iterations')
        print('# training error = ' .. err)
        break
      end
    end
  end
end
