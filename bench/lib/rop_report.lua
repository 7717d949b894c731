-- bench/lib/rop_report.lua — turns bench/results/rop.csv (and the run's
-- rop_meta.csv) into rop.md, and prints it.
--   tgl bench/lib/rop_report.lua rop.csv rop_meta.csv rop.md
-- A cell is ms per call, the median of the repeats with the spread (% of
-- the median); '!' marks a spread above 10%.  The ratio columns divide a
-- product's time by the same system's gradient time at the same thread
-- count (the issue's target: Gauss-Newton <= 3x a gradient); '≈' there
-- marks a product whose min–max range overlaps the gradient's.  tgl/peer
-- is a speed ratio (above 1: tgl faster) of tgl's row over the peer's best
-- variant.
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/?.lua;' .. package.path
local stats = require 'stats'
local peer = require 'peer_common'

local csv_path, meta_path, md_path = arg[1], arg[2], arg[3]
assert(csv_path and meta_path and md_path, 'usage: tgl bench/lib/rop_report.lua rop.csv rop_meta.csv rop.md')

local rows = require('csv').read(csv_path)
local meta = peer.read_meta(meta_path)

local out = {}
local function w(...) out[#out + 1] = table.concat({ ... }) end
local function cell(r)
  if not r then return '–' end
  if r.median == nil or r.median < 0 then return 'failed' end
  return ('%.2f (%.0f%%)%s'):format(r.median, r.spread_pct, r.spread_pct > stats.FLAG_PCT and '!' or '')
end
local function find(system, case, threads, variant)
  local b
  for _, r in ipairs(rows) do
    if r.system == system and r.case == case and r.threads == threads and (not variant or r.variant == variant)
       and type(r.median) == 'number' and r.median > 0 and (not b or r.median < b.median) then
      b = r
    end
  end
  return b
end
local function over(a, g)      -- a's time over the gradient's
  if not a or not g then return '–' end
  return ('%.2f×%s'):format(a.median / g.median, stats.overlap(a, g) and ' ≈' or '')
end

local threads, tseen, systems, sseen = {}, {}, {}, {}
for _, r in ipairs(rows) do
  if not tseen[r.threads] then tseen[r.threads] = true; threads[#threads + 1] = r.threads end
  local key = r.system .. '/' .. r.variant
  if not sseen[key] then sseen[key] = true; systems[#systems + 1] = { system = r.system, variant = r.variant } end
end
table.sort(threads)

w('# Forward mode: Gauss-Newton and Hessian-vector products vs a gradient')
w('')
w('Made by `bench/run rop` (bench/lib/rop_run.sh, bench/rop.lua, bench/peers/rop_*.py). ',
  'MLP 784-1000-1000-1000-10 (tanh), batch 60, float32, softmax-crossentropy cost; one call of each ',
  'compiled (tgl, JAX jit) or eager (PyTorch) function. Each figure: ',
  peer.describe(meta), '.')
w('')
peer.write_meta(w, meta)
w('## ms per call (lower is better), and each product over the same system\'s gradient')
w('')
w('`grad`: the gradient of the cost wrt the 8 parameters. `gn`: one Gauss-Newton product `Jᵀ H_L J v` ',
  '(tgl: `tgl.gauss_newton_product(logits, params, v, \'softmax_crossentropy\')`; JAX: `jax.jvp` then ',
  '`jax.vjp`, one jit; PyTorch `functorch`: `functorch.jvp` + `functorch.vjp`, `double_backward`: J v as the ',
  'derivative of Jᵀu wrt a dummy u, then `autograd.grad`). `hvp`: the exact `H v` (tgl: ',
  '`tgl.hessian_vector_product`; JAX: `jax.jvp` of `jax.grad`; PyTorch: `functorch.jvp` of `functorch.grad`, ',
  'or `autograd.grad` of ⟨grad, v⟩). **gn/grad**, **hvp/grad**: the product\'s time over the gradient\'s ',
  '(issue 11\'s target for gn: ≤ 3×); ≈: their ranges overlap.')
w('')
w('| threads | system | variant | grad ms | gn ms | hvp ms | gn/grad | hvp/grad |')
w('|---:|---|---|---:|---:|---:|---:|---:|')
for _, t in ipairs(threads) do
  for _, s in ipairs(systems) do
    local g = find(s.system, 'grad', t)
    local gn, hv = find(s.system, 'gn', t, s.variant), find(s.system, 'hvp', t, s.variant)
    local gr = find(s.system, 'grad', t, s.variant)
    if gn or hv or gr then
      w(('| %d | %s | %s | %s | %s | %s | %s | %s |'):format(t, s.system, s.variant, cell(gr or g),
        cell(gn), cell(hv), over(gn, g), over(hv, g)))
    end
  end
end
w('')
local peers, pseen = {}, {}
for _, s in ipairs(systems) do
  if s.system ~= 'tgl' and not pseen[s.system] then pseen[s.system] = true; peers[#peers + 1] = s.system end
end
if #peers > 0 then
  w('## tgl against the peers (speed ratio tgl / peer\'s best variant; above 1: tgl faster)')
  w('')
  local hdr, al = { '| threads | case' }, { '|---:|---' }
  for _, p in ipairs(peers) do hdr[#hdr + 1] = 'tgl/' .. p; al[#al + 1] = '---:' end
  w(table.concat(hdr, ' | '), ' |')
  w(table.concat(al, '|'), '|')
  for _, t in ipairs(threads) do
    for _, c in ipairs({ 'grad', 'gn', 'hvp' }) do
      local tr = find('tgl', c, t)
      if tr then
        local line = { '| ' .. t, c }
        for _, p in ipairs(peers) do
          local pr = find(p, c, t)
          line[#line + 1] = pr and ('%.2f×%s'):format(pr.median / tr.median, stats.overlap(tr, pr) and ' ≈' or '')
            or '–'
        end
        w(table.concat(line, ' | '), ' |')
      end
    end
  end
  w('')
end

w('Check (the same data, weights and direction for all: bench/.data/{data,init_mlp3,rop_v}.npz): ',
  '`grad` |g|², `gn` vᵀGv, `hvp` vᵀHv, summed in float64 from the float32 results; they should agree ',
  'to float32 rounding.')
w('')
w('| system | variant | threads | case | check | vs tgl |')
w('|---|---|---:|---|---:|---:|')
for _, t in ipairs(threads) do
  for _, c in ipairs({ 'grad', 'gn', 'hvp' }) do
    local ref = find('tgl', c, t)
    for _, r in ipairs(rows) do
      if r.threads == t and r.case == c and type(r.check) == 'number' then
        local agree = r == ref and 'reference' or '–'
        if ref and r ~= ref then
          local rel = math.abs(r.check - ref.check) / math.abs(ref.check)
          agree = rel < 1e-4 and ('agrees (%.1e)'):format(rel) or ('**DIFFERS** (%.1e)'):format(rel)
        end
        w(('| %s | %s | %d | %s | %.9g | %s |'):format(r.system, r.variant, t, c, r.check, agree))
      end
    end
  end
end
w('')

local text = table.concat(out, '\n') .. '\n'
local f = assert(io.open(md_path, 'w'))
f:write(text)
f:close()
io.write(text)
