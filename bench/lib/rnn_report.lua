-- bench/lib/rnn_report.lua — turns bench/results/rnn.csv (with the run's
-- rnn_meta.csv and, when there, rnn_profile.csv beside the CSV) into rnn.md
-- and the chart rnn.svg, and prints the Markdown.
--   tgl bench/lib/rnn_report.lua rnn.csv rnn_meta.csv rnn.md
-- A cell is the median of the repeats with the spread (% of the median);
-- '!' marks a spread above 10%.  Ratios are speed ratios from each system's
-- best variant (above 1: tgl faster); '≈' marks two figures whose min–max
-- ranges overlap.  The check table verifies, per cell, that tgl's loss went
-- down and that every peer's losses agree with tgl's (relative 1e-4).
-- With rows of system tgl@base (bench/run rnn --baseline-tgl), tgl@base is
-- no peer: its columns follow tgl's and a table compares each variant with
-- the baseline's (bench/lib/base_compare.lua).
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/?.lua;' .. package.path
local stats = require 'stats'
local peer = require 'peer_common'
local csvlib = require 'csv'
local svg = require 'svg'
local base_compare = require 'base_compare'

local csv_path, meta_path, md_path = arg[1], arg[2], arg[3]
assert(csv_path and meta_path and md_path, 'usage: tgl bench/lib/rnn_report.lua rnn.csv rnn_meta.csv rnn.md')
local AGREE = 1e-4

local rows = csvlib.read(csv_path)
local meta = peer.read_meta(meta_path)
local dir = csv_path:match('^(.*)/[^/]*$') or '.'
local prof = {}
do
  local f = io.open(dir .. '/rnn_profile.csv')
  if f then f:close(); prof = csvlib.read(dir .. '/rnn_profile.csv') end
end

local out = {}
local function w(...) out[#out + 1] = table.concat({ ... }) end
local function uniq(field, filter)
  local seen, list = {}, {}
  for _, r in ipairs(rows) do
    local v = r[field]
    if (not filter or filter(r)) and not seen[v] then seen[v] = true; list[#list + 1] = v end
  end
  return list
end
local function num_sort(l) table.sort(l); return l end
local threads = num_sort(uniq('threads'))
local hiddens = num_sort(uniq('hidden'))
local vocabs = num_sort(uniq('vocab'))
-- systems in a fixed order, tgl first (then tgl@base); then the variant columns
local systems = { 'tgl' }
local has_base = false
for _, r in ipairs(rows) do has_base = has_base or r.system == 'tgl@base' end
if has_base then systems[2] = 'tgl@base' end
for _, s in ipairs(uniq('system')) do
  if s ~= 'tgl' and s ~= 'tgl@base' then systems[#systems + 1] = s end
end
local function is_peer(s) return s ~= 'tgl' and s ~= 'tgl@base' end
local keys = {}
for _, s in ipairs(systems) do
  for _, v in ipairs(uniq('variant', function(r) return r.system == s end)) do keys[#keys + 1] = s .. '/' .. v end
end
local function sel(t, H, V)
  local r = {}
  for _, x in ipairs(rows) do
    if x.threads == t and x.hidden == H and x.vocab == V then r[#r + 1] = x end
  end
  return r
end
local function best(rs, system)
  local b
  for _, r in ipairs(rs) do
    if r.system == system and type(r.median) == 'number' and r.median > 0 and (not b or r.median > b.median) then
      b = r
    end
  end
  return b
end
local function cell(r)
  if not r then return '–' end
  if type(r.median) ~= 'number' or r.median <= 0 then return 'failed' end
  return ('%.0f (%.0f%%)%s'):format(r.median, r.spread_pct, r.spread_pct > stats.FLAG_PCT and '!' or '')
end
local function ratio(a, b)
  if not a or not b then return '–' end
  return ('%.2f×%s%s'):format(a.median / b.median, stats.overlap(a, b) and ' ≈' or '',
    (a.spread_pct > stats.FLAG_PCT or b.spread_pct > stats.FLAG_PCT) and '!' or '')
end
local function best_peer(rs)
  local bp
  for _, s in ipairs(systems) do
    if is_peer(s) then
      local b = best(rs, s)
      if b and (not bp or b.median > bp.median) then bp = b end
    end
  end
  return bp
end

w('# Elman RNN benchmark (the 2012 Theano paper\'s grid)')
w('')
w('Made by `bench/run rnn` (bench/lib/rnn_run.sh, bench/rnn.lua, bench/peers/rnn_*.py). ',
  'Each figure: ', peer.describe(meta), '; time steps per second (higher is better).')
w('')
peer.write_meta(w, meta)
if meta.budget then
  w('Budget per process: ', meta.budget, ' s of timing (0: none); cells whose repeats it shortened say so ',
    'in the CSV\'s note column (fewer sequences per repeat, the same work per step).')
  w('')
end
w('The work: an Elman network, sigmoid hidden units, full softmax output with negative log-likelihood (mean ',
  'over the steps), inputs as one-hot word ids (written as the row lookup `Wx[x]`, the same numbers as ',
  '`one_hot(x)·Wx`, done for all steps before the loop), batch 1, plain SGD (lr 0.01), full BPTT over ',
  'sequences of 100 steps, 100 random sequences, float32. tgl: `tgl.scan`, `tgl.grad`, updates, one compiled ',
  'function per sequence; `trust_input` one call from Lua per sequence, `n_calls` `f.fn{n_calls=N}`. ',
  'JAX: `lax.scan`, `value_and_grad`, `jit` per sequence, or `loop` (a jitted `fori_loop` of N sequences). ',
  'PyTorch: eager, a Python loop over the steps, autograd. PyTensor: `pytensor.scan`, `pytensor.grad`, ',
  'a compiled function with updates (`trust_input`).')
w('')

for _, t in ipairs(threads) do
  w(('## %d thread%s: time steps/s'):format(t, t == 1 and '' or 's'))
  w('')
  local hdr, al = { '| H | V' }, { '|---:|---:' }
  for _, k in ipairs(keys) do hdr[#hdr + 1] = k; al[#al + 1] = '---:' end
  hdr[#hdr + 1] = '**tgl / best peer**'; al[#al + 1] = '---:'
  local has_torch = false
  for _, s in ipairs(systems) do has_torch = has_torch or s == 'torch' end
  if has_torch then hdr[#hdr + 1] = 'tgl / torch'; al[#al + 1] = '---:' end
  w(table.concat(hdr, ' | '), ' |')
  w(table.concat(al, '|'), '|')
  for _, V in ipairs(vocabs) do
    for _, H in ipairs(hiddens) do
      local rs = sel(t, H, V)
      if #rs > 0 then
        local line = { ('| %d | %d'):format(H, V) }
        for _, k in ipairs(keys) do
          local r
          for _, x in ipairs(rs) do if x.system .. '/' .. x.variant == k then r = x end end
          line[#line + 1] = cell(r)
        end
        local tb, bp = best(rs, 'tgl'), best_peer(rs)
        line[#line + 1] = bp and (ratio(tb, bp) .. ' (' .. bp.system .. ')') or '–'
        if has_torch then line[#line + 1] = ratio(tb, best(rs, 'torch')) end
        w(table.concat(line, ' | '), ' |')
      end
    end
  end
  w('')
end

-- tgl against the baseline, variant by variant
if has_base then
  local items = {}
  local variants = {}
  for _, k in ipairs(keys) do
    local s, v = k:match('^([^/]+)/(.*)$')
    if (s == 'tgl' or s == 'tgl@base') and not variants[v] then variants[v] = true; variants[#variants + 1] = v end
  end
  for _, t in ipairs(threads) do
    for _, V in ipairs(vocabs) do
      for _, H in ipairs(hiddens) do
        local rs = sel(t, H, V)
        for _, v in ipairs(variants) do
          local a, b
          for _, x in ipairs(rs) do
            if x.variant == v and x.system == 'tgl' then a = x end
            if x.variant == v and x.system == 'tgl@base' then b = x end
          end
          if a or b then
            items[#items + 1] = { cell = { t, H, V }, variant = v, tgl = a, base = b, unit = 'steps/s' }
          end
        end
      end
    end
  end
  base_compare.write(w, 'tgl against tgl@base', { 'threads', 'H', 'V' }, items)
end

-- the check
w('## Check: loss of sequence 1 before and after 10 SGD steps on it, from the shared initial weights')
w('')
w('Same data and initial weights for all (bench/.data/rnn_*.npz). **down**: tgl\'s loss went down; ',
  '**peers**: each peer\'s losses against tgl\'s (relative difference; agree below ', ('%g'):format(AGREE), ').')
w('')
w('| threads | H | V | tgl loss before | after | down | peers |')
w('|---:|---:|---:|---:|---:|---|---|')
local n_bad = 0
for _, t in ipairs(threads) do
  for _, V in ipairs(vocabs) do
    for _, H in ipairs(hiddens) do
      local rs = sel(t, H, V)
      local ref
      for _, r in ipairs(rs) do
        if not ref and r.system == 'tgl' and type(r.loss_after) == 'number' then ref = r end
      end
      if #rs > 0 then
        local notes, done = {}, {}
        for _, r in ipairs(rs) do
          if r.system ~= 'tgl' and not done[r.system] and type(r.loss_after) == 'number' then
            done[r.system] = true
            if ref then
              local rel = math.max(math.abs(r.loss_after - ref.loss_after) / math.abs(ref.loss_after),
                                   math.abs(r.loss_before - ref.loss_before) / math.abs(ref.loss_before))
              if rel >= AGREE then n_bad = n_bad + 1 end
              notes[#notes + 1] = ('%s %s (%.0e)'):format(r.system, rel < AGREE and 'agrees' or '**DIFFERS**', rel)
            end
          end
        end
        local down = ref and (ref.loss_after < ref.loss_before and 'yes' or '**NO**') or '–'
        if down == '**NO**' then n_bad = n_bad + 1 end
        w(('| %d | %d | %d | %s | %s | %s | %s |'):format(t, H, V,
          ref and ('%.6f'):format(ref.loss_before) or '–', ref and ('%.6f'):format(ref.loss_after) or '–',
          down, table.concat(notes, ', ')))
      end
    end
  end
end
w('')
w(n_bad == 0 and 'Check: every loss went down and every peer agrees with tgl.' or
  ('Check: **%d problem(s)** above.'):format(n_bad))
w('')

-- where tgl's time goes
if #prof > 0 then
  w('## Where tgl\'s time goes (profile = true, a separate profiled copy of the step)')
  w('')
  w('Top-level ops, share of the time in ops and µs per sequence; `scan` is the forward loop and the ',
    'backward (BPTT) loop together; the per-step tables of the two loop bodies are in rnn.log.')
  w('')
  w('| threads | H | V | top ops (share, µs/sequence) |')
  w('|---:|---:|---:|---|')
  for _, t in ipairs(threads) do
    for _, V in ipairs(vocabs) do
      for _, H in ipairs(hiddens) do
        local ops = {}
        for _, p in ipairs(prof) do
          if p.threads == t and p.hidden == H and p.vocab == V then ops[#ops + 1] = p end
        end
        table.sort(ops, function(a, b) return a.share_pct > b.share_pct end)
        local parts = {}
        for k = 1, math.min(4, #ops) do
          parts[k] = ('%s %.0f%% (%.0f)'):format(ops[k].op, ops[k].share_pct, ops[k].us_per_seq)
        end
        if #parts > 0 then w(('| %d | %d | %d | %s |'):format(t, H, V, table.concat(parts, ', '))) end
      end
    end
  end
  w('')
end

-- the chart: per thread count, grouped bars of each system's best variant, log scale
do
  local colors = { tgl = '#d62728', jax = '#1f77b4', torch = '#ff7f0e', pytensor = '#2ca02c' }
  local palette = { '#9467bd', '#8c564b', '#7f7f7f' }
  local cells = {}
  for _, V in ipairs(vocabs) do for _, H in ipairs(hiddens) do cells[#cells + 1] = { H, V } end end
  local lo, hi = math.huge, 0
  for _, r in ipairs(rows) do
    if type(r.median) == 'number' and r.median > 0 then lo = math.min(lo, r.median); hi = math.max(hi, r.median) end
  end
  if hi > 0 then
    local l0, l1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if l1 == l0 then l1 = l0 + 1 end
    local ns = #systems
    local bw, gap, pw, ph, ml, mt = 9, 14, 0, 260, 70, 40
    pw = #cells * (ns * bw + gap)
    local W, Hh = ml + pw + 30, mt + #threads * (ph + 70) + 40
    local doc = svg.new(W, Hh)
    doc:text(ml, 22, 'Elman RNN, batch 1, BPTT over 100 steps: time steps/s (log scale; best variant per system)',
             { size = 13, weight = 'bold' })
    for ti, t in ipairs(threads) do
      local y0 = mt + (ti - 1) * (ph + 70)
      local function ypos(v) return y0 + ph - (math.log10(v) - l0) / (l1 - l0) * ph end
      doc:text(ml, y0 - 4, ('%d thread%s'):format(t, t == 1 and '' or 's'), { size = 12, weight = 'bold' })
      for e = l0, l1 do
        doc:line(ml, ypos(10 ^ e), ml + pw, ypos(10 ^ e), { stroke = '#ddd' })
        doc:text(ml - 6, ypos(10 ^ e) + 4, ('1e%d'):format(e), { size = 10, anchor = 'end' })
      end
      for ci, c in ipairs(cells) do
        local x0 = ml + (ci - 1) * (ns * bw + gap) + gap / 2
        local rs = sel(t, c[1], c[2])
        for si, s in ipairs(systems) do
          local b = best(rs, s)
          if b then
            doc:rect(x0 + (si - 1) * bw, ypos(b.median), bw - 1, y0 + ph - ypos(b.median),
              { fill = colors[s] or palette[(si - 1) % #palette + 1],
                title = ('%s/%s H %d V %d: %.0f steps/s'):format(s, b.variant, c[1], c[2], b.median) })
          end
        end
        doc:text(x0 + ns * bw / 2, y0 + ph + 14, ('%d'):format(c[1]), { size = 9, anchor = 'middle' })
        doc:text(x0 + ns * bw / 2, y0 + ph + 26, ('V%d'):format(c[2]), { size = 9, anchor = 'middle' })
      end
      doc:line(ml, y0 + ph, ml + pw, y0 + ph, { stroke = '#000' })
    end
    local lx = ml
    for si, s in ipairs(systems) do
      doc:rect(lx, Hh - 22, 10, 10, { fill = colors[s] or palette[(si - 1) % #palette + 1] })
      doc:text(lx + 14, Hh - 13, s, { size = 11 })
      lx = lx + 90
    end
    doc:text(ml + pw, Hh - 13, 'x axis: hidden H, input/output V', { size = 10, anchor = 'end' })
    doc:save((md_path:gsub('%.md$', '')) .. '.svg')
  end
end

local text = table.concat(out, '\n') .. '\n'
local f = assert(io.open(md_path, 'w'))
f:write(text)
f:close()
io.write(text)
