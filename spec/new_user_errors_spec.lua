-- new_user_errors_spec.lua — the errors a new user met (issue 18, item 3),
-- each with the message that tells them what went wrong and where:
--   * tgl.Rop with a direction of the wrong shape: at the call when the
--     sizes are known then (arrays, shared variables), else when the
--     compiled function runs (the rop_direction op), naming the function
--     called, the direction, the variable, both shapes and the line of the
--     tgl.Rop call — in every mode and linker, and after the whole-step
--     binding;
--   * tgl.hessian_vector_product, tgl.gauss_newton_product and tgl.Lop
--     name themselves, not tgl.Rop or tgl.grad;
--   * a scan step function that returns more (or fewer) outputs than
--     outputs_info declares, or values in the updates' or until_'s place;
--   * f:fn{...} (a colon) and the REPL completing f:fn;
--   * examples/rnnlm.lua's usage errors: one line, exit status 1, no
--     traceback; a binary corpus refused; a clamped -class noted.
tgl = tgl or require 'tgl'
local tgl = tgl
local S = dofile('spec/support.lua')

-- The error f raises, as text; asserts that it mentions each needle
-- (plain text).
local function error_of(f, ...)
  local ok, err = pcall(f)
  assert(not ok, 'expected an error')
  err = tostring(err)
  for _, needle in ipairs({ ... }) do
    assert(err:find(needle, 1, true), ('the message\n  %s\ndoes not mention\n  %s'):format(err, needle))
  end
  return err
end

-- The line of this file after the one calling here (where the next
-- statement builds what the message must name).
local function next_line() return debug.getinfo(2, 'l').currentline + 1 end

local function f64(t) return tgl.array(t, 'float64') end

describe('tgl.Rop with a direction of the wrong shape', function()
  local x = tgl.dmatrix('x')
  local W = tgl.shared(tgl.array({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, 'float64'), 'W')  -- (3,2)
  local y = tgl.sum(tgl.tanh(x:dot(W)))
  local V = tgl.dmatrix('V')

  it('a symbolic direction: an error when the function runs, naming tgl.Rop and its line', function()
    local line = next_line()
    local jv = tgl.Rop(y, W, V)
    for _, mode in ipairs({ 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }) do
      for _, linker in ipairs({ 'cvm', 'cvm_nogc', 'vm' }) do
        local f = tgl.compile { inputs = { x, V }, outputs = jv, mode = mode, linker = linker, name = 'jv' }
        local err = error_of(function() local _ = f(tgl.ones(4, 3):astype('float64'), tgl.ones(2, 3):astype('float64')) end,
          "tgl.jv: Rop direction 1 for 'W' has shape (2,3), W has (3,2); tgl.Rop was called at ")
        assert.matches('new_user_errors_spec%.lua:%d+: tgl%.jv: ', err)        -- the call's line
        assert.matches('was called at [^ ]*new_user_errors_spec%.lua:' .. line .. '$', err)
        assert.is_nil(err:find('dot', 1, true), err)                              -- no internal op
        -- the right shape gives J v: d/dt sum(tanh(x (W + t V))) = sum((1 - tanh^2) * x V)
        local xa, va = tgl.ones(4, 3):astype('float64'), tgl.array({ { 1, 0 }, { 0, 1 }, { 1, 1 } }, 'float64')
        local t = tgl.tanh(xa:dot(W:get_value()))
        local want = tgl.sum((1 - t * t) * xa:dot(va)):get()
        assert.near(want, f(xa, va):get(), 1e-12)
      end
    end
  end)

  it('the run-time check still holds once the step is bound to fixed buffers', function()
    local line = next_line()
    local f = tgl.compile { inputs = { x, V }, outputs = tgl.Rop(y, W, V), name = 'bound' }
    local xa, va = tgl.ones(4, 3):astype('float64'), tgl.ones(3, 2):astype('float64')
    local first = f(xa, va):get()
    for _ = 1, 4 do assert.equals(first, f(xa, va):get()) end
    assert.is_not_nil(f:whole_step(), 'the step was not bound')
    error_of(function() local _ = f(xa, tgl.ones(2, 3):astype('float64')) end,
             "Rop direction 1 for 'W' has shape (2,3), W has (3,2); tgl.Rop was called at ",
             'new_user_errors_spec.lua:' .. line)
    assert.equals(first, f(xa, va):get())
  end)

  it('a direction broadcast where the variable is not (size 1) is still accepted', function()
    local r = tgl.tensor { dtype = 'float64', ndim = 2, broadcastable = { true, false }, name = 'r' }
    local g = tgl.compile { inputs = { x, r }, outputs = tgl.Rop(y, W, r) }
    local h = tgl.compile { inputs = { x, V }, outputs = tgl.Rop(y, W, V) }
    local xa = tgl.ones(4, 3):astype('float64')
    local full = tgl.array({ { 1, -1 }, { 1, -1 }, { 1, -1 } }, 'float64')
    assert.near(h(xa, full):get(), g(xa, tgl.array({ { 1, -1 } }, 'float64')):get(), 1e-12)
    error_of(function() local _ = g(xa, tgl.ones(1, 3):astype('float64')) end, 'has shape (1,3), W has (3,2)')
  end)

  it('an unnamed variable, and a direction for a symbolic input', function()
    local u = tgl.dvector()
    local line = next_line()
    local f = tgl.compile { inputs = { u }, outputs = tgl.Rop(tgl.sum(u * u), u, f64 { 1, 2, 3 }) }
    assert.equals(2 * (1 + 2 * 2 + 3 * 3), f(f64 { 1, 2, 3 }):get())
    error_of(function() local _ = f(f64 { 1, 2 }) end,
             'Rop direction 1 for an unnamed input has shape (3,), the variable has (2,); tgl.Rop was called at ',
             'new_user_errors_spec.lua:' .. line)
  end)

  it('sizes known at the call are checked there: an array or a shared variable for a shared variable', function()
    local err = error_of(function() local _ = tgl.Rop(y, W, tgl.zeros({ 2, 3 }, { dtype = 'float64' })) end,
                         "tgl.Rop: direction 1 for 'W' has shape (2,3), W has (3,2)")
    assert.matches('^[^ ]*new_user_errors_spec%.lua:%d+: ', err)
    local Vs = tgl.shared(tgl.zeros({ 3, 3 }, { dtype = 'float64' }), 'Vs')
    error_of(function() local _ = tgl.Rop(y, { W }, { Vs }) end,
             "tgl.Rop: direction 1 for 'W' has shape (3,3), W has (3,2)")
    -- and the rank, for a symbolic one
    error_of(function() local _ = tgl.Rop(y, W, tgl.dvector()) end,
             "tgl.Rop: v 1 has 1 dimensions, wrt 1 ('W') has 2")
  end)

  it('gradients pass through the check (a Rop result is differentiable in its direction)', function()
    local jv = tgl.Rop(y, W, V)
    local gV = tgl.grad(jv, V)
    local f = tgl.compile { inputs = { x, V }, outputs = gV }
    local xa = tgl.array({ { 0.1, 0.2, 0.3 }, { -0.1, 0.4, 0.2 } }, 'float64')
    -- jv is linear in V: its gradient is x' (1 - tanh^2(x W))
    local t = tgl.tanh(xa:dot(W:get_value()))
    S.assert_close(xa:T():dot(1 - t * t), f(xa, tgl.ones(3, 2):astype('float64')), 1e-12)
  end)
end)

describe('the curvature products and Lop name the function the user called', function()
  local x = tgl.dmatrix('x')
  local W = tgl.shared(tgl.array({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, 'float64') * 0.1, 'W')
  local out = tgl.tanh(x:dot(W))
  local cost = tgl.sum(out)
  local V = tgl.dmatrix('V')
  local xa, bad = tgl.ones(4, 3):astype('float64'), tgl.ones(2, 3):astype('float64')

  it('hessian_vector_product', function()
    local line = next_line()
    local hv = tgl.hessian_vector_product(cost, W, V)
    local f = tgl.compile { inputs = { x, V }, outputs = hv, name = 'hv' }
    error_of(function() local _ = f(xa, bad) end,
             "tgl.hv: hessian_vector_product direction 1 for 'W' has shape (2,3), W has (3,2); "
             .. 'tgl.hessian_vector_product was called at ', 'new_user_errors_spec.lua:' .. line)
    local err = error_of(function() local _ = tgl.hessian_vector_product(cost, W, bad) end,
                         "tgl.hessian_vector_product: direction 1 for 'W' has shape (2,3), W has (3,2)")
    assert.is_nil(err:find('tgl.Rop', 1, true), err)
    error_of(function() local _ = tgl.hessian_vector_product(cost, W, tgl.dvector()) end,
             "tgl.hessian_vector_product: v 1 has 1 dimensions, wrt 1 ('W') has 2")
    -- the gradient it takes first names it too
    error_of(function() local _ = tgl.hessian_vector_product(out, W, V) end,
             'tgl.hessian_vector_product: the cost must be a scalar')
  end)

  it('gauss_newton_product', function()
    local line = next_line()
    local gv = tgl.gauss_newton_product(out, { W }, { V }, 'mse')
    local f = tgl.compile { inputs = { x, V }, outputs = gv, name = 'gv' }
    error_of(function() local _ = f(xa, bad) end,
             "tgl.gv: gauss_newton_product direction 1 for 'W' has shape (2,3), W has (3,2); "
             .. 'tgl.gauss_newton_product was called at ', 'new_user_errors_spec.lua:' .. line)
    error_of(function() local _ = tgl.gauss_newton_product(out, W, bad, 'mse') end,
             "tgl.gauss_newton_product: direction 1 for 'W' has shape (2,3), W has (3,2)")
    local y2 = tgl.dvector('unused')
    error_of(function() local _ = tgl.gauss_newton_product(out, { W, y2 }, { V, tgl.dvector() }, 'mse') end,
             "tgl.gauss_newton_product: the output does not depend on 'unused' (wrt 2)")
  end)

  it('Lop', function()
    local y2 = tgl.dvector('unused')
    error_of(function() local _ = tgl.Lop(out, { W, y2 }, tgl.dmatrix()) end, 'tgl.Lop: ', "'unused'")
  end)
end)

describe('a scan step function that returns the wrong number or kind of values', function()
  local x, acc0 = tgl.dmatrix('x'), tgl.dvector('acc0')
  local W = tgl.shared(tgl.zeros({ 2 }, { dtype = 'float64' }), 'W')

  local function scan_error(opts, ...)
    opts.sequences = opts.sequences or { x }
    local line = next_line() + 1
    local err = error_of(function()
      local _ = tgl.scan(opts)
    end, ...)
    assert.matches('new_user_errors_spec%.lua:' .. line .. ': tgl%.scan: ', err)
    return err
  end

  it('more outputs than outputs_info declares, given as separate values', function()
    scan_error({ fn = function(x_t, acc) return acc + x_t, acc end, outputs_info = { acc0 }, name = 'cumsum' },
               "tgl.scan: 'cumsum': the step function returned 2 outputs where outputs_info declares 1",
               'return {o1, o2, ...}')
    scan_error({ fn = function(x_t, acc) return { acc + x_t, acc }, acc end, outputs_info = { acc0 }, name = 't' },
               "'t': the step function returned 3 outputs where outputs_info declares 1")
    scan_error({ fn = function(x_t) return x_t, x_t * 2 end, name = 'map' },
               "'map': the step function returned 2 outputs as separate values")
  end)

  it('fewer outputs than outputs_info declares', function()
    scan_error({ fn = function(x_t, a, b) return a + x_t end, outputs_info = { acc0, acc0 }, name = 'few' },
               "'few': the step function returned 1 output where outputs_info declares 2 "
               .. '(it has an initial value for output 2)')
  end)

  it('outputs in the updates table, a condition without until_, too many values', function()
    scan_error({ fn = function(x_t, a) return a + x_t, { a } end, outputs_info = { acc0 }, name = 'upd' },
               "'upd': the step function returned a table holding a variable at position 1 as its second "
               .. 'value, where a table of updates ({shared, expression} pairs) was expected')
    scan_error({ fn = function(x_t, a) return a + x_t, true end, outputs_info = { acc0 }, name = 'b' },
               "'b': the step function returned a boolean as its second value where a table of updates")
    scan_error({ fn = function(x_t, a) return a + x_t, {}, tgl.gt(tgl.sum(a), 1) end,
                 outputs_info = { acc0 }, name = 'stop' },
               "'stop': the step function returned a variable as its third value where tgl.until_(cond) "
               .. 'was expected')
    scan_error({ fn = function(x_t, a) return a + x_t, {}, tgl.until_(tgl.gt(tgl.sum(a), 1)), 4 end,
                 outputs_info = { acc0 }, name = 'four' },
               "'four': the step function returned 4 values")
    scan_error({ fn = function(x_t, a) return a + x_t, { { x, a } } end, outputs_info = { acc0 }, name = 'ns' },
               "'ns': the step function returned an update for 'x', which is not a shared variable")
  end)

  it('the right forms still build', function()
    local s, ups = tgl.scan { fn = function(x_t, a) return { a + x_t, a * 2 }, { { W, W + 1 } } end,
                              sequences = { x }, outputs_info = { acc0 }, name = 'ok' }
    assert.equals(2, #s)
    assert.equals(1, #ups)
  end)
end)

describe('f.fn called with a colon', function()
  local n = tgl.shared(0, 'n')
  local f = tgl.compile { inputs = {}, outputs = n, updates = { { n, n + 1 } }, name = 'count' }

  it('says to call it with a dot', function()
    f()
    local line = next_line()
    local err = error_of(function() f:fn { n_calls = 3 } end,
                         'tgl.count.fn: call it with a dot: f.fn{n_calls = 3}, not f:fn{...}')
    assert.matches('new_user_errors_spec%.lua:' .. line .. ': ', err)
    error_of(function() f:fn() end, 'f.fn{n_calls = N}')
    assert.equals(1, n:get_value():get())   -- nothing ran
    f.fn { n_calls = 3 }
    assert.equals(4, n:get_value():get())
  end)

  it('the REPL completes f.fn after "." and not after ":"', function()
    local repl = require 'tgl.repl'
    local env = { f = f }
    assert.are.same({ 'f.fn' }, repl.complete('f.f', env))
    assert.are.same({}, repl.complete('f:f', env))
    local methods = {}
    for _, w in ipairs(repl.complete('f:', env)) do methods[w] = true end
    assert.is_true(methods['f:program'])
    assert.is_true(methods['f:output'])
    assert.is_nil(methods['f:fn'])
    -- a module's own functions still complete after ':' (no class there)
    assert.are.same({ 'm:go' }, repl.complete('m:g', { m = { go = function() end } }))
  end)
end)

describe('examples/rnnlm.lua usage errors', function()
  local bin = assert(os.getenv('TGL_BIN'), 'TGL_BIN must name the tgl binary')
  local dir = S.tmpdir('new_user_errors_rnnlm')
  local function file(name, bytes)
    local path = dir .. '/' .. name
    local f = assert(io.open(path, 'wb'))
    f:write(bytes)
    f:close()
    return path
  end
  local text = file('text.txt', 'a b c\nb c d\nc d a\n')
  local empty = file('empty.txt', '')
  local binary = file('model.bin', 'TGL\0\1\2\3 binary')
  local latin1 = file('latin1.txt', 'ok words\ncaf\233 au lait\n')
  local model = dir .. '/m.npz'

  -- Runs rnnlm with args; returns stdout, stderr, the exit status.
  local function rnnlm(args)
    local out, err = dir .. '/out', dir .. '/err'
    local rc = os.execute(('%q examples/rnnlm.lua %s >%q 2>%q'):format(bin, args, out, err))
    if rc > 255 then rc = math.floor(rc / 256) end
    local function slurp(p) local h = io.open(p); local s = h:read('*a'); h:close(); return s end
    return slurp(out), slurp(err), rc
  end
  -- A usage error: exit status 1, stderr's first line is the message,
  -- no traceback anywhere.
  local function fails(args, message)
    local out, err, rc = rnnlm(args)
    assert.equals(1, rc, err)
    assert.equals('rnnlm: ' .. message, err:match('^[^\n]*'))
    assert.is_nil((out .. err):find('stack traceback', 1, true), err)
    assert.is_nil((out .. err):find('.lua:%d+:'), err)
    return err
  end

  it('a missing or empty file', function()
    fails(('-train %s/none.txt -valid %s -rnnlm %s'):format(dir, text, model),
          ('cannot read the corpus file %s/none.txt (No such file or directory)'):format(dir))
    fails(('-train %s -valid %s -rnnlm %s'):format(empty, text, model), ('no words in %s (-train)'):format(empty))
    fails(('-train %s -valid %s -test %s/none.txt -rnnlm %s'):format(text, text, dir, model),
          ('cannot read the corpus file %s/none.txt (No such file or directory)'):format(dir))
    fails(('-test %s -rnnlm %s/none.npz'):format(text, dir), ('%s/none.npz does not exist (train it first)'):format(dir))
  end)

  it('bad options: one line, then the usage', function()
    local err = fails('-hidden 0 -train x -valid x -rnnlm x', '-hidden must be a positive integer, got 0')
    assert.matches('\nusage: tgl examples/rnnlm.lua ', err)
    fails('-frobnicate 3', 'unknown option -frobnicate')
    fails('-hidden', '-hidden needs a value')
    fails('-hidden many', '-hidden needs a number, got many')
    fails('-bptt -1 -train x -valid x -rnnlm x', '-bptt must be an integer >= 0, got -1')
    fails('stray', 'unexpected argument stray')
    fails('-train x -rnnlm x', '-train needs -valid')
  end)

  it('a file that is not text, naming the file and the byte offset', function()
    fails(('-train %s -valid %s -rnnlm %s'):format(binary, text, model),
          binary .. ' is not a text file: a NUL byte at byte offset 3 (a corpus is UTF-8 text, one '
          .. 'sentence per line)')
    fails(('-train %s -valid %s -rnnlm %s'):format(text, latin1, model),
          latin1 .. ' is not a text file: an invalid UTF-8 sequence (0xE9 ...) at byte offset 12 '
          .. '(a corpus is UTF-8 text, one sentence per line)')
    assert.is_nil(io.open(model), 'no model is written')
  end)

  it('a -class larger than the vocabulary is noted on stderr, and training goes on', function()
    local out, err, rc = rnnlm(('-train %s -valid %s -rnnlm %s -hidden 4 -class 50 -one-iter -samples 0')
                               :format(text, text, model))
    assert.equals(0, rc, err)
    assert.equals('rnnlm: note: -class 50: the vocabulary has only 6 words, so 6 classes are used\n', err)
    assert.matches('vocabulary 6 words, 6 classes', out)
    assert.matches('RESULT words_per_s=', out)
    os.remove(model)
  end)
end)

describe('the other examples share the command line of examples/lib/cli.lua', function()
  local bin = assert(os.getenv('TGL_BIN'), 'TGL_BIN must name the tgl binary')
  for _, ex in ipairs({ 'logreg', 'mlp_fashion', 'hf_autoencoder' }) do
    it(ex .. ': an unknown option and a missing data directory are one line and status 1', function()
      local out, rc = S.sh(('%q examples/%s.lua --frobnicate 1'):format(bin, ex))
      assert.equals(1, rc, out)
      assert.equals(ex .. ': unknown option --frobnicate', out:match('^[^\n]*'))
      out, rc = S.sh(('%q examples/%s.lua --data /nonexistent/data'):format(bin, ex))
      assert.equals(1, rc, out)
      assert.equals(ex .. ": tgl.io.read_idx: '/nonexistent/data/train-images-idx3-ubyte.gz': cannot open: "
                    .. 'No such file or directory', out:match('^[^\n]*'))
      assert.is_nil(out:find('stack traceback', 1, true), out)
    end)
  end
end)
