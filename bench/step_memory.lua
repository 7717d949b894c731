-- bench/step_memory.lua — the memory a bound whole step holds (issue 23
-- item 7; doc/compile.md, "Whole-step plan"): for the training steps of
-- bench/mlp.lua (784-10, 784-500-10, 784-1000-1000-1000-10) and the Elman
-- RNN of bench/rnn.lua (its scan bodies bind for each run of the loop), the
-- bytes the fixed buffers would hold with a buffer each (`sum`) and the
-- arena they share (`peak`, what the step holds and what its budget, the
-- L2 cache, is checked against), from f:whole_step() / f:step_memory().
-- A step whose peak passes the budget does not bind ("not bound").
--
--   tgl bench/step_memory.lua [--batches 1,10,60,256] [--hidden 50,100,500]
--
-- Output: one line per cell: model, size, bound steps, sum, peak, peak/sum.
local opts = { batches = '1,10,60,256', hidden = '50,100,500' }
do
  local i = 1
  while arg[i] do
    local k = arg[i]:match('^%-%-([%w-]+)$')
    if k and opts[k] and arg[i + 1] then
      opts[k] = arg[i + 1]; i = i + 2
    else
      io.stderr:write(('bench/step_memory.lua: bad argument %s\n'):format(arg[i]))
      os.exit(2)
    end
  end
end
local function split(s)
  local t = {}
  for w in tostring(s):gmatch('[^,]+') do t[#t + 1] = tonumber(w) end
  return t
end

tgl.config.compile = 'sync'

local function row(what, size, m)
  if m.steps == 0 then
    print(('%-22s %-10s not bound'):format(what, size))
  else
    print(('%-22s %-10s %d step(s)  sum %9d bytes  peak %9d bytes  peak/sum %.2f'):format(
      what, size, m.steps, m.sum, m.bytes, m.bytes / m.sum))
  end
end

local MODELS = { logreg = { 784, 10 }, mlp1 = { 784, 500, 10 }, mlp3 = { 784, 1000, 1000, 1000, 10 } }
for _, name in ipairs({ 'logreg', 'mlp1', 'mlp3' }) do
  for _, B in ipairs(split(opts.batches)) do
    tgl.manual_seed(1)
    local sizes = MODELS[name]
    local x, y = tgl.matrix('x'), tgl.ivector('y')
    local params, h = {}, x
    for l = 1, #sizes - 1 do
      local W = tgl.shared(tgl.randn(sizes[l], sizes[l + 1]) * 0.05)
      local b = tgl.shared(tgl.zeros(sizes[l + 1]))
      params[#params + 1], params[#params + 2] = W, b
      h = h:dot(W) + b
      if l < #sizes - 1 then h = tgl.tanh(h) end
    end
    local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(h), y))
    local g = tgl.grad(cost, params)
    local ups = {}
    for k, p in ipairs(params) do ups[k] = { p, p - 0.01 * g[k] } end
    local f = tgl.compile { inputs = { x, y }, outputs = cost, updates = ups, linker = 'cvm_nogc' }
    local X = tgl.randn(B, 784)
    local Y = tgl.minimum(tgl.floor(tgl.rand(B) * 10) + 1, 10):astype('int32')
    for _ = 1, 3 do f(X, Y) end
    row(name .. ' ' .. table.concat(sizes, '-'), 'batch ' .. B, f:step_memory())
  end
end

for _, H in ipairs(split(opts.hidden)) do
  tgl.manual_seed(2)
  local V = 10
  local Wx, Wh = tgl.shared(tgl.randn(V, H) * 0.1), tgl.shared(tgl.randn(H, H) * 0.1)
  local b, Wy, by = tgl.shared(tgl.zeros(H)), tgl.shared(tgl.randn(H, V) * 0.1), tgl.shared(tgl.zeros(V))
  local P = { Wx, Wh, b, Wy, by }
  local h0 = tgl.shared(tgl.zeros(H))
  local x, y = tgl.ivector('x'), tgl.ivector('y')
  local hs = tgl.scan { fn = function(e_t, h_prev, Wh_) return tgl.sigmoid(e_t + h_prev:dot(Wh_)) end,
                        sequences = { Wx[x] + b }, outputs_info = { h0 }, non_sequences = { Wh } }
  local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(hs:dot(Wy) + by), y))
  local g = tgl.grad(cost, P)
  local ups = {}
  for k, p in ipairs(P) do ups[k] = { p, p - 0.01 * g[k] } end
  local f = tgl.compile { inputs = { x, y }, outputs = cost, updates = ups, linker = 'cvm_nogc' }
  local xs, ys = {}, {}
  for t = 1, 100 do xs[t], ys[t] = (t * 7) % V + 1, (t * 3) % V + 1 end
  xs, ys = tgl.array(xs, 'int32'), tgl.array(ys, 'int32')
  for _ = 1, 3 do f(xs, ys) end
  row(('elman rnn H %d'):format(H), 'T 100', f:step_memory())
end
