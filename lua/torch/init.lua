-- torch — Torch7's tensor names over tgl arrays: `require 'torch'` (which
-- also sets the global `torch`, as Torch7 does).
--
-- A torch tensor *is* a tgl array: torch.Tensor(2, 3) returns a tgl array,
-- and the methods Torch7 scripts call (narrow, select, add, mul, t, ...) are
-- added to the arrays' method table (tgl.array's `methods`, the hook that
-- module offers) under names tgl does not use yet.  A name tgl already has
-- keeps tgl's meaning (sum, max, view, size, ...): doc/torch7.md lists
-- those differences, and the torch.sum/max/min/mean functions here give
-- Torch7's dims and return values instead.
--
-- Tensor types map to dtypes: Double float64, Float float32, Long int64,
-- Int int32, Byte uint8.  The default tensor type is 'torch.DoubleTensor'
-- (Torch7's), not tgl.config.floatX.
local tgl = require 'tgl'
local array = require 'tgl.array'
local core = require 'tgl.core'
local G = require 'tgl.graph'
local ffi, C = core.ffi, core.C

local methods = array.methods
local torch = {}

-- Errors name the torch function and point at the user's line: the first
-- stack frame outside tgl's own rooms (tgl.core.user_level).
local user_level = core.user_level
local function err(fname, fmt, ...)
  error(('%s: ' .. fmt):format(fname, ...), user_level())
end

-- Calls f(...) and re-raises a tgl error at the user's line (tgl's own
-- errors point at the first frame outside lua/tgl/, which is this file).
local function relay(f, ...)
  local r = { pcall(f, ...) }
  if r[1] then return unpack(r, 2, table.maxn(r)) end
  local msg = tostring(r[2]):gsub('^[^\n:]*:%d+: ', '')
  error(msg, user_level())
end

local function is_int(x) return type(x) == 'number' and x == math.floor(x) end

-- ---------------------------------------------------------------------------
-- tensor types

local TYPES = {
  ['torch.DoubleTensor'] = 'float64', ['torch.FloatTensor'] = 'float32',
  ['torch.LongTensor'] = 'int64', ['torch.IntTensor'] = 'int32', ['torch.ByteTensor'] = 'uint8',
}
local TYPE_OF = { bool = 'torch.BoolTensor' }
for name, dt in pairs(TYPES) do TYPE_OF[dt] = name end

local default_type = 'torch.DoubleTensor'

function torch.setdefaulttensortype(name)
  if not TYPES[name] then
    err('torch.setdefaulttensortype', "unknown tensor type %s (one of 'torch.DoubleTensor', "
        .. "'torch.FloatTensor', 'torch.LongTensor', 'torch.IntTensor', 'torch.ByteTensor')",
        tostring(name))
  end
  default_type = name
end
function torch.getdefaulttensortype() return default_type end

local function default_dtype() return TYPES[default_type] end

-- torch.LongStorage(n | table): a plain Lua table of integers marked as a
-- storage, so that torch.Tensor(storage) reads it as sizes (a plain table
-- is data, as in Torch7).
local LS_METHODS = {}
local LS_MT = { __index = LS_METHODS, __typename = 'torch.LongStorage' }
function LS_METHODS.size(s) return #s end
function LS_METHODS.totable(s) local t = {} for i = 1, #s do t[i] = s[i] end return t end
function torch.LongStorage(n)
  local s = {}
  if type(n) == 'table' then
    for i, v in ipairs(n) do
      if not is_int(v) then err('torch.LongStorage', 'element %d is not an integer: %s', i, tostring(v)) end
      s[i] = v
    end
  elseif n == nil then
  elseif is_int(n) and n >= 0 then
    for i = 1, n do s[i] = 0 end
  else
    err('torch.LongStorage', 'expected a size or a table of integers, got %s', tostring(n))
  end
  return setmetatable(s, LS_MT)
end
local function is_storage(x) return type(x) == 'table' and getmetatable(x) == LS_MT end

-- Sizes from `n1, n2, ...` or one table (a storage or a plain table).
local function sizes_of(fname, ...)
  local first = ...
  local s = {}
  if type(first) == 'table' and not core.is_array(first) then
    if select('#', ...) > 1 then err(fname, 'expected one table of sizes, got %d arguments', select('#', ...)) end
    for i, v in ipairs(first) do s[i] = v end
  else
    for i = 1, select('#', ...) do
      local v = select(i, ...)
      if type(v) ~= 'number' then
        err(fname, 'size %d must be a number, got %s', i, type(v))
      end
      s[i] = v
    end
  end
  for i, v in ipairs(s) do
    if not is_int(v) or v < 0 then err(fname, 'size %d is not a non-negative integer: %s', i, tostring(v)) end
  end
  return s
end

-- The constructor of one tensor type:
--   T()            an empty tensor (1-d, 0 elements: tgl has no 0-element 0-d array)
--   T(n1, n2, ...) or T(storage)  zeros of those sizes (Torch7 leaves them undefined)
--   T(table)       the nested table's values
--   T(tensor)      a view of the same memory (same type only)
local function constructor(name, dtype_of)
  return function(...)
    local dt = dtype_of()
    local n, first = select('#', ...), ...
    if n == 0 then return relay(tgl.empty, 0, { dtype = dt }) end
    if core.is_array(first) then
      if n > 1 then err(name, 'expected one tensor, got %d arguments', n) end
      if first.dtype ~= dt then
        err(name, 'cannot view a %s as a %s (use :type(%q) for a converted copy)',
            TYPE_OF[first.dtype] or first.dtype, TYPE_OF[dt], TYPE_OF[dt])
      end
      if first:dim() == 0 then return first end
      return G.index(first, {})
    end
    if type(first) == 'table' and not is_storage(first) then
      if n > 1 then err(name, 'expected one table of values, got %d arguments', n) end
      return relay(tgl.array, first, dt)
    end
    return relay(tgl.zeros, sizes_of(name, ...), { dtype = dt })
  end
end

for tname, dt in pairs(TYPES) do
  local short = tname:sub(7)
  torch[short] = constructor(tname, function() return dt end)
end
torch.Tensor = constructor('torch.Tensor', default_dtype)

-- torch.type(x): 'torch.DoubleTensor' for a float64 array; a Torch-style
-- class's __typename ('nn.Linear'); else Lua's type.
function torch.type(x)
  if core.is_array(x) then return TYPE_OF[x.dtype] or ('torch.' .. x.dtype) end
  local mt = type(x) == 'table' and getmetatable(x)
  if mt and type(mt.__typename) == 'string' then return mt.__typename end
  return type(x)
end
-- torch.typename(x): the same for torch objects, nil for others.
function torch.typename(x)
  local t = torch.type(x)
  if t == type(x) then return nil end
  return t
end
function torch.isTensor(x) return core.is_array(x) end
function torch.isStorage(x) return is_storage(x) end

-- ---------------------------------------------------------------------------
-- constructors with the default tensor type

local function shaped(fname, f)
  return function(...)
    return relay(f, sizes_of(fname, ...), { dtype = default_dtype() })
  end
end
torch.zeros = shaped('torch.zeros', tgl.zeros)
torch.ones = shaped('torch.ones', tgl.ones)
torch.rand = shaped('torch.rand', tgl.rand)
torch.randn = shaped('torch.randn', tgl.randn)

-- torch.range(a, b [, step]): a, a+step, ... up to b included.
function torch.range(a, b, step)
  if type(a) ~= 'number' or type(b) ~= 'number' then
    err('torch.range', 'expected (from, to [, step]) numbers')
  end
  return relay(tgl.arange, a, b, step or 1, { dtype = default_dtype() })
end

-- torch.linspace(a, b [, n = 100]): n points a + i*(b-a)/(n-1), as TH
-- computes them (the last one may differ from b by rounding).
function torch.linspace(a, b, n)
  n = n or 100
  if type(a) ~= 'number' or type(b) ~= 'number' then
    err('torch.linspace', 'expected (from, to [, n]) numbers')
  end
  if not is_int(n) or n < 1 or (n == 1 and a ~= b) then
    err('torch.linspace', 'invalid number of points %s (at least 2, or 1 when from == to)', tostring(n))
  end
  local t, step = {}, n > 1 and (b - a) / (n - 1) or 0
  for i = 0, n - 1 do t[i + 1] = a + i * step end
  return relay(tgl.array, t, default_dtype())
end

-- ---------------------------------------------------------------------------
-- random numbers and threads

local initial_seed = 0
function torch.manualSeed(s)
  relay(tgl.manual_seed, s)
  initial_seed = s
end
function torch.initialSeed() return initial_seed end

-- tgl.config.threads: the engine's worker threads (kernels and BLAS).
function torch.setnumthreads(n)
  if not is_int(n) or n < 1 then err('torch.setnumthreads', 'expected a positive integer, got %s', tostring(n)) end
  relay(function() tgl.config.threads = n end)
end
function torch.getnumthreads() return tgl.config.threads end

-- ---------------------------------------------------------------------------
-- torch.Timer: real is wall time; user is the process's CPU time
-- (os.clock: all threads, user and system together); sys is 0.

local Timer = {}
Timer.__index = Timer
Timer.__typename = 'torch.Timer'
function torch.Timer()
  local t = setmetatable({}, Timer)
  t:reset()
  t.running = true
  return t
end
function Timer:reset()
  self.real0, self.cpu0 = tgl.time(), os.clock()
  self.real_acc, self.cpu_acc = 0, 0
  return self
end
function Timer:stop()
  if self.running then
    self.real_acc = self.real_acc + (tgl.time() - self.real0)
    self.cpu_acc = self.cpu_acc + (os.clock() - self.cpu0)
    self.running = false
  end
  return self
end
function Timer:resume()
  if not self.running then
    self.real0, self.cpu0 = tgl.time(), os.clock()
    self.running = true
  end
  return self
end
function Timer:time()
  local real, cpu = self.real_acc, self.cpu_acc
  if self.running then
    real = real + (tgl.time() - self.real0)
    cpu = cpu + (os.clock() - self.cpu0)
  end
  return { real = real, user = cpu, sys = 0 }
end

-- ---------------------------------------------------------------------------
-- torch.CmdLine: options `-name value`; a boolean option is a flag that
-- sets the opposite of its default (as Torch7).  parse raises a clear
-- error for an unknown option or a bad number (Torch7 prints the help and
-- exits); `-h`/`--help` prints the help and exits with status 0.

local CmdLine = {}
CmdLine.__index = CmdLine
CmdLine.__typename = 'torch.CmdLine'
function torch.CmdLine()
  return setmetatable({ lines = {}, options = {}, order = {} }, CmdLine)
end
function CmdLine:text(s)
  self.lines[#self.lines + 1] = { text = s or '' }
end
function CmdLine:option(name, default, help)
  if type(name) ~= 'string' or not name:match('^%-%-?[%w_]') then
    err('torch.CmdLine:option', "an option's name starts with '-', got %s", tostring(name))
  end
  local key = name:gsub('^%-%-?', '')
  if self.options[name] then err('torch.CmdLine:option', 'option %s is declared twice', name) end
  local o = { name = name, key = key, default = default, help = help or '' }
  self.options[name] = o
  self.lines[#self.lines + 1] = { option = o }
end
function CmdLine:helptext(progname)
  local out = { ('Usage: %s [options]'):format(progname or (arg and arg[0]) or 'script') }
  local width = 0
  for _, l in ipairs(self.lines) do if l.option and #l.option.name > width then width = #l.option.name end end
  for _, l in ipairs(self.lines) do
    if l.option then
      local o = l.option
      out[#out + 1] = ('  %-' .. width .. 's %s [%s]'):format(o.name, o.help, tostring(o.default))
    else
      out[#out + 1] = l.text
    end
  end
  return table.concat(out, '\n') .. '\n'
end
function CmdLine:help(argv)
  io.write(self:helptext(argv and argv[0]))
end
function CmdLine:parse(argv)
  argv = argv or {}
  local params = {}
  for name, o in pairs(self.options) do params[o.key] = o.default end
  local i = 1
  while argv[i] ~= nil do
    local a = argv[i]
    if a == '-h' or a == '--help' then
      self:help(argv)
      os.exit(0)
    end
    local o = self.options[a]
    if not o then
      local names = {}
      for n in pairs(self.options) do names[#names + 1] = n end
      table.sort(names)
      err('torch.CmdLine:parse', 'unknown option %s (options: %s)', tostring(a), table.concat(names, ' '))
    end
    if type(o.default) == 'boolean' then
      params[o.key] = not o.default
      i = i + 1
    else
      local v = argv[i + 1]
      if v == nil then err('torch.CmdLine:parse', 'option %s needs a value', a) end
      if type(o.default) == 'number' then
        local x = tonumber(v)
        if x == nil then err('torch.CmdLine:parse', 'option %s needs a number, got %s', a, v) end
        v = x
      end
      params[o.key] = v
      i = i + 2
    end
  end
  return params
end

-- ---------------------------------------------------------------------------
-- Torch7's reductions with Torch7's results: no dim gives a Lua number;
-- dim d keeps d with size 1; max/min also return the 1-based indices as a
-- LongTensor.  (The methods a:sum(), a:max(d), ... are tgl's: see
-- doc/torch7.md.)

local function check_dim(fname, a, d)
  if not is_int(d) or d < 1 or d > a:dim() then
    err(fname, 'dimension %s out of range for a %d-d tensor (dimensions count from 1)', tostring(d), a:dim())
  end
end
local function reduction(name)
  local fname = 'torch.' .. name
  return function(a, d)
    if not core.is_array(a) then err(fname, 'expected a tensor, got %s', type(a)) end
    if d == nil then return relay(G[name], a):get() end
    check_dim(fname, a, d)
    local v = relay(G[name], a, d, { keepdims = true })
    if name == 'max' or name == 'min' then
      local i = relay(G['arg' .. name], a, d, { keepdims = true })
      return v, i:astype('int64')
    end
    return v
  end
end
for _, name in ipairs({ 'sum', 'mean', 'max', 'min' }) do torch[name] = reduction(name) end

-- ---------------------------------------------------------------------------
-- methods on arrays, under names tgl does not have (never replacing one)

local added = {}
local function method(name, f)
  if methods[name] == nil then
    methods[name] = f
    added[#added + 1] = name
  end
end

local function need_array(fname, x, what)
  if not core.is_array(x) then err(fname, '%s must be a tensor, got %s', what, type(x)) end
end

method('nElement', function(a) return a:nelement() end)
method('isContiguous', function(a) return a:is_contiguous() end)
method('isTensor', function(a) return core.is_array(a) end)

-- Indexing specs: {} for whole dimensions and `what` at dimension d.
local function spec_at(a, d, what)
  local s = {}
  for k = 1, a:dim() do s[k] = {} end
  s[d] = what
  return s
end

method('narrow', function(a, d, i, n)
  check_dim(':narrow', a, d)
  local size = a:size(d)
  if not is_int(i) or not is_int(n) or n < 1 or i < 1 or i + n - 1 > size then
    err(':narrow', 'index %s and size %s out of range for dimension %d of size %d',
        tostring(i), tostring(n), d, size)
  end
  return G.index(a, spec_at(a, d, { i, i + n - 1 }))
end)

method('select', function(a, d, i)
  check_dim(':select', a, d)
  if a:dim() == 1 then err(':select', 'cannot select on a 1-d tensor (t[i] reads its element)') end
  local size = a:size(d)
  if not is_int(i) or i < 1 or i > size then
    err(':select', 'index %s out of range for dimension %d of size %d', tostring(i), d, size)
  end
  return G.index(a, spec_at(a, d, i))
end)

-- a:sub(s1, e1 [, s2, e2, ...]): inclusive ranges, negative counts from the end.
method('sub', function(a, ...)
  local n = select('#', ...)
  if n % 2 ~= 0 or n / 2 > a:dim() then
    err(':sub', 'expected start, end pairs for at most %d dimensions, got %d numbers', a:dim(), n)
  end
  local s = {}
  for k = 1, a:dim() do
    if 2 * k <= n then
      local from, to = select(2 * k - 1, ...)
      local size = a:size(k)
      local f = (is_int(from) and from < 0) and size + 1 + from or from
      local t = (is_int(to) and to < 0) and size + 1 + to or to
      if not is_int(f) or not is_int(t) or f < 1 or t > size or f > t then
        err(':sub', 'range %s..%s out of range for dimension %d of size %d', tostring(from), tostring(to), k, size)
      end
      s[k] = { f, t }
    else
      s[k] = {}
    end
  end
  return G.index(a, s)
end)

-- a:index(d, indices): a new tensor of the slices at the 1-based indices.
method('index', function(a, d, idx)
  check_dim(':index', a, d)
  need_array(':index', idx, 'the indices')
  return relay(G.index, a, spec_at(a, d, idx))
end)

method('zero', function(a) return a:fill(0) end)

-- Writes v into a (a:copy converts to a's type); v may be a new array.
local function store(a, v)
  if core.is_array(v) then relay(methods.copy, a, v) else relay(methods.fill, a, v) end
  return a
end

-- a:add(v) ; a:add(t) ; a:add(v, t) ; a:add(t1, t2) ; a:add(t1, v, t2)
method('add', function(a, x, y, z)
  if z ~= nil then
    need_array(':add', x, 'the first tensor'); need_array(':add', z, 'the second tensor')
    return store(a, relay(G.add, x, relay(G.mul, y, z)))
  end
  if y ~= nil then
    if type(x) == 'number' then return store(a, relay(G.add, a, relay(G.mul, x, y))) end
    return store(a, relay(G.add, x, y))
  end
  if x == nil then err(':add', 'expected a number or a tensor') end
  return store(a, relay(G.add, a, x))
end)
-- a:mul(v) ; a:mul(t, v): a = t * v
method('mul', function(a, x, y)
  if y ~= nil then return store(a, relay(G.mul, x, y)) end
  if type(x) ~= 'number' then err(':mul', 'expected a number (use :cmul for a tensor), got %s', type(x)) end
  return store(a, relay(G.mul, a, x))
end)
method('div', function(a, x, y)
  if y ~= nil then return store(a, relay(G.div, x, y)) end
  if type(x) ~= 'number' then err(':div', 'expected a number (use :cdiv for a tensor), got %s', type(x)) end
  return store(a, relay(G.div, a, x))
end)
-- a:cmul(t) ; a:cmul(t1, t2): elementwise
method('cmul', function(a, x, y)
  if y ~= nil then return store(a, relay(G.mul, x, y)) end
  need_array(':cmul', x, 'the argument')
  return store(a, relay(G.mul, a, x))
end)
method('cdiv', function(a, x, y)
  if y ~= nil then return store(a, relay(G.div, x, y)) end
  need_array(':cdiv', x, 'the argument')
  return store(a, relay(G.div, a, x))
end)

-- a:t(): the transpose of a 2-d tensor (a view).
method('t', function(a)
  if a:dim() ~= 2 then err(':t', 'expected a 2-d tensor, got %d-d', a:dim()) end
  return a:T()
end)

-- a:resize(sizes...): in place, as Torch7: `a` itself becomes the new
-- shape.  Same element count: a view of the same memory.  Another count:
-- new memory holding a's first elements (the rest zero); other views of
-- the old memory no longer follow `a`.  Only contiguous tensors.
local out_array = core.out_array_t
local shape_buf = ffi.typeof('int64_t[$]', core.MAX_DIMS)()
method('resize', function(a, ...)
  local s = sizes_of(':resize', ...)
  if #s > core.MAX_DIMS then err(':resize', '%d dimensions (at most %d)', #s, core.MAX_DIMS) end
  if not a:is_contiguous() then
    err(':resize', 'the tensor is not contiguous (resize it after :contiguous(), or use :reshape for a copy)')
  end
  local count = 1
  for _, v in ipairs(s) do count = count * v end
  local out = out_array()
  if count == a:nelement() then
    for i, v in ipairs(s) do shape_buf[i - 1] = v end
    core.check(C.tgl_array_reshape(core.ctx, a.p, #s, shape_buf, out), 'resize')
  else
    local new = relay(tgl.zeros, s, { dtype = a.dtype })
    local k = math.min(count, a:nelement())
    if k > 0 then relay(methods.copy, new:reshape(-1):narrow(1, 1, k), a:reshape(-1):narrow(1, 1, k)) end
    C.tgl_array_retain(new.p)
    out[0] = new.p
  end
  local old = a.p
  a.p = out[0]
  C.tgl_array_release(old)
  return a
end)
method('resizeAs', function(a, b)
  need_array(':resizeAs', b, 'the argument')
  return a:resize(b:shape())
end)

-- Conversions: a itself when the type already matches, else a copy.
local function converter(dt)
  return function(a) if a.dtype == dt then return a end return a:astype(dt) end
end
method('double', converter('float64'))
method('float', converter('float32'))
method('long', converter('int64'))
method('int', converter('int32'))
method('byte', converter('uint8'))
-- a:type() -> 'torch.DoubleTensor' ; a:type('torch.FloatTensor') converts.
method('type', function(a, name)
  if name == nil then return torch.type(a) end
  local dt = TYPES[name]
  if not dt then err(':type', 'unknown tensor type %s', tostring(name)) end
  return converter(dt)(a)
end)
method('typeAs', function(a, b) need_array(':typeAs', b, 'the argument'); return converter(b.dtype)(a) end)

-- ---------------------------------------------------------------------------
-- matrix products: mm, mv, addmm, addmv, addr (Torch7's argument forms).
--   torch.addmm([res,] [v1,] M, [v2,] mat1, mat2)   res = v1*M + v2*(mat1 mat2)
--   M:addmm(mat1, mat2)                M = M + mat1 mat2
--   r:addmm(M, mat1, mat2) ; r:addmm([v1,] [M,] v2, mat1, mat2) ...
-- A method's one number is v2 (Torch7's rule: its v1 is then 1); two are
-- v1 and v2.  The result is computed first and then written into res (so
-- res may be M or one of the factors), resized to the result's shape.

local PRODUCTS = {
  addmm = { dims = { 2, 2, 2 }, what = 'mat1, mat2 (2-d)' },
  addmv = { dims = { 1, 2, 1 }, what = 'mat (2-d), vec2 (1-d)' },
  addr = { dims = { 2, 1, 1 }, what = 'vec1, vec2 (1-d)' },
}

local function product(name, a, b)
  if name == 'addr' then
    return relay(G.mul, relay(G.reshape, a, { a:size(1), 1 }), relay(G.reshape, b, { 1, b:size(1) }))
  end
  return relay(G.dot, a, b)
end

-- Checks the factors' dims and sizes; returns the product's shape.
local function product_shape(fname, name, a, b)
  local d = PRODUCTS[name].dims
  if a:dim() ~= d[2] or b:dim() ~= d[3] then
    err(fname, 'expected %s, got %d-d and %d-d tensors', PRODUCTS[name].what, a:dim(), b:dim())
  end
  if name == 'addr' then return { a:size(1), b:size(1) } end
  if a:size(2) ~= b:size(1) then
    err(fname, 'size mismatch: %s times %s', table.concat(a:shape(), 'x'), table.concat(b:shape(), 'x'))
  end
  if name == 'addmv' then return { a:size(1) } end
  return { a:size(1), b:size(2) }
end

-- Writes value into res, resizing res to value's shape first if needed.
local function store_resized(res, value)
  local same = res:dim() == value:dim()
  for k = 1, value:dim() do if same and res:size(k) ~= value:size(k) then same = false end end
  if not same then res:resize(value:shape()) end
  return store(res, value)
end

-- v1*M + v2*(a b), M may be nil.
local function combine(fname, name, v1, M, v2, a, b)
  local shape = product_shape(fname, name, a, b)
  local p = product(name, a, b)
  if v2 ~= 1 then p = relay(G.mul, p, v2) end
  if M == nil then return p end
  if M:dim() ~= #shape then
    err(fname, 'the added tensor is %d-d, the product %d-d', M:dim(), #shape)
  end
  for k, n in ipairs(shape) do
    if M:size(k) ~= n then
      err(fname, 'the added tensor is %s, the product %s', table.concat(M:shape(), 'x'), table.concat(shape, 'x'))
    end
  end
  if v1 ~= 1 then M = relay(G.mul, M, v1) end
  return relay(G.add, M, p)
end

-- Splits an argument list into its tensors and the numbers before each.
local function split_args(fname, ...)
  local ts, nums, pending = {}, {}, {}
  for i = 1, select('#', ...) do
    local x = select(i, ...)
    if core.is_array(x) then
      ts[#ts + 1] = x
      nums[#ts] = pending
      pending = {}
    elseif type(x) == 'number' then
      pending[#pending + 1] = x
    else
      err(fname, 'argument %d must be a number or a tensor, got %s', i, type(x))
    end
  end
  if #pending > 0 then err(fname, 'a number after the last tensor') end
  return ts, nums
end

for name in pairs(PRODUCTS) do
  local mname, fname = ':' .. name, 'torch.' .. name
  -- method: self:addmm([v1,] [M=self,] [v2,] a, b)
  method(name, function(self, ...)
    need_array(mname, self, 'self')
    local ts, nums = split_args(mname, ...)
    local v1, M, v2 = 1, self, 1
    if #ts == 3 then
      M = ts[1]
      if #nums[1] > 1 or #nums[2] > 1 or #nums[3] > 0 then err(mname, 'expected ([v1,] M, [v2,] a, b)') end
      v1, v2 = nums[1][1] or 1, nums[2][1] or 1
    elseif #ts == 2 then
      local n = nums[1]
      if #nums[2] > 0 or #n > 2 then err(mname, 'expected ([v1,] [v2,] a, b)') end
      if #n == 2 then v1, v2 = n[1], n[2] elseif #n == 1 then v2 = n[1] end
    else
      err(mname, 'expected ([v1,] [M,] [v2,] a, b): 2 or 3 tensors, got %d', #ts)
    end
    return store_resized(self, combine(mname, name, v1, M, v2, ts[#ts - 1], ts[#ts]))
  end)
  -- function: torch.addmm([res,] [v1,] M, [v2,] a, b)
  torch[name] = function(...)
    local ts, nums = split_args(fname, ...)
    local res
    if #ts == 4 then
      if #nums[1] > 0 then err(fname, 'expected ([res,] [v1,] M, [v2,] a, b)') end
      res = table.remove(ts, 1); table.remove(nums, 1)
    elseif #ts ~= 3 then
      err(fname, 'expected ([res,] [v1,] M, [v2,] a, b): 3 or 4 tensors, got %d', #ts)
    end
    if #nums[1] > 1 or #nums[2] > 1 or #nums[3] > 0 then err(fname, 'expected ([res,] [v1,] M, [v2,] a, b)') end
    local v = combine(fname, name, nums[1][1] or 1, ts[1], nums[2][1] or 1, ts[2], ts[3])
    if res then return store_resized(res, v) end
    return v:contiguous()
  end
end

-- mm / mv: the plain products, torch.mm([res,] a, b) and res:mm(a, b).
for name, base in pairs({ mm = 'addmm', mv = 'addmv' }) do
  local mname, fname = ':' .. name, 'torch.' .. name
  method(name, function(self, a, b)
    need_array(mname, a, 'the first factor'); need_array(mname, b, 'the second factor')
    return store_resized(self, combine(mname, base, 1, nil, 1, a, b))
  end)
  torch[name] = function(r, a, b)
    if b == nil then r, a, b = nil, r, a end
    need_array(fname, a, 'the first factor'); need_array(fname, b, 'the second factor')
    local v = combine(fname, base, 1, nil, 1, a, b)
    if r then need_array(fname, r, 'the result'); return store_resized(r, v) end
    return v
  end
end

-- ---------------------------------------------------------------------------
-- random fills (tgl's generator, seeded by torch.manualSeed): in place.
--   t:uniform([a=0, b=1])  t:normal([mean=0, std=1])  t:random(a, b | b)

local function is_float(a) return a.dtype == 'float32' or a.dtype == 'float64' end
method('uniform', function(a, lo, hi)
  lo, hi = lo or 0, hi or 1
  if type(lo) ~= 'number' or type(hi) ~= 'number' then err(':uniform', 'expected ([a, b]) numbers') end
  return store(a, relay(tgl.rand, a:shape(), { dtype = is_float(a) and a.dtype or 'float64', low = lo, high = hi }))
end)
method('normal', function(a, mean, std)
  mean, std = mean or 0, std or 1
  if type(mean) ~= 'number' or type(std) ~= 'number' or std < 0 then
    err(':normal', 'expected ([mean, std]) numbers, std >= 0')
  end
  return store(a, relay(tgl.randn, a:shape(), { dtype = is_float(a) and a.dtype or 'float64', mean = mean, std = std }))
end)
-- t:random(a, b): integers uniform in a..b; t:random(b): in 1..b.
method('random', function(a, lo, hi)
  if hi == nil then lo, hi = 1, lo end
  if not is_int(lo) or not is_int(hi) or lo > hi then
    err(':random', 'expected integer bounds a <= b, got %s, %s', tostring(lo), tostring(hi))
  end
  local u = relay(tgl.rand, a:shape(), { dtype = 'float64' })
  local v = relay(G.add, relay(G.floor, relay(G.mul, u, hi - lo + 1)), lo)
  -- rand is in [0, 1): floor(u * n) < n, except by rounding at u near 1
  v = relay(G.minimum, v, hi)
  return store(a, v)
end)

-- torch.randperm(n [, type]): a random permutation of 1..n (default type).
function torch.randperm(n, tname)
  if not is_int(n) or n < 1 then err('torch.randperm', 'expected a positive integer, got %s', tostring(n)) end
  local dt = tname and TYPES[tname] or default_dtype()
  if tname and not TYPES[tname] then err('torch.randperm', 'unknown tensor type %s', tostring(tname)) end
  -- Fisher-Yates over uniforms drawn from tgl's generator
  local u = relay(tgl.rand, n, { dtype = 'float64' }):totable()
  local p = {}
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do
    local j = math.min(i, math.floor(u[i] * i) + 1)
    p[i], p[j] = p[j], p[i]
  end
  return relay(tgl.array, p, dt)
end

require('torch.serialize')(torch, { err = err, TYPES = TYPES })

-- The names this module added to the arrays' methods (doc/torch7.md).
torch.added_methods = added

_G.torch = torch
return torch
