-- tgl.array — concrete arrays in Lua: constructors (array, zeros, ones,
-- full, arange, rand, randn), the methods of an array (shape, size, get,
-- set, totable, clone, astype, reshape, T, ...), and their printing.
--
-- An array is a `tgl_array *` cdata owned by C (see include/tgl.h) and
-- released by the garbage collector.  Indices and axes are 1-based here;
-- the C API is 0-based and this file translates.
local core = require 'tgl.core'
local ffi, C = core.ffi, core.C
local check, argerror = core.check, core.argerror

local M = {}

-- Methods and metamethod hooks live in plain tables that later modules
-- (the eager ops) extend: a ctype's metatable is frozen once it is set.
local methods = {}
local hooks = {}
M.methods, M.hooks = methods, hooks
-- Fields an array shows through `.` besides its methods (for REPL completion).
M.fields = { dtype = true, device = true }

-- Dtype ids by name and names by id, from the engine (tgl_dtype, tgl.h).
local DTYPE, DTYPE_NAME = {}, {}
for id = 0, C.TGL_NDTYPES - 1 do
  local name = ffi.string(C.tgl_dtype_name(id))
  DTYPE[name], DTYPE_NAME[id] = id, name
end
-- The C element type of each dtype, for reading host memory.
local ELEM_CTYPE = { float32 = 'float', float64 = 'double', int32 = 'int32_t', int64 = 'int64_t',
                     uint8 = 'uint8_t', bool = 'uint8_t' }
local PTR_T = {}
for id, name in pairs(DTYPE_NAME) do
  PTR_T[id] = ffi.typeof(assert(ELEM_CTYPE[name], 'tgl: no element type for dtype ' .. name) .. ' *')
end
M.DTYPE, M.DTYPE_NAME = DTYPE, DTYPE_NAME
local DT_BOOL = DTYPE.bool

-- The host's device (tgl_device): arrays there have an ordinary pointer.
local DEVICE_CPU = C.TGL_DEVICE_CPU
M.DEVICE_CPU = DEVICE_CPU

local MAX_DIMS = core.MAX_DIMS  -- TGL_MAX_DIMS

-- The name of device id ("cpu", "cuda").
local function device_name(dev)
  local name = C.tgl_device_name(dev)
  return name ~= nil and ffi.string(name) or ('device ' .. tostring(dev))
end

-- a's element pointer, for the reads and writes this file does directly in
-- host memory.  Only cpu arrays (TGL_DEVICE_CPU) have one: for an array on
-- another device this raises a clear error instead of reading device
-- memory.  (a:data() is the raw pointer on any device, as doc/arrays.md says.)
local function host_ptr(fname, a)
  local dev = a.p.device
  if dev ~= DEVICE_CPU then
    argerror(fname, 'the array is on %s; Lua reads the elements of cpu arrays only',
             device_name(dev))
  end
  return a.p._data
end

local out_array = core.out_array_t

-- A host copy of a device array, through its backend; errors name fname.
local function host_copy(fname, a)
  local out = out_array()
  check(C.tgl_array_to_device(core.ctx, a.p, 0, out), fname)
  return core.wrap(out[0])
end
local dims_t = ffi.typeof('int64_t[$]', MAX_DIMS)
local shape_buf, strides_buf, idx_buf = dims_t(), dims_t(), dims_t()
local perm_buf = ffi.typeof('int[$]', MAX_DIMS)()

local config = require 'tgl.config'
local function floatX() return config.floatX end

local function is_int(x)
  return type(x) == 'number' and x == math.floor(x) and x > -2^53 and x < 2^53
end

-- The options of the constructors that take a shape.
local DTYPE_OPTION = { dtype = 'string' }
local SHAPE_OPTIONS = {
  rand = { dtype = 'string', low = 'number', high = 'number' },
  randn = { dtype = 'string', mean = 'number', std = 'number' },
}

-- Parses `n1, n2, ..., [opts]` or `{n1, n2, ...}, [opts]` into a shape list
-- and the options table.
local function parse_shape(fname, ...)
  local n = select('#', ...)
  local first = ...
  local shape, opts = {}, nil
  if type(first) == 'table' and not core.is_array(first) then
    for i, v in ipairs(first) do shape[i] = v end
    if n > 2 then argerror(fname, 'expected a shape table and an options table, got %d arguments', n) end
    opts = select(2, ...)
  else
    for i = 1, n do
      local v = select(i, ...)
      if type(v) == 'table' and i == n then opts = v
      elseif type(v) == 'number' then shape[#shape + 1] = v
      else argerror(fname, 'size at position %d must be a number, got %s', i, type(v)) end
    end
  end
  opts = core.check_options(fname, opts, SHAPE_OPTIONS[fname] or DTYPE_OPTION)
  if #shape > MAX_DIMS then
    argerror(fname, '%d dimensions (at most %d are supported)', #shape, MAX_DIMS)
  end
  for i, v in ipairs(shape) do
    if not is_int(v) or v < 0 then
      argerror(fname, 'size %s of dimension %d is not a non-negative integer', tostring(v), i)
    end
    shape_buf[i - 1] = v
  end
  return shape, opts
end
M.parse_shape = parse_shape

local function opt_dtype(fname, opts, default)
  local dt = opts.dtype
  if dt == nil then dt = default or floatX() end
  return core.dtype_id(dt, fname)
end

-- ---------------------------------------------------------------------------
-- constructors

function M.empty(...)
  local shape, opts = parse_shape('empty', ...)
  local out = out_array()
  check(C.tgl_array_empty(core.ctx, opt_dtype('empty', opts), #shape, shape_buf, out), 'empty')
  return core.wrap(out[0])
end

function M.zeros(...)
  local shape, opts = parse_shape('zeros', ...)
  local out = out_array()
  check(C.tgl_array_zeros(core.ctx, opt_dtype('zeros', opts), #shape, shape_buf, out), 'zeros')
  return core.wrap(out[0])
end

local function filled(fname, value, shape, opts)
  local out = out_array()
  check(C.tgl_array_full(core.ctx, opt_dtype(fname, opts), #shape, shape_buf, value, out), fname)
  return core.wrap(out[0])
end

function M.ones(...)
  local shape, opts = parse_shape('ones', ...)
  return filled('ones', 1, shape, opts)
end

-- tgl.full({2,3}, 7 [, {dtype=...}]) ; tgl.full(5, 7) is a 1-d array of 5.
function M.full(shape, value, opts)
  if type(shape) == 'number' then shape = { shape } end
  if type(shape) ~= 'table' then argerror('full', 'shape must be a table of sizes, got %s', type(shape)) end
  if type(value) == 'boolean' then value = value and 1 or 0 end
  if type(value) ~= 'number' then argerror('full', 'value must be a number, got %s', type(value)) end
  local s, o = parse_shape('full', shape, opts)
  return filled('full', value, s, o)
end

-- tgl.arange(n) is 1..n; tgl.arange(a, b [, step]) is a, a+step, ... b
-- (both ends included, as Lua's numeric for).  Integer arguments give int64.
function M.arange(a, b, step, opts)
  if type(b) == 'table' then opts, b = b, nil
  elseif type(step) == 'table' then opts, step = step, nil end
  opts = core.check_options('arange', opts, DTYPE_OPTION)
  -- checked before tgl.arange(n) becomes (1, n), so the position is the user's
  local args = { a, b == nil and 1 or b, step or 1 }
  for i = 1, 3 do
    local v = args[i]
    if type(v) ~= 'number' or v ~= v or v == math.huge or v == -math.huge then
      argerror('arange', 'argument %d must be a finite number, got %s', i, tostring(v))
    end
  end
  if b == nil then a, b = 1, a end
  step = step or 1
  if step == 0 then argerror('arange', 'step must not be zero') end
  local default = (is_int(a) and is_int(b) and is_int(step)) and 'int64' or floatX()
  local out = out_array()
  check(C.tgl_array_arange(core.ctx, opt_dtype('arange', opts, default), a, b, step, out), 'arange')
  return core.wrap(out[0])
end

-- A seed or offset: an integral Lua number (negative ones wrap modulo 2^64)
-- or a 64-bit integer cdata such as tgl.get_rng_state() returns.
local int64_t, uint64_t = ffi.typeof('int64_t'), ffi.typeof('uint64_t')
local function to_u64(fname, what, v)
  if ffi.istype(uint64_t, v) then return v end
  if ffi.istype(int64_t, v) then return ffi.cast(uint64_t, v) end
  if not is_int(v) then argerror(fname, '%s must be an integer, got %s', what, tostring(v)) end
  return ffi.cast(uint64_t, ffi.cast(int64_t, v))
end

function M.manual_seed(seed)
  C.tgl_ctx_manual_seed(core.ctx, to_u64('manual_seed', 'seed', seed))
end

-- The generator's state as a table {seed=, offset=}, for checkpoints.
function M.get_rng_state()
  local s, o = ffi.new('uint64_t[1]'), ffi.new('uint64_t[1]')
  C.tgl_ctx_rng_state(core.ctx, s, o)
  return { seed = s[0], offset = o[0] }
end

function M.set_rng_state(state)
  if type(state) ~= 'table' or state.seed == nil or state.offset == nil then
    argerror('set_rng_state', 'expected a table {seed=, offset=} from tgl.get_rng_state()')
  end
  C.tgl_ctx_set_rng_state(core.ctx, to_u64('set_rng_state', 'seed', state.seed),
                          to_u64('set_rng_state', 'offset', state.offset))
end

local function opt_number(fname, opts, key, default)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= 'number' then argerror(fname, 'option %s must be a number, got %s', key, type(v)) end
  return v
end

-- tgl.rand(2,3 [, {dtype=, low=0, high=1}]) ; tgl.randn(2,3 [, {dtype=, mean=0, std=1}])
function M.rand(...)
  local shape, opts = parse_shape('rand', ...)
  local out = out_array()
  check(C.tgl_array_rand(core.ctx, opt_dtype('rand', opts), #shape, shape_buf,
                         opt_number('rand', opts, 'low', 0), opt_number('rand', opts, 'high', 1),
                         out), 'rand')
  return core.wrap(out[0])
end

function M.randn(...)
  local shape, opts = parse_shape('randn', ...)
  local out = out_array()
  check(C.tgl_array_randn(core.ctx, opt_dtype('randn', opts), #shape, shape_buf,
                          opt_number('randn', opts, 'mean', 0), opt_number('randn', opts, 'std', 1),
                          out), 'randn')
  return core.wrap(out[0])
end

-- tgl.array(data [, dtype]): data is a number, a boolean, nested tables of
-- them, or an array (copied).  Tables of booleans give bool; otherwise the
-- default is tgl.config.floatX.
function M.array(data, dtype)
  if type(dtype) == 'table' then dtype = core.check_options('array', dtype, DTYPE_OPTION).dtype end
  if core.is_array(data) then
    return data:astype(dtype or data.dtype)
  end
  local shape = {}
  local probe = data
  while type(probe) == 'table' do
    shape[#shape + 1] = #probe
    if #shape > MAX_DIMS then
      argerror('array', 'nested tables deeper than %d levels', MAX_DIMS)
    end
    probe = probe[1]
  end
  if probe ~= nil and type(probe) ~= 'number' and type(probe) ~= 'boolean' then
    argerror('array', 'elements must be numbers or booleans, got %s', type(probe))
  end
  if data == nil then argerror('array', 'expected a number or a (nested) table, got nil') end
  local default = type(probe) == 'boolean' and 'bool' or floatX()
  local dt = core.dtype_id(dtype or default, 'array')
  for i, v in ipairs(shape) do shape_buf[i - 1] = v end
  local out = out_array()
  check(C.tgl_array_empty(core.ctx, DTYPE.float64, #shape, shape_buf, out), 'array')
  local staging = core.wrap(out[0])
  local p = ffi.cast('double *', host_ptr('array', staging))
  local k = 0
  -- Depth-first fill in C order, checking every row against the shape.
  local function fill(t, d, path)
    local n = shape[d]
    if d > #shape then
      local v = t
      if type(v) == 'boolean' then v = v and 1 or 0
      elseif type(v) ~= 'number' then
        argerror('array', 'element %s is a %s, expected a number', path, type(v))
      end
      p[k] = v
      k = k + 1
      return
    end
    if type(t) ~= 'table' then
      argerror('array', 'ragged nested table: %s is a %s where a table of %d was expected',
               path, type(t), n)
    end
    if #t ~= n then
      argerror('array', 'ragged nested table: %s has %d elements, expected %d', path, #t, n)
    end
    for i = 1, n do fill(t[i], d + 1, path .. '[' .. i .. ']') end
  end
  fill(data, 1, 'data')
  if dt == DTYPE.float64 then return staging end
  -- The engine converts (integers saturate, bool is v ~= 0).
  return staging:astype(DTYPE_NAME[dt])
end

-- ---------------------------------------------------------------------------
-- methods

-- 1-based axis (negative from the end) -> 0-based, with a clear error.
local function axis0(fname, a, d)
  local nd = a.p.ndim
  if not is_int(d) then argerror(fname, 'axis must be an integer, got %s', tostring(d)) end
  local given = d
  if d < 0 then d = nd + 1 + d end
  if d < 1 or d > nd then
    argerror(fname, 'axis %s is out of range for a %d-d array (axes count from 1; -1 is the last)',
             tostring(given), nd)
  end
  return d - 1
end
M.axis0 = axis0

function methods.shape(a)
  local s = {}
  for i = 0, a.p.ndim - 1 do s[i + 1] = tonumber(a.p._shape[i]) end
  return s
end

function methods.size(a, d)
  if d == nil then return methods.shape(a) end
  return tonumber(a.p._shape[axis0('size', a, d)])
end

function methods.strides(a)
  local s = {}
  for i = 0, a.p.ndim - 1 do s[i + 1] = tonumber(a.p._strides[i]) end
  return s
end

function methods.dim(a) return a.p.ndim end
function methods.nelement(a) return tonumber(a.p._size) end
methods.numel = methods.nelement
function methods.is_contiguous(a) return C.tgl_array_is_contiguous(a.p) ~= 0 end
function methods.data(a) return a.p._data end

-- Element offset of the 1-based index (i1, ..., in).
local function offset_of(fname, a, ...)
  local nd = a.p.ndim
  local n = select('#', ...)
  if n ~= nd then argerror(fname, 'a %d-d array needs %d indices, got %d', nd, nd, n) end
  local off = 0
  for d = 1, nd do
    local i = select(d, ...)
    local size = tonumber(a.p._shape[d - 1])
    if not is_int(i) then argerror(fname, 'index %d must be an integer, got %s', d, tostring(i)) end
    if i < 0 then i = size + 1 + i end
    if i < 1 or i > size then
      argerror(fname, 'index %s is out of range for dimension %d of size %d '
               .. '(indices count from 1; -1 is the last)', tostring(select(d, ...)), d, size)
    end
    idx_buf[d - 1] = i - 1
    off = off + (i - 1) * tonumber(a.p._strides[d - 1])
  end
  return off
end

-- Element off of a cpu array (host_ptr checked the device).
local function read(a, off)
  local v = ffi.cast(PTR_T[a.p.dtype_id], a.p._data)[off]
  if a.p.dtype_id == DT_BOOL then return v ~= 0 end
  return tonumber(v)
end

local get_buf = ffi.new('double[1]')

function methods.get(a, ...)
  local off = offset_of('get', a, ...)
  if a.p.device ~= DEVICE_CPU then
    -- Through the engine, whose backend copies the element to the host.
    check(C.tgl_array_get(core.ctx, a.p, idx_buf, get_buf), 'get')
    if a.p.dtype_id == DT_BOOL then return get_buf[0] ~= 0 end
    return get_buf[0]
  end
  return read(a, off)
end

-- a:set(v, i1, ..., in): v converted as the engine converts (integers
-- saturate, booleans give 0/1).
function methods.set(a, v, ...)
  if type(v) == 'boolean' then v = v and 1 or 0 end
  if type(v) ~= 'number' then argerror('set', 'value must be a number, got %s', type(v)) end
  offset_of('set', a, ...)  -- validates and fills idx_buf
  check(C.tgl_array_set(core.ctx, a.p, idx_buf, v), 'set')
  return a
end

-- Nested tables of Lua values (numbers; booleans for bool arrays).  A 0-d
-- array gives its number.
function methods.totable(a)
  -- a device array's elements are read from a host copy
  if a.p.device ~= DEVICE_CPU then return methods.totable(host_copy('totable', a)) end
  host_ptr('totable', a)
  local nd = a.p.ndim
  if nd == 0 then return read(a, 0) end
  local function build(d, off)
    local t = {}
    local n, st = tonumber(a.p._shape[d]), tonumber(a.p._strides[d])
    if d == nd - 1 then
      for i = 1, n do t[i] = read(a, off + (i - 1) * st) end
    else
      for i = 1, n do t[i] = build(d + 1, off + (i - 1) * st) end
    end
    return t
  end
  return build(0, 0)
end

-- a on the host: a itself for a cpu array, else a copy (API.md, "Devices").
function methods.cpu(a)
  if a.p.device == DEVICE_CPU then return a end
  return host_copy('cpu', a)
end

-- a on the GPU (tgl built with CUDA): a itself there, else a copy.
function methods.cuda(a)
  local out = out_array()
  check(C.tgl_array_to_device(core.ctx, a.p, C.TGL_DEVICE_CUDA, out), 'cuda')
  return core.wrap(out[0])
end

function methods.clone(a)
  local out = out_array()
  check(C.tgl_array_copy(core.ctx, a.p, a.p.dtype_id, out), 'clone')
  return core.wrap(out[0])
end

-- A contiguous array: a itself when it already is one.
function methods.contiguous(a)
  if C.tgl_array_is_contiguous(a.p) ~= 0 then return a end
  return methods.clone(a)
end

function methods.astype(a, dtype)
  local out = out_array()
  check(C.tgl_array_copy(core.ctx, a.p, core.dtype_id(dtype, 'astype'), out), 'astype')
  return core.wrap(out[0])
end

-- a:reshape(2, 3) or a:reshape({2, 3}); one size may be -1.  A view when a
-- is contiguous, a copy otherwise.
function methods.reshape(a, ...)
  local first = ...
  local dims = type(first) == 'table' and first or { ... }
  if #dims > MAX_DIMS then
    argerror('reshape', '%d dimensions (at most %d are supported)', #dims, MAX_DIMS)
  end
  for i, v in ipairs(dims) do
    if not is_int(v) or v < -1 then
      argerror('reshape', 'size %s of dimension %d is not a non-negative integer or -1', tostring(v), i)
    end
    shape_buf[i - 1] = v
  end
  local out = out_array()
  check(C.tgl_array_reshape(core.ctx, a.p, #dims, shape_buf, out), 'reshape')
  return core.wrap(out[0])
end
methods.view = methods.reshape

-- a:T() reverses the axes (the matrix transpose for 2-d): a strided view.
function methods.T(a)
  local out = out_array()
  check(C.tgl_array_transpose(core.ctx, a.p, nil, out), 'T')
  return core.wrap(out[0])
end

-- a:transpose(d1, d2) swaps two axes; a:permute(p1, ..., pn) reorders all.
function methods.transpose(a, d1, d2)
  if d1 == nil then return methods.T(a) end
  local i, j = axis0('transpose', a, d1), axis0('transpose', a, d2)
  for k = 0, a.p.ndim - 1 do perm_buf[k] = k end
  perm_buf[i], perm_buf[j] = j, i
  local out = out_array()
  check(C.tgl_array_transpose(core.ctx, a.p, perm_buf, out), 'transpose')
  return core.wrap(out[0])
end

function methods.permute(a, ...)
  local p = type((...)) == 'table' and (...) or { ... }
  if #p ~= a.p.ndim then argerror('permute', 'a %d-d array needs %d axes, got %d', a.p.ndim, a.p.ndim, #p) end
  for k, d in ipairs(p) do perm_buf[k - 1] = axis0('permute', a, d) end
  local out = out_array()
  check(C.tgl_array_transpose(core.ctx, a.p, perm_buf, out), 'permute')
  return core.wrap(out[0])
end

-- a:copy(b): copies b's elements into a (same shape; dtypes may differ).
function methods.copy(a, b)
  if not core.is_array(b) then argerror('copy', 'source must be an array, got %s', type(b)) end
  check(C.tgl_array_assign(core.ctx, a.p, b.p), 'copy')
  return a
end

-- a:fill(v): every element set to v.
function methods.fill(a, v)
  if type(v) == 'boolean' then v = v and 1 or 0 end
  if type(v) ~= 'number' then argerror('fill', 'value must be a number, got %s', type(v)) end
  local src = filled('fill', v, {}, { dtype = DTYPE_NAME[a.p.dtype_id] })
  -- broadcast the scalar through a zero-stride view of the same shape
  for i = 0, a.p.ndim - 1 do shape_buf[i], strides_buf[i] = a.p._shape[i], 0 end
  local out = out_array()
  check(C.tgl_array_view(core.ctx, src.p, a.p.ndim, shape_buf, strides_buf, 0, out), 'fill')
  local view = core.wrap(out[0])
  check(C.tgl_array_assign(core.ctx, a.p, view.p), 'fill')
  return a
end

-- ---------------------------------------------------------------------------
-- printing, in the Torch7 manner: values in columns, then the type and shape.

local PRINT_THRESHOLD = 1000   -- more elements than this are elided
local EDGE = 3                 -- elements kept at each end of an elided axis

local function shape_string(a)
  if a.p.ndim == 0 then return "scalar" end
  local s = {}
  for i = 0, a.p.ndim - 1 do s[#s + 1] = tostring(tonumber(a.p._shape[i])) end
  return 'size ' .. table.concat(s, 'x')
end

-- Which indices of an axis of size n are shown (0 marks the ellipsis).
local function shown(n, elide)
  local t = {}
  if elide and n > 2 * EDGE then
    for i = 1, EDGE do t[#t + 1] = i end
    t[#t + 1] = 0
    for i = n - EDGE + 1, n do t[#t + 1] = i end
  else
    for i = 1, n do t[#t + 1] = i end
  end
  return t
end

-- Formats one element; fmt decides float layout for the whole array.
local function formatter(a, elide)
  local dt = a.p.dtype_id
  if dt == DTYPE.bool then return function(v) return v ~= 0 and 'true' or 'false' end end
  if dt == DTYPE.int64 then
    return function(v) return (tostring(v):gsub('LL$', '')) end
  end
  if dt >= 2 then return function(v) return string.format('%d', tonumber(v)) end end
  -- Floats: integers print without decimals; when the largest magnitude
  -- is moderate every value gets 4 decimals (tiny ones show as 0.0000, as
  -- in Torch7); otherwise scientific notation.
  local allint, maxabs = true, 0
  local p = ffi.cast(PTR_T[dt], a.p._data)
  local function scan(d, off)
    if d == a.p.ndim then
      local v = tonumber(p[off])
      if v == v and v ~= math.huge and v ~= -math.huge then
        if v ~= math.floor(v) then allint = false end
        local m = math.abs(v)
        if m > maxabs then maxabs = m end
      end
      return
    end
    for _, i in ipairs(shown(tonumber(a.p._shape[d]), elide)) do
      if i > 0 then scan(d + 1, off + (i - 1) * tonumber(a.p._strides[d])) end
    end
  end
  scan(0, 0)
  local fmt
  if allint and maxabs < 1e9 then fmt = '%.0f'
  elseif maxabs < 1e5 and (maxabs >= 1e-3 or maxabs == 0) then fmt = '%.4f'
  else fmt = '%.4e' end
  return function(v)
    v = tonumber(v)
    if v ~= v then return 'nan' end
    if v == math.huge then return 'inf' end
    if v == -math.huge then return '-inf' end
    return string.format(fmt, v)
  end
end

function M.tostring(a)
  local nd = a.p.ndim
  local footer = string.format(a.p.ndim == 0 and '[tgl.array %s %s]' or '[tgl.array %s of %s]',
                               DTYPE_NAME[a.p.dtype_id], shape_string(a))
  -- Device memory is not read from Lua: a host copy is printed, with the
  -- place (the type, shape and place only when there is no copy to make).
  if a.p.device ~= DEVICE_CPU then
    local ok, h = pcall(host_copy, 'tostring', a)
    return (ok and M.tostring(h) or footer):sub(1, -2) .. ' on ' .. device_name(a.p.device) .. ']'
  end
  if a.p._size == 0 then return '[empty]\n' .. footer end
  local elide = tonumber(a.p._size) > PRINT_THRESHOLD
  local fmt = formatter(a, elide)
  local p = ffi.cast(PTR_T[a.p.dtype_id], a.p._data)
  if nd == 0 then return fmt(p[0]) .. '\n' .. footer end
  -- Render every shown element first to find the column width.
  local width = 1
  local function measure(d, off)
    if d == nd then
      local w = #fmt(p[off]); if w > width then width = w end
      return
    end
    for _, i in ipairs(shown(tonumber(a.p._shape[d]), elide)) do
      if i > 0 then measure(d + 1, off + (i - 1) * tonumber(a.p._strides[d])) end
    end
  end
  measure(0, 0)
  local lines = {}
  local function row(off, d)  -- the last axis as one line
    local cells = {}
    for _, i in ipairs(shown(tonumber(a.p._shape[d]), elide)) do
      if i == 0 then cells[#cells + 1] = string.rep(' ', width - 3) .. '...'
      else
        local s = fmt(p[off + (i - 1) * tonumber(a.p._strides[d])])
        cells[#cells + 1] = string.rep(' ', width - #s) .. s
      end
    end
    lines[#lines + 1] = ' ' .. table.concat(cells, ' ')
  end
  local function matrix(off)  -- the last two axes
    if nd == 1 then row(off, 0); return end
    for _, i in ipairs(shown(tonumber(a.p._shape[nd - 2]), elide)) do
      if i == 0 then lines[#lines + 1] = ' ...'
      else row(off + (i - 1) * tonumber(a.p._strides[nd - 2]), nd - 1) end
    end
  end
  -- Leading axes: one block per slice, titled (i,j,.,.) as Torch7 does.
  local function slices(d, off, prefix)
    if d >= nd - 2 then
      if nd > 2 then
        lines[#lines + 1] = '(' .. table.concat(prefix, ',') .. ',.,.) = '
      end
      matrix(off)
      if nd > 2 then lines[#lines + 1] = '' end
      return
    end
    for _, i in ipairs(shown(tonumber(a.p._shape[d]), elide)) do
      if i == 0 then lines[#lines + 1] = '...'; lines[#lines + 1] = ''
      else
        prefix[d + 1] = i
        slices(d + 1, off + (i - 1) * tonumber(a.p._strides[d]), prefix)
        prefix[d + 1] = nil
      end
    end
  end
  slices(0, 0, {})
  lines[#lines + 1] = footer
  return table.concat(lines, '\n')
end

-- ---------------------------------------------------------------------------
-- the array ctype

local function hook(name)
  return function(...)
    local h = hooks[name]
    if not h then error('tgl: operator ' .. name .. ' is not defined for arrays', 2) end
    return h(...)
  end
end

-- Lua's < and <= must give a boolean, and an elementwise comparison is an
-- array: the operators raise and name the functions that compare.
local function no_order(what)
  return function()
    error('tgl: ' .. what .. " cannot be compared with <, <=, > or >= (Lua wants one "
          .. 'boolean); compare elementwise with tgl.lt(a, b), tgl.le, tgl.gt or tgl.ge, '
          .. 'e.g. tgl.lt(a, 0) for a < 0', 2)
  end
end
M.no_order = no_order

local mt = {
  __lt = no_order('arrays'), __le = no_order('arrays'),
  __index = function(a, k)
    local m = methods[k]
    if m ~= nil then return m end
    if k == 'dtype' then return DTYPE_NAME[a.p.dtype_id] end
    if k == 'device' then return device_name(a.p.device) end
    local h = hooks.__index
    if h then return h(a, k) end
    if type(k) == 'string' then
      error("tgl: arrays have no field or method '" .. k .. "'", 2)
    end
    error('tgl: cannot index an array with a ' .. type(k), 2)
  end,
  __newindex = hook('__newindex'),
  __tostring = M.tostring,
  __len = function(a) return a.p.ndim > 0 and tonumber(a.p._shape[0]) or 0 end,
  __add = hook('__add'), __sub = hook('__sub'), __mul = hook('__mul'),
  __div = hook('__div'), __pow = hook('__pow'), __unm = hook('__unm'),
  __mod = hook('__mod'), __eq = nil,
}
ffi.metatype('tgl_aref', mt)

return M
