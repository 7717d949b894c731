-- bench/lib/stats.lua — how the benchmarks turn repeated timings into one
-- figure.  A figure is the median of R repeats (default 5), each repeat at
-- least S seconds of work (default 0.5) after a warm-up, reported with its
-- spread: min–max, and (max − min) / median in percent.  A spread above
-- FLAG_PCT (10%) is flagged: the machine was busy or the code's speed
-- varies, and a ratio near 1 from that figure decides nothing.
-- bench/peers/common.py repeats these rules for the Python peers.
--
-- Knobs, in every bench script that uses this file: --repeats R and
-- --min-time S on the command line, or the environment variables
-- TGL_BENCH_REPEATS and TGL_BENCH_MIN_TIME (bench/run sets both).
local M = {}

M.REPEATS = tonumber(os.getenv('TGL_BENCH_REPEATS')) or 5
M.MIN_TIME = tonumber(os.getenv('TGL_BENCH_MIN_TIME')) or 0.5
M.FLAG_PCT = 10

-- {median=, min=, max=, spread_pct=, n=, values=} of a list of numbers.
function M.summary(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  assert(n > 0, 'stats.summary: no values')
  local med = n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
  return { median = med, min = s[1], max = s[n], n = n, values = xs,
           spread_pct = med ~= 0 and 100 * (s[n] - s[1]) / math.abs(med) or 0 }
end

-- True when two summaries' min–max ranges overlap: the run does not
-- separate them.  (With 5 repeats each, ranges that do not overlap mean
-- every repeat of one beat every repeat of the other: a rank test gives
-- p ≈ 0.008.)
function M.overlap(a, b)
  return a.min <= b.max and b.min <= a.max
end

-- Work on a GPU is asynchronous (a call returns once its kernels are
-- queued): under tgl.config.device = 'cuda' a timing ends when the device
-- has finished, so the figures are work done, not work queued.
local function device_sync()
  local tgl = package.loaded.tgl
  if tgl and tgl.cuda and tgl.cuda.synchronize and tgl.config and tgl.config.device == 'cuda' then
    tgl.cuda.synchronize()
  end
end
M.device_sync = device_sync

-- Times body(n) (n iterations of the work) for R repeats of at least
-- min_time seconds each, after a warm-up.  n is found by doubling from 1
-- until a run takes min_time / 4, then scaled up with a 20% margin.
-- Returns the summary of seconds per iteration, plus .n (iterations per
-- repeat) and .shortest (the shortest repeat, s).
function M.measure(body, clock, opts)
  opts = opts or {}
  local R, min_time = opts.repeats or M.REPEATS, opts.min_time or M.MIN_TIME
  body(opts.warmup or 1)
  device_sync()
  collectgarbage()
  local n, dt = 1, 0
  while true do
    local t0 = clock()
    body(n)
    device_sync()
    dt = clock() - t0
    if dt >= min_time / 4 or n >= 2 ^ 40 then break end
    n = n * 2
  end
  if dt < min_time then n = math.ceil(n * 1.2 * min_time / math.max(dt, 1e-9)) end
  local per, shortest = {}, math.huge
  for r = 1, R do
    collectgarbage()
    local t0 = clock()
    body(n)
    device_sync()
    local d = clock() - t0
    per[r], shortest = d / n, math.min(shortest, d)
  end
  local s = M.summary(per)
  s.n, s.shortest = n, shortest
  return s
end

-- "1.23 ms (1.20–1.31, 9%)": the summary s times scale, with fmt for the
-- numbers and the unit (optional) after the median; a trailing " !" when
-- the spread is above FLAG_PCT.
function M.format(s, fmt, scale, unit)
  scale = scale or 1
  local f = fmt:gsub('^%%%d+', '%%')          -- no field width inside the brackets
  return (fmt .. '%s (' .. f .. '–' .. f .. ', %.0f%%)%s'):format(s.median * scale, unit and ' ' .. unit or '',
    s.min * scale, s.max * scale, s.spread_pct, s.spread_pct > M.FLAG_PCT and ' !' or '')
end

-- Takes --repeats R and --min-time S out of an argument list (into
-- M.REPEATS, M.MIN_TIME); returns the other arguments in order.
function M.parse_args(args)
  local rest, i = {}, 1
  while args[i] ~= nil do
    local a = args[i]
    if a == '--repeats' or a == '--min-time' then
      local v = tonumber(args[i + 1])
      if not v or v <= 0 then error(('%s needs a positive number'):format(a), 0) end
      if a == '--repeats' then M.REPEATS = math.floor(v) else M.MIN_TIME = v end
      i = i + 2
    else
      rest[#rest + 1] = a; i = i + 1
    end
  end
  return rest
end

-- One line saying how the figures were made (for the scripts' headers).
function M.describe()
  return ('median of %d repeats of >= %g s each after a warm-up; (min–max, spread %% of the median); ' ..
          '! = spread > %d%%'):format(M.REPEATS, M.MIN_TIME, M.FLAG_PCT)
end

return M
