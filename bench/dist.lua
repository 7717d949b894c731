-- bench/dist.lua — a data-parallel training step (tgl.dist): time per step
-- with the gradients all-reduced inside the compiled step, overlapped
-- with the backward pass or not, against the same step without any
-- allreduce; and the allreduce alone (the transport's bandwidth), which
-- doc/distributed.md's scaling model starts from.
--
--   tgl bench/dist.lua [--model mlp3] [--batch 60] [--threads 1] [--bucket BYTES]
--                      [--repeats R] [--min-time S] [--profile]
--   mpirun -np 2 tgl bench/dist.lua ...      (as root: --allow-run-as-root)
--
-- The model is bench/mlp.lua's (bench/lib/mlp_common.lua: mlp3 is
-- 784-1000-1000-1000-10, tanh, softmax crossentropy, SGD, float32); the
-- batch is per process (the global batch is size x batch).  Variants:
--   local     no allreduce: each process steps on its own batch
--   overlap   the gradients through tgl.allreduce(g, 'mean'): FAST_RUN
--             buckets them and starts each as soon as its gradients exist
--   blocking  the same with the bucket stage off (allreduce_buckets
--             excluded): one blocking allreduce per gradient, in turn
--   allreduce the eager allreduce of a float32 buffer as large as every
--             gradient together (MB/s: bytes reduced per second)
-- (bench/dist.lua sets overlap = true: 'auto' would switch it off on a
-- machine whose cores the processes fill, doc/distributed.md.)
-- Every process runs the same number of steps per repeat (rank 1 sizes
-- the repeats and broadcasts the count); a repeat's time is the slowest
-- process's.  --profile adds a profiled run of `overlap` and prints the
-- time the step spends waiting for buckets (allreduce_wait: the
-- communication the backward pass did not hide).  Rank 1 prints.
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local tgl = require 'tgl'
local stats = require 'stats'
local common = require 'mlp_common'

local args = stats.parse_args(arg)
local opts = { model = 'mlp3', batch = 60, threads = 1, bucket = nil, profile = false }
local i = 1
while args[i] do
  local a = args[i]
  if a == '--profile' then opts.profile = true; i = i + 1
  elseif a == '--model' or a == '--batch' or a == '--threads' or a == '--bucket' then
    opts[a:sub(3)] = a == '--model' and args[i + 1] or tonumber(args[i + 1])
    i = i + 2
  else
    error('bench/dist.lua: unknown argument ' .. tostring(a), 0)
  end
end

local rank, size = tgl.dist.init { timeout = 120, bucket_bytes = opts.bucket, overlap = true }
local root = rank == 1
tgl.config.threads = opts.threads
local function say(...) if root then io.write(string.format(...)) io.flush() end end

local sizes = common.MODELS[opts.model] or error('bench/dist.lua: unknown model ' .. opts.model, 0)
local B = opts.batch

-- the same initial weights on every process; each its own batch
local function params()
  tgl.manual_seed(1)
  local ps = {}
  for l = 1, #sizes - 1 do
    local bound = math.sqrt(6 / (sizes[l] + sizes[l + 1]))
    ps[#ps + 1] = tgl.shared((tgl.rand({ sizes[l], sizes[l + 1] }, { dtype = 'float32' }) * 2 - 1) * bound, 'W' .. l)
    ps[#ps + 1] = tgl.shared(tgl.zeros({ sizes[l + 1] }, { dtype = 'float32' }), 'b' .. l)
  end
  return ps
end
tgl.manual_seed(100 + rank)
local X = tgl.randn({ B, sizes[1] }, { dtype = 'float32' }) * common.X_STD
local Y = (tgl.rand({ B }) * sizes[#sizes]):floor():astype('int32') + 1

local nparam = 0
for l = 1, #sizes - 1 do nparam = nparam + sizes[l] * sizes[l + 1] + sizes[l + 1] end

local function step(variant, profile)
  local ps = params()
  local x, y = tgl.matrix('x', 'float32'), tgl.ivector('y')
  local h = x
  for l = 1, #ps / 2 do
    h = h:dot(ps[2 * l - 1]) + ps[2 * l]
    if l < #ps / 2 then h = tgl.tanh(h) end
  end
  local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(h), y))
  local gs = tgl.grad(cost, ps)
  local upd = {}
  for k, p in ipairs(ps) do
    local g = variant == 'local' and gs[k] or tgl.allreduce(gs[k], 'mean')
    upd[k] = { p, p - common.LR * g }
  end
  local saved = tgl.config.exclude
  if variant == 'blocking' then tgl.config.exclude = { 'allreduce_buckets' } end
  local f = tgl.compile { inputs = { x, y }, outputs = { cost }, updates = upd, profile = profile,
                          name = 'dist_' .. variant }
  tgl.config.exclude = saved
  return f
end

-- Runs body(n) for R repeats of n steps, n the same on every process:
-- rank 1 sizes n alone, so body must not communicate (the local step).
local function measure(body)
  body(3)
  tgl.dist.barrier()
  local n = tgl.array({ 1 }, 'int64')
  if root then
    local k, dt = 1, 0
    repeat
      local t0 = tgl.time()
      body(k)
      dt = tgl.time() - t0
      if dt < stats.MIN_TIME / 4 then k = k * 2 end
    until dt >= stats.MIN_TIME / 4
    n[1] = math.max(1, math.ceil(k * stats.MIN_TIME / dt))
  end
  tgl.dist.broadcast(n, 1)
  local steps = n:get(1)
  local per = {}
  for r = 1, stats.REPEATS do
    collectgarbage()
    tgl.dist.barrier()
    local t0 = tgl.time()
    body(steps)
    local dt = tgl.array({ tgl.time() - t0 }, 'float64')
    tgl.dist.allreduce(dt, 'max')
    per[r] = dt:get(1) / steps
  end
  return stats.summary(per)
end

say('# bench/dist.lua: %s (%d parameters, %.1f MB of float32 gradients), batch %d per process, ' ..
    '%d process%s, %d thread%s each, bucket %d bytes\n', opts.model, nparam, nparam * 4 / 1e6, B, size,
    size == 1 and '' or 'es', opts.threads, opts.threads == 1 and '' or 's', tgl.dist.bucket_bytes())
say('# %s; load average %s\n', stats.describe(), (io.open('/proc/loadavg'):read('*l') or '?'):match('^(%S+ %S+ %S+)'))
say('%-10s %-36s %s\n', 'variant', 'ms per step (min-max, spread)', 'examples/s (global)')

local results = {}
local variants = size > 1 and { 'local', 'overlap', 'blocking' } or { 'local', 'overlap' }
for _, v in ipairs(variants) do
  local f = step(v)
  local s
  if size > 1 and v ~= 'local' then
    -- a step that communicates runs as many steps on every process: the
    -- count comes from the local step's time
    local per_local = results['local'].median
    local n = math.max(1, math.ceil(stats.MIN_TIME / per_local))
    f(X, Y) f(X, Y) f(X, Y)
    local per = {}
    for r = 1, stats.REPEATS do
      collectgarbage()
      tgl.dist.barrier()
      local t0 = tgl.time()
      for _ = 1, n do f(X, Y) end
      local dt = tgl.array({ tgl.time() - t0 }, 'float64')
      tgl.dist.allreduce(dt, 'max')
      per[r] = dt:get(1) / n
    end
    s = stats.summary(per)
  else
    s = measure(function(n) for _ = 1, n do f(X, Y) end end)
  end
  results[v] = s
  say('%-10s %-36s %.0f\n', v, stats.format(s, '%.2f', 1e3), B * size / s.median)
end

-- the allreduce alone, on a buffer as large as every gradient together
if size > 1 then
  local buf = tgl.zeros({ nparam }, { dtype = 'float32' })
  local n = 10
  tgl.dist.allreduce(buf, 'mean')
  local per = {}
  for r = 1, stats.REPEATS do
    tgl.dist.barrier()
    local t0 = tgl.time()
    for _ = 1, n do tgl.dist.allreduce(buf, 'mean') end
    local dt = tgl.array({ tgl.time() - t0 }, 'float64')
    tgl.dist.allreduce(dt, 'max')
    per[r] = dt:get(1) / n
  end
  local s = stats.summary(per)
  results.allreduce = s
  say('%-10s %-36s %.0f MB/s (%.1f MB per call)\n', 'allreduce', stats.format(s, '%.2f', 1e3),
      nparam * 4 / 1e6 / s.median, nparam * 4 / 1e6)
  local l, o, b = results['local'].median, results.overlap.median, results.blocking.median
  say('# time per step, %d processes vs the local step: overlap %.2fx, blocking %.2fx; ' ..
      'communication exposed: overlap %.2f ms, blocking %.2f ms of %.2f ms for the allreduce alone\n',
      size, o / l, b / l, (o - l) * 1e3, (b - l) * 1e3, s.median * 1e3)
end

if opts.profile and size > 1 then
  local f = step('overlap', true)
  for _ = 1, 3 do f(X, Y) end
  local n = math.max(1, math.ceil(stats.MIN_TIME / results.overlap.median))
  for _ = 1, n do f(X, Y) end
  if root then print(f:profile_summary()) end
end
