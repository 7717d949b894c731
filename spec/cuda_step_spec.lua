-- cuda_step_spec.lua — whole steps on the CUDA device (src/cuda/step.c: the
-- bound step's fixed segments captured as CUDA Graphs and replayed): a
-- training step whose loss reads its labels back (softmax_crossentropy's
-- label check, an item a capture cannot hold) gives the cpu's losses and
-- parameters call after call while the rest of the step is replayed; an
-- input given in another layout, a shared variable given a new value and
-- f.fn{n_calls} after the graphs are made are read right.  float64, so the
-- two devices agree to 1e-12.  Without a CUDA device (a real one, or the
-- emulator: TGL_CUDA_EMU=1) the spec says why and runs nothing.
local S = dofile('spec/support.lua')

local available = tgl.cuda and tgl.cuda.is_available()
if not available then
  print('cuda_step_spec: skipped: ' .. (tgl.cuda and tgl.cuda.built()
    and 'no CUDA device (set TGL_CUDA_EMU=1 for the emulated GPU)'
    or 'tgl was built without CUDA'))
  describe('whole steps on the cuda device', function()
    pending('no CUDA device')
  end)
  return
end

local function on(device, fn)
  local was, was_ws = tgl.config.device, tgl.config.whole_step
  tgl.config.device = device
  tgl.config.whole_step = true
  local res = { pcall(fn) }
  tgl.config.device, tgl.config.whole_step = was, was_ws
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, table.maxn(res))
end

-- A 20-16-16-5 tanh MLP trained by SGD on (x, y): the function, its
-- parameters (shared variables on `device`), from the same initial values.
local function mlp(device, init)
  return on(device, function()
    local x, y = tgl.matrix('x', 'float64'), tgl.ivector('y')
    local h, params = x, {}
    for l = 1, #init do
      local W = tgl.shared(init[l].W, 'W' .. l)
      local b = tgl.shared(init[l].b, 'b' .. l)
      params[#params + 1] = W
      params[#params + 1] = b
      h = tgl.dot(h, W) + b
      if l < #init then h = tgl.tanh(h) end
    end
    local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(h), y))
    local g = tgl.grad(cost, params)
    local ups = {}
    for k, p in ipairs(params) do ups[k] = { p, p - 0.1 * g[k] } end
    return tgl.compile { inputs = { x, y }, outputs = cost, updates = ups }, params
  end)
end

local function init_weights()
  tgl.manual_seed(11)
  local sizes, init = { 20, 16, 16, 5 }, {}
  for l = 1, #sizes - 1 do
    init[l] = { W = tgl.randn(sizes[l], sizes[l + 1], { dtype = 'float64' }) * 0.3,
                b = tgl.randn(sizes[l + 1], { dtype = 'float64' }) * 0.1 }
  end
  return init
end

local function labels(n)
  local t = {}
  for i = 1, n do t[i] = (i * 7) % 5 + 1 end
  return tgl.array(t, 'int32')
end

local function same_params(pc, pg, what)
  for k = 1, #pc do
    S.assert_close(pc[k]:get_value(), pg[k]:get_value(), 1e-12, 1e-12, what .. ', parameter ' .. k)
  end
end

describe('whole steps on the cuda device', function()
  it('replay a training step whose loss checks its labels, as the cpu computes it', function()
    local init = init_weights()
    local fc, pc = mlp('cpu', init)
    local fg, pg = mlp('cuda', init)
    local X, Y = tgl.randn(8, 20, { dtype = 'float64' }), labels(8)
    for i = 1, 10 do
      S.assert_close(fc(X, Y), fg(X, Y), 1e-12, 1e-12, 'loss of call ' .. i)
    end
    same_params(pc, pg, 'after 10 calls')
    assert.is_true(fg:whole_step().generated, 'the step is replayed')
    -- a bad label is the cpu's error, and nothing changes
    local before = pg[1]:get_value()
    local bad = tgl.array({ 1, 2, 3, 4, 5, 6, 1, 2 }, 'int32')
    local ok_c, err_c = pcall(fc, X, bad)
    local ok_g, err_g = pcall(fg, X, bad)
    assert.is_false(ok_c)
    assert.is_false(ok_g)
    assert.matches('label', tostring(err_g))
    S.assert_close(before, pg[1]:get_value(), 0, 0, 'W1 after the failed call')
    -- and the step goes on
    for i = 1, 3 do
      S.assert_close(fc(X, Y), fg(X, Y), 1e-12, 1e-12, 'loss after the error, call ' .. i)
    end
    same_params(pc, pg, 'after the error')
  end)

  it('reads a new input each call, one in another layout, and a variable given a new value', function()
    local init = init_weights()
    local fc, pc = mlp('cpu', init)
    local fg, pg = mlp('cuda', init)
    for i = 1, 12 do
      local X = i % 3 == 0 and tgl.randn(20, 8, { dtype = 'float64' }):T()
                or tgl.randn(8, 20, { dtype = 'float64' })
      local Y = labels(8)
      if i == 7 then
        local W = tgl.randn(16, 16, { dtype = 'float64' }) * 0.2
        pc[3]:set_value(W)
        pg[3]:set_value(W)
      end
      S.assert_close(fc(X, Y), fg(X, Y), 1e-12, 1e-12, 'loss of call ' .. i)
    end
    same_params(pc, pg, 'after 12 calls')
  end)

  it('runs f.fn{n_calls} on the replayed step as that many calls', function()
    local init = init_weights()
    local fc, pc = mlp('cpu', init)
    local fg, pg = mlp('cuda', init)
    local X, Y = tgl.randn(8, 20, { dtype = 'float64' }), labels(8)
    for _ = 1, 4 do fc(X, Y); fg(X, Y) end
    fc.fn { n_calls = 6 }
    fg.fn { n_calls = 6 }
    same_params(pc, pg, 'after n_calls')
    S.assert_close(fc(X, Y), fg(X, Y), 1e-12, 1e-12, 'loss after n_calls')
  end)
end)
