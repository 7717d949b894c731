-- bench/rop.lua — what a curvature product costs next to a gradient (issue
-- 11: "it costs a small constant times a gradient; target <= 3x").
--
-- The model: the 784-1000-1000-1000-10 tanh MLP of bench/mlp.lua (mlp3),
-- batch 60, float32, its data and initial weights (bench/.data/data.npz,
-- init_mlp3.npz, the first 60 examples); logits = the last layer's output,
-- cost = mean over the rows of the softmax crossentropy.  Three cases, each
-- ONE compiled function called with trust_input (the parameters are
-- shared variables; x, labels and the direction are inputs, as in a CG
-- loop where v changes every step):
--
--   grad  the gradient of the cost wrt the 8 parameters (tgl.grad)
--   gn    the Gauss-Newton product G v = J' H_L J v for the softmax-
--         crossentropy loss (tgl.gauss_newton_product: one Rop pass, one
--         Lop pass)
--   hvp   the exact Hessian-vector product H v (tgl.hessian_vector_product:
--         the Rop of the gradient)
--
-- The direction v (one array per parameter, N(0, 0.01^2)) is
-- bench/.data/rop_v.npz, made by --make-data and read by the peers
-- (bench/peers/rop_jax.py, rop_torch.py).  Figure: ms per call (median of
-- R repeats of >= S seconds, bench/lib/stats.lua); the report divides gn
-- and hvp by grad.  Check column (compared across systems by the report):
-- grad: |g|^2; gn: v'Gv; hvp: v'Hv (float64 sums of the float32 results).
--
--   tgl bench/rop.lua [--cases grad,gn,hvp] [--threads N] [--data DIR]
--                     [--make-data DIR] [--csv [--header]] [--system NAME]
--                     [--repeats R] [--min-time S]
-- --make-data DIR writes DIR/rop_v.npz (and DIR/data.npz, init_mlp3.npz
-- through bench/mlp.lua's --make-data when they are missing).
local here = arg[0]:match('^(.*)/[^/]*$') or '.'
package.path = here .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local peer = require 'peer_common'

local SIZES = { 784, 1000, 1000, 1000, 10 }
local BATCH = 60
local V_STD = 0.01
local CSV_HEADER = 'system,variant,case,threads,unit,median,min,max,spread_pct,repeats,values,check,note'

local opts = { cases = 'grad,gn,hvp', threads = tonumber(os.getenv('TGL_NUM_THREADS')) or 1,
               csv = false, header = false, system = 'tgl', data = here .. '/.data' }
peer.parse_args(arg, opts, 'usage: tgl bench/rop.lua [--cases grad,gn,hvp] [--threads N] [--data DIR]\n' ..
                '                         [--make-data DIR] [--csv [--header]] [--system NAME]\n' ..
                '                         [--repeats R] [--min-time S]\n')

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

if opts.make_data then
  local dir = opts.make_data
  if not (exists(dir .. '/data.npz') and exists(dir .. '/init_mlp3.npz')) then
    assert(os.execute(('%q %q --make-data %q'):format(arg[-1], here .. '/mlp.lua', dir)) == 0,
           'bench/mlp.lua --make-data failed')
  end
  tgl.manual_seed(110)
  local v = {}
  for l = 1, #SIZES - 1 do
    v['W' .. l] = tgl.randn(SIZES[l], SIZES[l + 1], { std = V_STD })
    v['b' .. l] = tgl.randn(SIZES[l + 1], { std = V_STD })
  end
  tgl.save(dir .. '/rop_v.npz', v)
  print('wrote ' .. dir .. '/rop_v.npz')
  return
end

for _, f in ipairs({ 'data.npz', 'init_mlp3.npz', 'rop_v.npz' }) do
  if not exists(opts.data .. '/' .. f) then
    io.stderr:write(('bench/rop.lua: %s/%s is missing: tgl bench/rop.lua --make-data %s\n')
                    :format(opts.data, f, opts.data))
    os.exit(1)
  end
end

peer.setup_tgl(opts.threads)         -- kernels compiled before the first call

local D = tgl.load(opts.data .. '/data.npz')
local xa = D.X[{ { 1, BATCH } }]:clone()
local ya = (D.y[{ { 1, BATCH } }] + 1):astype('int32')     -- tgl's labels are 1-based
local init = tgl.load(opts.data .. '/init_mlp3.npz')
local V = tgl.load(opts.data .. '/rop_v.npz')

local x, y = tgl.matrix('x'), tgl.ivector('y')
local params, vvars, vvals = {}, {}, {}
local h = x
for l = 1, #SIZES - 1 do
  local W = tgl.shared(init['W' .. l], 'W' .. l)
  local b = tgl.shared(init['b' .. l], 'b' .. l)
  params[#params + 1], params[#params + 2] = W, b
  vvars[#vvars + 1], vvars[#vvars + 2] = tgl.matrix('vW' .. l), tgl.vector('vb' .. l)
  vvals[#vvals + 1], vvals[#vvals + 2] = V['W' .. l], V['b' .. l]
  h = h:dot(W) + b
  if l < #SIZES - 1 then h = tgl.tanh(h) end
end
local logits = h
local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(logits), y))

-- sum of a[i] * b[i] over a list of arrays, in float64
local function dot(as, bs)
  local s = 0
  for i = 1, #as do
    s = s + tgl.sum(tgl.mul(as[i]:astype('float64'), bs[i]:astype('float64'))):get()
  end
  return s
end

local CASES = {
  grad = function()
    local f = tgl.compile { inputs = { x, y }, outputs = tgl.grad(cost, params), name = 'grad' }
    return f, { xa, ya }, function(out) return dot(out, out) end
  end,
  gn = function()
    local gv = tgl.gauss_newton_product(logits, params, vvars, 'softmax_crossentropy')
    local ins = { x }
    for _, v in ipairs(vvars) do ins[#ins + 1] = v end
    local args = { xa }
    for _, v in ipairs(vvals) do args[#args + 1] = v end
    return tgl.compile { inputs = ins, outputs = gv, name = 'gauss_newton' }, args,
           function(out) return dot(vvals, out) end
  end,
  hvp = function()
    local hv = tgl.hessian_vector_product(cost, params, vvars)
    local ins = { x, y }
    for _, v in ipairs(vvars) do ins[#ins + 1] = v end
    local args = { xa, ya }
    for _, v in ipairs(vvals) do args[#args + 1] = v end
    return tgl.compile { inputs = ins, outputs = hv, name = 'hvp' }, args,
           function(out) return dot(vvals, out) end
  end,
}

local function say(...) if not opts.csv then print(...) end end
if opts.csv and opts.header then print(CSV_HEADER) end
say(('tgl forward-mode benchmark: MLP 784-1000x3-10, batch %d, float32, %d thread(s); %s')
    :format(BATCH, opts.threads, stats.describe()))

for c in opts.cases:gmatch('[^,]+') do
  local make = CASES[c]
  if not make then io.stderr:write('bench/rop.lua: unknown case ' .. c .. '\n'); os.exit(2) end
  local t0 = tgl.time()
  local f, args, check = make()
  local compile_s = tgl.time() - t0
  local out = { f(unpack(args)) }
  local chk = check(out)
  f.trust_input = true
  local s = stats.measure(function(n) for _ = 1, n do f(unpack(args)) end end, tgl.time)
  local vals = {}
  for i, v in ipairs(s.values) do vals[i] = ('%.6g'):format(v * 1e3) end
  local row = ('%s,%s,%s,%d,ms/call,%.6g,%.6g,%.6g,%.2f,%d,%s,%.9g,compile %.2f s'):format(
    opts.system, 'trust_input', c, opts.threads, s.median * 1e3, s.min * 1e3, s.max * 1e3, s.spread_pct,
    #s.values, table.concat(vals, ';'), chk, compile_s)
  if opts.csv then print(row); io.stdout:flush() end
  say(('  %-5s %s   check %.9g   (compile %.2f s)'):format(c, stats.format(s, '%.3f', 1e3, 'ms'), chk, compile_s))
end
