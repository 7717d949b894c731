-- examples/lstm_scan.lua — an LSTM layer written as a tgl.scan step: input,
-- forget and output gates (sigmoid) and the candidate (tanh) from one
-- affine map, split by column slices; two recurrent outputs (h and c) fed
-- back.  First the gradient through the scan is checked against finite
-- differences (tgl.verify_grad, float64); then the LSTM learns to predict
-- the next value of a sine wave with SGD.
--   tgl examples/lstm_scan.lua
tgl.manual_seed(1)

-- One step: z = x_t W + h U + b, columns [i | f | o | g] of H each.
local function lstm_step(H)
  return function(x_t, h_prev, c_prev, W, U, b)
    local z = x_t:dot(W) + h_prev:dot(U) + b
    local i = tgl.sigmoid(z[{ {}, { 1, H } }])
    local f = tgl.sigmoid(z[{ {}, { H + 1, 2 * H } }])
    local o = tgl.sigmoid(z[{ {}, { 2 * H + 1, 3 * H } }])
    local g = tgl.tanh(z[{ {}, { 3 * H + 1, 4 * H } }])
    local c = f * c_prev + i * g
    return { o * tgl.tanh(c), c }             -- h_t, c_t: both fed back
  end
end
-- The layer: every step's h, stacked on axis 1 (T, B, H).
local function lstm(x, h0, c0, W, U, b, H)
  local outs = tgl.scan { fn = lstm_step(H), sequences = { x }, outputs_info = { h0, c0 },
                          non_sequences = { W, U, b }, name = 'lstm' }
  return outs[1], outs[2]                     -- several outputs: a table
end

-- 1. Gradient check on a small layer: 5 steps, batch 2, 3 inputs, 4 units.
do
  local T, B, N, H = 5, 2, 3, 4
  local zeros = tgl.constant(tgl.zeros(B, H, { dtype = 'float64' }))
  local err = tgl.verify_grad(function(x, W, U, b)
    local hs, cs = lstm(x, zeros, zeros, W, U, b, H)
    return hs:sum() + cs[-1]:sum()              -- uses every h and the last c
  end, { tgl.randn(T, B, N, { dtype = 'float64' }), tgl.randn(N, 4 * H, { dtype = 'float64' }) * 0.5,
         tgl.randn(H, 4 * H, { dtype = 'float64' }) * 0.5, tgl.randn(4 * H, { dtype = 'float64' }) * 0.1 })
  print(('gradient check through the scan: largest error %.2e'):format(err))
end

-- 2. Training: predict s_{t+1} from s_1..s_t for 16 sine waves.
local T, B, H, LR = 30, 16, 10, 0.5
local X, Y = tgl.zeros(T, B, 1), tgl.zeros(T, B, 1)
local phase = tgl.rand(B) * (2 * math.pi)
for t = 1, T do
  for j = 1, B do
    X:set(math.sin(0.3 * (t - 1) + phase:get(j)), t, j, 1)
    Y:set(math.sin(0.3 * t + phase:get(j)), t, j, 1)
  end
end
local W = tgl.shared(tgl.randn(1, 4 * H) * 0.5, 'W')
local U = tgl.shared(tgl.randn(H, 4 * H) * (1 / math.sqrt(H)), 'U')
local b = tgl.shared(tgl.zeros(4 * H), 'b')
local Wy = tgl.shared(tgl.randn(H, 1) * 0.3, 'Wy')
local by = tgl.shared(tgl.zeros(1), 'by')
local params = { W, U, b, Wy, by }
local zeros = tgl.shared(tgl.zeros(B, H), 'zeros')

local x, y = tgl.tensor3('x'), tgl.tensor3('y')
local hs = lstm(x, zeros, zeros, W, U, b, H)
local cost = tgl.mean((hs:reshape(T * B, H):dot(Wy) + by - y:reshape(T * B, 1)) ^ 2)
local grads = tgl.grad(cost, params)
local updates = {}
for k, p in ipairs(params) do updates[k] = { p, p - LR * grads[k] } end
local train = tgl.compile { inputs = { x, y }, outputs = cost, updates = updates, name = 'lstm_train' }

local first, last
for it = 0, 150 do
  last = train(X, Y):get()
  first = first or last
  if it % 25 == 0 then print(('iteration %3d  mean squared error %.5f'):format(it, last)) end
end
if not (last < 0.1 * first) then error(('the loss did not fall enough: %.5f -> %.5f'):format(first, last)) end
print(('loss fell from %.4f to %.4f'):format(first, last))
