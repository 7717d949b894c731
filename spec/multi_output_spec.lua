-- multi_output_spec.lua — multi-output nodes with a payload, seen from Lua:
-- a fused group with several outputs is one node (its fused program is the
-- payload) read through `output` nodes; tgl.debugprint shows both, an
-- optimized graph made of them compiles, and differentiating it gives the
-- gradient of the graph it came from.
local tgl = require 'tgl'

local function close(a, b, tol)
  local ta, tb = a:totable(), b:totable()
  if type(ta) ~= 'table' then ta, tb = { ta }, { tb } end
  for i = 1, #ta do
    if math.abs(ta[i] - tb[i]) > tol * (1 + math.abs(tb[i])) then return false, i end
  end
  return true
end

describe('a fused group with two outputs', function()
  local x = tgl.dvector('x')
  local y = tgl.exp(x) * 2          -- read by z and by the caller
  local z = tgl.tanh(y) + 1
  local opt = tgl.optimize({ y, z })
  local xs = tgl.array({ 0.1, -0.4, 0.7, 1.3 }, 'float64')

  it('is one fused node (payload shown) read through two output nodes', function()
    local text = tgl.debugprint(opt)
    local fused_ids, outputs = {}, 0
    for line in text:gmatch('[^\n]+') do
      local id = line:match('^%s*[ |]*fused %[id (%w+)%].-fused#%d+{exp mul tanh add} %(2 outputs%)')
      if id then fused_ids[id] = true end
      if line:match('^output %[id %w+%] float64 %(%?,%) #[12]') then outputs = outputs + 1 end
    end
    assert.equals(2, outputs, text)
    local n = 0
    for _ in pairs(fused_ids) do n = n + 1 end
    assert.equals(1, n, text) -- the same fused node under both outputs
  end)

  it('compiles to one instruction writing both outputs, with the right values', function()
    local f = tgl.compile { inputs = { x }, outputs = opt }
    local program = tgl.debugprint(f)
    local ops = 0
    for line in program:gmatch('[^\n]+') do
      if line:match('^%s*%d+%s+t%d+, t%d+ = fused#%d+') then ops = ops + 1 end
    end
    assert.equals(1, ops, program)
    local a, b = f(xs)
    local g = tgl.compile { inputs = { x }, outputs = { y, z }, mode = 'FAST_COMPILE' }
    local ra, rb = g(xs)
    -- outputs come back in the order asked for
    assert.is_true(close(a, ra, 1e-12) and close(b, rb, 1e-12) or
                   close(a, rb, 1e-12) and close(b, ra, 1e-12))
  end)

  it('differentiates: the pullback gets both outputs\' gradients at once', function()
    local cost = tgl.sum(opt[1] * opt[2])
    local gx = tgl.grad(cost, x)
    local f = tgl.compile { inputs = { x }, outputs = gx, mode = 'FAST_COMPILE' }
    local got = f(xs)
    -- d/dx sum(y z) with y = 2 e^x, z = tanh(y) + 1: y z + y (1 - tanh(y)^2) y
    local want = {}
    for i, v in ipairs(xs:totable()) do
      local yy = 2 * math.exp(v)
      local t = math.tanh(yy)
      want[i] = yy * (t + 1) + yy * (1 - t * t) * yy
    end
    local ok, at = close(got, tgl.array(want, 'float64'), 1e-10)
    assert.is_true(ok, 'element ' .. tostring(at))
  end)
end)
