-- usage_errors_spec.lua — what a new user gets wrong, and the error that
-- tells them (issue 9): options tables with unknown keys, positional
-- arguments or values of the wrong type (checked for every public function
-- that takes options, with the nearest known key suggested); < and <= on
-- arrays and variables; axes and indices given from 0.  Every error names
-- the function and points at the user's line.
tgl = tgl or require 'tgl'
local tgl = tgl

-- The error f raises: 'tgl.<fname>: ...' (or exactly prefix when fname
-- starts with 'tgl'), raised at a line of this file, mentioning each
-- plain-text needle.
local function raises(fname, f, ...)
  local ok, err = pcall(f)
  assert.is_false(ok, 'expected an error')
  err = tostring(err)
  local prefix = fname:match('^tgl') and fname or 'tgl.' .. fname .. ': '
  assert.matches('usage_errors_spec%.lua:%d+: ' .. prefix:gsub('%p', '%%%0'), err)
  for _, needle in ipairs({ ... }) do
    assert.matches(needle:gsub('%p', '%%%0'), err, 1)
  end
  return err
end

describe('tgl.compile arguments', function()
  local x = tgl.vector('x')

  it("rejects Theano's positional form and says how to write it", function()
    raises('tgl.compile takes one table', function() local _ = tgl.compile({ x }, x * 2) end,
           'tgl.compile{inputs = {...}, outputs = ...}')
    raises('tgl.compile takes one table', function() local _ = tgl.compile({ inputs = { x } }, x * 2) end)
    raises('tgl.compile takes one table', function() local _ = tgl.compile(x) end)
  end)

  it('names an unknown key and suggests the nearest known one', function()
    raises('compile', function() local _ = tgl.compile { inputs = { x }, output = x * 2 } end,
           "unknown option 'output' (did you mean 'outputs'?)")
    raises('compile', function() local _ = tgl.compile { input = { x }, outputs = x * 2 } end,
           "unknown option 'input' (did you mean 'inputs'?)")
    raises('compile', function() local _ = tgl.compile { inputs = { x }, outputs = x, update = {} } end,
           "(did you mean 'updates'?)")
    raises('compile', function() local _ = tgl.compile { inputs = { x }, outputs = x, frobnicate = 1 } end,
           "unknown option 'frobnicate' (known options: givens, inputs, linker, mode, name, "
           .. 'outputs, profile, updates)')
  end)

  it('rejects values of the wrong type, naming the key', function()
    raises('compile', function() local _ = tgl.compile { inputs = { x }, outputs = x, profile = 'yes' } end,
           "option 'profile' must be a boolean, got a string")
    raises('compile', function() local _ = tgl.compile { inputs = 3, outputs = x } end,
           "option 'inputs' must be a table or a variable, got a number")
    raises('compile', function() local _ = tgl.compile 'x' end,
           'expected a table: tgl.compile{inputs = {...}, outputs = ...}, got string')
  end)

  it('still compiles the right form', function()
    local f = tgl.compile { inputs = { x }, outputs = x * 2, name = 'double', profile = false }
    assert.same({ 2, 4 }, f({ 1, 2 }):totable())
  end)

  it('f.fn checks its options', function()
    local n = tgl.shared(0, 'n')
    local f = tgl.compile { inputs = {}, outputs = n, updates = { { n, n + 1 } }, name = 'count' }
    f()
    raises('count.fn', function() local _ = f.fn { n_call = 3 } end, "(did you mean 'n_calls'?)")
    raises('count.fn', function() local _ = f.fn { n_calls = '3' } end, "option 'n_calls' must be a number")
    f.fn { n_calls = 3 }
    assert.equal(4, n:get_value():get())
  end)
end)

describe('options tables of other functions', function()
  local x = tgl.matrix('x')
  local a = tgl.ones(2, 3)

  it('reductions take {keepdims=} and suggest it for a typo', function()
    raises('sum', function() local _ = tgl.sum(x, 1, { keepdim = true }) end,
           "unknown option 'keepdim' (did you mean 'keepdims'?)")
    -- the options table in the axis position is checked too (it used to
    -- reduce over no axis)
    raises('sum', function() local _ = tgl.sum(a, { keepdim = true }) end, "did you mean 'keepdims'?")
    raises('mean', function() local _ = tgl.mean(x, 1, { keepdims = 1 }) end,
           "option 'keepdims' must be a boolean, got a number")
    raises('argmax', function() local _ = tgl.argmax(a, 1, { keepdim = true }) end, "'keepdims'")
    raises('var', function() local _ = tgl.var(a, 1, { dof = 1 }) end, "did you mean 'ddof'?")
    assert.same({ 1, 1 }, tgl.sum(a, { keepdims = true }):shape())
    assert.same({ 1, 3 }, tgl.sum(a, 1, { keepdims = true }):shape())
  end)

  it('tgl.grad, jacobian, hessian and verify_grad check their options', function()
    local v = tgl.vector('v')
    local c = tgl.sum(v * v)
    raises('grad', function() local _ = tgl.grad(c, v, { disconected = 'ignore' }) end,
           "unknown option 'disconected' (did you mean 'disconnected'?)")
    raises('grad', function() local _ = tgl.grad(c, v, 'ignore') end, 'options must be a table, got string')
    raises('jacobian', function() local _ = tgl.jacobian(v, v, { sizes = 3 }) end, "did you mean 'size'?")
    raises('hessian', function() local _ = tgl.hessian(c, v, { size = '3' }) end,
           "option 'size' must be a number")
    raises('verify_grad', function() tgl.verify_grad(function(y) return y * 2 end, { { 1, 2 } }, { epsilon = 1e-4 }) end,
           "unknown option 'epsilon'", 'eps, seed, tol')
    raises('verify_grad', function() tgl.verify_grad(function(y) return y * 2 end, { { 1, 2 } }, { tol = 'big' }) end,
           "option 'tol' must be a number")
  end)

  it('shared, get_value and set_value check {borrow=}', function()
    raises('shared', function() local _ = tgl.shared(a, 'W', { borow = true }) end, "did you mean 'borrow'?")
    local W = tgl.shared(a, 'W')
    raises('get_value', function() local _ = W:get_value { borow = true } end, "did you mean 'borrow'?")
    raises('set_value', function() W:set_value(a, { borrow = 'yes' }) end, "option 'borrow' must be a boolean")
    raises('tensor', function() local _ = tgl.tensor { dtype = 'float64', ndims = 2 } end, "did you mean 'ndim'?")
  end)

  it('array constructors check {dtype=} and their other options', function()
    raises('zeros', function() local _ = tgl.zeros(2, 3, { dtpye = 'int32' }) end,
           "unknown option 'dtpye' (did you mean 'dtype'?)")
    raises('ones', function() local _ = tgl.ones({ 2, 3 }, { type = 'int32' }) end, "did you mean 'dtype'?")
    raises('full', function() local _ = tgl.full({ 2 }, 7, { dtyp = 'int32' }) end, "did you mean 'dtype'?")
    raises('array', function() local _ = tgl.array({ 1, 2 }, { dtyp = 'int32' }) end, "did you mean 'dtype'?")
    raises('arange', function() local _ = tgl.arange(1, 5, { dtype = 'int32', stp = 2 }) end, "'stp'")
    raises('rand', function() local _ = tgl.rand(2, { lo = 0 }) end, "did you mean 'low'?")
    raises('randn', function() local _ = tgl.randn(2, { sigma = 2 }) end, 'known options: dtype, mean, std')
    raises('save', function() tgl.save(os.tmpname() .. '.npz', { a = a }, { compres = true }) end,
           "did you mean 'compress'?")
    assert.equal('int32', tgl.ones(2, { dtype = 'int32' }).dtype)
  end)
end)

describe('< and <= on arrays and variables', function()
  it('raise an error that names tgl.lt/le/gt/ge instead of an FFI one', function()
    local a, x = tgl.ones(2), tgl.vector('x')
    for _, f in ipairs {
      function() return (a < 0) end, function() return (a <= a) end, function() return (0 > a) end,
      function() return (x < 0) end, function() return (x >= 1) end, function() return (a < x) end,
    } do
      local ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches('usage_errors_spec%.lua:%d+: tgl: %a+ cannot be compared with <, <=, > or >=', err)
      assert.matches('tgl.lt(a, 0)', err, 1, true)
      assert.matches('tgl.ge', err, 1, true)
    end
  end)

  it('== is identity of the Lua value, never elementwise', function()
    local a = tgl.ones(2)
    local b = a
    assert.is_true(a == b)
    assert.is_false(a == a:clone())
    assert.is_false(a == 1)
    local x = tgl.vector('x')
    assert.is_true(x == x)
    assert.is_false(x * 2 == x * 2)
    assert.same({ true, false }, tgl.eq(a, tgl.array({ 1, 2 })):totable())
  end)
end)

describe('axes and indices given from 0', function()
  local a, x = tgl.ones(2, 3), tgl.matrix('x')
  local AXES = '(axes count from 1; -1 is the last)'
  local INDICES = '(indices count from 1; -1 is the last)'

  it('say that indices count from 1', function()
    raises('get', function() local _ = a:get(0, 0) end, 'index 0 is out of range for dimension 1 of size 2', INDICES)
    raises('set', function() a:set(5, 1, 0) end, 'index 0 is out of range for dimension 2 of size 3', INDICES)
  end)

  it('say that axes count from 1', function()
    raises('sum', function() local _ = tgl.sum(a, 0) end, 'axis 0 is out of range for a 2-d array ' .. AXES)
    raises('sum', function() local _ = x:sum(0) end, 'axis 0 is out of range for a 2-d tensor ' .. AXES)
    raises('dimshuffle', function() local _ = tgl.dimshuffle(x, { 0, 1 }) end, AXES)
    raises('softmax', function() local _ = tgl.softmax(x, 0) end, AXES)
    raises('argmax', function() local _ = tgl.argmax(a, 0) end, AXES)
    raises('concatenate', function() local _ = tgl.concatenate({ x, x }, 0) end, AXES)
    raises('stack', function() local _ = tgl.stack({ x, x }, 0) end, AXES)
    raises('size', function() local _ = x:size(0) end, AXES)
    raises('size', function() local _ = a:size(0) end, 'axis 0 is out of range for a 2-d array ' .. AXES)
    raises('size', function() local _ = a:size(-3) end, 'axis -3 is out of range')
    raises('transpose', function() local _ = a:transpose(0, 1) end, AXES)
  end)
end)
