-- spec/nn_torch7_spec.lua — tgl's nn against Torch7's own numbers.
-- spec/fixtures/torch7/*.lua were produced by Torch7 itself (nn, optim and
-- Element-Research's SeqLSTM/SeqGRU) with bench/peers/torch7_refs.lua, in
-- float64, on weights and inputs from a formula; each case here builds the
-- same module with tgl's nn from the same constructor expression, copies
-- Torch7's weights in, runs the same forward/backward sequence (training
-- or evaluate mode, accumulating gradients from zero) and compares
-- outputs, gradInput, parameter gradients and running statistics to 1e-9
-- (|tgl - torch7| <= 1e-9 * max(1, |torch7|)).  A case whose module or
-- feature tgl's nn does not have yet is pending, found at run time, so it
-- turns on by itself when the module arrives.  The worst difference per
-- module is printed at the end.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'

local here = debug.getinfo(1, 'S').source:match('^@(.*)[/\\]') or 'spec'
local function fixture(name)
  local f = assert(loadfile(here .. '/fixtures/torch7/' .. name .. '.lua'))
  return f()
end

local TOL = 1e-9

-- {s = sizes, d = flat values} -> tgl array; {tbl = {...}} -> table of arrays
local function arr(t, dtype)
  if t.tbl then
    local out = {}
    for i, v in ipairs(t.tbl) do out[i] = arr(v, dtype) end
    return out
  end
  local a = tgl.array(t.d, dtype or 'float64')
  if #t.s ~= 1 then a = a:reshape(t.s) end
  return a
end

local function flatten(x, out)
  out = out or {}
  if type(x) == 'table' then
    for _, v in ipairs(x) do flatten(v, out) end
  else
    out[#out + 1] = x
  end
  return out
end

-- Worst scaled difference of got (array or table of arrays) against the
-- fixture value want; raises on a shape or structure mismatch.
local function worst(got, want, what)
  if want.tbl then
    assert(type(got) == 'table' and not tgl.is_array(got),
           what .. ': Torch7 gives a table of ' .. #want.tbl .. ' tensors, tgl gave ' .. tostring(got))
    assert(#got == #want.tbl, ('%s: Torch7 gives %d tensors, tgl %d'):format(what, #want.tbl, #got))
    local w = 0
    for i, v in ipairs(want.tbl) do w = math.max(w, worst(got[i], v, what .. '[' .. i .. ']')) end
    return w
  end
  assert(tgl.is_array(got), what .. ': tgl gave ' .. type(got) .. ', not an array')
  local shape = got:shape()
  assert(table.concat(shape, 'x') == table.concat(want.s, 'x'),
         ('%s: shape %s, Torch7 %s'):format(what, table.concat(shape, 'x'), table.concat(want.s, 'x')))
  local g = flatten(got:astype('float64'):totable())
  local w = 0
  for i, v in ipairs(want.d) do
    local d = math.abs(g[i] - v) / math.max(1, math.abs(v))
    if d ~= d then d = math.huge end
    if d > w then w = d end
  end
  return w
end

local summary = {}   -- module name -> worst scaled difference over its cases
local function note(case, w)
  local key = case.needs[1] or case.name
  summary[key] = math.max(summary[key] or 0, w)
end

-- The reason a case cannot run in this tree, or nil.
local function missing(case)
  for _, name in ipairs(case.needs) do
    if nn[name] == nil then return 'nn.' .. name .. ' not in this tree yet' end
  end
end

local function build(ctor)
  local f = assert(loadstring('return ' .. ctor, ctor))
  setfenv(f, setmetatable({ nn = nn, W = function(t) return tgl.array(t, 'float64') end }, { __index = _G }))
  local ok, m = pcall(f)
  if not ok and tostring(m):find('not supported') then return nil, tostring(m) end
  if not ok then error(m, 0) end
  return m
end

-- Runs one module case; returns the worst scaled difference.
local function run_module(case)
  local m = build(case.tgl_ctor or case.ctor)
  m:double()
  local mods = m:listModules()
  for _, p in ipairs(case.params) do
    local mod = mods[p.mod]
    assert(mod and tgl.is_array(mod[p.field]),
           ('%s: module %d (%s) has no %s'):format(case.name, p.mod, tostring(mod), p.field))
    mod[p.field]:copy(arr(p.t))
  end
  m:zeroGradParameters()
  local int_input = case.ctor:find('^nn%.LookupTable') ~= nil
  local w = 0
  for i, r in ipairs(case.runs) do
    if r.mode == 'eval' then m:evaluate() else m:training() end
    local x = arr(r.input, int_input and 'int64' or nil)
    local what = ('run %d (%s)'):format(i, r.mode)
    w = math.max(w, worst(m:forward(x), r.output, what .. ' output'))
    if r.gradOutput then
      local gi = m:backward(x, arr(r.gradOutput), r.scale)
      if not int_input then w = math.max(w, worst(gi, r.gradInput, what .. ' gradInput')) end
    end
  end
  for _, g in ipairs(case.grads) do
    w = math.max(w, worst(mods[g.mod][g.field], g.t, ('module %d %s'):format(g.mod, g.field)))
  end
  for _, s in ipairs(case.state) do
    local got = mods[s.mod][s.field]
    assert(got ~= nil, ('module %d (%s) keeps no %s'):format(s.mod, tostring(mods[s.mod]), s.field))
    w = math.max(w, worst(got, s.t, ('module %d %s'):format(s.mod, s.field)))
  end
  return w
end

describe('nn against Torch7 (float64, 1e-9)', function()
  local saved_floatX
  before_each(function() saved_floatX = tgl.config.floatX; tgl.config.floatX = 'float64' end)
  after_each(function() tgl.config.floatX = saved_floatX end)

  for _, group in ipairs({ 'containers', 'layers', 'spatial', 'rnn' }) do
    describe(group, function()
      for _, case in ipairs(fixture(group)) do
        it(case.name, function()
          local why = missing(case)
          if why then pending(why) return end
          local w = run_module(case)
          note(case, w)
          assert(w <= TOL, ('%s: worst scaled difference from Torch7 %.3g > %g'):format(case.name, w, TOL))
        end)
      end
    end)
  end

  describe('criterions', function()
    for _, case in ipairs(fixture('criterions')) do
      it(case.name, function()
        local why = missing(case)
        if why then pending(why) return end
        local c, unsupported = build(case.ctor)
        if not c then pending(unsupported) return end
        local x = arr(case.input)
        local t = arr(case.target, case.int_target and 'int64' or nil)
        local loss = c:forward(x, t)
        assert.is_number(loss)
        local w = math.abs(loss - case.output) / math.max(1, math.abs(case.output))
        w = math.max(w, worst(c:backward(x, t), case.gradInput, 'gradInput'))
        note(case, w)
        assert(w <= TOL, ('%s: worst scaled difference from Torch7 %.3g > %g'):format(case.name, w, TOL))
      end)
    end
  end)

  -- Torch7's optim closure API: optim.NAME(feval, x, config, state), three
  -- steps on f(x) = 1/2 sum a x^2 + b.x.
  describe('optim', function()
    local ref = fixture('optim')
    for _, case in ipairs(ref.cases) do
      local keys = {}
      for k in pairs(case.config) do keys[#keys + 1] = k end
      table.sort(keys)
      local cs = {}
      for _, k in ipairs(keys) do cs[#cs + 1] = k .. '=' .. tostring(case.config[k]) end
      it(case.optim .. '{' .. table.concat(cs, ', ') .. '}', function()
        local ok, optim = pcall(require, 'optim')
        if not ok or type(optim) ~= 'table' or type(optim[case.optim]) ~= 'function' then
          pending("require('optim')." .. case.optim .. ' not in this tree yet') return
        end
        local a, b = arr(ref.a), arr(ref.b)
        local function feval(x)
          return tgl.sum(a * x * x * 0.5 + b * x):get(), a * x + b
        end
        local x = arr(ref.x0)
        local config = {}
        for k, v in pairs(case.config) do config[k] = v end
        local state = {}
        local w = 0
        for s = 1, 3 do
          local _, fx = optim[case.optim](feval, x, config, state)
          w = math.max(w, math.abs(fx[1] - case.fs[s]) / math.max(1, math.abs(case.fs[s])))
          w = math.max(w, worst(x, case.xs[s], 'x after step ' .. s))
        end
        local key = 'optim.' .. case.optim
        summary[key] = math.max(summary[key] or 0, w)
        assert(w <= TOL, ('optim.%s: worst scaled difference from Torch7 %.3g > %g'):format(case.optim, w, TOL))
      end)
    end
  end)

  teardown(function()
    local names = {}
    for k in pairs(summary) do names[#names + 1] = k end
    table.sort(names)
    io.write('\nworst scaled difference from Torch7, per module:\n')
    for _, k in ipairs(names) do io.write(('  %-26s %.3g\n'):format(k, summary[k])) end
  end)
end)
