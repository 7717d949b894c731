-- bench/lib/mlp_common.lua — what bench/mlp.lua and the report share with
-- the peers (bench/peers/common.py repeats these numbers): the models, the
-- CSV columns, the chunked timing of one pass, and the FLOP count.
local M = {}

M.N_EXAMPLES, M.N_IN, M.N_OUT = 6000, 784, 10
M.LR = 0.01
-- The inputs are N(0, X_STD^2): 0.3 gives |x|^2 ~ 70 per example, about an
-- MNIST image's (~80).  With N(0, 1) (|x|^2 ~ 784), SGD at lr 0.01 with
-- batch 1 makes the loss go up (measured: logreg 3.09 -> 3.89, the 3-layer
-- MLP 2.44 -> 2.84 after a pass), in every system alike; speed does not
-- depend on the scale.
M.X_STD = 0.3
M.WARMUP_EXAMPLES = 600        -- warm-up steps: ceil(600 / batch), at least 2
M.CHUNKS = 20                  -- a pass is timed in 20 chunks (budget checks)

M.MODEL_NAMES = { 'logreg', 'mlp1', 'mlp3' }
M.MODELS = {
  logreg = { 784, 10 },
  mlp1 = { 784, 500, 10 },
  mlp3 = { 784, 1000, 1000, 1000, 10 },
}
M.MODEL_LABEL = {
  logreg = 'logreg 784-10', mlp1 = 'MLP 784-500-10', mlp3 = 'MLP 784-1000x3-10',
}

M.CSV_COLUMNS = { 'system', 'variant', 'model', 'batch', 'threads', 'examples', 'seconds',
                  'examples_per_s', 'loss_before', 'loss_after', 'loss_down' }
M.CSV_HEADER = table.concat(M.CSV_COLUMNS, ',')

function M.csv_row(r)
  return ('%s,%s,%s,%d,%d,%d,%.6f,%.1f,%.6f,%.6f,%s'):format(
    r.system, r.variant, r.model, r.batch, r.threads, r.examples, r.seconds, r.examples / r.seconds,
    r.loss0, r.loss1, (r.loss1 < r.loss0) and 'yes' or 'NO')
end

-- Times one pass of nb steps (run(k0, n) runs steps k0..k0+n-1, 0-based)
-- in CHUNKS chunks; with budget > 0, stops after the first chunk that ends
-- past `budget` seconds.  Returns {steps=, seconds=}.
function M.timed_pass(nb, B, budget, clock, run)
  local chunk = math.max(1, math.ceil(nb / M.CHUNKS))
  local done, t0 = 0, clock()
  local dt = 0
  while done < nb do
    local n = math.min(chunk, nb - done)
    run(done, n)
    done = done + n
    dt = clock() - t0
    if budget > 0 and dt > budget then break end
  end
  return { steps = done, seconds = dt }
end

-- FLOPs of one training step on a minibatch of B examples, counting the
-- matrix products and the update (elementwise ops are O(B * width) and are
-- left out):  for each layer l with i inputs and o outputs,
--   forward            2 B i o      (x W; + B o for the bias, counted)
--   gradient of W      2 B i o      (x^T delta; + B o for the bias gradient)
--   gradient of input  2 B i o      (delta W^T), not for the first layer
--   SGD update         2 (i o + o)  (p - lr * g)
function M.flops_per_step(model, B)
  local sizes, f = M.MODELS[model], 0
  for l = 1, #sizes - 1 do
    local i, o = sizes[l], sizes[l + 1]
    f = f + 2 * B * i * o + B * o          -- forward
    f = f + 2 * B * i * o + B * o          -- weight and bias gradients
    if l > 1 then f = f + 2 * B * i * o end
    f = f + 2 * (i * o + o)                -- update
  end
  return f
end

return M
