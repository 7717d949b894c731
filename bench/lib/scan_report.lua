-- bench/lib/scan_report.lua — turns bench/results/scan.csv (and the run's
-- scan_meta.csv) into scan.md, and prints it.
--   tgl bench/lib/scan_report.lua scan.csv scan_meta.csv scan.md
-- A cell is the median of the repeats with the spread (% of the median);
-- '!' marks a spread above 10%.  Ratios tgl/peer are speed ratios (above 1:
-- tgl faster), from tgl's best variant and the peer's best variant; '≈'
-- marks two figures whose min–max ranges overlap (the run does not
-- separate them).  With rows of system tgl@base (bench/run scan
-- --baseline-tgl), tgl@base is no peer: a last table compares each of
-- tgl's figures with the baseline's (bench/lib/base_compare.lua).
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/?.lua;' .. package.path
local stats = require 'stats'
local peer = require 'peer_common'
local base_compare = require 'base_compare'

local csv_path, meta_path, md_path = arg[1], arg[2], arg[3]
assert(csv_path and meta_path and md_path, 'usage: tgl bench/lib/scan_report.lua scan.csv scan_meta.csv scan.md')

local rows = require('csv').read(csv_path)
for _, r in ipairs(rows) do r.key = r.system .. '/' .. r.variant end
local meta = peer.read_meta(meta_path)

local out = {}
local function w(...) out[#out + 1] = table.concat({ ... }) end
local function sel(case, threads)
  local r = {}
  for _, x in ipairs(rows) do
    if x.case == case and (not threads or x.threads == threads) then r[#r + 1] = x end
  end
  return r
end
local function cell(r, fmt)
  if r.median == nil or r.median < 0 then return 'failed' end
  return (fmt .. ' (%.0f%%)%s'):format(r.median, r.spread_pct, r.spread_pct > stats.FLAG_PCT and '!' or '')
end
local function threads_of(case)
  local seen, list = {}, {}
  for _, x in ipairs(rows) do
    if x.case == case and not seen[x.threads] then seen[x.threads] = true; list[#list + 1] = x.threads end
  end
  table.sort(list)
  return list
end
-- tgl's or a peer's best row (higher is better when `higher`)
local function best(rs, system, higher)
  local b
  for _, r in ipairs(rs) do
    if r.system == system and r.median and r.median > 0 then
      if not b or (higher and r.median > b.median) or (not higher and r.median < b.median) then b = r end
    end
  end
  return b
end
local function ratio(a, b, higher)     -- speed ratio a over b, marks
  if not a or not b then return '–' end
  local q = higher and a.median / b.median or b.median / a.median
  local marks = (stats.overlap(a, b) and ' ≈' or '') ..
                ((a.spread_pct > stats.FLAG_PCT or b.spread_pct > stats.FLAG_PCT) and '!' or '')
  return ('%.2f×%s'):format(q, marks)
end

w('# tgl.scan benchmarks')
w('')
w('Made by `bench/run scan` (bench/lib/scan_run.sh, bench/scan.lua, bench/peers/scan_*.py). ',
  'Each figure: ', peer.describe(meta), '.')
w('')
peer.write_meta(w, meta)

-- overhead
local ov = sel('overhead')
if #ov > 0 then
  w('## Per-step overhead: h = h + 1 on one float64, ns per step (lower is better)')
  w('')
  w('`scan`: one compiled loop of 10^6 steps (tgl.scan; JAX lax.scan under jit). `lua_loop`: a Lua `for` ',
    'loop calling a compiled `h + 1` (trust_input) 10^6 times, the result fed back; `py_loop`: a Python ',
    'loop calling the jitted `h + 1` (JAX) or eager `h + 1` (PyTorch). ',
    '**tgl scan / this**: tgl scan\'s speed over the row\'s (above 1: tgl scan is faster).')
  w('')
  w('| system | variant | threads | ns/step (spread) | min–max | tgl scan / this |')
  w('|---|---|---:|---:|---:|---:|')
  local ref
  for _, r in ipairs(ov) do if r.key == 'tgl/scan' then ref = r end end
  for _, r in ipairs(ov) do
    w(('| %s | %s | %d | %s | %.4g–%.4g | %s |'):format(r.system, r.variant, r.threads, cell(r, '%.4g'),
      r.min, r.max, r == ref and '1' or ratio(ref, r, false)))
  end
  w('')
end

-- rnn
local tl = threads_of('rnn')
if #tl > 0 then
  w('## Elman RNN 100-100-10, 100 time steps, batch 1, float32: forward + BPTT + SGD, time steps/s (higher is better)')
  w('')
  w('One compiled function (tgl: `tgl.scan`, `tgl.grad`, updates; JAX: `lax.scan`, `value_and_grad`, jit) ',
    'or one eager step (PyTorch: a Python loop over the steps, autograd) per sequence. ',
    'tgl `trust_input`: one call from Lua per sequence; `n_calls`: `f.fn{n_calls=N}`. ',
    'JAX `jit`: one jitted call per sequence; `loop`: a jitted `fori_loop` of N sequences. ',
    '**tgl/peer**: tgl\'s best variant over the peer\'s best (above 1: tgl faster); ≈: ranges overlap; ',
    '!: a spread above ', stats.FLAG_PCT, '%.')
  w('')
  local keys, seen = {}, {}
  for _, r in ipairs(sel('rnn')) do if not seen[r.key] then seen[r.key] = true; keys[#keys + 1] = r.key end end
  local peers, pseen = {}, {}
  for _, r in ipairs(sel('rnn')) do
    if r.system ~= 'tgl' and r.system ~= 'tgl@base' and not pseen[r.system] then pseen[r.system] = true; peers[#peers + 1] = r.system end
  end
  local hdr, al = { '| threads' }, { '|---:' }
  for _, k in ipairs(keys) do hdr[#hdr + 1] = k; al[#al + 1] = '---:' end
  for _, p in ipairs(peers) do hdr[#hdr + 1] = 'tgl/' .. p; al[#al + 1] = '---:' end
  w(table.concat(hdr, ' | '), ' |')
  w(table.concat(al, '|'), '|')
  for _, t in ipairs(tl) do
    local rs = sel('rnn', t)
    local line = { '| ' .. t }
    for _, k in ipairs(keys) do
      local c = '–'
      for _, r in ipairs(rs) do if r.key == k then c = cell(r, '%.0f') end end
      line[#line + 1] = c
    end
    local tb = best(rs, 'tgl', true)
    for _, p in ipairs(peers) do line[#line + 1] = ratio(tb, best(rs, p, true), true) end
    w(table.concat(line, ' | '), ' |')
  end
  w('')
  w('Check (same data and initial weights for all, bench/.data/scan_rnn.npz): the loss before and after 20 SGD ',
    'steps, per system; they should agree to float32 rounding.')
  w('')
  w('| system | threads | loss before | loss after 20 steps | vs tgl |')
  w('|---|---:|---:|---:|---:|')
  for _, t in ipairs(tl) do
    local ref, done = nil, {}
    for _, r in ipairs(sel('rnn', t)) do
      if not ref and r.system == 'tgl' and type(r.loss_after) == 'number' then ref = r end
    end
    local order = {}
    if ref then order[1] = ref end
    for _, r in ipairs(sel('rnn', t)) do if r.system ~= 'tgl' then order[#order + 1] = r end end
    for _, r in ipairs(order) do
      if not done[r.system] and type(r.loss_after) == 'number' then
        done[r.system] = true
        local agree = r == ref and 'reference' or '–'
        if ref and r ~= ref then
          local rel = math.abs(r.loss_after - ref.loss_after) / math.abs(ref.loss_after)
          agree = rel < 1e-4 and ('agrees (%.1e)'):format(rel) or ('**DIFFERS** (%.1e)'):format(rel)
        end
        w(('| %s | %d | %.6f | %.6f | %s |'):format(r.system, t, r.loss_before, r.loss_after, agree))
      end
    end
  end
  w('')
end

-- memory
local mem = sel('memory')
if #mem > 0 then
  w('## Memory: 10^5 steps of h = h + 1 on 1000 float64, result h[-1] only; peak RSS (VmHWM) of a fresh process')
  w('')
  w('`baseline`: the same process compiling and calling `h + 1` once, no scan. `default`: the default ',
    'rewrites (`scan_save_mem` keeps only the states the result reads). `no_save_mem`: ',
    '`tgl.config.exclude = \'scan_save_mem\'` (every step\'s state kept: 10^5 × 1000 × 8 B = 763 MiB).')
  w('')
  -- a figure of several processes (scan.lua since --repeats applies to
  -- memory) has its min–max; a system column when tgl@base ran too
  local several, two = false, false
  for _, r in ipairs(mem) do
    several = several or (tonumber(r.repeats) or 1) > 1
    two = two or r.system ~= 'tgl'
  end
  if several then
    w('Each figure: the median of the fresh processes (`repeats` in scan.csv) with their min–max.')
    w('')
  end
  w('| ', two and 'system | ' or '', 'variant | peak RSS, MiB', several and ' (min–max)' or '', ' | over baseline, MiB | note |')
  w('|', two and '---|' or '', '---|---:|---:|---|')
  for _, r in ipairs(mem) do
    local base
    for _, x in ipairs(mem) do if x.variant == 'baseline' and x.system == r.system then base = x end end
    local fig = 'failed'
    if r.median >= 0 then
      fig = (several and '%.1f (%.1f–%.1f)' or '%.1f'):format(r.median, r.min, r.max)
    end
    w(('| %s%s | %s | %s | %s |'):format(two and (r.system .. ' | ') or '', r.variant, fig,
      (base and r.median >= 0 and r ~= base) and ('%.1f'):format(r.median - base.median) or '–', r.note or ''))
  end
  w('')
end

-- tgl against the baseline, figure by figure
local has_base = false
for _, r in ipairs(rows) do has_base = has_base or r.system == 'tgl@base' end
if has_base then
  local items, done = {}, {}
  local HOW = { overhead = { false, '%.4g' }, rnn = { true, '%.0f' }, memory = { false, '%.1f' } }
  for _, r in ipairs(rows) do
    if r.system == 'tgl' or r.system == 'tgl@base' then
      local id = r.case .. '/' .. r.threads .. '/' .. r.variant
      if not done[id] then
        done[id] = true
        local a, b
        for _, x in ipairs(rows) do
          if x.case == r.case and x.threads == r.threads and x.variant == r.variant then
            if x.system == 'tgl' then a = x elseif x.system == 'tgl@base' then b = x end
          end
        end
        local how = HOW[r.case] or { true, '%.4g' }
        items[#items + 1] = { cell = { r.case, r.threads }, variant = r.variant, tgl = a, base = b,
                              higher = how[1], fmt = how[2], unit = r.unit,
                              words = r.case == 'memory' and { 'more memory', 'less memory' } or nil,
                              res = r.case == 'memory' and 0.1 or nil }
      end
    end
  end
  base_compare.write(w, 'tgl against tgl@base', { 'case', 'threads' }, items,
    '`overhead` (ns/step) and `memory` (MiB): lower is better, and tgl/tgl@base is tgl@base\'s figure over ' ..
    'tgl\'s (above 1: tgl better); a `memory` figure is the peak RSS of fresh processes, printed to ' ..
    '0.1 MiB: ranges within 0.1 MiB of each other count as overlapping, and the verdict beyond is ' ..
    '**more memory** or **less memory**.')
end

local text = table.concat(out, '\n') .. '\n'
local f = assert(io.open(md_path, 'w'))
f:write(text)
f:close()
io.write(text)
