-- bench/lib/mlp_common.lua — what bench/mlp.lua and the report share with
-- the peers (bench/peers/common.py repeats these numbers and rules): the
-- models, the CSV columns, the timing protocol (check pass, then repeats;
-- bench/README.md) and the FLOP count.
local stats = require 'stats'
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
M.CHUNKS = 20                  -- clock reads per check pass and per timed repeat

M.MODEL_NAMES = { 'logreg', 'mlp1', 'mlp3' }
M.MODELS = {
  logreg = { 784, 10 },
  mlp1 = { 784, 500, 10 },
  mlp3 = { 784, 1000, 1000, 1000, 10 },
}
M.MODEL_LABEL = {
  logreg = 'logreg 784-10', mlp1 = 'MLP 784-500-10', mlp3 = 'MLP 784-1000x3-10',
}

-- One CSV row per cell (system, variant, model, batch, threads).  The
-- timing columns: examples_per_s is the median of the repeats' rates,
-- eps_min and eps_max the slowest and fastest repeat, spread_pct
-- (max - min) / median in percent, rates every repeat's rate (';'
-- between), examples and seconds the totals over the repeats.  The loss
-- columns come from the check pass (check_examples examples from the
-- initial weights: 6000 unless --budget cut it).
M.CSV_COLUMNS = { 'system', 'variant', 'model', 'batch', 'threads', 'examples', 'seconds',
                  'examples_per_s', 'eps_min', 'eps_max', 'spread_pct', 'repeats', 'rates',
                  'check_examples', 'loss_before', 'loss_after', 'loss_down' }
M.CSV_HEADER = table.concat(M.CSV_COLUMNS, ',')

-- r: system, variant, model, batch, threads, rates (examples/s per repeat),
-- examples, seconds (totals over the repeats), check_examples, loss0, loss1.
function M.csv_row(r)
  local s = stats.summary(r.rates)
  local rates = {}
  for i, v in ipairs(r.rates) do rates[i] = ('%.1f'):format(v) end
  return ('%s,%s,%s,%d,%d,%d,%.6f,%.1f,%.1f,%.1f,%.2f,%d,%s,%d,%.6f,%.6f,%s'):format(
    r.system, r.variant, r.model, r.batch, r.threads, r.examples, r.seconds, s.median, s.min, s.max,
    s.spread_pct, #r.rates, table.concat(rates, ';'), r.check_examples, r.loss0, r.loss1,
    (r.loss1 < r.loss0) and 'yes' or 'NO')
end

-- The check pass: one pass of nb steps from the initial weights (run(k0,
-- n) runs steps k0..k0+n-1, 0-based; sync() waits for them), in CHUNKS
-- chunks; with budget > 0 it stops after the first chunk that ends past
-- `budget` seconds.  The loss before and after it is what the report
-- compares between systems; its rate sizes the chunks of the repeats.
-- Returns {steps=, seconds=}.
function M.check_pass(nb, budget, clock, run, sync)
  local chunk = math.max(1, math.ceil(nb / M.CHUNKS))
  local done, t0 = 0, clock()
  local dt = 0
  while done < nb do
    local n = math.min(chunk, nb - done)
    run(done, n)
    sync()
    done = done + n
    dt = clock() - t0
    if budget > 0 and dt > budget then break end
  end
  return { steps = done, seconds = dt }
end

-- The timed repeats: training goes on from step `pos` (where the check
-- pass stopped), through the data in order, wrapping at nb steps (a chunk
-- never crosses the end of a pass).  A repeat runs chunks of about
-- min_time / CHUNKS seconds (sized from steps_per_s, the check pass's
-- rate) until min_time seconds have passed; the clock is read, and sync()
-- called, at chunk ends.  One untimed chunk first (the loss evaluation
-- after the check pass has just gone through the caches).  Returns
-- {rates=, examples=, seconds=}: examples/s per repeat and the totals.
function M.timed_repeats(nb, B, pos, steps_per_s, repeats, min_time, clock, run, sync)
  local chunk = math.max(1, math.min(nb, math.floor(steps_per_s * min_time / M.CHUNKS)))
  pos = pos % nb
  local function one_chunk()
    local n = math.min(chunk, nb - pos)
    run(pos, n)
    sync()
    pos = (pos + n) % nb
    return n
  end
  one_chunk()
  local rates, examples, seconds = {}, 0, 0
  for r = 1, repeats do
    collectgarbage()
    local steps, t0, dt = 0, clock(), 0
    repeat
      steps = steps + one_chunk()
      dt = clock() - t0
    until dt >= min_time
    rates[r] = steps * B / dt
    examples, seconds = examples + steps * B, seconds + dt
  end
  return { rates = rates, examples = examples, seconds = seconds }
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
