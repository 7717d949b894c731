-- bench/lib/nn_report.lua — turns bench/results/nn.csv (and nn_meta.csv)
-- into the Markdown table nn.md and the chart nn.svg (svg.bar_panels), and
-- prints the table.  Made by bench/lib/nn_run.sh (`bench/run nn`).
--   tgl bench/lib/nn_report.lua nn.csv nn_meta.csv nn.md [nn.svg]
-- (without nn.svg: the .md path with .svg).  A cell is the median of the
-- repeats with its spread (bench/lib/stats.lua); ratios are of medians,
-- marked ≈ when the two min–max ranges overlap and ! when either spread is
-- above stats.FLAG_PCT, as in the mlp report.
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/?.lua;' .. package.path
local stats = require 'stats'
local svg = require 'svg'
local nnc = require 'nn_common'
local rr = require 'rate_report'

local csv_path, meta_path, md_path, svg_path = arg[1], arg[2], arg[3], arg[4]
assert(csv_path and meta_path and md_path, 'usage: tgl bench/lib/nn_report.lua nn.csv nn_meta.csv nn.md [nn.svg]')
svg_path = svg_path or md_path:gsub('%.md$', '') .. '.svg'
local svg_name = svg_path:match('([^/]*)$')

local rows = require('csv').read(csv_path)
local meta, meta_order = require('peer_common').read_meta(meta_path)

local ORDER = { 'torch7/nn', 'tgl/t7script', 'tgl/eager', 'tgl/compile', 'torch/eager' }
local LABEL = {
  ['torch7/nn'] = 'Torch7 nn', ['tgl/t7script'] = 'Torch7 script on tgl', ['tgl/eager'] = 'tgl nn eager',
  ['tgl/compile'] = 'tgl nn.compile', ['torch/eager'] = 'PyTorch eager',
}
local COLOR = {
  ['torch7/nn'] = '#e7298a', ['tgl/t7script'] = '#9ecae1', ['tgl/eager'] = '#3182bd',
  ['tgl/compile'] = '#08519c', ['torch/eager'] = '#fd8d3c',
}
local systems = {}
do
  local present = {}
  for _, r in ipairs(rows) do present[r.system .. '/' .. r.variant] = true end
  for _, s in ipairs(ORDER) do if present[s] then systems[#systems + 1] = s; present[s] = nil end end
  local rest = {}
  for s in pairs(present) do rest[#rest + 1] = s end
  table.sort(rest)
  for _, s in ipairs(rest) do systems[#systems + 1] = s end
end
local function label(s) return LABEL[s] or s end

for _, r in ipairs(rows) do r.median, r.min, r.max = r.examples_per_s, r.eps_min, r.eps_max end  -- for stats.overlap
local cell, threads_list, batches = rr.grid(rows)
local models = rr.models(rows, nnc.MODEL_NAMES)

local function fmt_rate(v) return rr.fmt_rate(v, true) end
local function ratio(a, b)
  if not (a and b) then return '—' end
  local flagged = a.spread_pct > stats.FLAG_PCT or b.spread_pct > stats.FLAG_PCT
  return ('%.2f×'):format(a.examples_per_s / b.examples_per_s) .. (stats.overlap(a, b) and ' ≈' or '') ..
         (flagged and '!' or '')
end

local out = {}
local function w(...) out[#out + 1] = table.concat({ ... }) end
w('# nn benchmark: Torch7 side by side')
w('')
w('Training speed in **examples per second** (higher is better): plain SGD (learning rate 0.01, ',
  'float32), LogSoftMax + ClassNLLCriterion, over 6000 random examples (inputs N(0, 0.3²), ',
  'random labels). Models: logistic regression 784-10, MLP 784-500-10, MLP 784-1000×3-10 ',
  '(tanh), and a LeNet-style CNN on 1×28×28 (conv 5×5×20, max pool 2, conv 5×5×50, max pool 2, ',
  '800-500 tanh, 10). Each cell is the median of ', meta.repeats or '?', ' timed repeats of at least ',
  meta.min_time or '?', ' s, after a warm-up and a check pass from the initial weights',
  (tonumber(meta.budget) or 0) > 0 and (' (cut after ' .. meta.budget .. ' s)') or '',
  ', with the spread of the repeats ((max − min) / median) in brackets. Made by `bench/run nn`; ',
  'see `bench/README.md`.')
w('')
w('Columns: **Torch7 nn** — `bench/peers/nn_torch7.lua`, a plain Torch7 script ',
  '(zeroGradParameters / forward / backward / updateParameters), under Torch7; ',
  '**Torch7 script on tgl** — the same file run unchanged by tgl; **tgl nn eager** — `bench/nn.lua`, ',
  'the same calls on tgl arrays; **tgl nn.compile** — one compiled training step per minibatch; ',
  '**PyTorch eager** — `bench/peers/nn_torch.py`. Every system makes its own data and initial ',
  'weights, so speeds compare and loss values do not (the Torch7 script on tgl and tgl nn eager ',
  'draw the same numbers).')
w('')
w('- Date: ', meta.date or '?', '; CPU: ', meta.cpu or '?')
w('- tgl ', meta['version.tgl'] or meta['version.t7script'] or '?', ' (commit ', meta.tgl_commit or '?',
  '), BLAS: ', meta.blas or '?')
local peers = {}
for _, k in ipairs(meta_order) do
  local s = k:match('^version%.(.+)$')
  if s == 'torch7' or s == 'torch' then peers[#peers + 1] = (s == 'torch' and 'PyTorch ' or 'Torch7: ') .. meta[k] end
end
w('- Peers: ', #peers > 0 and table.concat(peers, ', ') or 'none')
if meta.torch7_prefix then
  w('- Torch7 from `TORCH7_PREFIX=', meta.torch7_prefix, '`', meta.torch7_commits and (' (' .. meta.torch7_commits .. ')') or '')
end
rr.write_missing_and_load(w, meta, meta_order)
local cores = tonumber((meta.cpu or ''):match('%((%d+) cores'))
local lmax = math.max(tonumber((meta.load_before or ''):match('^%S+')) or 0, tonumber(meta.load_max) or 0)
if cores and lmax > cores then
  w('')
  w(('**The machine was busy**: a load average up to %s on %d cores, so the processes timed here shared '):format(
    tostring(lmax), cores), 'the cores with others. The figures say what this run saw, not what each system does on an idle ',
    'machine; the 2-thread ones least of all (a system whose threads spin waiting for each other, as OpenMP ',
    'pools do, loses most when a core is taken away). Trust a ratio only without **!** and **≈**.')
end
w('')
w('Ratios are of medians: **script/T7** the Torch7 script on tgl over Torch7; **compile/T7** ',
  'and **compile/PyTorch** tgl nn.compile over Torch7 and over PyTorch; **eager/compile** tgl nn ',
  'eager over nn.compile. ', ('**!**: a spread above %d%% (a busy machine or an unsteady speed); '):format(
  stats.FLAG_PCT), '**≈**: the two min–max ranges overlap, so the run does not separate them.')
w('')
local head = { 'threads', 'model', 'batch' }
for _, s in ipairs(systems) do head[#head + 1] = label(s) end
for _, h in ipairs({ 'script/T7', 'compile/T7', 'compile/PyTorch', 'eager/compile' }) do head[#head + 1] = h end
w('| ', table.concat(head, ' | '), ' |')
local sep = {}
for i = 1, #head do sep[i] = i <= 3 and '---' or '---:' end
w('| ', table.concat(sep, ' | '), ' |')
local n_flagged, bad = 0, {}
for _, t in ipairs(threads_list) do
  for _, m in ipairs(models) do
    for _, B in ipairs(batches) do
      local c = cell[t] and cell[t][m] and cell[t][m][B]
      if c then
        local line = { tostring(t), m, tostring(B) }
        for _, s in ipairs(systems) do
          local r = c[s]
          local txt = '—'
          if r then
            txt = ('%s (%.0f%%)'):format(fmt_rate(r.examples_per_s), r.spread_pct)
            if r.spread_pct > stats.FLAG_PCT then txt = txt .. '!'; n_flagged = n_flagged + 1 end
            if r.loss_down ~= 'yes' then
              txt = txt .. ' (loss up)'
              bad[#bad + 1] = ('%s %s batch %d threads %d'):format(label(s), m, B, t)
            end
          end
          line[#line + 1] = txt
        end
        local T7, sc, ea, co, pt = c['torch7/nn'], c['tgl/t7script'], c['tgl/eager'], c['tgl/compile'], c['torch/eager']
        line[#line + 1] = ratio(sc, T7)
        line[#line + 1] = ratio(co, T7)
        line[#line + 1] = ratio(co, pt)
        line[#line + 1] = ratio(ea, co)
        w('| ', table.concat(line, ' | '), ' |')
      end
    end
  end
end
w('')
w(('%d cell%s flagged **!** (spread > %d%%). The slowest and fastest repeat of every cell are in nn.csv '):format(
  n_flagged, n_flagged == 1 and '' or 's', stats.FLAG_PCT), '(`eps_min`, `eps_max`; `rates`: every repeat).')
w('')
w('## Loss check')
w('')
if #bad == 0 then
  w('The loss on the first 1200 examples went down over the check pass in every cell, for every system.')
else
  table.sort(bad)
  w('The loss did **not** go down in ', #bad, ' cell(s): ', table.concat(bad, '; '), '.')
end
local worst, at = 0, nil
for _, t in ipairs(threads_list) do
  for _, m in ipairs(models) do
    for _, B in ipairs(batches) do
      local c = cell[t] and cell[t][m] and cell[t][m][B] or {}
      local a, b = c['tgl/t7script'], c['tgl/eager']
      if a and b and a.check_examples == b.check_examples then
        local d = math.max(math.abs(a.loss_before - b.loss_before), math.abs(a.loss_after - b.loss_after))
        if d >= worst then worst, at = d, ('%s batch %d threads %d'):format(m, B, t) end
      end
    end
  end
end
if at then
  w(('The Torch7 script on tgl and tgl nn eager (same numbers, same steps when their check passes ' ..
     'went as far): largest difference of the losses before and after, %.2g (%s).'):format(worst, at))
end
w('')
w('![examples/s](', svg_name, ')')
w('')
rr.write_md(md_path, out)

local panels = rr.panels(
  { cell = cell, threads_list = threads_list, models = models, batches = batches, systems = systems, color = COLOR },
  function(s, r, m, B, t)
    return ('%s, %s, batch %d, %d thread(s): %s examples/s (%s–%s)'):format(label(s), m, B, t,
      fmt_rate(r.examples_per_s), fmt_rate(r.eps_min), fmt_rate(r.eps_max))
  end,
  function(m, t)
    return ('%s — %d thread%s'):format(m == 'cnn' and 'LeNet-style CNN' or nnc.MODEL_LABEL[m], t, t == 1 and '' or 's')
  end)
local legend = {}
for i, s in ipairs(systems) do legend[i] = { label(s), COLOR[s] } end
svg.bar_panels(svg_path, {
  title = 'nn training speed, examples/s (log scale; higher is better); bars: median, whiskers: slowest–fastest',
  ncol = #models, nrow = #threads_list, nbars = #systems, fmt = fmt_rate, whiskers = true,
  panels = panels, legend = legend })
print(('\nwrote %s, %s'):format(md_path, svg_path))
