-- examples/rnn_elman.lua — an Elman recurrent network, trained with
-- backpropagation through time and plain SGD, predicts the next value of a
-- sine wave.  The recurrence is a tgl.scan over the time steps; tgl.grad
-- differentiates through it (BPTT); one compiled function does forward,
-- backward and the SGD update.
--   h_t = tanh(x_t Wx + h_{t-1} Wh + b),   prediction_t = h_t Wy + by
--   tgl examples/rnn_elman.lua
tgl.manual_seed(0)
local T, B, H = 40, 16, 16          -- time steps, sequences per batch, hidden units
local LR, ITERS = 0.2, 200

-- Data: B sine waves with random phases; input s_t, target s_{t+1}.
-- Arrays are time-major: (T, B, 1), so scan walks axis 1.
local X, Y = tgl.zeros(T, B, 1), tgl.zeros(T, B, 1)
local phase = tgl.rand(B) * (2 * math.pi)
for t = 1, T do
  for j = 1, B do
    X:set(math.sin(0.3 * (t - 1) + phase:get(j)), t, j, 1)
    Y:set(math.sin(0.3 * t + phase:get(j)), t, j, 1)
  end
end

-- Parameters (shared variables: they live across calls).
local Wx = tgl.shared(tgl.randn(1, H) * 0.5, 'Wx')
local Wh = tgl.shared(tgl.randn(H, H) * (0.9 / math.sqrt(H)), 'Wh')
local b = tgl.shared(tgl.zeros(H), 'b')
local Wy = tgl.shared(tgl.randn(H, 1) * 0.3, 'Wy')
local by = tgl.shared(tgl.zeros(1), 'by')
local params = { Wx, Wh, b, Wy, by }
local h0 = tgl.shared(tgl.zeros(B, H), 'h0')    -- the initial state (not trained)

-- The model: scan gives every step's state, stacked on axis 1: (T, B, H).
local x, y = tgl.tensor3('x'), tgl.tensor3('y')
local hs = tgl.scan {
  fn = function(x_t, h_prev, Wx_, Wh_, b_)      -- sequence slice, previous output, non-sequences
    return tgl.tanh(x_t:dot(Wx_) + h_prev:dot(Wh_) + b_)
  end,
  sequences = { x }, outputs_info = { h0 }, non_sequences = { Wx, Wh, b }, name = 'elman',
}
local pred = hs:reshape(T * B, H):dot(Wy) + by  -- the readout, all steps at once
local cost = tgl.mean((pred - y:reshape(T * B, 1)) ^ 2)

-- BPTT: the gradient flows back through the scan.
local grads = tgl.grad(cost, params)
local updates = {}
for i, p in ipairs(params) do updates[i] = { p, p - LR * grads[i] } end
local train = tgl.compile { inputs = { x, y }, outputs = cost, updates = updates, name = 'train' }

local t0 = tgl.time()
local first, last
for it = 0, ITERS do
  local loss = train(X, Y):get()
  first = first or loss
  last = loss
  if it % 25 == 0 then print(('iteration %3d  mean squared error %.5f'):format(it, loss)) end
end
print(('%d iterations in %.2f s'):format(ITERS + 1, tgl.time() - t0))
if not (last < 0.1 * first) then
  error(('the loss did not fall enough: %.5f -> %.5f'):format(first, last))
end
print(('loss fell from %.4f to %.4f'):format(first, last))
