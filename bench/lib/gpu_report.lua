-- bench/lib/gpu_report.lua — bench/gpu.sh's table: the MLP step on the GPU
-- against its cuBLAS-bound time and PyTorch CUDA, and the paper's RNN grid
-- cells on the GPU against PyTorch CUDA, from the CSV files bench/gpu.sh
-- wrote into OUT.  Missing files (a peer not installed, a run cut short)
-- show as "missing".
--
--   tgl bench/lib/gpu_report.lua OUT "device name"
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/?.lua;' .. package.path
local csv = require 'csv'

local out, device = arg[1], arg[2] or '?'
local function read(name)
  local ok, rows = pcall(csv.read, out .. '/' .. name)
  return ok and rows or {}
end
local function fmt(x, f) return x and (f or '%.0f'):format(x) or 'missing' end
local function ratio(a, b) return (a and b and b > 0) and ('%.2f'):format(a / b) or '—' end

local mlp, bound, torch = read('mlp_tgl.csv'), read('bound.csv'), read('mlp_torch.csv')
local function pick(rows, pred)
  for _, r in ipairs(rows) do if pred(r) then return r end end
end

print(('## GPU: %s'):format(device))
print()
print('MLP 784-1000x3-10, float32 (TF32 off), examples/s (median of the repeats; spread in bench CSVs).')
print('bound: the step\'s 11 matrix products alone (bench/gpu.lua), as examples/s; tgl/bound is the share of')
print('the cuBLAS-bound rate tgl reaches (target >= 0.70).')
print()
print('| batch | tgl cvm_nogc | tgl n_calls (CUDA Graphs) | products only (bound) | best tgl / bound | PyTorch CUDA eager | best tgl / PyTorch |')
print('|---:|---:|---:|---:|---:|---:|---:|')
for _, B in ipairs({ 1, 60, 256 }) do
  local a = pick(mlp, function(r) return r.batch == B and r.variant == 'cvm_nogc' end)
  local n = pick(mlp, function(r) return r.batch == B and r.variant == 'n_calls' end)
  local b = pick(bound, function(r) return r.batch == B end)
  local t = pick(torch, function(r) return r.batch == B and r.variant == 'eager' end)
  local ea, en = a and a.examples_per_s, n and n.examples_per_s
  local best = (ea or en) and math.max(ea or 0, en or 0) or nil
  local eb = b and b.seconds and B / b.seconds or nil
  local et = t and t.examples_per_s
  print(('| %d | %s | %s | %s | %s | %s | %s |'):format(B, fmt(ea), fmt(en), fmt(eb), ratio(best, eb),
        fmt(et), ratio(best, et)))
end
print()

local rnn, rtorch = read('rnn_tgl.csv'), read('rnn_torch.csv')
print('Elman RNN (the paper\'s grid), batch 1, BPTT over 100 steps, time steps/s.')
print()
print('| hidden | vocab | tgl trust_input | tgl n_calls | PyTorch CUDA eager | best tgl / PyTorch |')
print('|---:|---:|---:|---:|---:|---:|')
local cells = {}
for _, r in ipairs(rnn) do
  local key = r.hidden .. 'x' .. r.vocab
  if not cells[key] then cells[key] = { h = r.hidden, v = r.vocab }; cells[#cells + 1] = cells[key] end
  cells[key][r.variant] = r.median
end
for _, c in ipairs(cells) do
  local t = pick(rtorch, function(r) return r.hidden == c.h and r.vocab == c.v end)
  local best = math.max(c.trust_input or 0, c.n_calls or 0)
  print(('| %d | %d | %s | %s | %s | %s |'):format(c.h, c.v, fmt(c.trust_input), fmt(c.n_calls),
        fmt(t and t.median), ratio(best > 0 and best or nil, t and t.median)))
end
