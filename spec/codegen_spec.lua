-- codegen_spec.lua — generated kernels seen from Lua: tiered compilation
-- (callable at once, same values after the swap), the disk cache across
-- processes (hits, a truncated entry rebuilt, two processes at once), no
-- compiler (reference kernels, one warning), and DEBUG mode catching a
-- generated kernel that disagrees with the reference.
local tmp = os.getenv('TGL_TEST_TMP') or '/tmp'
local bin = os.getenv('TGL_BIN') or arg[-1]
os.execute('mkdir -p ' .. tmp)

local function fresh_dir(name)
  local dir = tmp .. '/codegen-' .. name
  os.execute(('rm -rf %q && mkdir -p %q'):format(dir, dir))
  return dir
end

-- Runs a chunk in a new tgl process; returns stdout, stderr, exit status.
-- (LuaJIT's p:close() gives no exit status: the shell prints it last.)
local function run(chunk, env)
  local errf = os.tmpname()
  local cmd = ('%s %q -e %q 2>%q; echo "exit status $?"'):format(env or '', bin, chunk, errf)
  local p = io.popen(cmd)
  local out = p:read('*a')
  p:close()
  local f = io.open(errf)
  local err = f and f:read('*a') or ''
  if f then f:close() end
  os.remove(errf)
  local code = tonumber(out:match('exit status (%d+)\n$'))
  out = out:gsub('exit status %d+\n$', '')
  return out, err, code
end

-- The chunk every process runs: compile y = tanh(a*x+b)*c and print it.
local CHUNK = [[
tgl.config.compile = 'sync'
local x = tgl.vector('x')
local f = tgl.compile { inputs = { x }, outputs = tgl.tanh(x * 1.5 - 0.25) * 0.75 }
print(f(tgl.array({ -1, 0, 0.5, 2 })))
print(f:program():match('%[(%a+)%]'))
]]

local function entries(dir)
  local p = io.popen(('ls %q/*.so 2>/dev/null'):format(dir))
  local list = {}
  for line in p:lines() do list[#list + 1] = line end
  p:close()
  return list
end

describe('tiered compilation', function()
  after_each(function() tgl.config.compile = 'tiered' end)

  it('a function is callable before its optimized kernels are ready, with the same values after the swap', function()
    tgl.config.cache_dir = fresh_dir('tiered')
    tgl.config.compile = 'tiered'
    local x = tgl.vector('x')
    local f = tgl.compile { inputs = { x }, outputs = tgl.exp(x * 0.5) + tgl.sigmoid(x) }
    local xa = tgl.array({ -3, -0.5, 0, 1, 4 })
    local before = f(xa)                     -- runs at once (libtcc or reference)
    local tier_before = f:program():match('%[(%a+)%]')
    f:wait_compiled()
    assert.equals('cc', f:program():match('%[(%a+)%]'))
    local after = f(xa)
    assert.is_true(tier_before == 'tcc' or tier_before == 'ref' or tier_before == 'cc')
    for i = 1, 5 do
      assert.is_true(math.abs(before:get(i) - after:get(i)) <= 1e-6 * math.abs(after:get(i)) + 1e-7,
                     ('element %d: %g before, %g after'):format(i, before:get(i), after:get(i)))
      local want = math.exp(xa:get(i) * 0.5) + 1 / (1 + math.exp(-xa:get(i)))
      assert.is_true(math.abs(after:get(i) - want) < 1e-5)
    end
  end)

  it("compile = 'tcc' runs libtcc code only, 'sync' the system compiler's", function()
    tgl.config.cache_dir = fresh_dir('modes')
    local x = tgl.vector('x')
    tgl.config.compile = 'tcc'
    local f = tgl.compile { inputs = { x }, outputs = tgl.tanh(x) * 2 }
    assert.equals('tcc', f:program():match('%[(%a+)%]'))
    tgl.config.compile = 'sync'
    local g = tgl.compile { inputs = { x }, outputs = tgl.tanh(x) * 3 }
    assert.equals('cc', g:program():match('%[(%a+)%]'))
    local xa = tgl.array({ 0.5 })
    assert.is_true(math.abs(f(xa):get(1) - 2 * math.tanh(0.5)) < 1e-6)
    assert.is_true(math.abs(g(xa):get(1) - 3 * math.tanh(0.5)) < 1e-6)
  end)
end)

describe('the kernel cache', function()
  it('a second process compiling the same graph hits the cache', function()
    local dir = fresh_dir('hit')
    -- a compiler that counts its compiles (and answers --version as cc does)
    local wrapper, log = dir .. '/countcc', dir .. '/compiles'
    local f = io.open(wrapper, 'w')
    f:write(('#!/bin/sh\ncase "$*" in *--version*) ;; *) echo x >> %q;; esac\nexec cc "$@"\n'):format(log))
    f:close()
    os.execute('chmod +x ' .. wrapper)
    local env = ('TGL_CACHE_DIR=%q TGL_CC=%q'):format(dir .. '/cache', wrapper)
    local function compiles()
      local lf = io.open(log)
      if not lf then return 0 end
      local n = select(2, lf:read('*a'):gsub('x', ''))
      lf:close()
      return n
    end
    local out1, err1, rc1 = run(CHUNK, env)
    assert.equals(0, rc1, err1)
    local n = compiles()
    assert.is_true(n >= 1, 'the first process compiled nothing')
    assert.matches('cc\n$', out1)
    local out2, err2, rc2 = run(CHUNK, env)
    assert.equals(0, rc2, err2)
    assert.equals(out1, out2)
    assert.equals(n, compiles()) -- no compile the second time: cache hits
  end)

  it('a truncated cache entry is deleted and rebuilt', function()
    local dir = fresh_dir('trunc')
    local out1 = run(CHUNK, 'TGL_CACHE_DIR=' .. dir)
    for _, e in ipairs(entries(dir)) do
      os.execute(('truncate -s 100 %q'):format(e))
    end
    local out2, err2, rc2 = run(CHUNK, 'TGL_CACHE_DIR=' .. dir)
    assert.equals(0, rc2, err2)
    assert.equals(out1, out2)
    for _, e in ipairs(entries(dir)) do
      local f = io.open(e, 'rb')
      local size = f:seek('end')
      f:close()
      assert.is_true(size > 100, e .. ' was not rebuilt')
    end
  end)

  it('two processes compiling the same graph at once both succeed', function()
    local dir = fresh_dir('race')
    local outs = {}
    for i = 1, 2 do outs[i] = tmp .. '/race' .. i .. '.out' end
    os.execute(('TGL_CACHE_DIR=%q %q -e %q > %q 2>&1 & TGL_CACHE_DIR=%q %q -e %q > %q 2>&1; wait')
               :format(dir, bin, CHUNK, outs[1], dir, bin, CHUNK, outs[2]))
    local texts = {}
    for i = 1, 2 do
      local f = io.open(outs[i])
      texts[i] = f:read('*a')
      f:close()
      assert.matches('float32 of size 4', texts[i])
      assert.matches('cc\n$', texts[i])
    end
    assert.equals(texts[1], texts[2])
    local tmps = io.popen(('ls %q | grep -c tmp'):format(dir)):read('*a')
    assert.equals('0', tmps:match('%d+'))
  end)

  it('tgl --cache-info and --cache-clear', function()
    local dir = fresh_dir('cli')
    run(CHUNK, 'TGL_CACHE_DIR=' .. dir)
    local info = run('', 'TGL_CACHE_DIR=' .. dir):sub(1, 0) -- (warm-up no-op)
    local p = io.popen(('TGL_CACHE_DIR=%q %q --cache-info'):format(dir, bin))
    info = p:read('*a')
    p:close()
    assert.matches('directory: ' .. dir:gsub('%p', '%%%0'), info)
    assert.is_true(tonumber(info:match('entries: (%d+)')) >= 1)
    p = io.popen(('TGL_CACHE_DIR=%q %q --cache-clear'):format(dir, bin))
    local cleared = p:read('*a')
    p:close()
    assert.matches('cache cleared', cleared)
    assert.matches('entries: 0', cleared)
    assert.equals(0, #entries(dir))
  end)
end)

describe('no compiler', function()
  it('falls back to the reference kernels with one warning, never an error', function()
    local dir = fresh_dir('nocc')
    local ref = run(CHUNK, 'TGL_CACHE_DIR=' .. fresh_dir('nocc-ref'))
    local out, err, rc = run(CHUNK .. [[
local y = tgl.vector('y')
local g = tgl.compile { inputs = { y }, outputs = tgl.exp(y) + 1 }
print(g(tgl.array({ 0 })):get(1))
]], 'TGL_CACHE_DIR=' .. dir .. ' TGL_CC=/nonexistent/cc TGL_COMPILE=cc')
    assert.equals(0, rc, err)
    local warnings = select(2, err:gsub('no C compiler', ''))
    assert.equals(1, warnings, err)
    assert.matches('ref\n2\n$', out)
    -- the same numbers as compiled code (to float32 rounding)
    local a = out:match('^(.-)\n%[tgl')
    local b = ref:match('^(.-)\n%[tgl')
    assert.equals(b, a)
  end)
end)

describe("mode = 'DEBUG'", function()
  it('checks every generated kernel against the reference and names the node and element', function()
    -- a "compiler" that swaps tanhf for sinhf: the generated kernel is wrong
    local dir = fresh_dir('debug')
    local wrapper = dir .. '/badcc'
    local f = io.open(wrapper, 'w')
    f:write('#!/bin/sh\nfor a in "$@"; do case "$a" in *.c) sed -i "s/tanhf(/sinhf(/g" "$a";; esac; done\nexec cc "$@"\n')
    f:close()
    os.execute('chmod +x ' .. wrapper)
    local chunk = [[
tgl.config.compile = 'sync'
local x = tgl.vector('x')
local f = tgl.compile { inputs = { x }, outputs = tgl.tanh(x) * 2, mode = 'DEBUG' }
local ok, err = pcall(f, tgl.array({ 0.5, 1, 2 }))
print(ok, err)
local g = tgl.compile { inputs = { x }, outputs = tgl.tanh(x) * 2 }
print(g(tgl.array({ 2 })):get(1))
]]
    local out, err, rc = run(chunk, ('TGL_CACHE_DIR=%q TGL_CC=%q'):format(dir .. '/cache', wrapper))
    assert.equals(0, rc, err)
    assert.matches('false', out)
    assert.matches('differs from the reference', out)
    assert.matches('built at', out)
    -- without DEBUG the wrong kernel runs unchecked: that is what DEBUG is for
    assert.is_true(math.abs(tonumber(out:match('\n([%d.]+)\n$')) - 2 * math.sinh(2)) < 1e-3)
  end)
end)

describe('at exit', function()
  -- Runs a shell command line; returns its stdout (with stderr), its exit
  -- status and its wall time in seconds.
  local function sh(cmd)
    local p = io.popen(('t0=$(date +%%s%%N); { %s; } 2>&1; rc=$?; t1=$(date +%%s%%N); ' ..
                        'echo "exit status $rc time $(( (t1 - t0) / 1000000 ))"'):format(cmd))
    local out = p:read('*a')
    p:close()
    local code, ms = out:match('exit status (%d+) time (%d+)\n$')
    return out:gsub('exit status %d+ time %d+\n$', ''), tonumber(code), tonumber(ms) / 1000
  end
  local function temps(dir)
    local p = io.popen(('ls -a %q 2>/dev/null | grep -c "%%.tmp%%."'):format(dir))
    local n = tonumber(p:read('*a'):match('%d+'))
    p:close()
    return n
  end
  local function cache_entries(dir)
    local out = sh(('TGL_CACHE_DIR=%q %q --cache-info'):format(dir, bin))
    return tonumber(out:match('entries: (%d+)'))
  end
  -- A tiered (default) script: compile, call once, print the tier.
  local function script(expr, tail)
    return ([[
local x = tgl.vector('x')
local f = tgl.compile { inputs = { x }, outputs = %s }
f(tgl.array({ 1, 2, 3 }))
print(f:program():match('%%[(%%a+)%%]'))
%s]]):format(expr, tail or '')
  end

  it('a short tiered script stores its kernels: the second run runs cc code from the first call', function()
    local dir = fresh_dir('exit')
    local path = dir .. '/short.lua'
    local f = io.open(path, 'w')
    f:write(script('tgl.tanh(x * 0.5) * 3 + 1'))
    f:close()
    local env = ('TGL_CACHE_DIR=%q TGL_COMPILE=tiered'):format(dir .. '/cache')
    local out1, rc1, t1 = sh(('%s %q %q'):format(env, bin, path))
    assert.equals(0, rc1, out1)
    assert.is_true(out1 == 'tcc\n' or out1 == 'ref\n', out1)
    assert.is_true(t1 < 10, 'the first run took ' .. t1 .. ' s')
    assert.is_true(cache_entries(dir .. '/cache') >= 1)
    assert.equals(0, temps(dir .. '/cache'))
    local out2, rc2 = sh(('%s %q %q'):format(env, bin, path))
    assert.equals(0, rc2, out2)
    assert.equals('cc\n', out2)
    assert.equals(0, temps(dir .. '/cache'))
  end)

  it('a script that fails (exit 1) and a REPL session store their kernels the same way', function()
    local dir = fresh_dir('exit-err')
    local env = ('TGL_CACHE_DIR=%q TGL_COMPILE=tiered'):format(dir .. '/cache')
    local failing = script('tgl.exp(x * 0.25) - 2', "error('boom')")
    local out1, rc1 = sh(('%s %q -e %q'):format(env, bin, failing))
    assert.equals(1, rc1, out1)
    assert.matches('boom', out1)
    assert.equals(0, temps(dir .. '/cache'))
    local out2, rc2 = sh(('%s %q -e %q'):format(env, bin, failing))
    assert.equals(1, rc2, out2)
    assert.matches('^cc\n', out2)
    -- the REPL reads one line at a time: the script on one line
    local line = script('tgl.sigmoid(x) * 7 - 1'):gsub('\n', ' ')
    local path = dir .. '/repl.in'
    local f = io.open(path, 'w')
    f:write(line .. '\n')
    f:close()
    local out3, rc3 = sh(('%s %q -i < %q'):format(env, bin, path))
    assert.equals(0, rc3, out3)
    assert.matches('tcc', out3)
    assert.equals(0, temps(dir .. '/cache'))
    local out4, rc4 = sh(('%s %q -i < %q'):format(env, bin, path))
    assert.equals(0, rc4, out4)
    assert.matches('cc', out4)
    assert.not_matches('tcc', out4)
    assert.equals(0, temps(dir .. '/cache'))
  end)

  it('a compile unfinished at the exit_wait deadline is stopped and leaves no temporaries', function()
    local dir = fresh_dir('exit-slow')
    local wrapper = dir .. '/slowcc'
    local f = io.open(wrapper, 'w')
    f:write('#!/bin/sh\ncase "$*" in *--version*) ;; *) sleep 30;; esac\nexec cc "$@"\n')
    f:close()
    os.execute('chmod +x ' .. wrapper)
    local env = ('TGL_CACHE_DIR=%q TGL_CC=%q TGL_COMPILE=tiered TGL_EXIT_WAIT=0.3')
                :format(dir .. '/cache', wrapper)
    local out, rc, t = sh(('%s %q -e %q'):format(env, bin, script('tgl.cos(x) * 5')))
    assert.equals(0, rc, out)
    assert.equals('tcc\n', out) -- no message about the stopped compile
    assert.is_true(t < 3, 'exit took ' .. t .. ' s with exit_wait = 0.3')
    assert.equals(0, temps(dir .. '/cache'))
    assert.equals(0, cache_entries(dir .. '/cache'))
  end)

  it('tgl.config.exit_wait: a number of seconds, checked', function()
    local out, rc = sh(('TGL_EXIT_WAIT=2.5 %q -e %q'):format(bin, [[
print(tgl.config.exit_wait); tgl.config.exit_wait = 0; print(tgl.config.exit_wait);
print(pcall(function() tgl.config.exit_wait = -1 end))]]))
    assert.equals(0, rc, out)
    assert.matches('^2.5\n0\nfalse\t.*exit_wait must be a number of seconds from 0 to 3600', out)
  end)

  it('--cache-clear removes the temporaries no live process owns', function()
    local dir = fresh_dir('exit-clear')
    local key = ('ab'):rep(32)
    local dead, live = 999999999, 1 -- no such PID; init, always alive
    for _, name in ipairs({ ('%s.so.tmp.%d.0001'):format(key, dead),
                            ('%s.tmp.%d.0002.c'):format(key, dead),
                            ('%s.so.tmp.%d.0003'):format(key, live) }) do
      io.open(dir .. '/' .. name, 'w'):close()
    end
    local out, rc = sh(('TGL_CACHE_DIR=%q %q --cache-clear'):format(dir, bin))
    assert.equals(0, rc, out)
    local p = io.popen(('ls %q'):format(dir))
    local left = p:read('*a')
    p:close()
    assert.equals(('%s.so.tmp.%d.0003\n'):format(key, live), left)
  end)
end)
