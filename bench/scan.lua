-- bench/scan.lua — what tgl.scan costs.  Three cases:
--
--   overhead  per-step cost of the loop: a scan of h = h + 1 on a 1-element
--             float64 vector for 10^6 steps (variant `scan`), against a Lua
--             `for` loop calling a compiled h + 1 10^6 times with
--             trust_input, feeding each result back (variant `lua_loop`).
--             Figure: ns per step.
--   rnn       an Elman RNN (input 100, hidden 100, readout 10, 100 time
--             steps, batch 1, float32): h_t = tanh(x_t Wx + h_{t-1} Wh + b),
--             cost = mean over steps and outputs of (h_t Wy + by - y_t)^2;
--             forward + backpropagation through time + SGD (lr 0.01) in ONE
--             compiled function with updates.  Variants: `trust_input` (one
--             call from Lua per sequence) and `n_calls` (f.fn{n_calls=N}).
--             Figure: time steps per second (100 x sequences per second).
--             Before timing, a check: the loss before and after 20 SGD steps
--             from the shared initial weights (bench/run compares it with
--             the peers', which start from the same file).
--   memory    a 10^5-step scan of h = h + 1 on 1000 float64 whose result
--             reads only the last state h[-1]: peak RSS (VmHWM) of a fresh
--             child process per variant: `default` rewrites, `no_save_mem`
--             (tgl.config.exclude = 'scan_save_mem': every step's state
--             kept, 800 MB) and `baseline` (the same process compiling and
--             calling h + 1 once, no scan).  Figure: MiB, the median of R
--             children (R = --repeats) with their spread.
--
-- Timing: bench/lib/stats.lua (median of R repeats of >= S seconds, spread).
--   tgl bench/scan.lua [--cases overhead,rnn,memory] [--threads N]
--                      [--data DIR] [--make-data DIR] [--csv [--header]]
--                      [--system NAME] [--repeats R] [--min-time S]
-- --data DIR reads DIR/scan_rnn.npz (written by --make-data DIR; the peers
-- bench/peers/scan_*.py read it too); without it the same numbers are made
-- in memory (tgl.manual_seed).  --csv prints the rows bench/run scan
-- collects (columns: CSV_HEADER below) instead of the text report.
local here = arg[0]:match('^(.*)/[^/]*$') or '.'
package.path = here .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local peer = require 'peer_common'

local N_OVERHEAD = 1000000             -- steps of case overhead
local N_MEM, D_MEM = 100000, 1000      -- steps and state size of case memory
local T, N_IN, N_H, N_OUT = 100, 100, 100, 10
local LR, CHECK_STEPS = 0.01, 20
local CSV_HEADER = 'system,variant,case,threads,unit,median,min,max,spread_pct,repeats,values,' ..
                   'loss_before,loss_after,note'

local function vmhwm_mib()
  local f = assert(io.open('/proc/self/status'))
  local s = f:read('*a')
  f:close()
  local kb = s:match('VmHWM:%s*(%d+)%s*kB')
  return kb and tonumber(kb) / 1024 or -1
end

-- The memory case's child: one variant, prints "MiB seconds value".
if arg[1] == '--mem-child' then
  local variant = arg[2]
  tgl.config.compile = 'sync'
  tgl.config.threads = 1
  local h0 = tgl.dvector('h0')
  local h0a = tgl.zeros(D_MEM, { dtype = 'float64' })
  local f
  if variant == 'baseline' then
    f = tgl.compile { inputs = { h0 }, outputs = h0 + 1, name = 'inc' }
  else
    if variant == 'no_save_mem' then
      local known = false
      for _, r in ipairs(tgl.rules()) do known = known or r.name == 'scan_save_mem' end
      if not known then print('missing: no rewrite rule scan_save_mem in tgl.rules()'); return end
      tgl.config.exclude = 'scan_save_mem'
    end
    local hs = tgl.scan { fn = function(h) return h + 1 end, outputs_info = { h0 }, n_steps = N_MEM,
                          name = 'count' }
    f = tgl.compile { inputs = { h0 }, outputs = hs[-1], name = 'scan_last' }
    tgl.config.exclude = {}
  end
  local t0 = tgl.time()
  local r = f(h0a)
  local dt = tgl.time() - t0
  local want = variant == 'baseline' and 1 or N_MEM
  assert(r:get(1) == want and r:get(D_MEM) == want,
         ('memory case %s: h[-1] = %s, expected %d'):format(variant, tostring(r:get(1)), want))
  print(('%.1f %.6f %g'):format(vmhwm_mib(), dt, r:get(1)))
  return
end

local opts = { cases = 'overhead,rnn,memory', threads = tonumber(os.getenv('TGL_NUM_THREADS')) or 1,
               csv = false, header = false, system = 'tgl' }
peer.parse_args(arg, opts, 'usage: tgl bench/scan.lua [--cases overhead,rnn,memory] [--threads N] [--data DIR]\n' ..
                '                          [--make-data DIR] [--csv [--header]] [--system NAME]\n' ..
                '                          [--repeats R] [--min-time S]\n')

-- The RNN's data and initial weights (float32): x (T x N_IN) ~ N(0, 1),
-- target y (T x N_OUT) = sin of a random phase plus step / 10, Wx, Wy ~
-- N(0, 0.1^2), Wh ~ N(0, 0.08^2) (spectral radius about 0.8), zero biases.
local function make_rnn_data()
  tgl.manual_seed(1234)
  local d = {
    x = tgl.randn(T, N_IN),
    Wx = tgl.randn(N_IN, N_H) * 0.1,
    Wh = tgl.randn(N_H, N_H) * 0.08,
    b = tgl.zeros(N_H),
    Wy = tgl.randn(N_H, N_OUT) * 0.1,
    by = tgl.zeros(N_OUT),
  }
  local phase = tgl.rand(N_OUT) * 6.28
  local y = tgl.zeros(T, N_OUT)
  for t = 1, T do
    for k = 1, N_OUT do y:set(math.sin(phase:get(k) + t / 10), t, k) end
  end
  d.y = y
  for k, v in pairs(d) do d[k] = v:astype('float32') end
  return d
end

if opts.make_data then
  os.execute(('mkdir -p %q'):format(opts.make_data))
  local path = opts.make_data .. '/scan_rnn.npz'
  tgl.save(path, make_rnn_data())
  print('wrote ' .. path)
  return
end

peer.setup_tgl(opts.threads)         -- kernels compiled before the first call

local rows = {}
local function report(variant, case, unit, s, extra)
  extra = extra or {}
  local vals = {}
  for i, v in ipairs(s.values) do vals[i] = ('%.6g'):format(v) end
  rows[#rows + 1] = ('%s,%s,%s,%d,%s,%.6g,%.6g,%.6g,%.2f,%d,%s,%s,%s,%s'):format(
    opts.system, variant, case, opts.threads, unit, s.median, s.min, s.max, s.spread_pct, s.n,
    table.concat(vals, ';'), extra.loss_before and ('%.6f'):format(extra.loss_before) or '',
    extra.loss_after and ('%.6f'):format(extra.loss_after) or '', extra.note or '')
  if opts.csv then print(rows[#rows]); io.stdout:flush() end
end
local function say(...) if not opts.csv then print(...) end end
-- a summary of per-unit values from stats.measure's seconds per call
local function rescale(s, f)
  local v = {}
  for i, x in ipairs(s.values) do v[i] = f(x) end
  local r = stats.summary(v)
  r.n = #v
  return r
end

if opts.csv and opts.header then print(CSV_HEADER) end
say(('tgl.scan benchmarks, %d thread(s); %s'):format(opts.threads, stats.describe()))
say(('load average %s'):format((io.open('/proc/loadavg'):read('*l'):match('^(%S+ %S+ %S+)'))))

local cases = {}
for c in opts.cases:gmatch('[^,]+') do cases[c] = true end

---------------------------------------------------------------- overhead
if cases.overhead then
  say(('\n-- overhead: h = h + 1 on 1 float64, %d steps'):format(N_OVERHEAD))
  local h = tgl.dvector('h')
  local h0a = tgl.zeros(1, { dtype = 'float64' })

  local hs = tgl.scan { fn = function(hp) return hp + 1 end, outputs_info = { h }, n_steps = N_OVERHEAD,
                        name = 'count' }
  local fscan = tgl.compile { inputs = { h }, outputs = hs[-1], name = 'scan_count' }
  fscan.trust_input = true
  local r = fscan(h0a)
  assert(r:get(1) == N_OVERHEAD, ('scan: h[-1] = %s, expected %d'):format(tostring(r:get(1)), N_OVERHEAD))
  local s = stats.measure(function(n) for _ = 1, n do fscan(h0a) end end, tgl.time, { warmup = 1 })
  local ns = rescale(s, function(x) return x / N_OVERHEAD * 1e9 end)
  say(('%-34s %s'):format('scan, 10^6 steps in one call', stats.format(ns, '%9.1f', 1, 'ns/step')))
  report('scan', 'overhead', 'ns/step', ns)

  local finc = tgl.compile { inputs = { h }, outputs = h + 1, name = 'inc' }
  finc.trust_input = true
  local ha = finc(h0a)
  local s2 = stats.measure(function(n)
    for _ = 1, n do
      local a = h0a
      for _ = 1, N_OVERHEAD do a = finc(a) end
      ha = a
    end
  end, tgl.time, { warmup = 1 })
  assert(ha:get(1) == N_OVERHEAD, ('lua loop: h = %s, expected %d'):format(tostring(ha:get(1)), N_OVERHEAD))
  local ns2 = rescale(s2, function(x) return x / N_OVERHEAD * 1e9 end)
  say(('%-34s %s'):format('Lua for loop, trust_input calls', stats.format(ns2, '%9.1f', 1, 'ns/step')))
  report('lua_loop', 'overhead', 'ns/step', ns2)
end

---------------------------------------------------------------- rnn
if cases.rnn then
  say(('\n-- rnn: Elman %d-%d-%d, %d steps, batch 1, float32; forward + BPTT + SGD in one function'):format(
    N_IN, N_H, N_OUT, T))
  local d
  if opts.data then d = tgl.load(opts.data .. '/scan_rnn.npz') else d = make_rnn_data() end
  local x, y = tgl.matrix('x'), tgl.matrix('y')
  local names = { 'Wx', 'Wh', 'b', 'Wy', 'by' }
  local P = {}
  for i, k in ipairs(names) do P[i] = tgl.shared(d[k]:clone(), k) end
  local Wx, Wh, b, Wy, by = unpack(P)
  local h0 = tgl.shared(tgl.zeros(N_H), 'h0')

  local hs, scan_updates = tgl.scan {
    fn = function(x_t, h_prev, Wx_, Wh_, b_) return tgl.tanh(x_t:dot(Wx_) + h_prev:dot(Wh_) + b_) end,
    sequences = { x }, outputs_info = { h0 }, non_sequences = { Wx, Wh, b }, name = 'elman',
  }
  assert(scan_updates == nil or next(scan_updates) == nil, 'rnn: scan returned updates')
  local out = hs:dot(Wy) + by
  local cost = tgl.mean((out - y) ^ 2)
  local grads = tgl.grad(cost, P)
  local updates = {}
  for i, p in ipairs(P) do updates[i] = { p, p - LR * grads[i] } end
  local train = tgl.compile { inputs = { x, y }, outputs = cost, updates = updates, linker = 'cvm_nogc',
                              name = 'rnn_train' }
  local eval = tgl.compile { inputs = { x, y }, outputs = cost, name = 'rnn_eval' }
  train.trust_input = true
  local xa, ya = d.x, d.y

  -- the check: 20 SGD steps from the initial weights
  local function reset() for i, k in ipairs(names) do P[i]:set_value(d[k]:clone()) end end
  local loss0 = eval(xa, ya):get()
  for _ = 1, CHECK_STEPS do train(xa, ya) end
  local loss1 = eval(xa, ya):get()
  say(('loss %.6f -> %.6f after %d SGD steps%s'):format(loss0, loss1, CHECK_STEPS,
                                                        loss1 < loss0 and '' or '  (NOT DOWN)'))

  local s = stats.measure(function(n) for _ = 1, n do train(xa, ya) end end, tgl.time, { warmup = 5 })
  local sps = rescale(s, function(x_) return T / x_ end)
  say(('%-34s %s'):format('call from Lua, trust_input', stats.format(sps, '%9.0f', 1, 'steps/s')))
  report('trust_input', 'rnn', 'steps/s', sps, { loss_before = loss0, loss_after = loss1 })

  reset()
  train(xa, ya)
  local s2 = stats.measure(function(n) train.fn { n_calls = n } end, tgl.time, { warmup = 5 })
  local sps2 = rescale(s2, function(x_) return T / x_ end)
  say(('%-34s %s'):format('fn{n_calls}', stats.format(sps2, '%9.0f', 1, 'steps/s')))
  report('n_calls', 'rnn', 'steps/s', sps2, { loss_before = loss0, loss_after = loss1 })
end

---------------------------------------------------------------- memory
if cases.memory then
  say(('\n-- memory: %d steps of h = h + 1 on %d float64, result h[-1]; peak RSS of a fresh process'):format(
    N_MEM, D_MEM))
  local tgl_bin, script = arg[-1] or 'tgl', arg[0]
  -- stats.REPEATS fresh children per variant: the peak RSS of one process
  -- moves by a few hundred KiB from one to the next, so a figure has a
  -- spread like the timed ones (bench/run --baseline-tgl compares by it)
  for _, variant in ipairs({ 'baseline', 'default', 'no_save_mem' }) do
    local mibs, secs, why, failed = {}, {}, nil, nil
    for _ = 1, stats.REPEATS do
      local p = assert(io.popen(('%q %q --mem-child %s 2>&1'):format(tgl_bin, script, variant)))
      local out = p:read('*a')
      p:close()
      local mib, sec = out:match('^([%d.]+) ([%d.]+) ')
      why = out:match('^missing: ([^\n]*)')
      if why then break end
      if not mib then failed = out; break end
      mibs[#mibs + 1], secs[#secs + 1] = tonumber(mib), tonumber(sec)
    end
    if why then
      say(('%-34s missing (%s)'):format(variant, why))
      if opts.csv then print(('#missing,%s,%s,%s'):format(opts.system, variant, why)) end
    elseif failed then
      io.stderr:write(('memory case %s failed:\n%s\n'):format(variant, failed))
      report(variant, 'memory', 'MiB', { median = -1, min = -1, max = -1, spread_pct = 0, n = 0, values = {} },
             { note = 'FAILED' })
    else
      local s = stats.summary(mibs)
      local sec = stats.summary(secs).median
      say(('%-34s %s peak RSS   (one call %.3f s)'):format(variant, stats.format(s, '%9.1f', 1, 'MiB'), sec))
      report(variant, 'memory', 'MiB', s, { note = ('call %.3f s'):format(sec) })
    end
  end
  say(('(every step kept: %d x %d x 8 B = %.0f MiB)'):format(N_MEM, D_MEM, N_MEM * D_MEM * 8 / 2 ^ 20))
end
