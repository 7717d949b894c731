-- cache_concurrency_spec.lua — the kernel cache shared between processes
-- and abused from outside (issue 24, item 4): several tgl processes started
-- together behind a barrier compile the same fused kernels, the same
-- generated whole-step function and the same scan into one fresh cache; a
-- cache directory that is read-only (a read-only bind mount in a private
-- mount namespace, and a directory another user owns), one that fills up
-- while several processes write into it, one holding truncated, garbage,
-- empty and foreign-architecture entries; and processes killed with
-- SIGKILL in the middle of a cold compile.  Every process's results are
-- checked against values computed here by hand (float64), its stderr
-- against the warnings allowed (none, or the one documented line), and
-- the directory afterwards: no temporary left, every entry a whole ELF
-- object for this machine, and a fresh process loads all of them without a
-- warning and rebuilds none (their inodes stay the same).
--
-- cache_robust_spec.lua has the single-process cases (RLIMIT_FSIZE, a
-- full tmpfs, a FIFO or a directory at an entry's name); this spec does
-- not repeat them.  TGL_CONC_LONG=1 runs more processes and more kills.
local support = dofile('spec/support.lua')

local bin = os.getenv('TGL_BIN') or arg[-1]
local root = support.tmpdir('cache_concurrency')
local long = os.getenv('TGL_CONC_LONG') == '1'

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- The work every process does.  NK distinct fused kernels, a training
-- step (logistic regression with two updates; called until its whole
-- step is bound and its generated function compiled) and a scan, each
-- checked against the same computation done here in Lua.  With GO set,
-- the process first says it is ready (READY) and waits for GO to exist,
-- so all start compiling at once.  Prints "ok <checks> generated <bool>".
local WORK = [[
local ffi = require 'ffi'
pcall(ffi.cdef, 'int usleep(unsigned int usec);')
local go = os.getenv('GO')
if go then
  io.open(os.getenv('READY'), 'w'):close()
  for _ = 1, 60000 do
    local f = io.open(go)
    if f then f:close(); break end
    ffi.C.usleep(5000)
  end
end
local tgl = require 'tgl'
tgl.config.compile = os.getenv('MODE') or 'sync'
local NK = tonumber(os.getenv('NK') or '3')
local checks = 0
local function check(got, want, what)
  if not (math.abs(got - want) <= 1e-9 * (1 + math.abs(want))) then
    error(('%s: got %.17g, expected %.17g'):format(what, got, want))
  end
  checks = checks + 1
end

-- fused kernels, one per i
local x = tgl.vector('x')
local xs = { 0.5, -1.25, 2, 0.1, -0.3 }
local first = tonumber(os.getenv('FIRST') or '1')
for i = first, first + NK - 1 do
  local f = tgl.compile{ inputs = { x }, outputs = tgl.tanh(x * i) + tgl.exp(x) * (i + 0.5) }
  for round = 1, 2 do
    local got = f(xs):totable()
    for k, v in ipairs(xs) do
      check(got[k], math.tanh(v * i) + math.exp(v) * (i + 0.5), ('kernel %d round %d'):format(i, round))
    end
    f:wait_compiled()
  end
end

-- a training step: p = sigmoid(X W + b), loss = mean((p - y)^2) + 0.01 |W|^2
local X, Y = tgl.matrix('X'), tgl.vector('Y')
local W, b = tgl.shared(tgl.zeros(3), 'W'), tgl.shared(0.0, 'b')
local p = tgl.sigmoid(X:dot(W) + b)
local loss = tgl.mean(tgl.sqr(p - Y)) + 0.01 * tgl.sum(tgl.sqr(W))
local gW, gb = unpack(tgl.grad(loss, { W, b }))
local step = tgl.compile{ inputs = { X, Y }, outputs = loss,
                          updates = { { W, W - 0.5 * gW }, { b, b - 0.5 * gb } } }
local Xv = { { 1, 2, 3 }, { 0, 1, 0 }, { 2, 0, 1 }, { 1, 1, 1 } }
local Yv = { 1, 0, 1, 0 }
local Xa, Ya = tgl.array(Xv), tgl.array(Yv)
local hW, hb = { 0, 0, 0 }, 0
for s = 1, 14 do
  local l = step(Xa, Ya):get()
  -- by hand: the loss before this step's update, then the update
  local n, want, d = #Yv, 0, {}
  for r = 1, n do
    local z = hb
    for k = 1, 3 do z = z + Xv[r][k] * hW[k] end
    local pr = 1 / (1 + math.exp(-z))
    want = want + (pr - Yv[r]) ^ 2 / n
    d[r] = 2 * (pr - Yv[r]) / n * pr * (1 - pr)
  end
  for k = 1, 3 do want = want + 0.01 * hW[k] ^ 2 end
  check(l, want, 'training loss at step ' .. s)
  local g, gbv = {}, 0
  for k = 1, 3 do
    g[k] = 0.02 * hW[k]
    for r = 1, n do g[k] = g[k] + Xv[r][k] * d[r] end
  end
  for r = 1, n do gbv = gbv + d[r] end
  for k = 1, 3 do hW[k] = hW[k] - 0.5 * g[k] end
  hb = hb - 0.5 * gbv
  -- the kernels' compiled code by step 7; the whole step, bound since
  -- step 2, records itself after two more runs and compiles its
  -- function, which runs steps 11 to 14
  if s == 6 or s == 10 then step:wait_compiled() end
end
step:wait_compiled()
local Wv = W:get_value():totable()
for k = 1, 3 do check(Wv[k], hW[k], 'W[' .. k .. ']') end
check(b:get_value():get(), hb, 'b')
local ws = step:whole_step()

-- a scan: h_t = tanh(x_t + 0.5 h_{t-1})
local S = tgl.matrix('S')
local hs = tgl.scan{ fn = function(x_t, h) return tgl.tanh(x_t + h * 0.5) end,
                     sequences = { S }, outputs_info = { tgl.zeros(3) } }
local fs = tgl.compile{ inputs = { S }, outputs = hs }
local Sv = { { 0.1, -0.2, 0.3 }, { 1, 0.5, -1 }, { -0.7, 0.2, 0.9 }, { 0.4, 0.4, -0.4 } }
-- three rounds: the kernels' compiled code by the second, the loop's
-- generated function (made from them) by the third
for round = 1, 3 do
  local got = fs(tgl.array(Sv)):totable()
  local h = { 0, 0, 0 }
  for t = 1, #Sv do
    for i = 1, 3 do
      h[i] = math.tanh(Sv[t][i] + 0.5 * h[i])
      check(got[t][i], h[i], ('scan step %d round %d'):format(t, round))
    end
  end
  fs:wait_compiled()
end
-- one kernel of its own (EXTRA): a compile that inserts into the cache
local extra = os.getenv('EXTRA')
if extra then
  local f = tgl.compile{ inputs = { x }, outputs = tgl.sin(x) * tonumber(extra) }
  check(f({ 1 }):get(1), math.sin(1) * tonumber(extra), 'extra kernel')
end
print(('ok %d generated %s'):format(checks, tostring(ws and ws.generated)))
]]
local script = root .. '/work.lua'
support.write_file(script, WORK)

-- The environment every run shares: float64 (exact checks), its own
-- temporary directory.
local function env_words(env)
  local vars = { 'TGL_FLOATX=float64' }
  for k, v in pairs(env) do vars[#vars + 1] = k .. '=' .. quote(v) end
  table.sort(vars)
  return table.concat(vars, ' ')
end

-- The lines of stderr that tgl printed.
local function tgl_lines(err)
  local lines = {}
  for line in err:gmatch('[^\n]+') do
    if line:find('^tgl') then lines[#lines + 1] = line end
  end
  return lines
end

-- A finished run {out=, err=, code=} did all its checks, and printed no tgl
-- line but at most one matching `warning` (nil: none at all), nothing that
-- blames tgl or comes from a crash.
local function expect_ok(r, warning, what)
  local ctx = what .. ' (exit ' .. tostring(r.code) .. '):\n' .. r.out .. r.err
  assert.are.equal(0, r.code, ctx)
  assert.matches('^ok %d+ generated ', r.out, nil, false, ctx)
  for _, bad in ipairs({ 'tgl bug', 'please report', 'internal error', 'double free',
                         'AddressSanitizer', 'Aborted', 'Segmentation' }) do
    assert.is_nil(r.err:find(bad, 1, true), ctx)
  end
  local lines = tgl_lines(r.err)
  if warning then
    assert.is_true(#lines <= 1, ctx)
    if #lines == 1 then assert.matches(warning, lines[1], nil, false, ctx) end
  else
    assert.are.equal(0, #lines, ctx)
  end
  return tonumber(r.out:match('^ok (%d+)'))
end

-- One run of the work, in the foreground.  prefix: shell words before env
-- (setpriv, unshare ...).
local function run(env, prefix)
  local errf = root .. '/stderr'
  local out, code = support.sh(('{ { %s env %s timeout 300 %s %s; } 2>%s; }'):format(
    prefix or '', env_words(env), quote(bin), quote(script), quote(errf)))
  return { out = out, code = code, err = support.read_file(errf, true) or '' }
end

-- The shell text that starts n runs of the work together: each says it is
-- ready, and all start once every one is (the file `go`); then waits for
-- all.  Run i's output, errors and status go to <dir>/out.i, err.i, rc.i.
local function together_sh(n, env, dir)
  local parts = { ('rm -f %s/ready.* %s/go'):format(quote(dir), quote(dir)) }
  for i = 1, n do
    local e = {}
    for k, v in pairs(env) do e[k] = v end
    e.WORKER, e.READY, e.GO = tostring(i), dir .. '/ready.' .. i, dir .. '/go'
    parts[#parts + 1] = ('( env %s timeout 300 %s %s >%s/out.%d 2>%s/err.%d; echo $? >%s/rc.%d ) &')
      :format(env_words(e), quote(bin), quote(script), quote(dir), i, quote(dir), i, quote(dir), i)
  end
  parts[#parts + 1] = ('k=0; while [ "$(ls %s | grep -c "^ready\\.")" -lt %d ] && [ $k -lt 6000 ]; '
    .. 'do sleep 0.05; k=$((k+1)); done; touch %s/go; wait')
    :format(quote(dir), n, quote(dir))
  return table.concat(parts, '\n')
end

local function results(n, dir)
  local rs = {}
  for i = 1, n do
    rs[i] = { out = support.read_file(dir .. '/out.' .. i, true) or '',
              err = support.read_file(dir .. '/err.' .. i, true) or '',
              code = tonumber(support.read_file(dir .. '/rc.' .. i, true) or '') }
  end
  return rs
end

-- Names in dir but the CPU backend's other files (calibration, BLAS picks).
local function listing(dir)
  local p = io.popen('ls -A ' .. quote(dir) .. ' 2>/dev/null')
  local names = {}
  for name in p:read('*a'):gmatch('[^\n]+') do
    if not (name:match('^tune%-%x+%.txt$') or name:match('^gemm%-pick%-%x+%.txt$')) then
      names[#names + 1] = name
    end
  end
  p:close()
  table.sort(names)
  return names
end

local ENTRY = '^' .. ('%x'):rep(64) .. '%.so$'
local function entries(dir)
  local e = {}
  for _, n in ipairs(listing(dir)) do
    if n:match(ENTRY) then e[#e + 1] = n end
  end
  return e
end

-- e_machine, class and byte order of an ELF file's header (nil: not ELF).
local function elf_id(s)
  if not s or #s < 64 or s:sub(1, 4) ~= '\127ELF' then return nil end
  local lo, hi = s:byte(19, 20)
  return { class = s:byte(5), data = s:byte(6), machine = lo + 256 * hi }
end
local host = elf_id(support.read_file(bin))

-- dir holds entries only (no temporaries, no temporary directories, nothing
-- else), each a whole-looking ELF object for this machine (size at least
-- what its program headers say is checked by tgl itself; here: the
-- header and a plausible size).  Returns { name = inode }.
local function healthy(dir, what)
  local names = listing(dir)
  for _, n in ipairs(names) do
    assert.is_truthy(n:match(ENTRY), what .. ': not an entry in the cache: ' .. n)
    local id = elf_id(support.read_file(dir .. '/' .. n))
    assert.is_truthy(id, what .. ': ' .. n .. ' is no ELF file')
    assert.are.same(host, id, what .. ': ' .. n .. ' is for another machine')
  end
  local inodes = {}
  local p = io.popen('ls -i ' .. quote(dir) .. ' 2>/dev/null')
  for ino, name in p:read('*a'):gmatch('(%d+) ([^\n]+)') do inodes[name] = ino end
  p:close()
  local r = {}
  for _, n in ipairs(names) do r[n] = inodes[n] end
  return r
end

-- A fresh process runs the work on dir: no warning, and it loads every
-- entry there as it is: none rebuilt (same inodes), none added.
local function loads_as_is(dir, env, what)
  local before = healthy(dir, what)
  local e = { TGL_CACHE_DIR = dir, MODE = 'sync' }
  for k, v in pairs(env or {}) do e[k] = v end
  expect_ok(run(e), nil, what .. ': a fresh process')
  local after = healthy(dir, what .. ', after a fresh process')
  assert.are.same(before, after, what .. ': a fresh process rebuilt or added entries')
  return before
end

local function fresh(name)
  local d = root .. '/' .. name
  os.execute(('rm -rf %s && mkdir -p %s/tmp'):format(quote(d), quote(d)))
  return d
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

-- A cache populated once by the concurrent runs, copied for the cases that
-- damage or freeze one.
local populated

describe('processes sharing one kernel cache', function()
  it('compile the same kernels, whole step and scan at once, all right, no torn entry', function()
    local n = long and 6 or 3
    local d = fresh('together')
    local k = d .. '/k'
    -- half of them compile in the background (tiered), half in the call
    local out = support.sh(together_sh(n, { TGL_CACHE_DIR = k, TMPDIR = d .. '/tmp',
                                            MODE = 'tiered' }, d))
    local rs = results(n, d)
    local checks
    for i, r in ipairs(rs) do
      local c = expect_ok(r, nil, 'process ' .. i .. ' of ' .. n .. ' ' .. out)
      checks = checks or c
      assert.are.equal(checks, c, 'process ' .. i .. ' did other checks')
      assert.matches('generated true', r.out, nil, true, 'process ' .. i)
    end
    -- and again, all at once on a fresh cache, computing synchronously
    local k2 = d .. '/k2'
    support.sh(together_sh(n, { TGL_CACHE_DIR = k2, TMPDIR = d .. '/tmp', MODE = 'sync' }, d))
    for i, r in ipairs(results(n, d)) do
      expect_ok(r, nil, 'sync process ' .. i .. ' of ' .. n)
    end
    assert.are.same({}, listing(d .. '/tmp'))
    local e1 = loads_as_is(k, nil, 'tiered cache')
    local e2 = loads_as_is(k2, nil, 'sync cache')
    assert.is_true(count(e1) >= 6, 'entries: ' .. count(e1))
    -- the same kernels, whichever way they were compiled
    local n1, n2 = {}, {}
    for name in pairs(e1) do n1[#n1 + 1] = name end
    for name in pairs(e2) do n2[#n2 + 1] = name end
    table.sort(n1)
    table.sort(n2)
    assert.are.same(n1, n2)
    populated = k
  end)
end)

-- The unshare command that gives a private mount namespace where mounts
-- are permitted: root's own (`unshare -m`; in a chroot, as CI's, a user
-- namespace is refused), else a user namespace's (`unshare -rm`, no root
-- needed).  nil, why when neither works.
local ns_cmd
local function mount_ns()
  if ns_cmd == nil then
    ns_cmd = false
    local probe = fresh('ns_probe')
    for _, cmd in ipairs({ 'unshare -m', 'unshare -rm' }) do
      local _, code = support.sh(('%s sh -c %s'):format(cmd, quote(
        ('mount --bind %s %s && mount -o remount,bind,ro %s %s && ! touch %s/x 2>/dev/null'):format(
          quote(probe), quote(probe), quote(probe), quote(probe), quote(probe)))))
      if code == 0 then ns_cmd = cmd; break end
    end
  end
  if not ns_cmd then
    return nil, 'neither unshare -m nor unshare -rm gives a mount namespace with a read-only '
      .. 'bind mount here'
  end
  return ns_cmd
end

-- A wrapper that runs a shell command line with dir bound read-only in a
-- private mount namespace (root's writes are stopped too, where chmod does
-- not stop them).  nil, why when that is impossible.
local function ro_prefix(dir)
  local ns, why = mount_ns()
  if not ns then return nil, why end
  return function(inner)
    return ('%s sh -c %s'):format(ns, quote(
      ('mount --bind %s %s && mount -o remount,bind,ro %s %s && exec %s'):format(
        quote(dir), quote(dir), quote(dir), quote(dir), inner)))
  end
end

local function populated_copy(name)
  if not populated then -- this test runs alone (--filter): one process populates it
    local p = fresh('populated')
    expect_ok(run({ TGL_CACHE_DIR = p .. '/k', TMPDIR = p .. '/tmp', MODE = 'sync' }), nil,
              'populating')
    populated = p .. '/k'
  end
  local d = fresh(name)
  os.execute(('cp -a %s %s/k'):format(quote(populated), quote(d)))
  return d, d .. '/k'
end

-- The work, in a shell command line of its own (for the wrappers).
local function work_line(env)
  local errf = root .. '/stderr'
  return ('env %s timeout 300 %s %s 2>%s'):format(env_words(env), quote(bin), quote(script),
                                                   quote(errf)), errf
end

local function run_line(line, errf)
  local out, code = support.sh(line)
  return { out = out, code = code, err = support.read_file(errf, true) or '' }
end

local NO_STORE = '^tgl: cannot store kernels in the cache .-: they are compiled for this process only$'

describe('a read-only kernel cache', function()
  it('is read: a full one gives every kernel with no warning and stays as it was', function()
    local d, k = populated_copy('ro_full')
    local before = healthy(k, 'before')
    local wrap, why = ro_prefix(k)
    if not wrap then
      -- as another user chmod is enough; as root it needs the mount, which
      -- a chroot (CI's fresh machine) refuses: a limit of the place, not a
      -- missing package, so pending even under TGL_TEST_STRICT (CI's
      -- sanitizer stage, outside the chroot, runs these)
      pending(why)
      return
    end
    local line, errf = work_line({ TGL_CACHE_DIR = k, TMPDIR = d .. '/tmp', MODE = 'sync' })
    expect_ok(run_line(wrap(line), errf), nil, 'read-only, populated')
    assert.are.same(before, healthy(k, 'after'))
    assert.are.same({}, listing(d .. '/tmp'))
  end)

  it('compiles what it lacks elsewhere with one warning, leaving the directory alone', function()
    local d = fresh('ro_empty')
    local k = d .. '/k'
    os.execute('mkdir -p ' .. quote(k))
    local wrap, why = ro_prefix(k)
    if not wrap then
      pending(why)
      return
    end
    for _, mode in ipairs(long and { 'sync', 'tiered' } or { 'tiered' }) do
      local line, errf = work_line({ TGL_CACHE_DIR = k, TMPDIR = d .. '/tmp', MODE = mode })
      local r = run_line(wrap(line), errf)
      expect_ok(r, NO_STORE, 'read-only, empty, ' .. mode)
      assert.are.equal(1, #tgl_lines(r.err), r.err)
      assert.matches('Read%-only file system', r.err)
      assert.are.same({}, listing(k))
      assert.are.same({}, listing(d .. '/tmp'))
    end
  end)

  it('owned by another user is read by a user who cannot write it (setpriv, as nobody)', function()
    local uid = support.sh('id -u'):gsub('%s+', '')
    if uid ~= '0' or support.sh('command -v setpriv'):gsub('%s+', '') == '' then
      pending('needs root and setpriv to run as nobody (the read-only mount covers the rest)')
      return
    end
    local d, k = populated_copy('ro_nobody')
    os.execute(('chmod 755 %s && chmod 644 %s/* && chmod 1777 %s/tmp'):format(quote(k), quote(k),
      quote(d)))
    -- nobody must be able to read the build: the spec's files are the
    -- user's; when it cannot, the case does not apply here
    local probe = support.sh(('setpriv --reuid=65534 --regid=65534 --clear-groups %s -e %s 2>&1')
      :format(quote(bin), quote('print("can run")')))
    if not probe:find('can run', 1, true) then
      pending('nobody cannot run ' .. bin .. ' here: ' .. probe)
      return
    end
    os.execute(('chmod 644 %s'):format(quote(script)))
    local before = healthy(k, 'before')
    local prefix = 'setpriv --reuid=65534 --regid=65534 --clear-groups'
    local errf = d .. '/tmp/stderr'
    local out, code = support.sh(('{ { %s env HOME=/nonexistent %s timeout 300 %s %s; } 2>%s; }'):format(
      prefix, env_words({ TGL_CACHE_DIR = k, TMPDIR = d .. '/tmp', MODE = 'sync' }), quote(bin),
      quote(script), quote(errf)))
    expect_ok({ out = out, code = code, err = support.read_file(errf, true) or '' }, nil,
              'as nobody, populated')
    os.remove(errf)
    assert.are.same(before, healthy(k, 'after'))
    -- a kernel it lacks: compiled elsewhere, one warning
    out, code = support.sh(('{ { %s env HOME=/nonexistent %s timeout 300 %s %s; } 2>%s; }'):format(
      prefix, env_words({ TGL_CACHE_DIR = k, TMPDIR = d .. '/tmp', MODE = 'sync', EXTRA = '3.25' }),
      quote(bin), quote(script), quote(errf)))
    local r = { out = out, code = code, err = support.read_file(errf, true) or '' }
    expect_ok(r, NO_STORE, 'as nobody, one kernel missing')
    assert.matches('Permission denied', r.err)
    os.remove(errf)
    assert.are.same(before, healthy(k, 'after the missing kernel'))
    assert.are.same({}, listing(d .. '/tmp'))
  end)
end)

describe('a kernel cache that fills up while several processes write it', function()
  it('gives every process its results with at most one warning, and keeps only whole entries',
     function()
    local n = long and 6 or 3
    local d = fresh('full')
    local mnt = d .. '/mnt'
    os.execute('mkdir -p ' .. quote(mnt))
    -- a 96 KiB tmpfs in a private mount namespace holds a few entries of
    -- the dozen the work makes; every process runs inside it, and what
    -- is left is copied out before the namespace (and the tmpfs) goes
    local inner = ('mount -t tmpfs -o size=96k tgl-spec-conc %s && { %s\n}; cp -a %s %s/k'):format(
      quote(mnt), together_sh(n, { TGL_CACHE_DIR = mnt .. '/k', TMPDIR = d .. '/tmp', MODE = 'sync' },
      d), quote(mnt .. '/k'), quote(d))
    local ns, why = mount_ns()
    if not ns then
      pending(why)
      return
    end
    local out, code = support.sh(ns .. ' sh -c ' .. quote(inner))
    if code ~= 0 and not support.read_file(d .. '/rc.1', true) then
      local why = 'cannot mount a tmpfs in a private mount namespace here: ' .. out
      pending(why)
      return
    end
    local warned = 0
    for i, r in ipairs(results(n, d)) do
      expect_ok(r, NO_STORE, 'process ' .. i .. ' on a full cache')
      if #tgl_lines(r.err) == 1 then
        warned = warned + 1
        assert.matches('No space left on device', r.err)
      end
    end
    assert.is_true(warned >= 1, 'no process found the cache full: the tmpfs is too large')
    assert.are.same({}, listing(d .. '/tmp'))
    -- what the full disk kept is whole: loaded as is by a fresh process,
    -- which stores the rest
    local kept = healthy(d .. '/k', 'the full cache')
    assert.is_true(count(kept) >= 1, 'nothing fitted in the tmpfs')
    expect_ok(run({ TGL_CACHE_DIR = d .. '/k', TMPDIR = d .. '/tmp', MODE = 'sync' }), nil,
              'after the full cache')
    local after = healthy(d .. '/k', 'completed')
    for name, ino in pairs(kept) do
      assert.are.equal(ino, after[name], name .. ' was rebuilt: the full disk had torn it')
    end
    loads_as_is(d .. '/k', nil, 'completed')
  end)
end)

describe('damaged entries in the kernel cache', function()
  it('truncated, garbage, empty and foreign-architecture entries are rebuilt, never loaded',
     function()
    local d, k = populated_copy('damaged')
    local names = entries(k)
    assert.is_true(#names >= 6, 'entries: ' .. #names)
    local function patch(name, fn)
      local p = k .. '/' .. name
      local s = support.read_file(p)
      support.write_file(p, fn(s))
    end
    local other = host.machine == 62 and 183 or 62 -- x86-64 <-> AArch64
    local damage = {
      function(s) return s:sub(1, math.floor(#s / 2)) end,                -- truncated
      function(s) return s:sub(1, 64) end,                               -- headers only
      function(s)                                                        -- garbage
        local r, t = support.new_rng(7), {}
        for i = 1, #s do t[i] = string.char(r.int(0, 255)) end
        return table.concat(t)
      end,
      function() return '' end,                                          -- zero length
      function(s)                                                        -- another machine
        return s:sub(1, 18) .. string.char(other % 256, math.floor(other / 256)) .. s:sub(21)
      end,
      function(s) return s:sub(1, 4) .. string.char(1) .. s:sub(6) end,  -- 32-bit class
    }
    for i, fn in ipairs(damage) do patch(names[i], fn) end
    for _, mode in ipairs({ 'sync', 'tiered' }) do
      expect_ok(run({ TGL_CACHE_DIR = k, TMPDIR = d .. '/tmp', MODE = mode }), nil,
                'damaged entries, ' .. mode)
      healthy(k, 'after the damaged entries were met, ' .. mode)
      assert.are.same(names, entries(k))
      if mode == 'sync' then
        for i = 1, #damage do patch(names[i], damage[i]) end -- again, for the tiered run
      end
    end
    assert.are.same({}, listing(d .. '/tmp'))
    loads_as_is(k, nil, 'repaired')
  end)
end)

describe('a process killed in the middle of a cache write', function()
  it('leaves nothing the next run reuses half-written; the next runs are right', function()
    local d = fresh('killed')
    local k = d .. '/k'
    local delays = long and { 0.2, 0.5, 0.9, 1.4, 2, 3, 4.5, 6 } or { 0.3, 1.2, 2.5 }
    local killed = 0
    for i, delay in ipairs(delays) do
      -- a cold compile of many distinct kernels (FIRST moves on, so each
      -- round has kernels no earlier one finished), killed after `delay`
      local env = env_words({ TGL_CACHE_DIR = k, TMPDIR = d .. '/tmp', MODE = 'sync', NK = '6',
                              FIRST = tostring(100 * i) })
      -- odd rounds kill the tgl process alone (its compiler, orphaned,
      -- finishes writing a temporary nobody renames), even rounds its
      -- whole process group (setsid), the compiler with it
      local group = i % 2 == 0
      local out = support.sh(('( %senv %s %s %s >/dev/null 2>&1 & pid=$!; sleep %s; kill -9 %s$pid; '
        .. 'wait $pid; echo "status $?" ) 2>/dev/null'):format(group and 'setsid ' or '', env,
        quote(bin), quote(script), delay, group and '-- -' or ''))
      if out:find('status 137', 1, true) then killed = killed + 1 end
      -- the next run: the same kernels, right, without a warning
      expect_ok(run({ TGL_CACHE_DIR = k, TMPDIR = d .. '/tmp', MODE = 'sync', NK = '6',
                      FIRST = tostring(100 * i) }), nil, 'the run after a kill at ' .. delay .. ' s')
      -- entries are whole; what is left of the killed one's compile is
      -- only its temporaries (its compiler may still be writing them)
      for _, n in ipairs(listing(k)) do
        if not n:match(ENTRY) then
          assert.is_truthy(n:find('%.tmp%.'), 'after a kill: ' .. n)
        end
      end
      local es = {}
      for _, n in ipairs(entries(k)) do es[#es + 1] = n end
      for _, n in ipairs(es) do
        local id = elf_id(support.read_file(k .. '/' .. n))
        assert.are.same(host, id, n)
      end
    end
    assert.is_true(killed >= 1, 'no run was killed before it finished')
    -- a run that stores a new kernel sweeps the dead processes' temporaries
    os.execute('sleep 1') -- compilers the killed processes started finish meanwhile
    expect_ok(run({ TGL_CACHE_DIR = k, TMPDIR = d .. '/tmp', MODE = 'sync', NK = '6',
                    FIRST = '100', EXTRA = '2.5' }), nil, 'the sweeping run')
    healthy(k, 'after the sweep')
    assert.are.same({}, listing(d .. '/tmp'))
    loads_as_is(k, { NK = '6', FIRST = '100', EXTRA = '2.5' }, 'after the kills')
  end)
end)
