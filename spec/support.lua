-- support.lua — helpers the busted specs share (loaded with
-- dofile('spec/support.lua'); specs run from the repository root).
local M = {}

-- True in CI (CI set) and under scripts/test.sh (TGL_TEST_STRICT=1): a
-- dependency of the suite that is missing fails the test there, and makes
-- it pending elsewhere (scripts/install-deps.sh --test installs them all).
function M.strict_deps()
  local ci = os.getenv('CI')
  return os.getenv('TGL_TEST_STRICT') == '1'
      or (ci ~= nil and ci ~= '' and ci ~= 'false' and ci ~= '0')
end

-- Fails (strict) or marks pending a test whose dependency `what` is missing.
function M.missing_dep(what)
  local msg = what .. ' is not installed (scripts/install-deps.sh --test installs it)'
  if M.strict_deps() then error(msg, 2) end
  -- busted gives `pending` to the spec's environment, not to _G
  getfenv(2).pending(msg)
end

-- Runs a chunk of Lua in a new tgl process (a crash there fails one test
-- instead of ending the run); returns stdout, stderr and the exit status
-- (read from the shell: LuaJIT's close gives none).
function M.run_process(chunk)
  local bin = os.getenv('TGL_BIN') or arg[-1]
  local src, errf = os.tmpname(), os.tmpname()
  local f = assert(io.open(src, 'w'))
  f:write(chunk)
  f:close()
  local p = io.popen(('%q %q 2>%q; echo "exit status $?"'):format(bin, src, errf))
  local out = p:read('*a')
  p:close()
  f = io.open(errf)
  local err = f and f:read('*a') or ''
  if f then f:close() end
  os.remove(errf)
  os.remove(src)
  local code = tonumber(out:match('exit status (%d+)%s*$'))
  out = out:gsub('exit status %d+%s*$', '')
  return out, err, code
end

return M
