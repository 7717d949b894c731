-- bench/lib/peer_common.lua — what the benchmarks run by bench/lib/peer_run.sh
-- (bench/scan.lua, bench/rop.lua) and their reports (bench/lib/scan_report.lua,
-- rop_report.lua) share: the scripts' command line and the reports' header.
local stats = require 'stats'
local M = {}

-- Reads args (--repeats and --min-time first, stats.parse_args) into opts:
-- --csv, --header (flags), --cases, --data, --make-data (as make_data),
-- --system (strings), --threads N; anything else writes usage_text to
-- stderr and exits with status 2.
function M.parse_args(args, opts, usage_text)
  local rest = stats.parse_args(args)
  local i = 1
  local function usage()
    io.stderr:write(usage_text)
    os.exit(2)
  end
  while rest[i] do
    local a = rest[i]
    if a == '--csv' or a == '--header' then
      opts[a:sub(3)] = true; i = i + 1
    elseif a == '--cases' or a == '--data' or a == '--make-data' or a == '--system' then
      if not rest[i + 1] then usage() end
      opts[a:sub(3):gsub('-', '_')] = rest[i + 1]; i = i + 2
    elseif a == '--threads' then
      opts.threads = tonumber(rest[i + 1]) or usage(); i = i + 2
    else
      usage()
    end
  end
  return opts
end

-- The run's <name>_meta.csv as a table key -> value (values may hold no
-- commas), and the list of its keys in the file's order.
function M.read_meta(path)
  local meta, order = {}, {}
  for line in io.lines(path) do
    local k, v = line:match('^([^,]+),(.*)$')
    if k and k ~= 'key' then meta[k] = v; order[#order + 1] = k end
  end
  return meta, order
end

-- stats.describe() with the run's repeats and min_time.
function M.describe(meta)
  return (stats.describe():gsub('median of %d+ repeats', 'median of ' .. (meta.repeats or '?') ..
    ' repeats'):gsub('>= [%d.]+ s', '>= ' .. (meta.min_time or '?') .. ' s'))
end

-- The report's list of the run's settings, versions, missing systems and
-- load, through w(...) (one line each), then an empty line.
function M.write_meta(w, meta)
  for _, k in ipairs({ 'date', 'cpu', 'blas', 'tgl_commit', 'repeats', 'min_time', 'run_seconds' }) do
    if meta[k] then w('- ', k, ': ', meta[k]) end
  end
  if meta.baseline_tgl then          -- bench/run ... --baseline-tgl
    w('- Baseline **tgl@base**: `', meta.baseline_tgl, '` (checkout at ', meta.baseline_commit or '?',
      '), run on the same bench script, each cell right before or after tgl (the order alternates)')
  end
  local mkeys = {}
  for k in pairs(meta) do mkeys[#mkeys + 1] = k end
  table.sort(mkeys)
  for _, k in ipairs(mkeys) do
    local v = meta[k]
    if k:match('^version%.') then w('- ', k:sub(9), ' ', v) end
    if k:match('^missing%.') then w('- ', k:sub(9), ': missing (', v, ')') end
    if k:match('^missing_variant%.') then w('- ', k:sub(17), ': not run (', v, ')') end
  end
  w('- Load average (1, 5, 15 min) before the run: ', meta.load_before or '?', '; after: ', meta.load_after or '?',
    '; highest 1-min figure seen between processes: ', meta.load_max or '?')
  w('')
end

-- tgl's settings for a benchmark process: kernels compiled before the
-- first call, `threads` threads, and a warning when OpenBLAS's variable
-- says otherwise (bench/run sets both).
function M.setup_tgl(threads, who)
  tgl.config.compile = 'sync'
  tgl.config.threads = threads
  local blas_threads = os.getenv('OPENBLAS_NUM_THREADS')
  if blas_threads and tonumber(blas_threads) ~= threads then
    io.stderr:write(('%swarning: OPENBLAS_NUM_THREADS=%s but --threads %d\n'):format(
      who and who .. ': ' or '', blas_threads, threads))
  end
end

return M
