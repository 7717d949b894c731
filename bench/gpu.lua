-- bench/gpu.lua — the cuBLAS-bound time of an MLP training step on the GPU,
-- the yardstick of issue 22's target ("≥ 70% of the cuBLAS-bound time per
-- step"): the time of the step's matrix products alone, nothing else.
--
-- For the paper's 784-1000-1000-1000-10 MLP (bench/mlp.lua's mlp3) at
-- batch B, one SGD step does, per layer l with i inputs and o outputs, the
-- forward product (B×i)·(i×o), the weight gradient (i×B)·(B×o) and, but
-- for the first layer, the input gradient (B×o)·(o×i).  This script runs
-- exactly those 11 products (float32, operands on the device, results
-- written into preallocated device buffers as in-place updates, so no
-- allocation is timed) as one compiled function called with
-- f.fn{n_calls = N}, and prints, per batch, the median seconds per step of
-- the products (bench/lib/stats.lua: R repeats, each ended by a device
-- synchronize).  bench/gpu.sh divides it by the measured step time.
--
--   TGL_DEVICE=cuda tgl bench/gpu.lua [--batches 1,60,256] [--sizes 784,1000,1000,1000,10]
--                                     [--repeats R] [--min-time S]
-- Output: CSV rows `bound,<batch>,<seconds per step>,<min>,<max>`.
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local tgl = require 'tgl'

local opts = { batches = '1,60,256', sizes = '784,1000,1000,1000,10',
               repeats = stats.REPEATS, ['min-time'] = stats.MIN_TIME }
do
  local i = 1
  while arg[i] do
    local k = arg[i]:match('^%-%-([%w-]+)$')
    if not k or opts[k] == nil or arg[i + 1] == nil then
      io.stderr:write('bench/gpu.lua: unknown or incomplete option ', tostring(arg[i]), '\n')
      os.exit(2)
    end
    opts[k] = arg[i + 1]
    i = i + 2
  end
end
local function list(s)
  local t = {}
  for x in tostring(s):gmatch('[^,]+') do t[#t + 1] = tonumber(x) end
  return t
end

if tgl.config.device ~= 'cuda' then
  io.stderr:write('bench/gpu.lua: run it with TGL_DEVICE=cuda (device is ', tostring(tgl.config.device), ')\n')
  os.exit(2)
end

local sizes = list(opts.sizes)
print('kind,batch,seconds,min,max')
for _, B in ipairs(list(opts.batches)) do
  local function shared(r, c) return tgl.shared(tgl.randn(r, c, { dtype = 'float32' })) end
  local ups = {}
  local x = shared(B, sizes[1])
  local prev = x
  local deltas = {}
  for l = 1, #sizes - 1 do
    local i, o = sizes[l], sizes[l + 1]
    local W = shared(i, o)
    local h = shared(B, o)          -- forward result
    local d = shared(B, o)          -- this layer's output gradient (an operand)
    local gW = shared(i, o)         -- weight gradient
    ups[#ups + 1] = { h, tgl.dot(prev, W) }
    ups[#ups + 1] = { gW, tgl.dot(prev:T(), d) }
    if l > 1 then
      local gin = shared(B, i)
      ups[#ups + 1] = { gin, tgl.dot(d, W:T()) }
    end
    deltas[l] = d
    prev = h
  end
  local f = tgl.compile { inputs = {}, outputs = {}, updates = ups, linker = 'cvm_nogc',
                          name = 'products_b' .. B }
  local s = stats.measure(function(n) f.fn { n_calls = n } end, tgl.time,
                          { repeats = tonumber(opts.repeats), min_time = tonumber(opts['min-time']) })
  print(('bound,%d,%.6e,%.6e,%.6e'):format(B, s.median, s.min, s.max))
  io.stdout:flush()
end
