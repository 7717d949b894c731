-- bench/nn_lstm.lua — nn.LSTM (lua/nn/recurrent.lua) per call: an LSTM
-- 100 -> 200 over 50 steps of a batch of 32, float32, one thread;
-- m:forward alone, and m:forward followed by m:backward (gradInput and
-- the parameter gradients, backpropagation through time).  Each figure
-- is the median of R repeats of at least S seconds of calls, with the
-- min–max over the repeats (bench/lib/stats.lua).  The GRU and the Elman
-- RNN of the same sizes follow, then, as a reference, the same LSTM step
-- written by hand as one tgl.scan with its own shared variables Wx, Wh, b
-- (two compiled functions: the forward, and the gradients of
-- sum(h * gOut) with respect to x, Wx, Wh and b, which runs the forward
-- again as nn's backward does).  Its difference to nn.LSTM's forward +
-- backward is what the single weight array (SeqLSTM's layout: Wh a slice
-- of it) costs in the gradient loop: nothing since tgl.scan gives the
-- slice, a non-sequence, its own placeholder (doc/scan.md).
--   tgl bench/nn_lstm.lua [--repeats R] [--min-time S] [--cpu-time]   (default 5, 0.5)
-- --cpu-time times with the process's CPU time (os.clock) instead of the
-- wall clock: on a machine shared with other work it counts the time this
-- process ran (one thread, so the same as the wall time when idle).
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local rest = stats.parse_args(arg)
local clock, clock_name = tgl.time, 'wall time'
if rest[1] == '--cpu-time' then clock, clock_name = os.clock, 'CPU time'; table.remove(rest, 1) end
if #rest > 0 then
  io.stderr:write('usage: tgl bench/nn_lstm.lua [--repeats R] [--min-time S] [--cpu-time]\n')
  os.exit(2)
end
local nn = require 'nn'
tgl.config.threads = 1
tgl.config.compile = 'sync'
tgl.manual_seed(1)

local T, N, D, H = 50, 32, 100, 200
print(('nn.LSTM(%d, %d), seqlen %d, batch %d, float32, 1 thread, %s; %s'):format(D, H, T, N, clock_name,
                                                                               stats.describe()))
for _, name in ipairs({ 'LSTM', 'GRU', 'RNN' }) do
  local m = nn[name](D, H):float()
  local x = tgl.randn(T, N, D):astype('float32')
  local g = tgl.randn(T, N, H):astype('float32')
  local s1 = stats.measure(function(n) for _ = 1, n do m:forward(x) end end, clock, { warmup = 3 })
  local s2 = stats.measure(function(n)
    for _ = 1, n do m:forward(x); m:backward(x, g) end
  end, clock, { warmup = 3 })
  print(('nn.%s(%d, %d)'):format(name, D, H))
  print(('  %-20s %s'):format('forward', stats.format(s1, '%9.3f', 1e3, 'ms/call')))
  print(('  %-20s %s'):format('forward + backward', stats.format(s2, '%9.3f', 1e3, 'ms/call')))
end

-- the reference: the same step over separate shared variables
do
  local o = { dtype = 'float32' }
  local Wx = tgl.shared(tgl.randn(D, 4 * H, o) * 0.05, 'Wx')
  local Wh = tgl.shared(tgl.randn(H, 4 * H, o) * 0.05, 'Wh')
  local b = tgl.shared(tgl.zeros(4 * H, o), 'b')
  local h0 = tgl.shared(tgl.zeros(N, H, o), 'h0')
  local c0 = tgl.shared(tgl.zeros(N, H, o), 'c0')
  local x, gy = tgl.tensor3('x', 'float32'), tgl.tensor3('gy', 'float32')
  local s = x:shape()
  local Z = (x:reshape(-1, D):dot(Wx) + b):reshape(tgl.concatenate({ s[{ { 1, 2 } }], tgl.constant({ 4 * H }, 'int64') }, 1), 3)
  local outs = tgl.scan { fn = function(z_t, h_prev, c_prev, Wh_)
    local a = z_t + h_prev:dot(Wh_)
    local ifo = tgl.sigmoid(a[{ {}, { 1, 3 * H } }])
    local g = tgl.tanh(a[{ {}, { 3 * H + 1, 4 * H } }])
    local c = ifo[{ {}, { H + 1, 2 * H } }] * c_prev + ifo[{ {}, { 1, H } }] * g
    return { ifo[{ {}, { 2 * H + 1, 3 * H } }] * tgl.tanh(c), c }
  end, sequences = { Z }, outputs_info = { h0, c0 }, non_sequences = { Wh }, name = 'lstm' }
  local fwd = tgl.compile { inputs = { x }, outputs = outs[1], name = 'lstm_fwd' }
  local grads = tgl.compile { inputs = { x, gy }, outputs = tgl.grad(tgl.sum(outs[1] * gy), { x, Wx, Wh, b }),
                              name = 'lstm_grad' }
  local xa = tgl.randn(T, N, D, o)
  local ga = tgl.randn(T, N, H, o)
  local s1 = stats.measure(function(n) for _ = 1, n do fwd(xa) end end, clock, { warmup = 3 })
  local s2 = stats.measure(function(n) for _ = 1, n do fwd(xa); grads(xa, ga) end end, clock, { warmup = 3 })
  print(('tgl.scan by hand, separate Wx, Wh, b (%d, %d)'):format(D, H))
  print(('  %-20s %s'):format('forward', stats.format(s1, '%9.3f', 1e3, 'ms/call')))
  print(('  %-20s %s'):format('forward + gradients', stats.format(s2, '%9.3f', 1e3, 'ms/call')))
end
