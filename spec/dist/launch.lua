-- spec/dist/launch.lua — runs tgl scripts under mpirun for the specs of
-- tgl.dist (spec/dist_spec.lua, spec/nn_dist_spec.lua): every process of
-- the job is the tgl host (TGL_BIN) running one script of spec/dist/.
--
--   local launch = require 'spec.dist.launch'   (from the repository root)
--   local ok, why = launch.available()          -- false, why: mpirun or MPI missing
--   local r = launch.run(2, 'spec/dist/collectives.lua', {'arg'}, {timeout = 60})
--   -- r.ok (exit status 0), r.status, r.output (stdout and stderr), r.seconds
--
-- mpirun gets --oversubscribe (more processes than cores) and, as root,
-- --allow-run-as-root; a job is killed after its timeout (default 120 s).
local tgl = require 'tgl'

local support = dofile('spec/support.lua')
local M = {}

local function sh_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- The mpirun command, or nil.
function M.mpirun()
  local path, code = support.sh('command -v mpirun')
  path = path:gsub('%s+$', '')
  return code == 0 and path ~= '' and path or nil
end

-- true, or false and why the multi-process specs cannot run here.
function M.available()
  if not tgl.dist.available() then return false, 'this tgl was built without MPI (-DTGL_MPI)' end
  if not M.mpirun() then return false, 'mpirun is not installed (Debian openmpi-bin)' end
  if not os.getenv('TGL_BIN') then return false, 'TGL_BIN (the tgl host) is not set' end
  return true
end

local is_root = support.sh('id -u'):match('^0%s*$') ~= nil

-- Runs script under mpirun -np np; args are the script's arguments.
-- opts: timeout (seconds, default 120), env (a table of NAME = value for
-- every process).
function M.run(np, script, args, opts)
  opts = opts or {}
  local parts = { 'timeout', '-k', '10', tostring(opts.timeout or 120), sh_quote(M.mpirun()),
                  '--oversubscribe' }
  if is_root then parts[#parts + 1] = '--allow-run-as-root' end
  parts[#parts + 1] = '-np'
  parts[#parts + 1] = tostring(np)
  -- Under the sanitizers (scripts/test.sh --sanitize), the processes keep
  -- AddressSanitizer's and UBSan's checks but not LeakSanitizer's: Open
  -- MPI frees neither what MPI_Init allocates nor its plugins' blocks, and
  -- unloads the plugins at exit, leaving reports with no frame a
  -- suppression could name.  (tgl.dist's own paths are leak-checked in
  -- one process: spec/dist_spec.lua, the bucket ops in rewrite_spec and
  -- op_matrix_spec.)
  local asan = os.getenv('ASAN_OPTIONS')
  if asan then
    parts[#parts + 1] = '-x'
    parts[#parts + 1] = sh_quote('ASAN_OPTIONS=' .. asan .. ':detect_leaks=0')
  end
  for k, v in pairs(opts.env or {}) do
    parts[#parts + 1] = '-x'
    parts[#parts + 1] = sh_quote(k .. '=' .. tostring(v))
  end
  parts[#parts + 1] = sh_quote(os.getenv('TGL_BIN'))
  parts[#parts + 1] = sh_quote(script)
  for _, a in ipairs(args or {}) do parts[#parts + 1] = sh_quote(a) end
  local cmd = table.concat(parts, ' ')
  local t0 = tgl.time()
  local out, status = support.sh(cmd)
  status = status or -1
  return { ok = status == 0, status = status, output = out, seconds = tgl.time() - t0, command = cmd }
end

return M
