-- cache_robust_spec.lua — the kernel cache is an optimisation, so nothing
-- about the disk may fail a user's call or be blamed on tgl: a cache that
-- cannot be written (injected with RLIMIT_FSIZE, a compiler whose output
-- cannot be written, a full tmpfs where mount is permitted), a FIFO or a
-- directory at an entry's name.  Each case runs a training step (whole
-- step included) in a tgl process bounded by `timeout` and checks its
-- values against a healthy run, its exit status, and that stderr has the
-- one expected warning and no "tgl bug", internal error or allocator abort
-- (the double free of issue 19 under ASan).  Then: a compiled kernel lives
-- as long as a function runs it (tgl.kernels_live).
local tgl = require 'tgl'
local support = dofile('spec/support.lua')

local bin = os.getenv('TGL_BIN') or arg[-1]
local root = support.tmpdir('cache_robust')

local TRAIN = [[
local tgl = require 'tgl'
tgl.config.compile = os.getenv('MODE') or 'sync'
local x, y = tgl.matrix('x'), tgl.vector('y')
local W, b = tgl.shared(tgl.zeros(3, 1), 'W'), tgl.shared(0.0, 'b')
local p = tgl.sigmoid(x:dot(W):flatten() + b)
local loss = tgl.mean(tgl.sqr(p - y)) + 0.01 * tgl.sum(tgl.sqr(W))
local gW, gb = unpack(tgl.grad(loss, { W, b }))
local step = tgl.compile{ inputs = { x, y }, outputs = loss,
                          updates = { { W, W - 0.5 * gW }, { b, b - 0.5 * gb } } }
local X = tgl.array({ { 1, 2, 3 }, { 0, 1, 0 }, { 2, 0, 1 }, { 1, 1, 1 } })
local Y = tgl.array({ 1, 0, 1, 0 })
local l
for _ = 1, 10 do l = step(X, Y) end
step:wait_compiled()        -- then the whole step is recorded and compiled
for _ = 1, 10 do l = step(X, Y) end
print(('loss %.9g'):format(l:get()))
print('W ' .. table.concat(W:get_value():flatten():totable(), ' '))
]]
local script = root .. '/train.lua'
support.write_file(script, TRAIN)

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Runs the training script: env is a table of environment variables,
-- prefix shell commands run first in the same subshell (ulimit).
-- Returns {out=, err=, code=, loss=, W={...}}.
local function train(env, prefix)
  local vars = {}
  for k, v in pairs(env) do vars[#vars + 1] = k .. '=' .. quote(v) end
  local errf = root .. '/stderr'
  local out, code = support.sh(('{ { %s env %s timeout 120 %s %s; } 2>%s; }'):format(
    prefix or '', table.concat(vars, ' '), quote(bin), quote(script), quote(errf)))
  local r = { out = out, code = code, err = support.read_file(errf, true) or '' }
  r.loss = tonumber(out:match('loss (%S+)'))
  local w = out:match('W ([^\n]+)')
  r.W = {}
  for v in (w or ''):gmatch('%S+') do r.W[#r.W + 1] = tonumber(v) end
  return r
end

local reference
local function healthy()
  if not reference then
    local cache = root .. '/healthy'
    os.execute('rm -rf ' .. quote(cache))
    reference = train({ TGL_CACHE_DIR = cache, MODE = 'sync' })
    assert.are.equal(0, reference.code, reference.out .. reference.err)
    assert.is_number(reference.loss)
  end
  return reference
end

-- The lines of stderr that tgl printed.
local function tgl_lines(err)
  local lines = {}
  for line in err:gmatch('[^\n]+') do
    if line:find('^tgl') then lines[#lines + 1] = line end
  end
  return lines
end

-- r ran to the end with the healthy run's values, printed exactly one tgl
-- line, matching warning (or none when warning is nil), and nothing that
-- blames tgl or comes from a crash.
local function expect_fine(r, warning, what)
  local ctx = what .. ':\n' .. r.out .. r.err
  assert.are.equal(0, r.code, ctx)
  local ref = healthy()
  assert.is_number(r.loss, ctx)
  assert.is_true(math.abs(r.loss - ref.loss) <= 1e-6, ctx)
  assert.are.equal(#ref.W, #r.W, ctx)
  for i = 1, #ref.W do assert.is_true(math.abs(r.W[i] - ref.W[i]) <= 1e-6, ctx) end
  for _, bad in ipairs({ 'tgl bug', 'please report', 'internal error', 'double free',
                         'AddressSanitizer', 'Aborted' }) do
    assert.is_nil(r.err:find(bad, 1, true), ctx)
  end
  local lines = tgl_lines(r.err)
  if warning then
    assert.are.equal(1, #lines, ctx)
    assert.matches(warning, lines[1], nil, false, ctx)
  else
    assert.are.equal(0, #lines, ctx)
  end
end

-- Names in dir: entries (<64 hex>.so), temporaries, anything else.
-- The CPU backend's per-shape BLAS choices (gemm-pick-<key>.txt,
-- src/cpu/gemm_pick.c) live in the same directory and are no kernel
-- entry: cache_clear leaves them, and this listing skips them.
local function listing(dir)
  local p = io.popen('ls -A ' .. quote(dir) .. ' 2>/dev/null')
  local names = {}
  -- the calibration record (tune-<key>.txt, doc/calibration.md) too
  for name in p:read('*a'):gmatch('[^\n]+') do
    if not (name:match('^tune%-%x+%.txt$') or name:match('^gemm%-pick%-%x+%.txt$')) then
      names[#names + 1] = name
    end
  end
  p:close()
  return names
end
local function entries(dir)
  local e = {}
  for _, n in ipairs(listing(dir)) do
    if n:match('^' .. ('%x'):rep(64) .. '%.so$') then e[#e + 1] = n end
  end
  table.sort(e)
  return e
end
local function no_debris(dir, what)
  for _, n in ipairs(listing(dir)) do
    assert.is_nil(n:find('%.tmp%.'), what .. ': temporary left: ' .. n)
    assert.is_nil(n:find('^tgl%-'), what .. ': temporary directory left: ' .. n)
  end
end

local function fresh(name)
  local d = root .. '/' .. name
  os.execute(('rm -rf %s && mkdir -p %s/tmp'):format(quote(d), quote(d)))
  return d
end

describe('an unwritable kernel cache', function()
  -- RLIMIT_FSIZE (SIGXFSZ ignored, as a process inherits it) makes every
  -- write past the limit fail with EFBIG, in tgl and in the compiler it
  -- runs: no mount and no test hook needed.  In a coverage build
  -- (scripts/coverage.sh) the limit would also cut the process's gcov
  -- counter files short and spoil every later merge into them:
  -- GCOV_PREFIX sends this process's counters elsewhere (ignored by any
  -- other build).
  local function limited(kb)
    return ("trap '' XFSZ; ulimit -f %d; export GCOV_PREFIX=%s;"):format(
      kb, quote(root .. '/gcov-discard'))
  end

  it('falls back with one warning when no kernel can be written (injected: 1 KiB files)', function()
    for _, m in ipairs({ { 'sync', 'reference' }, { 'tiered', 'libtcc' } }) do
      local d = fresh('fsize1_' .. m[1])
      local r = train({ TGL_CACHE_DIR = d .. '/k', TMPDIR = d .. '/tmp', MODE = m[1] }, limited(1))
      expect_fine(r, '^tgl: cannot write compiled kernels %(cannot write .-File too large; and in a '
        .. 'temporary directory: cannot write .-File too large%): using ' .. m[2] .. ' kernels$',
        m[1])
      assert.are.same({}, entries(d .. '/k'))
      no_debris(d .. '/k', m[1])
      no_debris(d .. '/tmp', m[1])
    end
  end)

  it('tells a compiler that cannot write its output from one that rejects the source', function()
    -- a stand-in compiler: answers --version; -fsyntax-only exits with
    -- $FAKE_SYNTAX; a real compile fails as ld does on a full disk
    local cc = root .. '/fakecc.sh'
    support.write_file(cc, [[#!/bin/sh
case " $* " in
*" --version "*) echo "fakecc 1.0"; exit 0 ;;
*" -fsyntax-only "*) exit "$FAKE_SYNTAX" ;;
esac
echo "/usr/bin/ld: final link failed: No space left on device" >&2
exit 1
]])
    os.execute('chmod +x ' .. quote(cc))
    local d = fresh('fakecc')
    local r = train({ TGL_CACHE_DIR = d .. '/k', TMPDIR = d .. '/tmp', MODE = 'sync', TGL_CC = cc,
                      FAKE_SYNTAX = '0' })
    expect_fine(r, '^tgl: cannot write compiled kernels %(.-exited with status 1: /usr/bin/ld: final '
      .. 'link failed: No space left on device; and in a temporary directory: .-%): using '
      .. 'reference kernels$', 'output not written')
    no_debris(d .. '/k', 'fakecc')
    no_debris(d .. '/tmp', 'fakecc')
    -- the same failure with a source the compiler rejects: tgl's bug, said so
    r = train({ TGL_CACHE_DIR = d .. '/k', TMPDIR = d .. '/tmp', MODE = 'sync', TGL_CC = cc,
                FAKE_SYNTAX = '1' })
    assert.are_not.equal(0, r.code)
    assert.matches('does not compile with .-fakecc%.sh %(a tgl bug; please report it%)', r.err)
  end)

  it('compiles outside the cache when only the cache is full (a full tmpfs; needs mount)', function()
    local mnt = root .. '/tmpfs'
    os.execute('mkdir -p ' .. quote(mnt))
    local out, code = support.sh('mount -t tmpfs -o size=256k tgl-spec-full ' .. quote(mnt))
    if code ~= 0 then
      pending('cannot mount a tmpfs here (' .. out:gsub('%s+$', '')
        .. '): the full-disk cases need mount; the injected-failure cases cover the same paths')
      return
    end
    finally(function() os.execute('umount ' .. quote(mnt)) end)
    -- fill it but for `free` KiB
    local function fill(free)
      os.execute(('rm -rf %s/*'):format(quote(mnt)))
      os.execute(('dd if=/dev/zero of=%s/fill bs=1k 2>/dev/null'):format(quote(mnt)))
      if free > 0 then
        os.execute(('truncate -s -%dk %s/fill'):format(free, quote(mnt)))
      end
    end
    for _, mode in ipairs({ 'sync', 'tiered' }) do
      -- full: the source cannot be written; 12 KiB free: the source can,
      -- the compiler's shared object cannot (told apart with -fsyntax-only)
      for _, free in ipairs({ 0, 12 }) do
        fill(free)
        local d = fresh('full_' .. mode .. free)
        local what = mode .. ', ' .. free .. ' KiB free'
        local r = train({ TGL_CACHE_DIR = mnt .. '/k', TMPDIR = d .. '/tmp', MODE = mode })
        expect_fine(r, '^tgl: cannot store kernels in the cache ' .. (mnt .. '/k'):gsub('%p', '%%%0')
          .. ' %(.-No space left on device.-%): they are compiled for this process only$', what)
        no_debris(mnt .. '/k', what)
        no_debris(d .. '/tmp', what)
      end
      -- the temporary directory on the full file system too
      fill(0)
      local r = train({ TGL_CACHE_DIR = mnt .. '/k', TMPDIR = mnt, MODE = mode })
      expect_fine(r, '^tgl: cannot write compiled kernels %(.-No space left on device.-%): using '
        .. (mode == 'sync' and 'reference' or 'libtcc') .. ' kernels$', mode .. ', all full')
      no_debris(mnt, mode .. ', all full')
    end
  end)
end)

describe('odd files in the kernel cache', function()
  it('replaces a FIFO at an entry\'s name instead of waiting on it', function()
    local d = fresh('fifo')
    expect_fine(train({ TGL_CACHE_DIR = d .. '/k', MODE = 'sync' }), nil, 'populating')
    local names = entries(d .. '/k')
    assert.is_true(#names >= 3, 'entries: ' .. #names)
    for _, n in ipairs(names) do
      local p = quote(d .. '/k/' .. n)
      os.execute(('rm %s && mkfifo %s'):format(p, p))
    end
    local t0 = os.time()
    local r = train({ TGL_CACHE_DIR = d .. '/k', MODE = 'sync' })
    expect_fine(r, nil, 'FIFOs at the entries')   -- a blocked open would end in timeout (124)
    assert.is_true(os.time() - t0 < 60)
    assert.are.same(names, entries(d .. '/k'))
    for _, n in ipairs(names) do
      local out = support.sh('test -f ' .. quote(d .. '/k/' .. n) .. ' && echo regular')
      assert.matches('regular', out, nil, false, n)
    end
    no_debris(d .. '/k', 'FIFOs')
  end)

  it('keeps a directory at an entry\'s name, warning once, and removes an empty one', function()
    local d = fresh('dir')
    expect_fine(train({ TGL_CACHE_DIR = d .. '/k', MODE = 'sync' }), nil, 'populating')
    local names = entries(d .. '/k')
    local full, empty = d .. '/k/' .. names[1], d .. '/k/' .. names[2]
    os.execute(('rm %s %s && mkdir -p %s/user-data %s'):format(quote(full), quote(empty),
      quote(full), quote(empty)))
    local r = train({ TGL_CACHE_DIR = d .. '/k', MODE = 'sync' })
    expect_fine(r, '^tgl: cannot store kernels in the cache .-%(cannot rename .-' .. names[1]
      .. '%.tmp%.[%d.]+%x+ to ' .. names[1]:gsub('%.', '%%.') .. ': Is a directory%): they are '
      .. 'compiled for this process only$', 'directories at entries')
    assert.matches('regular', support.sh('test -f ' .. quote(empty) .. ' && echo regular'))
    assert.matches('kept', support.sh('test -d ' .. quote(full .. '/user-data') .. ' && echo kept'))
    no_debris(d .. '/k', 'directories')
    -- clearing deletes the entries, counts no directory, and leaves it alone
    local info = support.run_process(([[
      local tgl = require 'tgl'
      tgl.config.cache_dir = %q
      tgl.cache_clear()
      print('entries ' .. tgl.cache_info().entries)
    ]]):format(d .. '/k'))
    assert.matches('entries 0', info)
    assert.are.same({ names[1] }, listing(d .. '/k'))
  end)
end)

describe('compiled kernels in memory', function()
  local saved
  setup(function() saved = tgl.config.compile end)
  teardown(function() tgl.config.compile = saved end)

  local function collect() collectgarbage(); collectgarbage() end

  it('go with the last function that runs them (libtcc)', function()
    tgl.config.compile = 'tcc'
    collect()
    local base = tgl.kernels_live()
    local x = tgl.vector('x')
    local f = tgl.compile{ inputs = { x }, outputs = tgl.exp(x) * 3 + 1 }
    assert.are.equal(base + 1, tgl.kernels_live())
    -- the same fused program: one kernel for both functions
    local g = tgl.compile{ inputs = { x }, outputs = tgl.exp(x) * 3 + 1 }
    assert.are.equal(base + 1, tgl.kernels_live())
    f = nil
    collect()
    assert.are.equal(base + 1, tgl.kernels_live())
    assert.are.same({ 4 }, g({ 0 }):totable())
    g = nil
    collect()
    assert.are.equal(base, tgl.kernels_live())
    -- made again when a function needs it after that, with the same values
    local h = tgl.compile{ inputs = { x }, outputs = tgl.exp(x) * 3 + 1 }
    assert.are.equal(base + 1, tgl.kernels_live())
    assert.are.same({ 4, 4 }, h({ 0, 0 }):totable())
    h = nil
    -- many distinct functions, each dropped: the live kernels stay few
    local most = 0
    for i = 1, 2000 do
      local fi = tgl.compile{ inputs = { x }, outputs = tgl.exp(x) * i + 1 }
      assert.are.equal(i + 1, fi({ 0 }):get(1))
      if i % 100 == 0 then
        collect()
        most = math.max(most, tgl.kernels_live() - base)
      end
    end
    collect()
    assert.is_true(most <= 2, 'live kernels after collecting: ' .. most)
    assert.are.equal(base, tgl.kernels_live())
  end)

  it('close their shared objects with the last function, and load them again', function()
    tgl.config.compile = 'sync'
    collect()
    local base = tgl.kernels_live()
    local x = tgl.vector('x')
    local fs = {}
    for i = 1, 6 do fs[i] = tgl.compile{ inputs = { x }, outputs = tgl.sqrt(x) * i - 0.5 } end
    assert.are.equal(base + 6, tgl.kernels_live())
    fs = nil
    collect()
    assert.are.equal(base, tgl.kernels_live())
    -- from the cache this time (the object was closed, not the file)
    local f = tgl.compile{ inputs = { x }, outputs = tgl.sqrt(x) * 4 - 0.5 }
    assert.are.equal(base + 1, tgl.kernels_live())
    assert.are.same({ 7.5, 3.5 }, f({ 4, 1 }):totable())
  end)
end)
