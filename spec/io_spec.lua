-- io_spec.lua — tgl.save and tgl.load: NumPy's files (spec/fixtures, made
-- by make_fixtures.py) load with their exact values; what tgl saves, NumPy
-- reads back bit for bit (checked with Debian's /usr/bin/python3 when it has
-- numpy: pending without it, failing in CI and under scripts/test.sh); bad input raises errors that name the problem.
local tgl = require 'tgl'
local ffi = require 'ffi'

local here = debug.getinfo(1, 'S').source:match('^@(.*)[/\\]') or 'spec'
local function fixture(name) return here .. '/fixtures/' .. name end

local tmpdir = os.getenv('TGL_TEST_TMP')
if not tmpdir then
  tmpdir = os.tmpname()
  os.remove(tmpdir)
end
tmpdir = tmpdir .. '/io_spec'
os.execute("mkdir -p '" .. tmpdir .. "'")
local function tmp(name) return tmpdir .. '/' .. name end

local read_file = dofile('spec/support.lua').read_file

local write_file = dofile('spec/support.lua').write_file

local function bytes_of(a)
  return ffi.string(a:data(), a:nelement() * ffi.sizeof(({
    float32 = 'float', float64 = 'double', int32 = 'int32_t', int64 = 'int64_t',
    uint8 = 'uint8_t', bool = 'uint8_t' })[a.dtype]))
end

local function hex(s)
  return (s:gsub('.', function(c) return ('%02x'):format(c:byte()) end))
end

-- The error message of f(...), which must fail.
local function error_of(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(err)
end

-- What the suite needs beyond the build: missing, it fails the test in CI
-- and under scripts/test.sh, and makes it pending elsewhere (support.lua).
local support = dofile('spec/support.lua')
local strict_deps, missing_dep = support.strict_deps, support.missing_dep

local st = os.execute("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1")
local has_numpy = st == 0 or st == true

-- What NumPy sees in each file: "key dtype shape hex-bytes" per array.
local function numpy_view(paths)
  local script = tmp('view.py')
  write_file(script, [[
import sys, numpy as np
for path in sys.argv[1:]:
    if path.endswith('.npz'):
        with np.load(path) as z:
            items = [(k, z[k]) for k in z.files]
    else:
        items = [('-', np.load(path))]
    for k, a in items:
        print(k, a.dtype.str, repr(a.shape).replace(' ', ''), np.ascontiguousarray(a).tobytes().hex())
]])
  local p = io.popen("/usr/bin/python3 '" .. script .. "' '" .. table.concat(paths, "' '") .. "' 2>&1")
  local out = p:read('*a')
  p:close()
  return out
end

-- The same line for a tgl array.
local DESCR = { float32 = '<f4', float64 = '<f8', int32 = '<i4', int64 = '<i8',
                uint8 = '|u1', bool = '|b1' }
local function tgl_view(key, a)
  local s = a:shape()
  local shape = '(' .. table.concat(s, ',') .. (#s == 1 and ',)' or ')')
  return ('%s %s %s %s\n'):format(key, DESCR[a.dtype], shape, hex(bytes_of(a)))
end

-- One array of each dtype, with awkward values set through the data pointer.
local function awkward_arrays()
  local f64 = tgl.zeros(6, { dtype = 'float64' })
  local u64 = ffi.cast('uint64_t *', f64:data())
  u64[0] = 0x7ff8000000000001ULL   -- NaN with a payload
  u64[1] = 0x8000000000000000ULL   -- -0.0
  u64[2] = 0x7ff0000000000000ULL   -- inf
  u64[3] = 1ULL                    -- the smallest subnormal
  local f32 = tgl.array({ { 1.5, -2 }, { 0, 3e38 } }, 'float32')
  ffi.cast('uint32_t *', f32:data())[2] = 0x7fc00abc
  local i64 = tgl.zeros(3, { dtype = 'int64' })
  local p = ffi.cast('int64_t *', i64:data())
  p[0] = -9223372036854775807LL - 1
  p[1] = 9223372036854775807LL
  p[2] = -1
  return {
    f32 = f32, f64 = f64, i64 = i64,
    i32 = tgl.array({ -2147483648, 0, 2147483647 }, 'int32'),
    u8 = tgl.array({ { 0, 255 }, { 128, 7 } }, 'uint8'),
    b = tgl.array({ true, false, true }),
    scalar = tgl.array(3.25, 'float64'),
    empty = tgl.zeros(0, 3),
    nd8 = tgl.arange(16, { dtype = 'int32' }):reshape(1, 2, 1, 2, 1, 2, 1, 2),
  }
end

describe('tgl.load', function()
  it('reads a NumPy .npy with its dtype, shape and values', function()
    local a = tgl.load(fixture('f4_2x3.npy'))
    assert.are.equal('float32', a.dtype)
    assert.are.same({ 2, 3 }, a:shape())
    assert.are.same({ { -2, -0.5, 1 }, { 2.5, 4, 5.5 } }, a:totable())
  end)

  it('keeps special float bits and int64 extremes exactly', function()
    local a = tgl.load(fixture('f8_special.npy'))
    local u = ffi.cast('uint64_t *', a:data())
    assert.is_true(u[1] == 0x8000000000000000ULL)
    assert.is_true(u[4] == 0x7ff8000000000001ULL)
    assert.are.equal(math.huge, a:get(3))
    assert.are.equal(-math.huge, a:get(4))
    assert.are.equal(1.5, a:get(7))
    local i = tgl.load(fixture('i8_ext.npy'))
    local p = ffi.cast('int64_t *', i:data())
    assert.is_true(p[0] == -9223372036854775807LL - 1)
    assert.is_true(p[1] == -1LL)
    assert.is_true(p[2] == 9223372036854775807LL)
  end)

  it('reads every dtype, both byte orders, versions 2.0 and 3.0', function()
    local cases = {
      { 'i4_ext.npy', 'int32', { -2147483648, 0, 2147483647 } },
      { 'u1.npy', 'uint8', { 0, 1, 127, 128, 255 } },
      { 'b1.npy', 'bool', { true, false, true } },
      { 'b1_nonzero.npy', 'bool', { false, true, true, true } },
      { 'be_f4.npy', 'float32', { 1.5, -2.25, tonumber(ffi.new('float', 3e38)) } },
      { 'be_f8.npy', 'float64', { 1.5, -2.25, 1e300 } },
      { 'be_i4.npy', 'int32', { 1, -2, 305419896 } },
      { 'be_i8.npy', 'int64', { 1, -2, 2 ^ 40 + 5 } },
      { 'v2_f8.npy', 'float64', { 1, 2, 3 } },
      { 'v3_u1.npy', 'uint8', { 7, 8 } },
    }
    for _, c in ipairs(cases) do
      local a = tgl.load(fixture(c[1]))
      assert.are.equal(c[2], a.dtype, c[1])
      assert.are.same(c[3], a:totable(), c[1])
    end
  end)

  it('reads scalars, empty arrays, 8-d arrays and Fortran order', function()
    local s = tgl.load(fixture('scalar_f8.npy'))
    assert.are.same({}, s:shape())
    assert.are.equal(3.25, s:totable())
    assert.are.same({ 0, 3 }, tgl.load(fixture('empty_0x3.npy')):shape())
    local nd = tgl.load(fixture('nd8_i4.npy'))
    assert.are.same({ 1, 2, 1, 2, 1, 2, 1, 2 }, nd:shape())
    assert.are.equal(15, nd:get(1, 2, 1, 2, 1, 2, 1, 2))
    local f = tgl.load(fixture('fortran_i4.npy'))
    assert.are.same({ 2, 3, 4 }, f:shape())
    assert.is_true(f:is_contiguous())
    assert.are.equal(23, f:get(2, 3, 4))
    assert.are.equal(6, f:get(1, 2, 3))   -- C-order position of (0,1,2)
    assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, tgl.load(fixture('fortran_be_f8.npy')):totable())
  end)

  it('reads np.savez and np.savez_compressed archives as tables by name', function()
    for _, name in ipairs({ 'savez.npz', 'savez_compressed.npz', 'zip64.npz' }) do
      local t = tgl.load(fixture(name))
      assert.are.same({ { -2, -0.5, 1 }, { 2.5, 4, 5.5 } }, t.W:totable(), name)
      assert.are.equal('int64', t.b.dtype)
      assert.are.same({ 1, 2 }, t.b:totable())
    end
    assert.is_true(tgl.load(fixture('savez.npz')).flag:totable())
    local z = tgl.load(fixture('savez_compressed.npz')).zeros
    assert.are.same({ 100 }, z:shape())
    assert.are.equal(0, z:get(100))
  end)

  it('refuses unsupported dtypes and other formats, naming the problem', function()
    assert.matches("^.-tgl%.load: '.-bad_c8%.npy': unsupported dtype '<c8'",
                   error_of(tgl.load, fixture('bad_c8.npy')))
    assert.matches("unsupported dtype '<U3'", error_of(tgl.load, fixture('bad_U3.npy')))
    assert.matches('object arrays', error_of(tgl.load, fixture('bad_obj.npy')))
    assert.matches("tgl%.load: '.-notnpy%.npz': entry 'x%.npy': not a %.npy file",
                   error_of(tgl.load, fixture('notnpy.npz')))
    write_file(tmp('text.txt'), 'hello, world')
    assert.matches("tgl%.load: '.-text%.txt' is neither a %.npy file nor a %.npz archive "
                   .. "%(it starts with 'hello,'%)", error_of(tgl.load, tmp('text.txt')))
    write_file(tmp('empty.npy'), '')
    assert.matches("tgl%.load: '.-empty%.npy' is empty", error_of(tgl.load, tmp('empty.npy')))
    assert.matches("tgl%.load: '.-nope%.npy': cannot open: No such file",
                   error_of(tgl.load, tmp('nope.npy')))
    assert.matches('tgl%.load: path must be a string, got number', error_of(tgl.load, 42))
  end)

  it('refuses truncated and corrupted files', function()
    local npy = read_file(fixture('f4_2x3.npy'))
    write_file(tmp('cut.npy'), npy:sub(1, -5))
    assert.matches('tgl%.load: .-truncated: header claims 6 elements %(24 bytes%) but only 20 '
                   .. 'bytes follow', error_of(tgl.load, tmp('cut.npy')))
    local npz = read_file(fixture('savez.npz'))
    write_file(tmp('cut.npz'), npz:sub(1, -10))
    assert.matches('tgl%.load: .-no end%-of%-central%-directory record',
                   error_of(tgl.load, tmp('cut.npz')))
    -- Flip one bit of W's last data byte (W.npy is 152 bytes, stored
    -- first, after its 30-byte header, name and extra field): only the
    -- CRC notices.
    local at = 30 + npz:byte(27) + 256 * npz:byte(28) + npz:byte(29) + 256 * npz:byte(30) + 152
    write_file(tmp('crc.npz'), npz:sub(1, at - 1) .. string.char(bit.bxor(npz:byte(at), 1))
               .. npz:sub(at + 1))
    assert.matches("tgl%.load: .-CRC mismatch in entry 'W%.npy'", error_of(tgl.load, tmp('crc.npz')))
  end)
end)

-- A .npy file whose header dict is `dict` (padded as NumPy pads), then data.
local function npy_with_header(dict, data)
  local h = dict .. (' '):rep(63 - (10 + #dict) % 64) .. '\n'
  return '\147NUMPY\1\0' .. string.char(#h % 256, math.floor(#h / 256)) .. h .. (data or '')
end

describe('tgl.load and special files', function()
  local support = dofile('spec/support.lua')
  local dir = support.tmpdir('io_spec_special')
  local bin = os.getenv('TGL_BIN') or arg[-1]

  -- Runs a Lua chunk in a tgl process that may not take more than 20 s: a
  -- load that blocks fails the test (status 124) instead of hanging it.
  local function run_bounded(chunk)
    local script = dir .. '/chunk.lua'
    write_file(script, chunk)
    return support.sh(('timeout 20 %q %q'):format(bin, script))
  end

  it('refuses a FIFO at once, with no writer and with a writer that stalls', function()
    local out, code = support.sh(("cd %q && rm -f idle.npy stall.npy stall.npz stall.idx && "
      .. "mkfifo idle.npy stall.npy stall.npz stall.idx"):format(dir))
    assert.are.equal(0, code, out)
    -- writers that send a valid .npy preamble (or a zip signature, an IDX
    -- magic) and then stall for longer than the test may take
    local writers = {}
    for name, head in pairs({ ['stall.npy'] = [[\223NUMPY\001\000v\000{'descr': ]],
                              ['stall.npz'] = [[PK\003\004]],
                              ['stall.idx'] = [[\000\000\010\001]] }) do
      -- (exec: killing the subshell kills the sleep; no output reaches this pipe)
      writers[#writers + 1] = ("(printf '%s'; exec sleep 60) > %q/%s 2>/dev/null & pids=\"$pids $!\";")
        :format(head, dir, name)
    end
    local chunk = ([[
      local tgl = require 'tgl'
      local core = require 'tgl.core'
      local dir = %q
      for _, name in ipairs({ 'idle.npy', 'stall.npy', 'stall.npz' }) do
        local ok, err = pcall(tgl.load, dir .. '/' .. name)
        print(name, ok, err)
      end
      local ok, err = pcall(tgl.io.read_idx, dir .. '/stall.idx')
      print('idx', ok, err)
      -- the C loaders by themselves, as a C program would call them
      local st1 = core.C.tgl_npy_load(core.ctx, dir .. '/stall.npy', core.out_array_t())
      print('npy_load', tonumber(st1), core.ffi.string(core.C.tgl_ctx_error(core.ctx)))
      local st2 = core.C.tgl_npz_load(core.ctx, dir .. '/stall.npz', core.ffi.new('tgl_npz *[1]'))
      print('npz_load', tonumber(st2), core.ffi.string(core.C.tgl_ctx_error(core.ctx)))
    ]]):format(dir)
    local t0 = os.time()
    local script = dir .. '/chunk.lua'
    write_file(script, chunk)
    out, code = support.sh('pids=; ' .. table.concat(writers, ' ')
      .. (' timeout 20 %q %q; st=$?; kill $pids 2>/dev/null; (exit $st)'):format(bin, script))
    assert.are.equal(0, code, out)
    assert.is_true(os.time() - t0 < 15, 'took ' .. (os.time() - t0) .. ' s')
    local fifo = 'is a FIFO %(named pipe%), not a regular file; load reads only regular files'
    for _, name in ipairs({ 'idle%.npy', 'stall%.npy', 'stall%.npz' }) do
      assert.matches(name .. "\tfalse\ttgl%.load: '[^\n]-/" .. name .. "': " .. fifo, out)
    end
    assert.matches("idx\tfalse\ttgl%.io%.read_idx: '[^\n]-/stall%.idx': " .. fifo, out)
    assert.matches("npy_load\t%d+\ttgl_npy_load: '[^\n]-/stall%.npy': " .. fifo, out)
    assert.matches("npz_load\t%d+\ttgl_npz_load: '[^\n]-/stall%.npz': " .. fifo, out)
  end)

  it('refuses directories and devices, naming what they are', function()
    os.execute(("mkdir -p %q"):format(dir .. '/d.npy'))
    assert.matches("tgl%.load: '.-/d%.npy': is a directory, not a regular file",
                   error_of(tgl.load, dir .. '/d.npy'))
    assert.matches("tgl%.load: '/dev/zero': is a character device, not a regular file",
                   error_of(tgl.load, '/dev/zero'))
    assert.matches("tgl%.io%.read_idx: '/dev/null': is a character device",
                   error_of(tgl.io.read_idx, '/dev/null'))
    -- a symbolic link to a regular file is read through
    write_file(dir .. '/real.npy', read_file(fixture('f4_2x3.npy')))
    os.execute(("ln -sf real.npy %q"):format(dir .. '/link.npy'))
    assert.are.same({ 2, 3 }, tgl.load(dir .. '/link.npy'):shape())
    local out, code = run_bounded(
      ("print(pcall(require('tgl').load, %q))"):format(dir .. '/d.npy'))
    assert.are.equal(0, code, out)
  end)
end)

describe('tgl.load messages quote file bytes escaped', function()
  it('escapes header keys and dtypes with control bytes and invalid UTF-8', function()
    write_file(tmp('key.npy'), npy_with_header(
      "{'descr': '<f4', 'fortran_op\239\191\189c\1iT\norder': False, 'shape': (1,), }", '\0\0\0\0'))
    local msg = error_of(tgl.load, tmp('key.npy'))
    assert.are.equal(("tgl.load: '%s': bad header: unexpected key "
      .. [['fortran_op\xef\xbf\xbdc\x01iT\x0aorder']] .. " (at byte 43 of the header)")
      :format(tmp('key.npy')), msg)
    assert.is_nil(msg:find('[\n\128-\255]'))
    -- a quote and a backslash in a key are escaped, so the quoting stays unambiguous
    write_file(tmp('quote.npy'), npy_with_header([[{'descr': '<f4', 'a\'b\\': 1}]]))
    assert.matches([[unexpected key 'a\'b\\']], error_of(tgl.load, tmp('quote.npy')), 1, true)
    write_file(tmp('descr.npy'), npy_with_header(
      "{'descr': '<\255\n4', 'fortran_order': False, 'shape': (1,), }", '\0\0\0\0'))
    assert.matches([[unsupported dtype '<\xff\x0a4' (tgl reads]], error_of(tgl.load, tmp('descr.npy')),
                   1, true)
    write_file(tmp('twice.npy'), npy_with_header(
      "{'descr': '<f4', '\tshape': (1,), '\tshape': (1,), }"))
    assert.matches([[unexpected key '\x09shape']], error_of(tgl.load, tmp('twice.npy')), 1, true)
  end)

  it('escapes the first bytes of a file that is neither format, and archive entry names', function()
    write_file(tmp('bin.dat'), '\0\1\n\255ab')
    assert.are.equal(("tgl.load: '%s' is neither a .npy file nor a .npz archive (it starts with "
      .. [['\x00\x01\x0a\xffab')]]):format(tmp('bin.dat')), error_of(tgl.load, tmp('bin.dat')))
    -- rename the fixture's entry W.npy to \255\n.npy... (same length: 5
    -- bytes, in its local header and in the central directory), then flip
    -- a data bit so that the CRC check names the entry
    local npz = read_file(fixture('savez.npz'))
    local renamed = npz:gsub('W%.npy', '\255\n.np')
    local at = 30 + npz:byte(27) + 256 * npz:byte(28) + npz:byte(29) + 256 * npz:byte(30) + 152
    write_file(tmp('name.npz'), renamed:sub(1, at - 1) .. string.char(bit.bxor(renamed:byte(at), 1))
               .. renamed:sub(at + 1))
    local msg = error_of(tgl.load, tmp('name.npz'))
    assert.matches([[CRC mismatch in entry '\xff\x0a.np' (the directory says]], msg, 1, true)
    assert.is_nil(msg:find('[\n\128-\255]'))
  end)
end)

describe('tgl.save', function()
  it('round-trips every dtype and shape kind bit for bit through .npy', function()
    for key, a in pairs(awkward_arrays()) do
      tgl.save(tmp(key .. '.npy'), a)
      local b = tgl.load(tmp(key .. '.npy'))
      assert.are.equal(a.dtype, b.dtype, key)
      assert.are.same(a:shape(), b:shape(), key)
      assert.are.equal(hex(bytes_of(a)), hex(bytes_of(b)), key)
    end
  end)

  it('round-trips a table of arrays through .npz, stored or compressed', function()
    local arrays = awkward_arrays()
    for _, compress in ipairs({ false, true }) do
      tgl.save(tmp('all.npz'), arrays, { compress = compress })
      local t = tgl.load(tmp('all.npz'))
      for key, a in pairs(arrays) do
        assert.are.same(a:shape(), t[key]:shape(), key)
        assert.are.equal(hex(bytes_of(a)), hex(bytes_of(t[key])), key)
      end
    end
    tgl.save(tmp('none.npz'), {})
    assert.are.same({}, tgl.load(tmp('none.npz')))
  end)

  it('saves a transposed view in C order', function()
    local a = tgl.array({ { 1, 2, 3 }, { 4, 5, 6 } }, 'int32')
    tgl.save(tmp('t.npy'), a:T())
    assert.are.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, tgl.load(tmp('t.npy')):totable())
  end)

  it('writes files NumPy reads back identically', function()
    if not has_numpy then
      missing_dep('/usr/bin/python3 with numpy (python3-numpy)')
      return
    end
    local arrays = awkward_arrays()
    local keys, want, paths = {}, {}, {}
    for key in pairs(arrays) do keys[#keys + 1] = key end
    table.sort(keys)
    for _, key in ipairs(keys) do
      tgl.save(tmp(key .. '.npy'), arrays[key])
      paths[#paths + 1] = tmp(key .. '.npy')
      want[#want + 1] = tgl_view('-', arrays[key])
    end
    tgl.save(tmp('all.npz'), arrays)
    tgl.save(tmp('allz.npz'), arrays, { compress = true })
    paths[#paths + 1] = tmp('all.npz')
    paths[#paths + 1] = tmp('allz.npz')
    for _ = 1, 2 do   -- entries in sorted name order
      for _, key in ipairs(keys) do want[#want + 1] = tgl_view(key, arrays[key]) end
    end
    assert.are.equal(table.concat(want), numpy_view(paths))
  end)

  it('replaces the file atomically and leaves it alone when saving fails', function()
    local a = tgl.array({ 1, 2, 3 }, 'float64')
    tgl.save(tmp('keep.npz'), { a = a })
    local before = read_file(tmp('keep.npz'))
    error_of(tgl.save, tmp('keep.npz'), { a = a, b = 5 })
    assert.are.equal(before, read_file(tmp('keep.npz')))
    tgl.save(tmp('keep.npz'), { a = tgl.array(7, 'uint8') })
    assert.are.equal(7, tgl.load(tmp('keep.npz')).a:totable())
    local p = io.popen("ls -a '" .. tmpdir .. "'")
    assert.is_nil(p:read('*a'):find('%.tmp%.'))
    p:close()
  end)

  -- What is at path, without following a symbolic link.
  local function kind_of(path)
    local p = io.popen(("if [ -L '%s' ]; then echo link; elif [ -p '%s' ]; then echo fifo; "
      .. "elif [ -d '%s' ]; then echo dir; elif [ -f '%s' ]; then echo file; else echo none; fi")
      :format(path, path, path, path))
    local k = p:read('*l')
    p:close()
    return k
  end
  local function leftovers(dir)
    local p = io.popen("ls -a '" .. dir .. "'")
    local found = p:read('*a'):match('[^\n]*%.tmp%.[^\n]*')
    p:close()
    return found
  end
  local function sh(cmd)
    local st = os.execute(cmd)
    assert(st == 0 or st == true, cmd)
  end
  local function readlink(path)
    local p = io.popen("readlink '" .. path .. "'")
    local s = p:read('*l')
    p:close()
    return s
  end

  it('refuses to replace anything but a regular file, and leaves it alone', function()
    local dir = tmp('kinds')
    sh(("rm -rf '%s' && mkdir -p '%s' && cd '%s' && mkfifo fifo.npy fifo.npz "
      .. "&& mkdir dir.npy dir.npz && ln -s nowhere.npy dangling.npy && ln -s nowhere.npz dangling.npz "
      .. "&& ln -s fifo.npy tofifo.npy && ln -s fifo.npz tofifo.npz && ln -s dir.npy todir.npy "
      .. "&& ln -s dir.npz todir.npz && ln -s loop.npy loop.npy"):format(dir, dir, dir))
    local a = tgl.array({ 1, 2, 3 }, 'float64')
    local cases = {
      { 'fifo', 'fifo', 'is a FIFO %(named pipe%), not a regular file' },
      { 'dir', 'dir', 'is a directory, not a regular file' },
      { 'dangling', 'link', 'is a dangling symbolic link %(its target does not exist%)' },
      { 'tofifo', 'link', 'is a symbolic link to a FIFO %(named pipe%), not to a regular file' },
      { 'todir', 'link', 'is a symbolic link to a directory, not to a regular file' },
    }
    for _, ext in ipairs({ '.npy', '.npz' }) do
      local value = ext == '.npy' and a or { a = a }
      for _, c in ipairs(cases) do
        local path = dir .. '/' .. c[1] .. ext
        local msg = error_of(tgl.save, path, value)
        assert.matches("tgl%.save: '" .. path:gsub('%p', '%%%0') .. "': " .. c[3]
          .. '; save replaces only a regular file %(or a symbolic link to one%)', msg)
        assert.are.equal(c[2], kind_of(path))
      end
    end
    local msg = error_of(tgl.save, dir .. '/loop.npy', a)
    assert.matches("'[^']*loop%.npy': is a symbolic link that cannot be followed", msg)
    assert.are.equal('link', kind_of(dir .. '/loop.npy'))
    assert.are.equal('nowhere.npy', readlink(dir .. '/dangling.npy'))
    assert.are.equal('none', kind_of(dir .. '/nowhere.npy'))
    assert.are.equal('none', kind_of(dir .. '/nowhere.npz'))
    assert.is_nil(leftovers(dir))
    assert.is_nil(leftovers(dir .. '/dir.npy'))
  end)

  it('writes through a symbolic link to a regular file, which stays a link', function()
    local dir = tmp('links')
    sh(("rm -rf '%s' && mkdir -p '%s/data' '%s/links'"):format(dir, dir, dir))
    for _, ext in ipairs({ '.npy', '.npz' }) do
      local wrap = function(x) if ext == '.npy' then return x end return { w = x } end
      local unwrap = function(v) if ext == '.npy' then return v end return v.w end
      local real, link = dir .. '/data/w' .. ext, dir .. '/links/w' .. ext
      tgl.save(real, wrap(tgl.array({ 1, 2 }, 'float64')))
      sh(("ln -s ../data/w%s '%s'"):format(ext, link))
      tgl.save(link, wrap(tgl.array({ 5, 6, 7 }, 'int32')))
      assert.are.equal('link', kind_of(link))
      assert.are.equal('../data/w' .. ext, readlink(link))
      assert.are.equal('file', kind_of(real))
      assert.are.same({ 5, 6, 7 }, unwrap(tgl.load(real)):totable())
      assert.are.same({ 5, 6, 7 }, unwrap(tgl.load(link)):totable())
      -- a failed save through the link leaves the target as it was
      local before = read_file(real)
      if ext == '.npz' then error_of(tgl.save, link, { w = tgl.array({ 1 }), b = 5 }) end
      assert.are.equal(before, read_file(real))
    end
    assert.is_nil(leftovers(dir .. '/data'))
    assert.is_nil(leftovers(dir .. '/links'))
  end)

  it('rejects bad arguments with errors that name them', function()
    local a = tgl.array({ 1, 2 })
    local cases = {
      { { tmp('x.npz'), a }, 'a single array goes to a %.npy file; give a table of arrays for %.npz' },
      { { tmp('x.npy'), { a = a } }, 'a table of arrays goes to a %.npz file' },
      { { tmp('x.npz'), { W = a, b = 'no' } }, "the value for key 'b' is a string, not an array" },
      { { tmp('x.npz'), { a } }, "the table's keys name the arrays and must be strings, got number key 1" },
      { { tmp('x.npz'), { [''] = a } }, 'array names must not be empty' },
      { { tmp('x.npz'), { ['a\0b'] = a } }, "array name 'a\\0b' contains a NUL byte" },
      { { 42, a }, 'path must be a string, got number' },
      { { tmp('x.npy'), 'text' }, 'expected an array or a table of named arrays, got string' },
      { { tmp('x.npz'), { a = a }, { level = 9 } }, "unknown option 'level'" },
      { { tmp('x.npy'), a, { compress = true } }, 'compress applies to %.npz archives' },
      { { tmp('x.npz'), { a = a }, 'fast' }, 'options must be a table, got string' },
      { { tmp('no/such/dir/x.npy'), a }, "'.-x%.npy': cannot create a file in its directory: "
        .. 'No such file or directory' },
    }
    for _, c in ipairs(cases) do
      local args = c[1]
      local msg = error_of(tgl.save, args[1], args[2], args[3])
      assert.matches('tgl%.save: ' .. c[2], msg)
      -- The error points at the caller's line, not at tgl's files.
      assert.is_nil(msg:find('tgl[/\\]io%.lua'), msg)
    end
    assert.is_nil(io.open(tmp('x.npz'), 'rb'))
    assert.is_nil(io.open(tmp('x.npy'), 'rb'))
  end)
end)
