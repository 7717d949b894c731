-- bench/lib/mlp_report.lua — turns bench/results/mlp.csv (and the run's
-- mlp_meta.csv) into the Markdown table (mlp.md) and the bar chart
-- (mlp.svg, written by hand: no plotting dependency), and prints the table.
--   tgl bench/lib/mlp_report.lua mlp.csv mlp_meta.csv mlp.md mlp.svg
-- A cell is the median of the repeats with its spread; CSVs from before the
-- repeats (one timed pass, no eps_min/eps_max columns) give the old table.
-- With a baseline (system tgl@base, bench/run mlp --baseline-tgl), a table
-- compares each tgl variant with the baseline's, with a verdict
-- (bench/lib/base_compare.lua).
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/?.lua;' .. package.path
local common = require 'mlp_common'
local stats = require 'stats'
local svg = require 'svg'
local base_compare = require 'base_compare'
local rr = require 'rate_report'

local csv_path, meta_path, md_path, svg_path = arg[1], arg[2], arg[3], arg[4]
assert(csv_path and meta_path and md_path and svg_path,
       'usage: tgl bench/lib/mlp_report.lua mlp.csv mlp_meta.csv mlp.md mlp.svg')

-- The measurements.
local rows = require('csv').read(csv_path)

-- The run's facts (key,value; values may hold no commas).
local meta, meta_order = require('peer_common').read_meta(meta_path)

-- Columns: the systems' variants in a fixed order, those present.
local ORDER = {
  'tgl/cvm', 'tgl/cvm_nogc', 'tgl/trust_input', 'tgl/n_calls',
  'tgl@base/cvm', 'tgl@base/cvm_nogc', 'tgl@base/trust_input', 'tgl@base/n_calls',
  'pytensor/cvm', 'pytensor/trust_input', 'pytensor/n_calls',
  'torch/eager', 'torch/compile', 'jax/jit', 'jax/loop', 'numpy/numpy', 'torch7/nn',
}
local LABEL = { ['numpy/numpy'] = 'numpy', ['torch7/nn'] = 'torch7' }
local COLOR = {
  ['tgl/cvm'] = '#9ecae1', ['tgl/cvm_nogc'] = '#6baed6', ['tgl/trust_input'] = '#3182bd',
  ['tgl/n_calls'] = '#08519c', ['tgl@base/cvm'] = '#e0e0e0', ['tgl@base/cvm_nogc'] = '#c6c6c6',
  ['tgl@base/trust_input'] = '#a8a8a8', ['tgl@base/n_calls'] = '#7a7a7a', ['pytensor/cvm'] = '#dadaeb', ['pytensor/trust_input'] = '#9e9ac8',
  ['pytensor/n_calls'] = '#6a51a3', ['torch/eager'] = '#fd8d3c', ['torch/compile'] = '#d94801',
  ['jax/jit'] = '#74c476', ['jax/loop'] = '#238b45', ['numpy/numpy'] = '#969696', ['torch7/nn'] = '#e7298a',
}
local present, systems = {}, {}
for _, r in ipairs(rows) do present[r.system .. '/' .. r.variant] = true end
for _, s in ipairs(ORDER) do if present[s] then systems[#systems + 1] = s; present[s] = nil end end
for s in pairs(present) do systems[#systems + 1] = s end          -- unknown ones last
local function label(s) return LABEL[s] or s end
local function is_tgl(s) return s:match('^tgl/') ~= nil end
local function is_base(s) return s:match('^tgl@base/') ~= nil end

-- Rows with repeats carry min and max; for one-pass rows the three are one.
local has_spread = false
for _, r in ipairs(rows) do
  if r.eps_min and r.eps_max then has_spread = true else r.eps_min, r.eps_max = r.examples_per_s, r.examples_per_s end
  r.spread_pct = tonumber(r.spread_pct) or 0
  r.median, r.min, r.max = r.examples_per_s, r.eps_min, r.eps_max    -- as stats.overlap wants
  r.check_examples = tonumber(r.check_examples) or r.examples
end
local has_base = false
for _, s in ipairs(systems) do if is_base(s) then has_base = true end end

-- cell[threads][model][batch][system] = row
local cell, threads_list, batches = rr.grid(rows)
local models = rr.models(rows, common.MODEL_NAMES)

local function fmt_rate(v) return rr.fmt_rate(v) end

local out = {}
local function w(...) out[#out + 1] = table.concat({ ... }) end

w('# MLP benchmark (the 2012 Theano paper\'s feed-forward benchmark)')
w('')
local intro
if has_spread then
  intro = table.concat({ 'Training speed in **examples per second** (higher is better): plain SGD ',
    '(learning rate 0.01, float32) over 6000 random Gaussian examples with random labels; ',
    'each cell is the median of ', meta.repeats or '?', ' timed repeats of at least ',
    meta.min_time or '?', ' s each, after a warm-up and one pass from the initial weights ',
    '(the loss check), with the spread of the repeats ((max − min) / median) in brackets.' })
else
  intro = 'Training speed in **examples per second** (higher is better): one pass of plain SGD ' ..
    '(learning rate 0.01, float32) over 6000 random Gaussian examples with random labels, ' ..
    'timed after a warm-up.'
end
w(intro, ' Models: logistic regression 784-10, MLP 784-500-10, MLP ',
  '784-1000-1000-1000-10 (tanh hidden units, softmax + negative log-likelihood). ',
  'Every system starts from the same data and Glorot-uniform weights (`bench/.data/*.npz`). ',
  'Made by `bench/run mlp`; see `bench/README.md`.')
w('')
w('- Date: ', meta.date or '?', '; CPU: ', meta.cpu or '?')
w('- tgl ', meta['version.tgl'] or '?', ' (commit ', meta.tgl_commit or '?', '), BLAS: ', meta.blas or '?')
if meta.baseline_tgl then
  w('- Baseline **tgl@base**: `', meta.baseline_tgl, '` (', meta['version.tgl@base'] or '?',
    ', checkout at ', meta.baseline_commit or '?', '), run on the same bench script, each batch ',
    'size right before or after tgl')
end
local peers = {}
for _, k in ipairs(meta_order) do
  local s = k:match('^version%.(.+)$')
  if s and s ~= 'tgl' and s ~= 'tgl@base' then peers[#peers + 1] = s .. ' ' .. meta[k] end
end
w('- Peers: ', #peers > 0 and table.concat(peers, ', ') or 'none')
rr.write_missing_and_load(w, meta, meta_order)
if (tonumber(meta.budget) or 0) > 0 then
  if has_spread then
    w('- Check passes cut after ', meta.budget, ' s (`--budget`): see the `check_examples` column of mlp.csv')
  else
    w('- Passes cut after ', meta.budget, ' s (`--budget`): see the `examples` column of mlp.csv')
  end
end
local sg = {}
for _, t in ipairs(threads_list) do
  local s = ('%s thread%s: %.1f GFLOP/s'):format(t, t == 1 and '' or 's', tonumber(meta['sgemm.' .. t]) or 0)
  if meta['sgemm_auto.' .. t] then
    s = s .. (' (%.1f with OPENBLAS_CORETYPE unset, core %s; not used)'):format(
      tonumber(meta['sgemm_auto.' .. t]), meta.openblas_core_auto or '?')
  end
  sg[#sg + 1] = s
end
if meta.openblas_coretype and meta.openblas_coretype ~= '' then
  w('- OpenBLAS core type forced by the environment: `OPENBLAS_CORETYPE=', meta.openblas_coretype,
    '` (tgl, NumPy, PyTorch and PyTensor use it; JAX has its own kernels)')
end
w('- sgemm rate (tgl `a:dot(b)`, float32 2048³, OpenBLAS): ', table.concat(sg, '; '))
w('')
w('Variants: tgl and PyTensor as in the paper — `cvm` (a call from the host language per ',
  'minibatch, inputs checked), `cvm_nogc` (intermediates kept between calls), `trust_input` ',
  '(`cvm_nogc` + no input checks), `n_calls` (a shared step counter picks the minibatch and ',
  '`fn{n_calls=N}` runs the whole pass in C); PyTorch `eager`; JAX `jit` (one jitted step ',
  'per minibatch) and `loop` (a jitted `fori_loop` over the steps: JAX\'s C outer loop); ',
  'hand-written NumPy. **tgl/best peer**: tgl\'s best variant over the best peer variant',
  has_spread and ' (medians)' or '', has_base and '; **tgl/tgl@base**: tgl\'s best variant over the baseline\'s best' or '',
  '. **sgemm share**: tgl\'s best FLOP rate (forward + backward + update, formula in ',
  '`bench/lib/mlp_common.lua`) over the sgemm rate at the same thread count.')
if has_spread then
  w('')
  w(('**!** after a cell: its repeats spread by more than %d%% of the median (a busy machine or '):format(
      stats.FLAG_PCT), 'an unsteady speed); after a ratio: one of its two cells is so flagged, so the ratio ',
    'may be off by more than the spread suggests (the two were timed at different moments). **≈** after a ratio: the two ',
    'variants\' min–max ranges overlap, so this run does not separate them (ranges apart with 5 ',
    'repeats each: every repeat of one beat every repeat of the other, p ≈ 0.008 by a rank test). ',
    'The min–max of every cell is in the table after this one and in mlp.csv (`rates`: every repeat).')
end
w('')

local head = { 'threads', 'model', 'batch' }
for _, s in ipairs(systems) do head[#head + 1] = label(s) end
local extra = { 'best peer', 'tgl/best peer' }
if has_base then extra[#extra + 1] = 'tgl/tgl@base' end
extra[#extra + 1] = 'tgl GFLOP/s'; extra[#extra + 1] = 'sgemm share'
for _, h in ipairs(extra) do head[#head + 1] = h end
w('| ', table.concat(head, ' | '), ' |')
local sep = {}
for i = 1, #head do sep[i] = i <= 3 and '---' or '---:' end
w('| ', table.concat(sep, ' | '), ' |')

-- Rows a over b; ' ≈' when their ranges overlap, '!' when either is flagged.
local function ratio_txt(a, b)
  if not (a and b) then return '—' end
  local flagged = a.spread_pct > stats.FLAG_PCT or b.spread_pct > stats.FLAG_PCT
  return ('%.2f×'):format(a.examples_per_s / b.examples_per_s) ..
         ((has_spread and stats.overlap(a, b)) and ' ≈' or '') .. ((has_spread and flagged) and '!' or '')
end

local summary = {}           -- for the chart and the printout
local spread_lines, n_flagged = {}, 0
for _, t in ipairs(threads_list) do
  for _, m in ipairs(models) do
    for _, B in ipairs(batches) do
      local c = cell[t] and cell[t][m] and cell[t][m][B]
      if c then
        local best_tgl, best_peer, best_peer_name, best_base = nil, nil, nil, nil
        local line = { tostring(t), m, tostring(B) }
        local sline = { tostring(t), m, tostring(B) }
        for _, s in ipairs(systems) do
          local r = c[s]
          local v = r and r.examples_per_s
          if v then
            if is_tgl(s) then
              if not best_tgl or v > best_tgl.examples_per_s then best_tgl = r end
            elseif is_base(s) then
              if not best_base or v > best_base.examples_per_s then best_base = r end
            else
              if not best_peer or v > best_peer.examples_per_s then best_peer, best_peer_name = r, s end
            end
          end
          local txt = fmt_rate(v)
          if r and has_spread then
            txt = ('%s (%.0f%%)'):format(txt, r.spread_pct)
            if r.spread_pct > stats.FLAG_PCT then txt = txt .. '!'; n_flagged = n_flagged + 1 end
          end
          if r and r.loss_down ~= 'yes' then txt = txt .. ' (loss up)' end
          line[#line + 1] = txt
          sline[#sline + 1] = r and (fmt_rate(r.eps_min) .. '–' .. fmt_rate(r.eps_max)) or '—'
        end
        local flops = common.flops_per_step(m, B) / B
        local gf = best_tgl and best_tgl.examples_per_s * flops / 1e9
        local rate = tonumber(meta['sgemm.' .. t])
        line[#line + 1] = best_peer_name and label(best_peer_name) or '—'
        line[#line + 1] = ratio_txt(best_tgl, best_peer)
        if has_base then line[#line + 1] = ratio_txt(best_tgl, best_base) end
        line[#line + 1] = gf and ('%.1f'):format(gf) or '—'
        line[#line + 1] = (gf and rate) and ('%.0f%%'):format(100 * gf / rate) or '—'
        for i = 4, 3 + #systems do
          if c[systems[i - 3]] and c[systems[i - 3]] == best_tgl then
            line[i] = '**' .. line[i] .. '**'
          end
        end
        w('| ', table.concat(line, ' | '), ' |')
        spread_lines[#spread_lines + 1] = '| ' .. table.concat(sline, ' | ') .. ' |'
        summary[#summary + 1] = { t = t, m = m, B = B, c = c }
      end
    end
  end
end
w('')
if has_spread then
  w(('%d cell%s flagged **!** (spread > %d%%).'):format(n_flagged, n_flagged == 1 and '' or 's', stats.FLAG_PCT))
  w('')
  w('<details><summary>Slowest–fastest repeat of every cell (examples/s)</summary>')
  w('')
  local sh = { 'threads', 'model', 'batch' }
  for _, s in ipairs(systems) do sh[#sh + 1] = label(s) end
  w('| ', table.concat(sh, ' | '), ' |')
  w('| ', table.concat(sep, ' | ', 1, #sh), ' |')
  for _, l in ipairs(spread_lines) do w(l) end
  w('')
  w('</details>')
  w('')
end

if has_base then
  local items = {}
  for _, e in ipairs(summary) do
    for _, s in ipairs(systems) do
      local v = s:match('^tgl/(.*)$')
      if v and (e.c[s] or e.c['tgl@base/' .. v]) then
        items[#items + 1] = { cell = { e.t, e.m, e.B }, variant = v, tgl = e.c[s], base = e.c['tgl@base/' .. v],
                              unit = 'examples/s' }
      end
    end
    for _, s in ipairs(systems) do        -- variants only the baseline has
      local v = s:match('^tgl@base/(.*)$')
      if v and e.c[s] then
        local there = false
        for _, s2 in ipairs(systems) do there = there or s2 == 'tgl/' .. v end
        if not there then
          items[#items + 1] = { cell = { e.t, e.m, e.B }, variant = v, base = e.c[s], unit = 'examples/s' }
        end
      end
    end
  end
  base_compare.write(w, 'tgl against tgl@base', { 'threads', 'model', 'batch' }, items)
end

-- Loss check: the loss on all 6000 examples before and after the pass must
-- go down, and all systems (same data, weights and order) must agree.
w('## Loss check')
w('')
local bad, worst, worst_at = {}, 0, nil
for _, e in ipairs(summary) do
  local ref = e.c['tgl/n_calls'] or e.c['tgl/cvm']
  for s, r in pairs(e.c) do
    if r.loss_down ~= 'yes' then bad[#bad + 1] = ('%s %s batch %d threads %d (%.4f → %.4f)'):format(
      label(s), e.m, e.B, e.t, r.loss_before, r.loss_after) end
    -- (with --budget, check passes of different lengths are not compared)
    if ref and s ~= 'torch7/nn' and r.check_examples == ref.check_examples then
      local d = math.abs(r.loss_after - ref.loss_after)
      if d > worst then worst, worst_at = d, ('%s %s batch %d threads %d'):format(label(s), e.m, e.B, e.t) end
    end
  end
end
if #bad == 0 then
  w('The loss on the 6000 examples went down in every cell, for every system.')
else
  table.sort(bad)
  w('The loss did **not** go down in ', #bad, ' cell(s): ', table.concat(bad, '; '), '.')
end
w('')
if worst == 0 then
  w('Every system\'s loss after the pass equals tgl\'s to the 6 decimals of mlp.csv (same data, ',
    'initial weights and minibatch order).')
else
  w(('Largest difference between a system\'s loss after the pass and tgl\'s: %.2g%s ' ..
     '(same data, initial weights and minibatch order; float32 rounding differs).'):format(
    worst, worst_at and (' (' .. worst_at .. ')') or ''))
end
w('')
w('![examples/s](mlp.svg)')
w('')

rr.write_md(md_path, out)

-- The chart: one panel per (threads, model); groups = batch sizes; one bar
-- per system variant; log scale (svg.bar_panels).
local panels = rr.panels(
  { cell = cell, threads_list = threads_list, models = models, batches = batches, systems = systems, color = COLOR },
  function(s, r, m, B, t)
    return ('%s, %s, batch %d, %d thread(s): %s examples/s%s'):format(label(s), m, B, t, fmt_rate(r.examples_per_s),
      has_spread and (' (%s–%s)'):format(fmt_rate(r.eps_min), fmt_rate(r.eps_max)) or '')
  end,
  function(m, t) return ('%s — %d thread%s'):format(common.MODEL_LABEL[m], t, t == 1 and '' or 's') end)
local legend = {}
for i, s in ipairs(systems) do legend[i] = { label(s), COLOR[s] } end
svg.bar_panels(svg_path, {
  title = 'Training speed, examples/s (log scale; higher is better)' ..
          (has_spread and '; bars: median of the repeats, whiskers: slowest–fastest' or ''),
  ncol = #models, nrow = #threads_list, nbars = #systems, fmt = fmt_rate, whiskers = has_spread,
  panels = panels, legend = legend })
print(('\nwrote %s, %s'):format(md_path, svg_path))
