-- bench/compile_many.lua — many distinct small functions compiled in a
-- loop under compile = 'tiered' (a hyper-parameter sweep, a module
-- compiled per input shape): the process's threads (/proc/self/status)
-- and memory growth while their kernels queue for the background
-- compile workers, and the time until all kernels are ready.  Two cases,
-- each from a fresh process with an empty kernel cache: every function
-- dropped after one call, and every function kept (then waited for).
-- Figures are medians of R processes (min–max, bench/lib/stats.lua).
--   tgl bench/compile_many.lua [--repeats R] [N]   (N functions, default 2000)
--   TGL_CFLAGS=-O0 tgl bench/compile_many.lua 300  (a quick look)
--   tgl bench/compile_many.lua --child dropped|kept N CACHE_DIR

local function status()
  local f = assert(io.open('/proc/self/status'))
  local s = f:read('*a')
  f:close()
  return tonumber(s:match('Threads:%s*(%d+)')), tonumber(s:match('VmRSS:%s*(%d+)')) / 1024
end

if arg[1] == '--child' then
  local case, n = arg[2], tonumber(arg[3])
  tgl.config.cache_dir = arg[4]
  tgl.config.compile = 'tiered'
  tgl.config.exit_wait = 0      -- a dropped function's kernel need not reach the cache
  local x = tgl.dvector('x')
  local xa = tgl.array({ 1, 2, 3 }, 'float64')
  collectgarbage()
  local threads0, rss0 = status()
  local most, peak = threads0, rss0
  local kept = {}
  local t0 = tgl.time()
  for i = 1, n do
    local f = tgl.compile { inputs = { x }, outputs = tgl.tanh(x * (1 + i / 4096)) + i }
    f(xa)
    if case == 'kept' then kept[i] = f end
    local t, r = status()
    most, peak = math.max(most, t), math.max(peak, r)
  end
  for _, f in ipairs(kept) do f:wait_compiled() end
  print(('%d %d %.3f %.6f'):format(threads0, most, peak - rss0, tgl.time() - t0))
  return
end

package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local rest = stats.parse_args(arg)
local N = tonumber(rest[1] or 2000)
if #rest > 1 or not N then
  io.stderr:write('usage: tgl bench/compile_many.lua [--repeats R] [N]\n')
  os.exit(2)
end

local tgl_bin, script = arg[-1] or 'tgl', arg[0]
local base = os.tmpname()
os.remove(base)
local CASES = { 'dropped', 'kept' }
local got = { dropped = { {}, {}, {}, {} }, kept = { {}, {}, {}, {} } }
for r = 1, stats.REPEATS do
  for _, case in ipairs(CASES) do
    local dir = ('%s-%s-%d'):format(base, case, r)
    local p = assert(io.popen(('%q %q --child %s %d %q'):format(tgl_bin, script, case, N, dir)))
    local out = p:read('*a')
    p:close()
    os.execute(('rm -rf %q'):format(dir))
    local m = { out:match('^(%d+) (%d+) ([%d.-]+) ([%d.]+)') }
    if not m[1] then error('child failed: ' .. out) end
    for k = 1, 4 do got[case][k][r] = tonumber(m[k]) end
  end
end

print(('%d distinct small functions compiled with compile = \'tiered\', cflags %s: median of %d fresh ' ..
       'processes per case (min–max)'):format(N, tgl.config.cflags, stats.REPEATS))
print(('%-8s %16s %16s %22s %26s'):format('case', 'threads before', 'threads at most', 'memory growth (MB)',
                                          'seconds (kept: to ready)'))
for _, case in ipairs(CASES) do
  local s = {}
  for k = 1, 4 do s[k] = stats.summary(got[case][k]) end
  local function cell(x, f) return (f .. ' (' .. f .. '–' .. f .. ')'):format(x.median, x.min, x.max) end
  print(('%-8s %16s %16s %22s %26s'):format(case, cell(s[1], '%.0f'), cell(s[2], '%.0f'), cell(s[3], '%.1f'),
                                            cell(s[4], '%.2f')))
end
