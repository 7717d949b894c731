-- idx_spec.lua — tgl.io.read_idx: the IDX format of MNIST/Fashion-MNIST,
-- plain and gzip-compressed, every element type, and corrupt files.
local tmp = os.getenv('TGL_TEST_TMP') or '/tmp'
os.execute('mkdir -p ' .. tmp)

-- What the suite needs beyond the build: missing, it fails the test in CI
-- and under scripts/test.sh, and makes it pending elsewhere (support.lua).
local support = dofile('spec/support.lua')
local strict_deps, missing_dep = support.strict_deps, support.missing_dep

local function be32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256,
                     math.floor(n / 256) % 256, n % 256)
end

local function write(name, bytes)
  local path = tmp .. '/' .. name
  local f = assert(io.open(path, 'wb'))
  f:write(bytes)
  f:close()
  return path
end

local function header(code, dims)
  local h = string.char(0, 0, code, #dims)
  for _, d in ipairs(dims) do h = h .. be32(d) end
  return h
end

describe('tgl.io.read_idx', function()
  it('reads uint8 images with their shape', function()
    local path = write('u8.idx', header(0x08, { 2, 3 }) .. string.char(0, 1, 2, 253, 254, 255))
    local a = tgl.io.read_idx(path)
    assert.equals('uint8', a.dtype)
    assert.same({ 2, 3 }, a:shape())
    assert.same({ { 0, 1, 2 }, { 253, 254, 255 } }, a:totable())
  end)

  it('widens int8 and big-endian int16 to int32, and reads int32', function()
    local a = tgl.io.read_idx(write('i8.idx', header(0x09, { 3 }) .. string.char(0x7f, 0x80, 0xff)))
    assert.equals('int32', a.dtype)
    assert.same({ 127, -128, -1 }, a:totable())
    local b = tgl.io.read_idx(write('i16.idx', header(0x0B, { 2 }) .. string.char(0x01, 0x02, 0xff, 0xfe)))
    assert.same({ 258, -2 }, b:totable())
    local c = tgl.io.read_idx(write('i32.idx', header(0x0C, { 1 }) .. string.char(0xff, 0xff, 0xff, 0xfe)))
    assert.same({ -2 }, c:totable())
  end)

  it('reads big-endian float32 and float64', function()
    -- 1.5f = 0x3fc00000 ; -2.25 = 0xc002000000000000
    local a = tgl.io.read_idx(write('f32.idx', header(0x0D, { 1 }) .. string.char(0x3f, 0xc0, 0, 0)))
    assert.equals('float32', a.dtype)
    assert.same({ 1.5 }, a:totable())
    local b = tgl.io.read_idx(write('f64.idx', header(0x0E, { 1 }) .. string.char(0xc0, 0x02, 0, 0, 0, 0, 0, 0)))
    assert.same({ -2.25 }, b:totable())
  end)

  it('reads gzip-compressed files', function()
    local path = write('gz.idx', header(0x08, { 4 }) .. string.char(9, 8, 7, 6))
    if os.execute('command -v gzip >/dev/null 2>&1') ~= 0 then
      missing_dep('gzip')
      return
    end
    os.execute(('gzip -kf %q'):format(path))
    assert.same({ 9, 8, 7, 6 }, tgl.io.read_idx(path .. '.gz'):totable())
  end)

  it('reads the Fashion-MNIST test labels Debian ships', function()
    local path = '/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz'
    if not io.open(path) then
      missing_dep('dataset-fashion-mnist')
      return
    end
    local y = tgl.io.read_idx(path)
    assert.same({ 10000 }, y:shape())
    assert.equals(9, y:get(1))         -- the first test item is an ankle boot
    assert.equals(9, tgl.max(y):get()) -- classes 0..9
  end)

  it('fails clearly on a missing file, a bad magic, a truncated header or data', function()
    local function raises(path, what)
      local ok, err = pcall(tgl.io.read_idx, path)
      assert.is_false(ok)
      assert.matches('tgl%.io%.read_idx: ', err)
      assert.matches(what, err)
    end
    raises(tmp .. '/no/such/file.idx', 'cannot open')
    raises(write('magic.idx', 'PK\3\4 not an idx'), 'not an IDX file')
    raises(write('short.idx', string.char(0, 0)), 'too short')
    raises(write('hdr.idx', string.char(0, 0, 8, 2) .. be32(3)), 'truncated header')
    raises(write('data.idx', header(0x08, { 2, 3 }) .. string.char(1, 2, 3)), 'ends before them')
    -- a header claiming 2^48 elements fails as truncated, without trying to allocate them
    raises(write('huge.idx', header(0x08, { 65536, 65536, 65536 })), 'ends before them')
    assert.has_error(function() tgl.io.read_idx(42) end, 'tgl.io.read_idx: path must be a string, got number')
  end)
end)
