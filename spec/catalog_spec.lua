-- catalog_spec.lua — the op catalog's properties (doc/internals.md, "Op
-- properties"; tgl_op_property in doc/c-api.md): every op of the catalog
-- states a shape rule and a Rop rule the engine knows, consistent with its
-- implementation (a PULLBACK op has a pullback, an OWN op its pushforward
-- hook, the elementwise family MAP and DIAGONAL...); every op has a Rop
-- case and a gradient case (spec/rop_spec.lua holds them; its catalog walk
-- checks the names, this one that the file still does it); and the shape
-- rule has its effect: class_xent and its pullback's class_xent_delta,
-- whose shapes follow from their inputs' shapes, take their shapes from
-- the shape cache and run from fixed buffers in the whole-step plan (they
-- were missing from plan.c's lists before the rule moved to the catalog).
local ffi = require 'ffi'
local C = require('tgl.core').C
local lm = require 'tgl.lm'
local S = dofile('spec/support.lua')

local function prop(op, key)
  local s = C.tgl_op_property(op, key)
  return s ~= nil and ffi.string(s) or nil
end

local SHAPE_RULES = { SHAPES = true, MAP = true, PASS0 = true, META = true, LIKE0 = true,
                      FILL0 = true, VALUES = true, INDEXED = true, RUN = true }
local ROP_RULES = { NONE = true, OWN = true, DIAGONAL = true, BILINEAR = true, FORMULA = true,
                    PULLBACK = true, ['LINEAR(IN0)'] = true, ['LINEAR(IN0_1)'] = true,
                    ['LINEAR(ALL)'] = true, ['LINEAR(ALL_BUT0)'] = true }
-- The ops whose Rop rule is PULLBACK though they have no pullback: Rop
-- then says so (a clear error), as their second derivative is not
-- implemented.
local NO_PULLBACK = { class_xent_delta = 'built only by class_xent\'s pullback (spec/lm_spec.lua)' }

describe('the op catalog', function()
  local n = C.tgl_op_count()

  it('states a known shape rule and Rop rule for every op, consistent with its implementation', function()
    assert(n > 60, 'the catalog has only ' .. n .. ' ops')
    local bad = {}
    local function fail(name, fmt, ...) bad[#bad + 1] = name .. ': ' .. fmt:format(...) end
    for op = 0, n - 1 do
      local name = ffi.string(C.tgl_op_name(op))
      local shape, rop, fam = prop(op, 'shape'), prop(op, 'rop'), prop(op, 'family')
      if not SHAPE_RULES[shape] then fail(name, 'unknown shape rule %s', tostring(shape)) end
      if not ROP_RULES[rop] then fail(name, 'unknown Rop rule %s', tostring(rop)) end
      if not fam then fail(name, 'no family') end
      for _, key in ipairs({ 'grad', 'rop_hook', 'view', 'inplace', 'lazy', 'inner' }) do
        local v = prop(op, key)
        if v ~= 'yes' and v ~= 'no' then fail(name, '%s is %s', key, tostring(v)) end
      end
      if (rop == 'OWN') ~= (prop(op, 'rop_hook') == 'yes') then
        fail(name, 'Rop rule %s but rop hook %s', rop, prop(op, 'rop_hook'))
      end
      if rop == 'PULLBACK' and prop(op, 'grad') ~= 'yes' and not NO_PULLBACK[name] then
        fail(name, 'Rop rule PULLBACK but no pullback')
      end
      if fam == 'elemwise' and (shape ~= 'MAP' or rop ~= 'DIAGONAL') then
        fail(name, 'an elementwise op with shape %s and Rop %s (MAP, DIAGONAL)', shape, rop)
      end
      if (rop == 'DIAGONAL' or rop == 'BILINEAR' or rop:match('^LINEAR')) and prop(op, 'outputs') ~= 'one' then
        fail(name, 'Rop rule %s on an op with several outputs', rop)
      end
      -- an op run through an inner program or on demand cannot know its
      -- shapes before it runs
      if (prop(op, 'inner') == 'yes' or prop(op, 'lazy') == 'yes') and shape ~= 'RUN' then
        fail(name, 'shape rule %s for an op with an inner program or lazy inputs', shape)
      end
    end
    assert(#bad == 0, 'catalog entries: ' .. table.concat(bad, '; '))
    assert.is_nil(prop(-1, 'shape'))
    assert.is_nil(prop(n, 'shape'))
    assert.is_nil(prop(0, 'no such key'))
    assert.equals('MAP', prop(0, 'shape'))
  end)

  it('gives the rules as the catalog lines state them', function()
    local want = {
      add = { 'MAP', 'DIAGONAL' }, sum = { 'SHAPES', 'LINEAR(IN0)' }, dot = { 'SHAPES', 'BILINEAR' },
      reshape = { 'INDEXED', 'LINEAR(IN0)' }, inc_subtensor = { 'LIKE0', 'LINEAR(IN0_1)' },
      ifelse = { 'RUN', 'LINEAR(ALL_BUT0)' }, scan = { 'RUN', 'OWN' }, arange = { 'VALUES', 'PULLBACK' },
      shape = { 'META', 'PULLBACK' }, fill_like = { 'FILL0', 'PULLBACK' },
      rop_direction = { 'PASS0', 'OWN' }, log_softmax = { 'SHAPES', 'FORMULA' },
      class_xent = { 'SHAPES', 'PULLBACK' }, class_xent_delta = { 'SHAPES', 'PULLBACK' },
      output = { 'RUN', 'NONE' },
    }
    for name, w in pairs(want) do
      local op = C.tgl_op_lookup(name)
      assert(op >= 0, name)
      assert.same(w, { prop(op, 'shape'), prop(op, 'rop') }, name)
    end
  end)

  it('has a Rop case and a gradient case for every op (spec/rop_spec.lua)', function()
    -- rop_spec's catalog walk fails for an op with neither a case nor an
    -- exemption; each of its cases checks the pushforward and the
    -- pullback.  Here: that the file still makes both checks over the
    -- whole catalog, and names every op it exempts with a reason.
    local src = assert(io.open('spec/rop_spec.lua')):read('*a')
    assert(src:find("every op of the catalog has a Rop case and a gradient case", 1, true),
           'rop_spec.lua no longer walks the catalog')
    assert(src:find('C.tgl_op_count()', 1, true), 'rop_spec.lua no longer walks the catalog')
    assert(src:find('check_pullback(', 1, true), 'rop_spec.lua no longer checks the pullback per case')
    local internal = src:match('local INTERNAL = (%b{})')
    assert(internal, 'rop_spec.lua has no INTERNAL table')
    for name in internal:gmatch('\n%s*([%w_]+) = ') do
      assert(C.tgl_op_lookup(name) >= 0, 'rop_spec.lua exempts ' .. name .. ', which the catalog lacks')
    end
  end)
end)

describe('the shape rule at work: class_xent', function()
  -- The whole-step plan (tgl.config.whole_step = 'bound' here) runs an
  -- instruction from fixed buffers when its output shapes are cached or
  -- follow from its inputs' shapes; an instruction that writes an output
  -- of the function is always dynamic (outputs are fresh arrays, the
  -- caller's), and a view of a fixed buffer is made once and runs no more.
  local T, H, C_, K = 3, 4, 3, 7
  local function model()
    tgl.manual_seed(3)
    local h = tgl.dmatrix('h')
    local c, t, o = tgl.lvector('c'), tgl.lvector('t'), tgl.lvector('o')
    local Wc = tgl.shared(tgl.randn(C_, H):astype('float64'), 'Wc')
    local Ws = tgl.shared(tgl.randn(K, H):astype('float64'), 'Ws')
    return h, c, t, o, Wc, Ws, lm.class_xent(h, Wc, Ws, c, t, o)
  end
  local ha = (function() tgl.manual_seed(4) return tgl.randn(T, H):astype('float64') end)()
  local ca, ta = tgl.array({ 2, 1, 3 }, 'int64'), tgl.array({ 3, 4, 7 }, 'int64')
  local oa = tgl.array({ 1, 1, 1, 2, 3, 3, 3 }, 'int64')

  -- f bound after two calls, with fixed and dynamic instructions as
  -- wanted; its outputs at a third call equal the vm linker's (every
  -- shape asked of every op, every call).
  local function check(inputs, outputs, want_ops, fixed, dynamic)
    local was, was_compile = tgl.config.whole_step, tgl.config.compile
    tgl.config.whole_step, tgl.config.compile = 'bound', 'sync'
    local ok, err = pcall(function()
      local f = tgl.compile { inputs = inputs, outputs = outputs }
      local program = f:program()
      for _, op in ipairs(want_ops) do
        assert(program:find('= ' .. op .. '(', 1, true), 'the program runs no ' .. op .. ':\n' .. program)
      end
      f(ha, ca, ta, oa)
      f(ha, ca, ta, oa)
      local ws = f:whole_step()
      assert.is_table(ws, 'the step is not bound')
      assert.same({ fixed = fixed, dynamic = dynamic }, { fixed = ws.fixed, dynamic = ws.dynamic },
                  'instructions fixed and dynamic in:\n' .. program)
      local g = tgl.compile { inputs = inputs, outputs = outputs, linker = 'vm' }
      local want, got = g(ha, ca, ta, oa), f(ha, ca, ta, oa)
      S.assert_close(want, got, 0, 0, 'the bound step against the vm linker')
      assert(tgl.max(tgl.abs(want)):get() > 1e-3, 'the result is about zero: the check checks nothing')
    end)
    tgl.config.whole_step, tgl.config.compile = was, was_compile
    if not ok then error(err, 0) end
  end

  it('class_xent runs from fixed buffers, and a size computed from its shape is cached', function()
    local h, c, t, o, _, _, loss = model()
    -- class_xent, axes_size(loss), arange(1, that), the fused multiply
    -- writing the output: arange's shape is the value of loss's size, so
    -- it is fixed only when the shape cache knows loss's shape (before the
    -- rule was in the catalog: class_xent and arange dynamic too, 1 fixed)
    check({ h, c, t, o }, loss * tgl.arange(1, tgl.size(loss, 1)):astype('float64'),
          { 'class_xent', 'axes_size', 'arange' }, 3, 1)
  end)

  it("class_xent_delta (class_xent's pullback) runs from fixed buffers", function()
    local h, c, t, o, Wc, _, loss = model()
    -- class_xent_delta, class_xent, fill_like, the fused multiply: fixed;
    -- two dimshuffles of fixed buffers, made once; the dot writing the
    -- output: dynamic (before the rule was in the catalog: 2 fixed, 3
    -- dynamic)
    check({ h, c, t, o }, tgl.grad(tgl.sum(loss), Wc), { 'class_xent_delta', 'class_xent' }, 4, 1)
  end)
end)
