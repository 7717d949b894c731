-- spec/nn_recurrent_spec.lua — lua/nn/recurrent.lua: nn.LSTM (nn.SeqLSTM),
-- nn.GRU (nn.SeqGRU) and nn.RNN.  Values against a plain step-by-step
-- computation in Lua numbers with the same weights (the rnn package's
-- equations and layouts), float64 to 1e-10; gradInput and every parameter
-- gradient against central finite differences of forward (1e-7); batch,
-- one sequence (seqlen x inputSize), seqlen 1, batchfirst, remember/forget
-- and userPrevOutput/userPrevCell, reset's layout, errors naming the module
-- and the user's line, and an LSTM followed by a Linear per step inside a
-- Sequential; nn.compile's steps over chunks with remember() equal the
-- eager Torch7 loop (the state carried by the step's hooks and updates);
-- examples/lstm_lm.lua trains (nn.compile with sgd and adam, --clip).
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local S = dofile('spec/support.lua')
local maxdiff, fd = S.maxdiff, S.fd

local function sigmoid(v) return 1 / (1 + math.exp(-v)) end

-- The reference: for each step t and example n, a = [x_t, h_{t-1}] W + b
-- (computed column by column in Lua numbers), then the cell's equations.
-- x is T x N x D (a Lua table from totable()); returns T x N x H tables.
local function reference(kind, m, x, h0, c0)
  local W, b = m.weight:totable(), m.bias:totable()
  local D, H = m.inputSize, m.outputSize
  local T, N = #x, #x[1]
  local out = {}
  local h, c = {}, {}
  for n = 1, N do
    h[n], c[n] = {}, {}
    for j = 1, H do
      h[n][j] = h0 and h0[n][j] or 0
      c[n][j] = c0 and c0[n][j] or 0
    end
  end
  -- column j of [x, hin] W + b, hin standing for h's rows (the GRU's r*h)
  local function col(xn, hin, j, with_x)
    local s = b[j]
    if with_x ~= false then for k = 1, D do s = s + xn[k] * W[k][j] end end
    for k = 1, H do s = s + hin[k] * W[D + k][j] end
    return s
  end
  for t = 1, T do
    out[t] = {}
    local nh, nc = {}, {}
    for n = 1, N do
      local xn, hp, cp = x[t][n], h[n], c[n]
      nh[n], nc[n] = {}, {}
      if kind == 'LSTM' then
        for j = 1, H do
          local i = sigmoid(col(xn, hp, j))
          local f = sigmoid(col(xn, hp, H + j))
          local o = sigmoid(col(xn, hp, 2 * H + j))
          local g = math.tanh(col(xn, hp, 3 * H + j))
          nc[n][j] = f * cp[j] + i * g
          nh[n][j] = o * math.tanh(nc[n][j])
        end
      elseif kind == 'GRU' then
        local r, u, rh = {}, {}, {}
        for j = 1, H do
          r[j] = sigmoid(col(xn, hp, j))
          u[j] = sigmoid(col(xn, hp, H + j))
          rh[j] = r[j] * hp[j]
        end
        for j = 1, H do
          -- the candidate: x Wx_n + b_n + (r h) Wh_n
          local s = col(xn, rh, 2 * H + j)
          local cand = math.tanh(s)
          nh[n][j] = (1 - u[j]) * cand + u[j] * hp[j]
        end
      else
        for j = 1, H do
          local a = col(xn, hp, j)
          nh[n][j] = kind == 'RNN' and math.tanh(a) or math.max(a, 0)
        end
      end
      out[t][n] = nh[n]
    end
    h, c = nh, nc
  end
  return tgl.array(out, 'float64'), h, c
end

-- backward's gradInput, gradWeight and gradBias against finite
-- differences of L = sum(forward(x) * gOut); before() runs before each
-- forward (to set the initial state).
local function check_grads(m, x, before)
  before = before or function() end
  local out = m:forward(x)
  local gOut = tgl.randn(unpack(out:shape()))   -- floatX is float64 here
  local function L() before(); return tgl.sum(m:forward(x) * gOut):get() end
  m:zeroGradParameters()
  before()
  m:forward(x)
  local gi = m:backward(x, gOut):clone()
  local gw, gb = m.gradWeight:clone(), m.gradBias:clone()
  assert.is_true(maxdiff(gi, fd(L, x)) < 1e-7)
  assert.is_true(maxdiff(gw, fd(L, m.weight)) < 1e-7)
  assert.is_true(maxdiff(gb, fd(L, m.bias)) < 1e-7)
end

local KINDS = {
  LSTM = function(D, H) return nn.LSTM(D, H) end,
  GRU = function(D, H) return nn.GRU(D, H) end,
  RNN = function(D, H) return nn.RNN(D, H) end,
  ReLU = function(D, H) return nn.RNN(D, H, nn.ReLU()) end,
}
local ORDER = { 'LSTM', 'GRU', 'RNN', 'ReLU' }

describe('nn sequence modules (LSTM, GRU, RNN)', function()
  S.float64(21)

  it('layouts, fields, reset and printing as the rnn package (SeqLSTM, SeqGRU)', function()
    assert.equals(nn.LSTM, nn.SeqLSTM)
    assert.equals(nn.GRU, nn.SeqGRU)
    local l = nn.LSTM(3, 5)
    assert.same({ 8, 20 }, l.weight:shape())
    assert.same({ 8, 20 }, l.gradWeight:shape())
    assert.same({ 20 }, l.bias:shape())
    assert.same({ 20 }, l.gradBias:shape())
    assert.equals(3, l.inputsize); assert.equals(5, l.outputsize)
    assert.equals(3, l.inputSize); assert.equals(5, l.outputSize)
    assert.equals('nn.LSTM(3 -> 5)', tostring(l))
    -- bias: 0 except the forget gate's block, 1
    for j = 1, 20 do assert.equals((j > 5 and j <= 10) and 1 or 0, l.bias:get(j)) end
    local params, grads = l:parameters()
    assert.equals(2, #params); assert.equals(l.weight, params[1]); assert.equals(l.gradBias, grads[2])
    local g = nn.GRU(4, 6)
    assert.same({ 10, 18 }, g.weight:shape())
    assert.same({ 18 }, g.bias:shape())
    for j = 1, 18 do assert.equals((j > 6 and j <= 12) and 1 or 0, g.bias:get(j)) end
    local r = nn.RNN(4, 6)
    assert.same({ 10, 6 }, r.weight:shape())
    assert.same({ 6 }, r.bias:shape())
    assert.equals(0, tgl.max(tgl.abs(r.bias)):get())
    assert.equals('nn.RNN(4 -> 6, nn.Tanh)', tostring(r))
    assert.equals('nn.RNN(4 -> 6, nn.ReLU)', tostring(nn.RNN(4, 6, nn.ReLU())))
    -- weights normal(0, 1/sqrt(in + out)): the sample's spread (400x800)
    local big = nn.LSTM(150, 250)
    local sd = math.sqrt(tgl.mean(tgl.sqr(big.weight)):get())
    assert.near(1 / math.sqrt(400), sd, 0.05 / math.sqrt(400))
    assert.near(0, tgl.mean(big.weight):get(), 1e-3)
    -- reset(std)
    big:reset(0.5)
    assert.near(0.5, math.sqrt(tgl.mean(tgl.sqr(big.weight)):get()), 0.01)
    -- the states start empty; a forward sets h0 (and c0) to the zeros it used
    assert.equals(0, l.h0:nelement())
    l:forward(tgl.randn(2, 3, 3))
    assert.same({ 3, 5 }, l.h0:shape()); assert.same({ 3, 5 }, l.c0:shape())
    assert.equals(0, tgl.max(tgl.abs(l.h0)):get())
  end)

  for _, kind in ipairs(ORDER) do
    it(kind .. ': forward equals the step-by-step computation (batch, one sequence, seqlen 1)', function()
      local m = KINDS[kind](3, 4)
      m.bias:copy(tgl.randn(m.bias:nelement()) * 0.5)
      for _, shape in ipairs({ { 5, 2, 3 }, { 1, 3, 3 }, { 4, 1, 3 } }) do
        local x = tgl.randn(unpack(shape))
        local y = m:forward(x)
        assert.same({ shape[1], shape[2], 4 }, y:shape())
        assert.equals(y, m.output)
        local want = reference(kind == 'ReLU' and 'ReLU' or kind, m, x:totable())
        assert.is_true(maxdiff(y, want) < 1e-10)
      end
      -- one sequence: seqlen x inputSize gives seqlen x outputSize
      for _, T in ipairs({ 6, 1 }) do
        local x = tgl.randn(T, 3)
        local y = m:forward(x)
        assert.same({ T, 4 }, y:shape())
        local want = reference(kind, m, x:reshape(T, 1, 3):totable())
        assert.is_true(maxdiff(y, want:reshape(T, 4)) < 1e-10)
      end
    end)

    it(kind .. ': gradInput, gradWeight and gradBias equal finite differences (batch, one sequence, seqlen 1)', function()
      local m = KINDS[kind](3, 4)
      m.bias:copy(tgl.randn(m.bias:nelement()) * 0.5)
      check_grads(m, tgl.randn(4, 2, 3))
      check_grads(m, tgl.randn(3, 3))
      check_grads(m, tgl.randn(1, 2, 3))
    end)
  end

  -- random configurations: kind, sizes, seqlen, batch or one sequence,
  -- batchfirst; forward against the reference, and gradients at a few
  -- random elements of x, weight and bias against finite differences
  it('property: random kinds, sizes and layouts against the reference and finite differences', function()
    local cases = tonumber(os.getenv('TGL_PROP_CASES')) or 12
    local function pick(n) return math.floor(tgl.rand(1):get(1) * n) + 1 end
    for case = 1, cases do
      local kind = ORDER[pick(#ORDER)]
      local D, H, T, N = pick(4), pick(5), pick(5), pick(3)
      local layout = ({ 'batch', 'single', 'batchfirst' })[pick(3)]
      local m = KINDS[kind](D, H)
      m.bias:copy(tgl.randn(m.bias:nelement()) * 0.5)
      local x
      if layout == 'single' then x = tgl.randn(T, D)
      elseif layout == 'batchfirst' then m.batchfirst = true; x = tgl.randn(N, T, D)
      else x = tgl.randn(T, N, D) end
      local what = ('case %d: %s(%d, %d), %s, seqlen %d, batch %d'):format(case, kind, D, H, layout, T, N)
      local y = m:forward(x)
      local xr = layout == 'single' and x:reshape(T, 1, D)
                 or layout == 'batchfirst' and tgl.transpose(x, { 2, 1, 3 }):clone() or x
      local want = reference(kind, m, xr:totable())
      if layout == 'single' then want = want:reshape(T, H)
      elseif layout == 'batchfirst' then want = tgl.transpose(want, { 2, 1, 3 }):clone() end
      assert(maxdiff(y, want) < 1e-10, what)
      local gOut = tgl.randn(unpack(y:shape()))
      local function L() return tgl.sum(m:forward(x) * gOut):get() end
      m:zeroGradParameters()
      local gi = m:backward(x, gOut)
      for _, pair in ipairs({ { x, gi }, { m.weight, m.gradWeight }, { m.bias, m.gradBias } }) do
        local a, g = pair[1]:reshape(pair[1]:nelement()), pair[2]:reshape(pair[2]:nelement())
        for _ = 1, 3 do
          local i = pick(a:nelement())
          local v = a:get(i)
          a:set(v + 1e-6, i); local lp = L()
          a:set(v - 1e-6, i); local lm = L()
          a:set(v, i)
          assert(math.abs((lp - lm) / 2e-6 - g:get(i)) < 1e-7, what)
        end
      end
    end
  end)

  it('backward accumulates with scale; updateParameters, getParameters stay shared', function()
    local m = nn.LSTM(2, 3)
    local x, g = tgl.randn(3, 2, 2), tgl.randn(3, 2, 3)
    m:zeroGradParameters()
    m:forward(x); m:backward(x, g)
    local gw = m.gradWeight:clone()
    m:backward(x, g, 0.5)
    assert.is_true(maxdiff(m.gradWeight, gw * 1.5) < 1e-12)
    local flat, gflat = m:getParameters()
    assert.equals(5 * 12 + 12, flat:nelement())
    local before = m:forward(x):clone()
    flat:copy(flat * 0.5)
    local want = reference('LSTM', m, x:totable())
    assert.is_true(maxdiff(m:forward(x), want) < 1e-10)
    assert.is_true(maxdiff(before, want) > 1e-3)
    m:zeroGradParameters()
    assert.equals(0, tgl.max(tgl.abs(gflat)):get())
    m:forward(x); m:backward(x, g)
    local w0 = flat:clone()
    m:updateParameters(0.1)
    assert.is_true(maxdiff(flat, w0 - gflat * 0.1) < 1e-15)
  end)

  it('batchfirst: batch x seqlen x inputSize in and out', function()
    local m = nn.GRU(3, 4)
    local x = tgl.randn(5, 2, 3)
    local y = m:forward(x):clone()
    -- the same shape either way: the flag is part of the compiled key
    local sq = tgl.randn(3, 3, 3)
    local y1 = m:forward(sq):clone()                                       -- sq as seqlen x batch
    local yt = m:forward(tgl.transpose(sq, { 2, 1, 3 }):clone()):clone()   -- its transpose so
    m.batchfirst = true
    local y2 = m:forward(sq)                                               -- sq as batch x seqlen
    assert.is_true(maxdiff(y2, tgl.transpose(yt, { 2, 1, 3 })) < 1e-12)
    assert.is_true(maxdiff(y1, y2) > 1e-6)
    local xb = tgl.transpose(x, { 2, 1, 3 }):clone()
    local yb = m:forward(xb)
    assert.same({ 2, 5, 4 }, yb:shape())
    assert.is_true(maxdiff(tgl.transpose(yb, { 2, 1, 3 }), y) < 1e-12)
    check_grads(m, xb)
  end)

  for _, kind in ipairs({ 'LSTM', 'GRU', 'RNN' }) do
    it(kind .. ': remember() carries the last state into the next forward; forget() and a mode change reset it', function()
      local m = KINDS[kind](3, 4)
      local x = tgl.randn(7, 2, 3)
      local whole = m:forward(x):clone()
      local a, b = x[{ { 1, 3 } }]:clone(), x[{ { 4, 7 } }]:clone()
      -- not remembering (the default): each forward starts from zero
      m:forward(a)
      assert.is_true(maxdiff(m:forward(b), reference(kind, m, b:totable())) < 1e-10)
      assert.equals(m, m:remember())
      m:forget()
      local ya = m:forward(a):clone()
      local yb = m:forward(b):clone()
      assert.is_true(maxdiff(ya, whole[{ { 1, 3 } }]) < 1e-12)
      assert.is_true(maxdiff(yb, whole[{ { 4, 7 } }]) < 1e-12)
      -- h0 holds the state the last forward started from
      assert.is_true(maxdiff(m.h0, whole[3]) < 1e-12)
      -- its backward uses that state: gradients vs finite differences with
      -- the same initial state each time (userPrevOutput/userPrevCell)
      local h, c = whole[3]:clone(), nil
      if kind == 'LSTM' then
        local _, _, cs = reference(kind, m, a:totable())
        c = tgl.array(cs, 'float64')
        assert.is_true(maxdiff(m.c0, c) < 1e-12)
      end
      check_grads(m, b, function() m.userPrevOutput = h; m.userPrevCell = c end)
      -- forget(): from zero again
      m:forget()
      assert.is_true(maxdiff(m:forward(a), ya) < 1e-12)
      -- evaluate() forgets (a change of mode), and remember('train') does
      -- not carry in evaluate mode
      m:evaluate()
      assert.is_true(maxdiff(m:forward(a), ya) < 1e-12)
      m:remember('train')
      assert.is_true(maxdiff(m:forward(b), reference(kind, m, b:totable())) < 1e-10)
      m:training()
      m:forward(a)
      assert.is_true(maxdiff(m:forward(b), whole[{ { 4, 7 } }]) < 1e-12)
      -- another batch size while remembering is an error; after forget() not
      local ok, err = pcall(function() m:forward(tgl.randn(2, 3, 3)) end)
      assert.is_false(ok)
      assert.matches('nn_recurrent_spec.lua:%d+: nn.' .. kind .. ':forward: batch sizes must be the same to remember states', err)
      m:forget()
      assert.same({ 2, 3, 4 }, m:forward(tgl.randn(2, 3, 3)):shape())
      -- a bad mode
      ok, err = pcall(function() m:remember('always') end)
      assert.is_false(ok)
      assert.matches("nn_recurrent_spec.lua:%d+: nn.%a+:remember: expected 'both', 'train', 'eval' or 'neither', got always", err)
    end)
  end

  it('userPrevOutput/userPrevCell set the initial state of the next forward only', function()
    local m = nn.LSTM(2, 3)
    local x = tgl.randn(4, 2, 2)
    local h0, c0 = tgl.randn(2, 3), tgl.randn(2, 3)
    m.userPrevOutput, m.userPrevCell = h0, c0
    local y = m:forward(x)
    assert.is_true(maxdiff(y, reference('LSTM', m, x:totable(), h0:totable(), c0:totable())) < 1e-10)
    assert.is_nil(m.userPrevOutput)
    assert.is_true(maxdiff(m:forward(x), reference('LSTM', m, x:totable())) < 1e-10)
    -- a wrong one is an error that changes nothing (the state stays)
    m:remember():forget()
    m:forward(x)
    local h0, c0 = m.h0:clone(), m.c0:clone()
    local want = m:forward(x):clone()
    m:forward(x[{ { 1, 2 } }]:clone())   -- another seqlen, the same batch
    m:forget()
    m:forward(x)
    m.userPrevOutput, m.userPrevCell = tgl.randn(2, 3), tgl.randn(3, 3)
    local ok, err = pcall(function() m:forward(x) end)
    assert.is_false(ok)
    assert.matches('nn_recurrent_spec.lua:%d+: nn.LSTM:forward: userPrevCell must be an array of 2x3 %(batch x outputSize%), got 3x3', err)
    assert.is_true(maxdiff(m.h0, h0) == 0 and maxdiff(m.c0, c0) == 0)
    m.userPrevOutput, m.userPrevCell = nil, nil
    assert.is_true(maxdiff(m:forward(x), want) == 0)
    -- a change of dtype starts from zero (no error about the batch)
    m:float()
    assert.is_true(maxdiff(m:forward(x:astype('float32')), reference('LSTM', m, x:totable())) < 1e-5)
  end)

  it('errors name the module and the user\'s line', function()
    local m = nn.LSTM(3, 4)
    local ok, err = pcall(function() m:forward(tgl.randn(5, 2, 7)) end)
    assert.is_false(ok)
    assert.matches('nn_recurrent_spec.lua:%d+: nn.LSTM%(3 %-> 4%): expected seqlen x batch x 3 %(or seqlen x 3%), got an input of 5x2x7 %(its last size must be inputSize 3%)', err)
    ok, err = pcall(function() m:forward(tgl.randn(5, 2, 3, 1)) end)
    assert.is_false(ok)
    assert.matches('nn_recurrent_spec.lua:%d+: nn.LSTM%(3 %-> 4%): expected seqlen x batch x 3 %(or seqlen x 3%), got a 4%-d input', err)
    ok, err = pcall(function() nn.GRU(3, 4):backward(tgl.randn(2, 5), tgl.randn(2, 4)) end)
    assert.is_false(ok)
    assert.matches('nn_recurrent_spec.lua:%d+: nn.GRU%(3 %-> 4%): expected .*got an input of 2x5', err)
    -- inside a container: the container names it
    local s = nn.Sequential():add(nn.Linear(2, 3)):add(nn.RNN(4, 2))
    ok, err = pcall(function() s:forward(tgl.randn(5, 2)) end)
    assert.is_false(ok)
    assert.matches('nn_recurrent_spec.lua:%d+: nn.Sequential: module %(2%) nn.RNN%(4 %-> 2, nn.Tanh%): .*got an input of 5x3', err)
    -- a gradOutput of the wrong shape fails at the call, naming the module
    ok, err = pcall(function() m:backward(tgl.randn(5, 2, 3), tgl.randn(5, 2, 3)) end)
    assert.is_false(ok)
    assert.matches("nn_recurrent_spec.lua:%d+: tgl.nn_LSTM_backward: scan 'grad of LSTM', step %d+: ", err)
    -- constructors
    ok, err = pcall(function() nn.LSTM(3) end)
    assert.is_false(ok)
    assert.matches('nn_recurrent_spec.lua:%d+: nn.LSTM: expected nn.LSTM%(inputSize, outputSize%) with positive integers, got 3, nil', err)
    ok, err = pcall(function() nn.RNN(3, 2, nn.Linear(2, 2)) end)
    assert.is_false(ok)
    assert.matches('nn_recurrent_spec.lua:%d+: nn.RNN: the transfer module must have no parameters', err)
    ok, err = pcall(function() nn.RNN(3, 2, 'tanh') end)
    assert.is_false(ok)
    assert.matches('nn_recurrent_spec.lua:%d+: nn.RNN: transfer must be a module', err)
    -- a failed call changes no gradient
    m:zeroGradParameters()
    pcall(function() m:backward(tgl.randn(5, 2, 3), tgl.randn(5, 2, 3)) end)
    assert.equals(0, tgl.max(tgl.abs(m.gradWeight)):get())
  end)

  it('Sequential: LSTM, View(-1, H), Linear, LogSoftMax per step; ClassNLL; gradients vs finite differences', function()
    local T, N, D, H, V = 4, 2, 3, 5, 6
    local model = nn.Sequential():add(nn.LSTM(D, H)):add(nn.View(-1, H))
                                 :add(nn.Linear(H, V)):add(nn.LogSoftMax())
    local crit = nn.ClassNLLCriterion()
    local x = tgl.randn(T, N, D)
    local y = tgl.array({ 1, 2, 3, 4, 5, 6, 1, 2 }, 'int64')
    local out = model:forward(x)
    assert.same({ T * N, V }, out:shape())
    -- the same by hand: the LSTM's steps, then the Linear on each row
    local lstm, lin = model.modules[1], model.modules[3]
    local hs = reference('LSTM', lstm, x:totable()):reshape(T * N, H)
    local want = tgl.log_softmax(hs:dot(lin.weight:T()) + lin.bias)
    assert.is_true(maxdiff(out, want) < 1e-10)
    assert.is_true(maxdiff(lstm.output, hs:reshape(T, N, H)) < 1e-10)
    local function L() return crit:forward(model:forward(x), y) end
    model:zeroGradParameters()
    local gi = model:backward(x, crit:backward(model:forward(x), y)):clone()
    assert.is_true(maxdiff(gi, fd(L, x)) < 1e-7)
    assert.same({ T, N, H }, model.modules[2].gradInput:shape())
    local params, grads = model:parameters()
    assert.equals(4, #params)
    for k = 1, 4 do assert.is_true(maxdiff(grads[k], fd(L, params[k])) < 1e-7) end
  end)

  it('float32 models (type, float) and graph() on a symbolic input', function()
    local m = nn.LSTM(3, 4)
    local x = tgl.randn(5, 2, 3)
    local y64 = m:forward(x):clone()
    m:float()
    assert.equals('float32', m.weight.dtype)
    local y32 = m:forward(x:astype('float32'))
    assert.equals('float32', y32.dtype)
    assert.is_true(maxdiff(y32, y64) < 1e-5)
    m:double()
    -- graph() outside forward: zero initial states of the batch's size
    local xs = tgl.tensor3('xs', 'float64')
    local f = tgl.compile { inputs = { xs }, outputs = m:graph(xs) }
    assert.is_true(maxdiff(f(x), m:forward(x)) < 1e-12)
  end)
end)

describe('nn.compile with a sequence module that remembers', function()
  S.float64(11)

  -- LookupTable(7, 3) -> LSTM/GRU(3, 4):remember() -> View(-1, 4) -> Linear(4, 7) -> LogSoftMax
  local function lm(kind)
    local rec = nn[kind](3, 4):remember('both')
    return nn.Sequential():add(nn.LookupTable(7, 3)):add(rec):add(nn.View(-1, 4))
                          :add(nn.Linear(4, 7)):add(nn.LogSoftMax()), rec
  end
  -- chunks of seqlen 3 x batch 2 and their next words
  local function chunk(k)
    local x, y = {}, {}
    for t = 1, 3 do
      x[t] = {}
      for b = 1, 2 do
        x[t][b] = (k * 5 + t * 3 + b * 2) % 7 + 1
        y[#y + 1] = (k * 5 + t * 3 + b * 2 + 1) % 7 + 1
      end
    end
    return tgl.array(x, 'int64'), tgl.array(y, 'int64')
  end

  for _, case in ipairs({ { 'LSTM', 'sgd', { learningRate = 0.5 } },
                           { 'LSTM', 'adam', { learningRate = 0.05 } },
                           { 'GRU', 'sgd', { learningRate = 0.5, momentum = 0.9 } } }) do
    it(('%s with %s: steps over chunks carry the state as the eager loop does (4 chunks)')
       :format(case[1], case[2]), function()
      local optim = require 'optim'
      local model, rec = lm(case[1])
      local ref, rref = lm(case[1])
      local a, b = model:parameters(), ref:parameters()
      for i = 1, #a do b[i]:copy(a[i]) end
      local crit = nn.ClassNLLCriterion()
      local cfg = {}
      for k, v in pairs(case[3]) do cfg[k] = v end
      local step = nn.compile { model = model, criterion = crit, optimizer = nn.optim[case[2]](cfg) }
      -- the reference: Torch7's idiom, forward/backward over getParameters
      local params, grads = ref:getParameters()
      local state = {}
      for k = 1, 4 do
        local x, y = chunk(k)
        local function feval()
          grads:zero()
          local out = ref:forward(x)
          local loss = crit:forward(out, y)
          ref:backward(x, crit:backward(out, y))
          return loss, grads
        end
        local _, fs = optim[case[2]](feval, params, case[3], state)
        assert.near(fs[1], step:step(x, y), 1e-12)
      end
      a, b = model:parameters(), ref:parameters()
      for i = 1, #a do assert.is_true(maxdiff(a[i], b[i]) < 1e-12) end
      -- the next forward starts from the last step's state in both (and
      -- that state matters: a forgotten one gives another output)
      local x = chunk(5)
      local o1, o2 = model:forward(x):clone(), ref:forward(x):clone()
      assert.is_true(maxdiff(o1, o2) < 1e-12)
      rec:forget()
      assert.is_true(maxdiff(model:forward(x), o1) > 1e-6)
    end)
  end
end)

describe('examples/lstm_lm.lua', function()
  -- nn.compile with sgd, nn.compile with adam, and the eager loop with
  -- the gradient clipped (--clip)
  for _, flags in ipairs({ '--lr 0.5', '--optim adam --lr 0.004', '--clip 5 --lr 0.5' }) do
    it('trains on a small corpus and its validation perplexity falls (' .. flags .. ')', function()
      local dir = os.tmpname()
      os.remove(dir)
      os.execute('mkdir -p ' .. dir)
      -- sentences that follow a pattern a model can learn: word k then k+1
      local words = { 'a', 'b', 'c', 'd', 'e', 'f', 'g' }
      local function text(n, start)
        local lines = {}
        for k = 1, n do
          local s, w = {}, (k * 3 + start) % 7
          for j = 1, 4 + k % 3 do s[j] = words[(w + j) % 7 + 1] end
          lines[k] = table.concat(s, ' ')
        end
        return table.concat(lines, '\n') .. '\n'
      end
      local function write(path, s)
        local f = assert(io.open(path, 'w'))
        f:write(s)
        f:close()
      end
      write(dir .. '/train.txt', text(300, 0))
      write(dir .. '/valid.txt', text(60, 1))
      local bin = os.getenv('TGL_BIN') or arg[-1]
      local p = io.popen(('%q examples/lstm_lm.lua --data %s --epochs 3 --words 0 --hidden 16 --emb 8 '
                          .. '--batch 4 --seqlen 6 %s 2>&1'):format(bin, dir, flags))
      local out = p:read('*a')
      p:close()
      os.execute('rm -rf ' .. dir)
      local ppl = {}
      for v in out:gmatch('epoch %d  train ppl +[%d.]+  valid ppl +([%d.]+)') do ppl[#ppl + 1] = tonumber(v) end
      assert(#ppl == 3, out)
      assert(ppl[3] < ppl[1] * 0.8, out)
      assert(out:match('RESULT train_ppl=[%d.]+ valid_ppl=[%d.]+ first_valid_ppl=[%d.]+ words_per_s=%d+'), out)
    end)
  end
end)
