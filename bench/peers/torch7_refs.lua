-- bench/peers/torch7_refs.lua — generates spec/fixtures/torch7/*.lua, the
-- reference numbers spec/nn_torch7_spec.lua checks tgl's nn against.
--
-- This script runs UNDER TORCH7 (not under tgl): see bench/peers/torch7.sh
-- and doc/torch7_reference.md.
--
--   bench/peers/torch7.sh --refs [OUTDIR]      (OUTDIR: spec/fixtures/torch7)
--
-- Every module and criterion is built in float64, its parameters and
-- inputs are set from a formula (no shared random generator is needed:
-- value i of a tensor is scale * sin(0.37 i + k), i counting from 1 in
-- row-major order), forward and backward run with a gradOutput made the
-- same way, and the inputs, parameters, outputs, gradInput, parameter
-- gradients and running statistics are written out as Lua data with
-- %.17g (exact round trip of a double).  The fixture files are
-- measurements of Torch7; the spec reads every value from them.
--
-- A case is {name, ctor, runs, ...}: ctor is a Lua expression that both
-- Torch7's nn and tgl's nn evaluate (with W{...} a float64 vector), runs a
-- list of {mode = 'train'|'eval', input = <input maker>, backward = bool,
-- scale = number}.  gradients accumulate over the runs from zero, as
-- Torch7's backward does.
--
-- SeqLSTM/SeqGRU come from Element-Research's rnn sources: set
-- TORCH7_RNN_SRC to that directory (its SeqLSTM.lua and SeqGRU.lua load
-- on their own, without dpnn/torchx).
require 'torch'
require 'nn'
torch.setdefaulttensortype('torch.DoubleTensor')

local outdir = arg and arg[1] or 'spec/fixtures/torch7'
local unpack = unpack or table.unpack

-- Provenance: commit hashes of the sources Torch7 was built from, given
-- by bench/peers/torch7.sh (TORCH7_COMMITS), else 'unknown'.
local commits = os.getenv('TORCH7_COMMITS') or 'unknown'

local rnn_src = os.getenv('TORCH7_RNN_SRC')
if rnn_src and rnn_src ~= '' then
  -- the two files only read nn.Sequencer.remember at load time (a method
  -- the cases here never call): an empty table stands in for the package
  nn.Sequencer = nn.Sequencer or {}
  dofile(rnn_src .. '/SeqLSTM.lua')
  dofile(rnn_src .. '/SeqGRU.lua')
end

-- value i (1-based, row-major) of a generated tensor
local function val(i, k, s) return s * math.sin(0.37 * i + k) end

local function gen(sizes, k, s)
  local t = torch.Tensor(torch.LongStorage(sizes))
  local flat = t:view(t:nElement())
  for i = 1, flat:nElement() do flat[i] = val(i, k, s or 1) end
  return t
end

-- a tensor of the same shape as t (or a table of such), filled from the formula
local function like(t, k, s)
  if torch.isTensor(t) then
    local sizes = t:size():totable()
    return gen(sizes, k, s)
  end
  local out = {}
  for i, v in ipairs(t) do out[i] = like(v, k + 0.7 * i, s) end
  return out
end

local function deepclone(t)
  if torch.isTensor(t) then return t:clone() end
  local out = {}
  for i, v in ipairs(t) do out[i] = deepclone(v) end
  return out
end

---------------------------------------------------------------- writing

local function num(x)
  if x ~= x then return '0/0' end
  if x == math.huge then return 'math.huge' end
  if x == -math.huge then return '-math.huge' end
  return string.format('%.17g', x)
end

-- {s = {sizes}, d = {flat row-major values}} for a tensor, {tbl = {...}}
-- for a table of tensors.
local function ser(t)
  if type(t) == 'number' then return num(t) end
  if torch.isTensor(t) then
    local sizes = t:nElement() == 0 and {} or t:size():totable()
    local parts = {}
    if t:nElement() > 0 then
      local flat = t:contiguous():view(t:nElement())
      for i = 1, flat:nElement() do parts[i] = num(flat[i]) end
    end
    return '{s={' .. table.concat(sizes, ',') .. '},d={' .. table.concat(parts, ',') .. '}}'
  end
  local parts = {}
  for i, v in ipairs(t) do parts[i] = ser(v) end
  return '{tbl={' .. table.concat(parts, ',') .. '}}'
end

local function header(f, what)
  f:write('-- spec/fixtures/torch7/', what, '.lua: reference numbers produced by Torch7\n')
  f:write('-- (', commits, ')\n')
  f:write('-- with bench/peers/torch7_refs.lua, float64.  Measurements of Torch7, not code;\n')
  f:write('-- regenerate with bench/peers/torch7.sh --refs.  Read by spec/nn_torch7_spec.lua.\n')
end

local function needs(ctor)
  local seen, out = {}, {}
  for name in ctor:gmatch('nn%.([%w_]+)') do
    if not seen[name] then seen[name] = true; out[#out + 1] = string.format('%q', name) end
  end
  return '{' .. table.concat(out, ',') .. '}'
end

local env = setmetatable({ nn = nn, torch = torch,
                           W = function(t) return torch.Tensor(t) end }, { __index = _G })
local function build(ctor)
  local f = assert(loadstring('return ' .. ctor, ctor))
  setfenv(f, env)
  return f()
end

---------------------------------------------------------------- modules

local PARAM_FIELDS = { 'weight', 'bias' }
local STATE_FIELDS = { 'running_mean', 'running_var' }

local function run_module(case)
  local m = build(case.ctor)
  local params = {}
  local mods = m:listModules()
  local j = 0
  for mi, mod in ipairs(mods) do
    for _, field in ipairs(PARAM_FIELDS) do
      local p = rawget(mod, field)
      if torch.isTensor(p) and p:nElement() > 0 then
        j = j + 1
        p:copy(gen(p:size():totable(), 10 + 3 * j, case.wscale or 0.5))
        if case.wshift and field == 'weight' then p:add(case.wshift) end
        params[#params + 1] = { mod = mi, field = field, t = p:clone() }
      end
    end
  end
  m:zeroGradParameters()
  local runs = {}
  for ri, r in ipairs(case.runs) do
    if r.mode == 'eval' then m:evaluate() else m:training() end
    local x = r.input()
    local y = deepclone(m:forward(x))
    local rec = { mode = r.mode or 'train', input = x, output = y }
    if r.backward ~= false then
      local go = like(y, 0.5 + ri, 1)
      local gi = deepclone(m:backward(x, go, r.scale))
      rec.gradOutput, rec.gradInput, rec.scale = go, gi, r.scale
    end
    runs[ri] = rec
  end
  local grads, state = {}, {}
  for mi, mod in ipairs(mods) do
    for _, field in ipairs(PARAM_FIELDS) do
      local p = rawget(mod, field)
      local gf = 'grad' .. field:sub(1, 1):upper() .. field:sub(2)
      if torch.isTensor(p) and p:nElement() > 0 then
        grads[#grads + 1] = { mod = mi, field = gf, t = rawget(mod, gf):clone() }
      end
    end
    for _, field in ipairs(STATE_FIELDS) do
      local s = rawget(mod, field)
      if torch.isTensor(s) then state[#state + 1] = { mod = mi, field = field, t = s:clone() } end
    end
  end
  return params, runs, grads, state
end

local function write_slots(f, key, list)
  f:write('  ', key, '={')
  for _, s in ipairs(list) do
    f:write('{mod=', s.mod, ',field=', string.format('%q', s.field), ',t=', ser(s.t), '},')
  end
  f:write('},\n')
end

local function write_modules(what, cases)
  local path = outdir .. '/' .. what .. '.lua'
  local f = assert(io.open(path, 'w'))
  header(f, what)
  f:write('return {\n')
  for _, case in ipairs(cases) do
    local params, runs, grads, state = run_module(case)
    f:write('{name=', string.format('%q', case.name), ',ctor=', string.format('%q', case.ctor),
            ',needs=', needs(case.ctor), case.tgl_ctor and (',tgl_ctor=' .. string.format('%q', case.tgl_ctor)) or '',
            ',\n')
    write_slots(f, 'params', params)
    f:write('  runs={\n')
    for _, r in ipairs(runs) do
      f:write('  {mode=', string.format('%q', r.mode), r.scale and (',scale=' .. num(r.scale)) or '',
              ',\n   input=', ser(r.input), ',\n   output=', ser(r.output))
      if r.gradOutput then
        f:write(',\n   gradOutput=', ser(r.gradOutput), ',\n   gradInput=', ser(r.gradInput))
      end
      f:write('},\n')
    end
    f:write('  },\n')
    write_slots(f, 'grads', grads)
    write_slots(f, 'state', state)
    f:write('},\n')
  end
  f:write('}\n')
  f:close()
  print(('%-12s %3d cases -> %s'):format(what, #cases, path))
end

-- input makers
local function I(sizes, k, s) return function() return gen(sizes, k or 0.3, s or 1) end end
local function IT(list)
  return function()
    local out = {}
    for i, sz in ipairs(list) do out[i] = gen(sz, 0.3 + 1.1 * i, 1) end
    return out
  end
end
-- indices 1..n from a formula: ((7 i + 3) mod n) + 1
local function IDX(sizes, n)
  return function()
    local t = torch.Tensor(torch.LongStorage(sizes))
    local flat = t:view(t:nElement())
    for i = 1, flat:nElement() do flat[i] = ((7 * i + 3) % n) + 1 end
    return t
  end
end
local function one(ctor, input, name, extra)
  local c = { name = name or ctor, ctor = ctor, runs = { { input = input } } }
  for k, v in pairs(extra or {}) do c[k] = v end
  return c
end

local containers = {
  one('nn.Sequential():add(nn.Linear(4, 5)):add(nn.Tanh()):add(nn.Linear(5, 3)):add(nn.LogSoftMax())',
      I({ 3, 4 })),
  one('nn.Sequential():add(nn.Linear(4, 5)):add(nn.Sigmoid()):add(nn.Linear(5, 2, false))', I({ 4 }),
      'Sequential, vector input'),
  one('nn.Concat(2):add(nn.Linear(4, 3)):add(nn.Linear(4, 2)):add(nn.Tanh())', I({ 3, 4 })),
  one('nn.Concat(1):add(nn.Linear(4, 3)):add(nn.Identity())', I({ 4 }), 'Concat(1), vector input'),
  one('nn.ConcatTable():add(nn.Linear(4, 3)):add(nn.Identity()):add(nn.Tanh())', I({ 2, 4 })),
  one('nn.Parallel(2, 2):add(nn.Linear(3, 2)):add(nn.Linear(3, 4))', I({ 4, 2, 3 })),
  one('nn.ParallelTable():add(nn.Linear(4, 3)):add(nn.Tanh())', IT({ { 2, 4 }, { 2, 5 } })),
  one('nn.Sequential():add(nn.ConcatTable():add(nn.Linear(4, 3)):add(nn.Linear(4, 3))):add(nn.CAddTable())',
      I({ 2, 4 }), 'Sequential(ConcatTable, CAddTable)'),
  one('nn.Sequential():add(nn.SplitTable(2)):add(nn.ParallelTable():add(nn.Linear(3, 2)):add(nn.Linear(3, 2)))'
      .. ':add(nn.JoinTable(2))', I({ 5, 2, 3 }), 'Sequential(SplitTable, ParallelTable, JoinTable)'),
  { name = 'Sequential(Linear, BatchNormalization, ReLU): evaluate, 2 training steps, evaluate',
    ctor = 'nn.Sequential():add(nn.Linear(3, 4)):add(nn.BatchNormalization(4)):add(nn.ReLU())',
    runs = { { mode = 'eval', input = I({ 5, 3 }, 0.1) }, { input = I({ 5, 3 }, 0.3, 2) },
             { input = I({ 5, 3 }, 1.3, 2) }, { mode = 'eval', input = I({ 5, 3 }, 2.3) } } },
  { name = 'Linear, backward twice with scale 0.5 (accumulation)', ctor = 'nn.Linear(4, 3)',
    runs = { { input = I({ 2, 4 }), scale = 0.5 }, { input = I({ 2, 4 }, 1.7), scale = 0.5 } } },
}

local layers = {
  one('nn.Linear(4, 3)', I({ 5, 4 })),
  one('nn.Linear(4, 3)', I({ 4 }), 'Linear, vector input'),
  one('nn.Linear(4, 3, false)', I({ 5, 4 }), 'Linear without bias'),
  one('nn.LookupTable(10, 3)', IDX({ 2, 6 }, 10), 'LookupTable, 2-D indices with repeats'),
  one('nn.LookupTable(7, 4)', IDX({ 9 }, 7), 'LookupTable, 1-D indices with repeats'),
  one('nn.Identity()', I({ 3, 4 })),
  one('nn.Reshape(3, 4)', I({ 2, 12 }), 'Reshape, batch'),
  one('nn.Reshape(2, 6)', I({ 12 }), 'Reshape, vector'),
  one('nn.View(3, 4)', I({ 2, 12 }), 'View(3, 4) on 2x12'),
  one('nn.View(6):setNumInputDims(2)', I({ 5, 2, 3 }), 'View(6):setNumInputDims(2)'),
  one('nn.View(-1)', I({ 3, 4 }), 'View(-1)'),
  one('nn.Transpose({1, 2}, {2, 3})', I({ 2, 3, 4 })),
  one('nn.Narrow(2, 2, 3)', I({ 3, 6 })),
  one('nn.Narrow(1, 2, 2)', I({ 5, 3 })),
  one('nn.Select(2, 3)', I({ 3, 4, 2 })),
  one('nn.Select(1, -1)', I({ 3, 4 })),
  one('nn.Squeeze()', I({ 3, 1, 4, 1 })),
  one('nn.Squeeze(2)', I({ 3, 1, 4, 1 })),
  one('nn.Replicate(3, 2)', I({ 4, 5 })),
  one('nn.Replicate(2)', I({ 4 }), 'Replicate(2), first dimension'),
  one('nn.JoinTable(2)', IT({ { 2, 3 }, { 2, 4 } })),
  one('nn.JoinTable(1)', IT({ { 2, 3 }, { 1, 3 }, { 3, 3 } })),
  one('nn.SplitTable(2)', I({ 3, 4 })),
  one('nn.SplitTable(1)', I({ 2, 3, 2 })),
  one('nn.CAddTable()', IT({ { 3, 4 }, { 3, 4 }, { 3, 4 } })),
  one('nn.CSubTable()', IT({ { 3, 4 }, { 3, 4 } })),
  one('nn.CMulTable()', IT({ { 3, 4 }, { 3, 4 }, { 3, 4 } })),
  one('nn.MulConstant(2.5)', I({ 3, 4 })),
  one('nn.AddConstant(-0.7)', I({ 3, 4 })),
  one('nn.Tanh()', I({ 3, 4 }, 0.3, 2)),
  one('nn.Sigmoid()', I({ 3, 4 }, 0.3, 3)),
  one('nn.ReLU()', I({ 3, 5 })),
  one('nn.LeakyReLU(0.1)', I({ 3, 5 })),
  one('nn.ELU(0.8)', I({ 3, 5 }, 0.3, 2)),
  one('nn.SoftMax()', I({ 3, 5 }, 0.3, 3)),
  one('nn.SoftMax()', I({ 5 }, 0.3, 3), 'SoftMax, vector'),
  one('nn.LogSoftMax()', I({ 3, 5 }, 0.3, 3)),
  one('nn.LogSoftMax()', I({ 5 }, 0.3, 3), 'LogSoftMax, vector'),
  one('nn.SoftPlus()', I({ 3, 5 }, 0.3, 4)),
  one('nn.SoftPlus(2)', I({ 3, 5 }, 0.3, 4)),
  one('nn.Abs()', I({ 3, 5 })),
  { name = 'Dropout(0.3) evaluate', ctor = 'nn.Dropout(0.3)', runs = { { mode = 'eval', input = I({ 3, 5 }) } } },
  { name = 'BatchNormalization(4): 3 training steps, then evaluate', ctor = 'nn.BatchNormalization(4)',
    wshift = 1,
    runs = { { input = I({ 5, 4 }, 0.3, 2) }, { input = I({ 5, 4 }, 1.1, 3) }, { input = I({ 5, 4 }, 2.9, 1.5) },
             { mode = 'eval', input = I({ 5, 4 }, 4.1, 2) } } },
  { name = 'BatchNormalization(3, 1e-3, 0.3, false): no affine, momentum 0.3',
    ctor = 'nn.BatchNormalization(3, 1e-3, 0.3, false)',
    runs = { { input = I({ 6, 3 }, 0.3, 2) }, { input = I({ 6, 3 }, 1.1, 3) }, { input = I({ 6, 3 }, 2.9, 1.5) },
             { mode = 'eval', input = I({ 4, 3 }, 4.1, 2) } } },
  { name = 'SpatialBatchNormalization(3): 3 training steps, then evaluate',
    ctor = 'nn.SpatialBatchNormalization(3)', wshift = 1,
    runs = { { input = I({ 2, 3, 3, 4 }, 0.3, 2) }, { input = I({ 2, 3, 3, 4 }, 1.1, 3) },
             { input = I({ 2, 3, 3, 4 }, 2.9, 1.5) }, { mode = 'eval', input = I({ 2, 3, 3, 4 }, 4.1, 2) } } },
}

local spatial = {
  one('nn.SpatialConvolution(2, 3, 3, 3)', I({ 2, 2, 5, 5 })),
  one('nn.SpatialConvolution(2, 3, 3, 3, 1, 1, 1, 1)', I({ 2, 2, 5, 5 })),
  one('nn.SpatialConvolution(2, 4, 3, 2, 2, 1, 0, 1)', I({ 2, 2, 6, 7 })),
  one('nn.SpatialConvolution(2, 3, 3, 3, 2, 2, 1, 1)', I({ 2, 5, 5 }), 'SpatialConvolution, 3-D input'),
  one('nn.SpatialConvolution(3, 2, 2, 3, 1, 2, 1, 0):noBias()', I({ 2, 3, 5, 4 })),
  { name = 'SpatialConvolution, backward twice with scale 2', ctor = 'nn.SpatialConvolution(2, 2, 3, 3, 1, 1, 1, 1)',
    runs = { { input = I({ 1, 2, 4, 4 }), scale = 2 }, { input = I({ 1, 2, 4, 4 }, 2.2), scale = 2 } } },
  one('nn.SpatialMaxPooling(2, 2)', I({ 2, 2, 4, 4 })),
  one('nn.SpatialMaxPooling(3, 3, 2, 2, 1, 1)', I({ 2, 2, 5, 5 })),
  one('nn.SpatialMaxPooling(3, 3, 2, 2):ceil()', I({ 1, 2, 6, 6 })),
  one('nn.SpatialMaxPooling(2, 3, 2, 2, 1, 1):ceil()', I({ 2, 2, 5, 6 })),
  one('nn.SpatialMaxPooling(2, 2, 2, 2)', I({ 2, 4, 4 }), 'SpatialMaxPooling, 3-D input'),
  -- ceil with padding: a last window that would start in the padding is dropped
  one('nn.SpatialMaxPooling(2, 2, 2, 2, 1, 1):ceil()', I({ 1, 2, 5, 5 })),
  one('nn.SpatialMaxPooling(3, 3, 2, 2, 1, 1):ceil()', I({ 1, 2, 6, 7 })),
  one('nn.SpatialAveragePooling(2, 2, 2, 2)', I({ 2, 2, 4, 4 })),
  one('nn.SpatialAveragePooling(3, 3, 2, 2, 1, 1)', I({ 2, 2, 5, 5 })),
  one('nn.SpatialAveragePooling(3, 3, 1, 1)', I({ 1, 3, 5, 4 })),
  one('nn.SpatialAveragePooling(3, 3, 2, 2):ceil()', I({ 1, 2, 6, 6 })),
  -- the divisor at the borders: padding counted, but not past it (ceil)
  one('nn.SpatialAveragePooling(3, 3, 2, 2, 1, 1):ceil()', I({ 1, 2, 6, 7 })),
  one('nn.SpatialAveragePooling(2, 2, 2, 2, 1, 1):ceil()', I({ 1, 2, 5, 5 })),
  one('nn.SpatialAveragePooling(3, 3, 2, 2, 1, 1):setCountExcludePad()', I({ 2, 2, 5, 5 })),
  one('nn.SpatialAveragePooling(3, 3, 2, 2, 1, 1):ceil():setCountExcludePad()', I({ 1, 2, 6, 7 })),
  one('nn.SpatialAveragePooling(2, 2)', I({ 1, 2, 4, 5 }), 'SpatialAveragePooling(2, 2), default stride 1'),
  one('nn.Sequential():add(nn.SpatialConvolution(1, 2, 3, 3)):add(nn.ReLU()):add(nn.SpatialMaxPooling(2, 2))'
      .. ':add(nn.View(2 * 2 * 2)):add(nn.Linear(8, 3)):add(nn.LogSoftMax())', I({ 2, 1, 6, 6 }),
      'LeNet-style Sequential'),
}

local rnn = {}
if nn.SeqLSTM then
  rnn[#rnn + 1] = one('nn.SeqLSTM(3, 4)', I({ 5, 2, 3 }), 'SeqLSTM(3, 4), seqlen x batch x size')
  rnn[#rnn + 1] = one('nn.SeqLSTM(2, 3)', I({ 3, 1, 2 }), 'SeqLSTM(2, 3), batch 1')
  -- two sequences in a row (no state carried over: remember is 'neither'),
  -- gradients accumulating; then evaluate
  rnn[#rnn + 1] = { name = 'SeqLSTM(3, 2): two sequences, then evaluate', ctor = 'nn.SeqLSTM(3, 2)',
                    runs = { { input = I({ 4, 3, 3 }) }, { input = I({ 2, 3, 3 }, 1.9) },
                             { mode = 'eval', input = I({ 3, 3, 3 }, 2.6) } } }
end
if nn.SeqGRU then
  rnn[#rnn + 1] = one('nn.SeqGRU(3, 4)', I({ 5, 2, 3 }), 'SeqGRU(3, 4), seqlen x batch x size')
  rnn[#rnn + 1] = one('nn.SeqGRU(2, 3)', I({ 3, 1, 2 }), 'SeqGRU(2, 3), batch 1')
  rnn[#rnn + 1] = { name = 'SeqGRU(3, 2): two sequences, then evaluate', ctor = 'nn.SeqGRU(3, 2)',
                    runs = { { input = I({ 4, 3, 3 }) }, { input = I({ 2, 3, 3 }, 1.9) },
                             { mode = 'eval', input = I({ 3, 3, 3 }, 2.6) } } }
end

---------------------------------------------------------------- criterions

-- probabilities in (0, 1)
local function P(sizes, k)
  return function()
    local t = gen(sizes, k or 0.3, 2)
    return t:apply(function(v) return 1 / (1 + math.exp(-v)) end)
  end
end
local function LSM(sizes, k)
  return function() return nn.LogSoftMax():forward(gen(sizes, k or 0.3, 2)):clone() end
end

local criterions = {
  { ctor = 'nn.ClassNLLCriterion()', input = LSM({ 4, 5 }), target = IDX({ 4 }, 5) },
  { ctor = 'nn.ClassNLLCriterion(nil, false)', input = LSM({ 4, 5 }), target = IDX({ 4 }, 5) },
  { ctor = 'nn.ClassNLLCriterion()', input = LSM({ 5 }), target = function() return torch.Tensor({ 3 }) end,
    name = 'ClassNLLCriterion, vector input' },
  { ctor = 'nn.ClassNLLCriterion(W{0.5, 1, 2, 0.3, 1.5})', input = LSM({ 6, 5 }), target = IDX({ 6 }, 5) },
  { ctor = 'nn.ClassNLLCriterion(W{0.5, 1, 2, 0.3, 1.5}, false)', input = LSM({ 6, 5 }), target = IDX({ 6 }, 5) },
  { ctor = 'nn.CrossEntropyCriterion()', input = I({ 4, 5 }, 0.3, 2), target = IDX({ 4 }, 5) },
  { ctor = 'nn.CrossEntropyCriterion(W{0.5, 1, 2, 0.3, 1.5})', input = I({ 6, 5 }, 0.3, 2), target = IDX({ 6 }, 5) },
  { ctor = 'nn.CrossEntropyCriterion()', input = I({ 5 }, 0.3, 2), target = function() return torch.Tensor({ 4 }) end,
    name = 'CrossEntropyCriterion, vector input' },
  { ctor = 'nn.ClassNLLCriterion(W{0.5, 1, 2, 0.3, 1.5})', input = LSM({ 5 }),
    target = function() return torch.Tensor({ 3 }) end, name = 'ClassNLLCriterion with weights, vector input' },
  { ctor = 'nn.MSECriterion()', input = I({ 3, 4 }), target = I({ 3, 4 }, 2.1) },
  { ctor = 'nn.MSECriterion()', input = I({ 2, 3, 2 }), target = I({ 2, 3, 2 }, 2.1), name = 'MSECriterion, 3-D' },
  { ctor = 'nn.MSECriterion(false)', input = I({ 3, 4 }), target = I({ 3, 4 }, 2.1) },
  { ctor = 'nn.BCECriterion()', input = P({ 3, 4 }), target = P({ 3, 4 }, 1.9) },
  { ctor = 'nn.BCECriterion(nil, false)', input = P({ 3, 4 }), target = P({ 3, 4 }, 1.9) },
  { ctor = 'nn.BCECriterion(W{0.5, 1, 2, 0.3})', input = P({ 3, 4 }), target = P({ 3, 4 }, 1.9) },
  { ctor = 'nn.BCECriterion(W{0.5, 1, 2, 0.3}, false)', input = P({ 4 }), target = P({ 4 }, 1.9),
    name = 'BCECriterion with weights, vector input, no sizeAverage' },
  { ctor = 'nn.AbsCriterion()', input = I({ 3, 4 }), target = I({ 3, 4 }, 2.1) },
  { ctor = 'nn.AbsCriterion(false)', input = I({ 3, 4 }), target = I({ 3, 4 }, 2.1) },
  { ctor = 'nn.SmoothL1Criterion()', input = I({ 3, 4 }, 0.3, 2), target = I({ 3, 4 }, 2.1) },
  { ctor = 'nn.SmoothL1Criterion(false)', input = I({ 3, 4 }, 0.3, 2), target = I({ 3, 4 }, 2.1) },
}

local function write_criterions()
  local path = outdir .. '/criterions.lua'
  local f = assert(io.open(path, 'w'))
  header(f, 'criterions')
  f:write('return {\n')
  for _, c in ipairs(criterions) do
    local crit = build(c.ctor)
    local x, t = c.input(), c.target()
    local loss = crit:forward(x, t)
    local gi = crit:backward(x, t):clone()
    local int = c.target == nil or (c.ctor:find('ClassNLL') or c.ctor:find('CrossEntropy')) ~= nil
    f:write('{name=', string.format('%q', c.name or c.ctor), ',ctor=', string.format('%q', c.ctor),
            ',needs=', needs(c.ctor), ',int_target=', tostring(int), ',\n input=', ser(x),
            ',\n target=', ser(t), ',\n output=', num(loss), ',\n gradInput=', ser(gi), '},\n')
  end
  f:write('}\n')
  f:close()
  print(('%-12s %3d cases -> %s'):format('criterions', #criterions, path))
end

---------------------------------------------------------------- optim

-- f(x) = 1/2 sum a_i x_i^2 + sum b_i x_i, three steps from x0.
local A = { 1, 2, 0.5, 3 }
local B = { 0.3, -0.2, 0.1, 0 }
local X0 = { 1, -1, 0.5, 2 }
local optim_cases = {
  { 'sgd', { learningRate = 0.1 } },
  { 'sgd', { learningRate = 0.1, momentum = 0.9 } },
  { 'sgd', { learningRate = 0.1, momentum = 0.9, dampening = 0, nesterov = true } },
  { 'sgd', { learningRate = 0.1, momentum = 0.5, dampening = 0.2, weightDecay = 0.01 } },
  { 'sgd', { learningRate = 0.1, learningRateDecay = 0.1, weightDecay = 0.05 } },
  { 'adam', { learningRate = 0.01 } },
  { 'adam', { learningRate = 0.05, beta1 = 0.8, beta2 = 0.99, epsilon = 1e-6, weightDecay = 0.01 } },
  { 'rmsprop', { learningRate = 0.01 } },
  { 'rmsprop', { learningRate = 0.02, alpha = 0.9, epsilon = 1e-6, weightDecay = 0.01 } },
  { 'adagrad', { learningRate = 0.1 } },
  { 'adagrad', { learningRate = 0.1, learningRateDecay = 0.05, weightDecay = 0.01 } },
}

local function write_optim()
  -- optim's init.lua also loads its Logger, which needs xlua: load the four
  -- optimisers' own files into a global optim table instead
  local ok, err = pcall(function()
    optim = {}
    for _, name in ipairs({ 'sgd', 'adam', 'rmsprop', 'adagrad' }) do require('optim.' .. name) end
  end)
  if not ok then print('optim: not installed, skipped (' .. tostring(err) .. ')'); return end
  local path = outdir .. '/optim.lua'
  local f = assert(io.open(path, 'w'))
  header(f, 'optim')
  f:write('-- f(x) = 1/2 sum_i a_i x_i^2 + sum_i b_i x_i from x0; xs[s] = x after step s,\n')
  f:write('-- fs[s] = f at the point step s started from (what optim returns).\n')
  f:write('return {\n a=', ser(torch.Tensor(A)), ',\n b=', ser(torch.Tensor(B)), ',\n x0=', ser(torch.Tensor(X0)),
          ',\n cases={\n')
  local a, b = torch.Tensor(A), torch.Tensor(B)
  local function feval(x)
    local g = torch.cmul(a, x):add(b)
    return 0.5 * torch.cmul(a, x):dot(x) + b:dot(x), g
  end
  for _, c in ipairs(optim_cases) do
    local name, cfg = c[1], c[2]
    local keys = {}
    for k in pairs(cfg) do keys[#keys + 1] = k end
    table.sort(keys)
    local cs = {}
    for _, k in ipairs(keys) do cs[#cs + 1] = k .. '=' .. (type(cfg[k]) == 'number' and num(cfg[k]) or tostring(cfg[k])) end
    local config, state = {}, {}
    for k, v in pairs(cfg) do config[k] = v end
    local x = torch.Tensor(X0)
    local xs, fs = {}, {}
    for s = 1, 3 do
      local _, fx = optim[name](feval, x, config, state)
      xs[s] = ser(x:clone())
      fs[s] = num(fx[1])
    end
    f:write('  {optim=', string.format('%q', name), ',config={', table.concat(cs, ','), '},\n   xs={',
            table.concat(xs, ','), '},\n   fs={', table.concat(fs, ','), '}},\n')
  end
  f:write(' },\n}\n')
  f:close()
  print(('%-12s %3d cases -> %s'):format('optim', #optim_cases, path))
end

os.execute('mkdir -p "' .. outdir .. '"')
write_modules('containers', containers)
write_modules('layers', layers)
write_modules('spatial', spatial)
if #rnn > 0 then write_modules('rnn', rnn) else print('rnn: TORCH7_RNN_SRC not set, SeqLSTM/SeqGRU skipped') end
write_criterions()
write_optim()
