-- bench/nn_lstm.lua — nn.LSTM (lua/nn/recurrent.lua) per call: an LSTM
-- 100 -> 200 over 50 steps of a batch of 32, float32, one thread;
-- m:forward alone, and m:forward followed by m:backward (gradInput and
-- the parameter gradients, backpropagation through time).  Each figure
-- is the median of R repeats of at least S seconds of calls, with the
-- min–max over the repeats (bench/lib/stats.lua).
--   tgl bench/nn_lstm.lua [--repeats R] [--min-time S]     (default 5, 0.5)
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local rest = stats.parse_args(arg)
if #rest > 0 then
  io.stderr:write('usage: tgl bench/nn_lstm.lua [--repeats R] [--min-time S]\n')
  os.exit(2)
end
local nn = require 'nn'
tgl.config.threads = 1
tgl.config.compile = 'sync'
tgl.manual_seed(1)

local T, N, D, H = 50, 32, 100, 200
print(('nn.LSTM(%d, %d), seqlen %d, batch %d, float32, 1 thread; %s'):format(D, H, T, N, stats.describe()))
for _, name in ipairs({ 'LSTM', 'GRU', 'RNN' }) do
  local m = nn[name](D, H):float()
  local x = tgl.randn(T, N, D):astype('float32')
  local g = tgl.randn(T, N, H):astype('float32')
  local s1 = stats.measure(function(n) for _ = 1, n do m:forward(x) end end, tgl.time, { warmup = 3 })
  local s2 = stats.measure(function(n)
    for _ = 1, n do m:forward(x); m:backward(x, g) end
  end, tgl.time, { warmup = 3 })
  print(('nn.%s(%d, %d)'):format(name, D, H))
  print(('  %-20s %s'):format('forward', stats.format(s1, '%9.3f', 1e3, 'ms/call')))
  print(('  %-20s %s'):format('forward + backward', stats.format(s2, '%9.3f', 1e3, 'ms/call')))
end
