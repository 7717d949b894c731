-- bench/mlp.lua — the feed-forward benchmark of the 2012 Theano paper
-- ("Theano: new features and speed improvements", section 4), for tgl.
--
-- Three models on 784 inputs and 10 classes: logistic regression
-- (784-10), one hidden layer (784-500-10) and three hidden layers
-- (784-1000-1000-1000-10); tanh hidden units, softmax with negative
-- log-likelihood, plain SGD (learning rate 0.01), float32.  The data are
-- 6000 random Gaussian examples with random labels, held in shared
-- variables; a minibatch is selected by its index through `givens`, as in
-- the Theano tutorials.  Per cell: a warm-up, a check pass from the
-- initial weights (the loss before and after it), then the timed repeats
-- (bench/lib/mlp_common.lua); the figure is the median examples per
-- second of the repeats, with their spread.
--
-- Variants (the paper's):
--   cvm          linker cvm, called from Lua once per minibatch: f(k)
--   cvm_nogc     linker cvm_nogc (intermediates kept between calls)
--   trust_input  cvm_nogc + f.trust_input = true (index arrays made once)
--   n_calls      cvm_nogc, no inputs: a shared step counter i (update
--                i = i + 1) selects the minibatch, and f.fn{n_calls = N}
--                runs the whole pass in C without returning to Lua
--
-- Every system of bench/run starts from the same numbers: the data and the
-- Glorot-uniform initial weights are made here once and saved as .npz
-- (--data DIR), which the peers load with NumPy.
--
--   tgl bench/mlp.lua [--models logreg,mlp1,mlp3] [--batches 1,10,60,256]
--                     [--variants cvm,cvm_nogc,trust_input,n_calls]
--                     [--threads N] [--data DIR] [--budget S] [--header]
--                     [--repeats R] [--min-time S] [--system NAME] [--profile]
--   tgl bench/mlp.lua --make-data DIR     write DIR/data.npz, DIR/init_<model>.npz
--   tgl bench/mlp.lua --sgemm [N]         float32 N x N x N dot, GFLOP/s
--
-- Output: one CSV row per cell on stdout (bench/lib/mlp_common.lua has the
-- columns and the FLOP count).  --repeats R (default 5) timed repeats of at
-- least --min-time S seconds (default 0.5) each (bench/lib/stats.lua; the
-- environment's TGL_BENCH_REPEATS / TGL_BENCH_MIN_TIME too).  --budget S
-- stops the check pass at the first chunk boundary after S seconds (the
-- row's check_examples says how far it went); the default 0 runs the whole
-- pass.  --system NAME labels the rows (bench/run --baseline-tgl runs this
-- script under another tgl binary as 'tgl@base').  Threads: tgl.config.threads
-- is set to --threads; OpenBLAS reads OPENBLAS_NUM_THREADS when the process
-- starts, so bench/run sets it in the environment (it is checked here).
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local common = require 'mlp_common'

local opts = {
  models = 'logreg,mlp1,mlp3', batches = '1,10,60,256', variants = 'cvm,cvm_nogc,trust_input,n_calls',
  threads = tonumber(os.getenv('TGL_NUM_THREADS')) or 1, data = nil, budget = 0, header = false,
  profile = false, ['make-data'] = nil, sgemm = nil, lr = 0.01, examples = common.N_EXAMPLES,
  repeats = stats.REPEATS, ['min-time'] = stats.MIN_TIME, system = 'tgl',
}
do
  local i = 1
  while arg[i] do
    local k = arg[i]:match('^%-%-([%w-]+)$')
    if k == 'header' or k == 'profile' then
      opts[k] = true; i = i + 1
    elseif k == 'sgemm' then
      opts.sgemm = tonumber(arg[i + 1]) or 2048; i = i + ((tonumber(arg[i + 1]) and 2) or 1)
    elseif k and arg[i + 1] and (opts[k] ~= nil or k == 'data' or k == 'make-data') then
      opts[k] = tonumber(arg[i + 1]) or arg[i + 1]; i = i + 2
    else
      io.stderr:write(('bench/mlp.lua: bad argument %s\n'):format(arg[i]))
      os.exit(2)
    end
  end
end

-- TGL_BENCH_CLOCK=cpu times the cells in process CPU time (os.clock)
-- instead of the wall clock: on a shared machine it leaves out the waits
-- for a core (one thread only: CPU time sums the threads).
local clock = os.getenv('TGL_BENCH_CLOCK') == 'cpu' and os.clock or tgl.time

tgl.config.compile = 'sync'         -- kernels compiled before the first call
tgl.config.threads = opts.threads

local function split(s)
  local t = {}
  for w in tostring(s):gmatch('[^,]+') do t[#t + 1] = tonumber(w) or w end
  return t
end

-- ---------------------------------------------------------------------------
-- sgemm rate: C = A B on float32 n x n arrays through a:dot(b) (OpenBLAS).
if opts.sgemm then
  local n = opts.sgemm
  tgl.manual_seed(7)
  local a, b = tgl.randn(n, n), tgl.randn(n, n)
  a:dot(b)                                   -- warm-up (threads, pages)
  local best = math.huge
  for _ = 1, 5 do
    local t0 = tgl.time()
    a:dot(b)
    best = math.min(best, tgl.time() - t0)
  end
  print(('sgemm,%d,%s,%.2f'):format(n, os.getenv('OPENBLAS_NUM_THREADS') or '', 2 * n ^ 3 / best / 1e9))
  return
end

-- ---------------------------------------------------------------------------
-- Data and initial weights (the same for every system).
local function make_data(dir)
  os.execute(('mkdir -p %q'):format(dir))
  tgl.manual_seed(20120)
  local X = tgl.randn(common.N_EXAMPLES, common.N_IN, { std = common.X_STD })
  local y = tgl.minimum(tgl.floor(tgl.rand(common.N_EXAMPLES) * common.N_OUT), common.N_OUT - 1):astype('int32')
  tgl.save(dir .. '/data.npz', { X = X, y = y })      -- y: 0-based class labels
  for m, name in ipairs(common.MODEL_NAMES) do
    tgl.manual_seed(1000 + m)
    local sizes, init = common.MODELS[name], {}
    for l = 1, #sizes - 1 do
      local fan_in, fan_out = sizes[l], sizes[l + 1]
      local r = math.sqrt(6 / (fan_in + fan_out))       -- Glorot/Xavier uniform
      init['W' .. l] = tgl.rand(fan_in, fan_out, { low = -r, high = r })
      init['b' .. l] = tgl.zeros(fan_out)
    end
    tgl.save(('%s/init_%s.npz'):format(dir, name), init)
  end
end

if opts['make-data'] then
  make_data(opts['make-data'])
  return
end

local data_dir = opts.data
if not data_dir then
  data_dir = os.tmpname(); os.remove(data_dir)
end
local fh = io.open(data_dir .. '/data.npz', 'rb')
if fh then fh:close() else make_data(data_dir) end
local D = tgl.load(data_dir .. '/data.npz')
local Xall = D.X
local Yall = (D.y + 1):astype('int32')               -- tgl's labels are 1-based

-- ---------------------------------------------------------------------------
-- One cell: build the model, compile the variant, warm up, time a pass.
local Xs = tgl.shared(Xall, 'X', { borrow = true })
local Ys = tgl.shared(Yall, 'y', { borrow = true })

local function build(name)
  local init = tgl.load(('%s/init_%s.npz'):format(data_dir, name))
  local sizes = common.MODELS[name]
  local x, y = tgl.matrix('x'), tgl.ivector('y')
  local params, values, h = {}, {}, x
  for l = 1, #sizes - 1 do
    local W = tgl.shared(init['W' .. l], 'W' .. l)
    local b = tgl.shared(init['b' .. l], 'b' .. l)
    params[#params + 1], values[#values + 1] = W, init['W' .. l]
    params[#params + 1], values[#values + 1] = b, init['b' .. l]
    h = h:dot(W) + b
    if l < #sizes - 1 then h = tgl.tanh(h) end
  end
  local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(h), y))
  local grads = tgl.grad(cost, params)
  local updates = {}
  for k, p in ipairs(params) do updates[k] = { p, p - opts.lr * grads[k] } end
  local M = { x = x, y = y, cost = cost, params = params, values = values, updates = updates }
  function M.reset()
    for k, p in ipairs(params) do p:set_value(values[k]) end
  end
  M.eval = tgl.compile { inputs = {}, outputs = cost, givens = { [x] = Xs, [y] = Ys }, name = 'eval_' .. name }
  return M
end

local function compile_variant(M, variant, B)
  local x, y = M.x, M.y
  local linker = variant == 'cvm' and 'cvm' or 'cvm_nogc'
  local name = ('train_%s'):format(variant)
  if variant == 'n_calls' then
    local i = tgl.shared(tgl.array(0, 'int64'), 'i')
    local ups = { { i, i + 1 } }
    for _, u in ipairs(M.updates) do ups[#ups + 1] = u end
    local f = tgl.compile { inputs = {}, outputs = M.cost, updates = ups, linker = linker, name = name,
      profile = opts.profile,
      givens = { [x] = Xs[{ { i * B + 1, (i + 1) * B } }], [y] = Ys[{ { i * B + 1, (i + 1) * B } }] } }
    local first = true
    return f, function(k0, n)              -- runs steps k0 .. k0+n-1 (0-based)
      if n <= 0 then return end
      if k0 == 0 then i:set_value(tgl.array(0, 'int64')) end
      if first then f(); first = false; n = n - 1 end  -- fn needs one call first
      if n > 0 then f.fn { n_calls = n } end
    end
  end
  local k = tgl.lscalar('k')
  local f = tgl.compile { inputs = { k }, outputs = M.cost, updates = M.updates, linker = linker, name = name,
    profile = opts.profile,
    givens = { [x] = Xs[{ { k * B + 1, (k + 1) * B } }], [y] = Ys[{ { k * B + 1, (k + 1) * B } }] } }
  if variant == 'trust_input' then
    f.trust_input = true
    local idx = {}
    for j = 0, math.floor(opts.examples / B) - 1 do idx[j] = tgl.array(j, 'int64') end
    return f, function(k0, n)
      for j = k0, k0 + n - 1 do f(idx[j]) end
    end
  end
  return f, function(k0, n)
    for j = k0, k0 + n - 1 do f(j) end
  end
end

local blas_threads = os.getenv('OPENBLAS_NUM_THREADS')
if blas_threads and tonumber(blas_threads) ~= opts.threads then
  io.stderr:write(('bench/mlp.lua: warning: OPENBLAS_NUM_THREADS=%s but --threads %d\n'):format(
    blas_threads, opts.threads))
end

-- tgl's calls return when the work is done on the CPU; on a GPU they return
-- once it is queued, and a chunk ends when the device has finished it.
local nosync = stats.device_sync

if opts.header then print(common.CSV_HEADER) end
io.stdout:setvbuf('line')
for _, name in ipairs(split(opts.models)) do
  assert(common.MODELS[name], 'unknown model ' .. tostring(name))
  local M = build(name)
  for _, B in ipairs(split(opts.batches)) do
    for _, variant in ipairs(split(opts.variants)) do
      local f, run = compile_variant(M, variant, B)
      local nb = math.floor(opts.examples / B)
      M.reset()
      -- Warm-up: a few steps (first calls, buffers, BLAS threads), then the
      -- weights go back to their initial values.
      local nwarm = math.max(2, math.min(nb, math.ceil(common.WARMUP_EXAMPLES / B)))
      run(0, nwarm)
      f:wait_compiled()
      M.reset()
      collectgarbage(); collectgarbage()
      local loss0 = M.eval():get()
      local check = common.check_pass(nb, opts.budget, clock, run, nosync)
      local loss1 = M.eval():get()
      local res = common.timed_repeats(nb, B, check.steps, check.steps / check.seconds, opts.repeats,
                                       opts['min-time'], clock, run, nosync)
      print(common.csv_row {
        system = opts.system, variant = variant, model = name, batch = B, threads = opts.threads,
        rates = res.rates, examples = res.examples, seconds = res.seconds,
        check_examples = check.steps * B, loss0 = loss0, loss1 = loss1,
      })
      if opts.profile then io.stderr:write(f:profile_summary(), '\n') end
    end
  end
end
