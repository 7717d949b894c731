-- bench/rnn.lua — the recurrent-network benchmark of the 2012 Theano paper,
-- in tgl: an Elman network trained with full backpropagation through time.
--
-- The work, per cell (hidden size H × input/output size V), the same for
-- every system (bench/peers/rnn_*.py repeat it):
--   inputs x_t and targets y_t are word ids (1..V) of 100 random sequences of
--   T = 100 steps; batch 1, float32;
--   e_t = Wx[x_t] + b                 (a row lookup: the same numbers as
--                                      one_hot(x_t) · Wx, without the
--                                      V-wide product; done for all steps
--                                      before the loop, as it does not
--                                      depend on h)
--   h_t = sigmoid(e_t + h_{t-1} Wh),  h_0 = 0
--   cost = mean over t of -log softmax(h_t Wy + by)[y_t]  (full softmax, NLL)
--   plain SGD, learning rate 0.01, one update per sequence (full BPTT over
--   its 100 steps), through the sequences in order.
-- Written as a user would: tgl.scan forward, tgl.grad through the scan, SGD
-- updates, ONE compiled function per sequence.  Variants: `trust_input`
-- (one call from Lua per sequence, the sequences in turn) and `n_calls`
-- (f.fn{n_calls=N}: N sequences inside C; each repeats the last call's
-- sequence: the same work per step).
-- Figure: time steps per second (100 × sequences per second) after a
-- warm-up; bench/lib/stats.lua's median of R repeats of >= S seconds.
-- Check before timing: from the shared initial weights, the loss (the
-- cost) of sequence 1 before and after CHECK_STEPS SGD steps on it
-- (bench/run rnn compares it with the peers').
--
--   tgl bench/rnn.lua [--hidden 50,100,500,1500] [--vocab 10,54,3000]
--                     [--threads N] [--data DIR] [--make-data DIR]
--                     [--csv [--header]] [--system NAME] [--budget S]
--                     [--profile] [--repeats R] [--min-time S]
-- --make-data DIR writes DIR/rnn_V<V>.npz (x, y: 100 × 100 int32 ids,
-- 0-based as NumPy's) and DIR/rnn_H<H>_V<V>.npz (Wx, Wh, b, Wy, by) for the
-- cells asked for, unless there; --data DIR reads them (without it the same
-- numbers are made in memory).  --budget S (default 0: none) caps a
-- cell's timing near S seconds by shortening the repeats (down to one
-- sequence each), never the work per step.  --profile also runs each cell
-- with profile = true and prints where the time goes (to stderr, and as
-- `#profile,H,V,threads,op,share_pct,us_per_seq` lines with --csv).
local here = arg[0]:match('^(.*)/[^/]*$') or '.'
package.path = here .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local peer = require 'peer_common'

local T, NSEQ, LR, CHECK_STEPS = 100, 100, 0.01, 10
local SEED = 2010
local CSV_HEADER = 'system,variant,hidden,vocab,threads,unit,median,min,max,spread_pct,repeats,values,' ..
                   'loss_before,loss_after,note'
local USAGE = 'usage: tgl bench/rnn.lua [--hidden 50,100,500,1500] [--vocab 10,54,3000] [--threads N]\n' ..
              '                         [--data DIR] [--make-data DIR] [--csv [--header]] [--system NAME]\n' ..
              '                         [--budget S] [--profile] [--repeats R] [--min-time S]\n'

-- this script's own options first; the rest as bench/scan.lua's
local opts = { hidden = '50,100,500,1500', vocab = '10,54,3000', budget = 0, profile = false,
               threads = tonumber(os.getenv('TGL_NUM_THREADS')) or 1, csv = false, header = false,
               system = 'tgl' }
local rest, i = {}, 1
while arg[i] ~= nil do
  local a = arg[i]
  if a == '--hidden' or a == '--vocab' or a == '--budget' then
    if arg[i + 1] == nil then io.stderr:write(USAGE); os.exit(2) end
    opts[a:sub(3)] = arg[i + 1]; i = i + 2
  elseif a == '--profile' then
    opts.profile = true; i = i + 1
  else
    rest[#rest + 1] = a; i = i + 1
  end
end
peer.parse_args(rest, opts, USAGE)
local function list(s, what)         -- 'none': no cells (--csv --header prints the header only)
  local r = {}
  if s == 'none' then return r end
  for v in s:gmatch('[^,]+') do
    local n = tonumber(v)
    if not n or n < 1 or n % 1 ~= 0 then error(('--%s: %q is not a positive integer'):format(what, v), 0) end
    r[#r + 1] = n
  end
  return r
end
local hiddens, vocabs = list(opts.hidden, 'hidden'), list(opts.vocab, 'vocab')
opts.budget = tonumber(opts.budget)
if not opts.budget or opts.budget < 0 then error('--budget needs a number of seconds >= 0', 0) end

-- The data of vocabulary V: x, y (NSEQ × T int32, 0-based ids).
local function make_seqs(V)
  tgl.manual_seed(SEED + V)
  local function ids() return tgl.floor(tgl.rand(NSEQ, T) * V):astype('int32') end
  return { x = ids(), y = ids() }
end
-- The initial weights of cell (H, V): Wx ~ N(0, 0.1^2), Wh and Wy ~
-- N(0, 1/H), zero biases, float32.
local function make_weights(H, V)
  tgl.manual_seed(SEED + 7 * H + V)
  local s = 1 / math.sqrt(H)
  local w = { Wx = tgl.randn(V, H) * 0.1, Wh = tgl.randn(H, H) * s, b = tgl.zeros(H),
              Wy = tgl.randn(H, V) * s, by = tgl.zeros(V) }
  for k, v in pairs(w) do w[k] = v:astype('float32') end
  return w
end
local function exists(p) local f = io.open(p); if f then f:close() end; return f ~= nil end

if opts.make_data then
  os.execute(('mkdir -p %q'):format(opts.make_data))
  for _, V in ipairs(vocabs) do
    local p = ('%s/rnn_V%d.npz'):format(opts.make_data, V)
    if not exists(p) then tgl.save(p, make_seqs(V)); print('wrote ' .. p) end
    for _, H in ipairs(hiddens) do
      p = ('%s/rnn_H%d_V%d.npz'):format(opts.make_data, H, V)
      if not exists(p) then tgl.save(p, make_weights(H, V)); print('wrote ' .. p) end
    end
  end
  return
end

peer.setup_tgl(opts.threads)         -- kernels compiled before the first call

local function say(...) if not opts.csv then print(...) end end
local function emit(s) print(s); io.stdout:flush() end
local function rescale(s, f)       -- a summary of per-unit values from seconds per sequence
  local v = {}
  for k, x in ipairs(s.values) do v[k] = f(x) end
  local r = stats.summary(v)
  r.n = #v
  return r
end
local function report(variant, H, V, s, loss0, loss1, note)
  local vals = {}
  for k, v in ipairs(s.values) do vals[k] = ('%.6g'):format(v) end
  local row = ('%s,%s,%d,%d,%d,steps/s,%.6g,%.6g,%.6g,%.2f,%d,%s,%.6f,%.6f,%s'):format(
    opts.system, variant, H, V, opts.threads, s.median, s.min, s.max, s.spread_pct, s.n,
    table.concat(vals, ';'), loss0, loss1, note or '')
  if opts.csv then emit(row) end
end

-- The repeats' length under the budget: the cell runs 2 variants of about
-- (REPEATS + 1.5) × min_time each (stats.measure's calibration included).
local function min_time_for(sec_per_seq)
  local mt = stats.MIN_TIME
  if opts.budget > 0 then
    mt = math.min(mt, opts.budget / (2 * (stats.REPEATS + 1.5)))
  end
  return math.max(mt, sec_per_seq * 0.5)    -- at least about one sequence a repeat
end

-- The training step, the loss, and the profiled twin of one cell.
local function build(H, V, w, profile)
  local names = { 'Wx', 'Wh', 'b', 'Wy', 'by' }
  local P = {}
  for k, n in ipairs(names) do P[k] = tgl.shared(w[n]:clone(), n) end
  local Wx, Wh, b, Wy, by = unpack(P)
  local h0 = tgl.shared(tgl.zeros(H), 'h0')
  local x, y = tgl.ivector('x'), tgl.ivector('y')
  local e = Wx[x] + b                           -- T × H: one_hot(x) · Wx + b
  local hs = tgl.scan { fn = function(e_t, h_prev, Wh_) return tgl.sigmoid(e_t + h_prev:dot(Wh_)) end,
                        sequences = { e }, outputs_info = { h0 }, non_sequences = { Wh }, name = 'elman' }
  -- the mean over steps of -log softmax(h Wy + by)[y]: tgl's rewrites make
  -- it one softmax_crossentropy op (and one op for its gradient)
  local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(hs:dot(Wy) + by), y))
  local grads = tgl.grad(cost, P)
  local updates = {}
  for k, p in ipairs(P) do updates[k] = { p, p - LR * grads[k] } end
  local train = tgl.compile { inputs = { x, y }, outputs = cost, updates = updates, linker = 'cvm_nogc',
                              profile = profile, name = 'rnn_train' }
  local eval = not profile and tgl.compile { inputs = { x, y }, outputs = cost, name = 'rnn_eval' }
  train.trust_input = true
  return train, eval, function() for k, n in ipairs(names) do P[k]:set_value(w[n]:clone()) end end
end

-- where a profiled run spends its time: the top-level ops, largest first
local function profile_rows(text, nseq)
  local r = {}
  local top = text:match('^(.-)\n%s*body of scan') or text
  for op, ms, share in top:gmatch('\n  (%S+)%s+%d+%s+%d+%s+([%d.]+)%s+([%d.]+)%%') do
    r[#r + 1] = { op = op, share = tonumber(share), us = tonumber(ms) * 1000 / nseq }
  end
  return r
end

if opts.csv and opts.header then emit(CSV_HEADER) end
say(('Elman RNN benchmark (T = %d, batch 1, float32, SGD lr %g, full BPTT), %d thread(s); %s'):format(
  T, LR, opts.threads, stats.describe()))
say(('load average %s'):format((io.open('/proc/loadavg'):read('*l'):match('^(%S+ %S+ %S+)'))))

for _, V in ipairs(vocabs) do
  local seqs = opts.data and tgl.load(('%s/rnn_V%d.npz'):format(opts.data, V)) or make_seqs(V)
  local xs, ys = {}, {}                          -- per sequence, 1-based ids
  for k = 1, NSEQ do
    xs[k] = (seqs.x[k] + 1):astype('int32'):clone()
    ys[k] = (seqs.y[k] + 1):astype('int32'):clone()
  end
  for _, H in ipairs(hiddens) do
    local w = opts.data and tgl.load(('%s/rnn_H%d_V%d.npz'):format(opts.data, H, V)) or make_weights(H, V)
    local t_build = tgl.time()
    local train, eval, reset = build(H, V, w, false)
    local t_compile = tgl.time() - t_build
    -- the check, from the initial weights
    local loss0 = eval(xs[1], ys[1]):get()
    for _ = 1, CHECK_STEPS do train(xs[1], ys[1]) end
    local loss1 = eval(xs[1], ys[1]):get()
    local ok = loss1 < loss0 and loss1 == loss1
    say(('\n-- H %d, V %d: compiled in %.2f s; loss %.6f -> %.6f after %d SGD steps on sequence 1%s'):format(
      H, V, t_compile, loss0, loss1, CHECK_STEPS, ok and '' or '  (NOT DOWN)'))
    reset()
    -- timing: warm-up, then the sequences in turn
    local t0 = tgl.time()
    train(xs[2], ys[2])
    local mt = min_time_for(tgl.time() - t0)
    local pos = 0
    local s = stats.measure(function(n)
      for _ = 1, n do pos = pos % NSEQ + 1; train(xs[pos], ys[pos]) end
    end, tgl.time, { warmup = 2, min_time = mt })
    local sps = rescale(s, function(x_) return T / x_ end)
    say(('%-28s %s'):format('call from Lua, trust_input', stats.format(sps, '%9.0f', 1, 'steps/s')))
    local note = mt < stats.MIN_TIME and ('repeats of %.3g s (budget)'):format(mt) or ''
    report('trust_input', H, V, sps, loss0, loss1, note)

    local s2 = stats.measure(function(n) train.fn { n_calls = n } end, tgl.time, { warmup = 2, min_time = mt })
    local sps2 = rescale(s2, function(x_) return T / x_ end)
    say(('%-28s %s'):format('fn{n_calls}', stats.format(sps2, '%9.0f', 1, 'steps/s')))
    report('n_calls', H, V, sps2, loss0, loss1, note)

    if opts.profile then
      local ptrain = build(H, V, w, true)
      local nseq = math.max(3, math.ceil(0.3 * sps.median / T))
      ptrain(xs[1], ys[1])
      ptrain.fn { n_calls = nseq - 1 }
      local text = ptrain:profile_summary()
      io.stderr:write(('-- profile H %d V %d threads %d\n%s\n'):format(H, V, opts.threads, text))
      for _, r in ipairs(profile_rows(text, nseq)) do
        local line = ('#profile,%d,%d,%d,%s,%.1f,%.1f'):format(H, V, opts.threads, r.op, r.share, r.us)
        if opts.csv then emit(line) else say(line) end
      end
    end
    collectgarbage()
  end
end
