-- bench/lib/base_compare.lua — the "tgl against tgl@base" part of the
-- reports of `bench/run mlp|rnn|scan --baseline-tgl PATH`: one row per
-- (cell, variant) with both figures, their spreads, the speed ratio and a
-- verdict, so that "no cell slower beyond its spread" can be read off the
-- table (issue 20) rather than worked out from two columns.
--
-- The rule is the one of mlp.md's ratios (bench/lib/stats.lua): two figures
-- whose min–max ranges overlap are not separated by the run: **within
-- spread**; otherwise every repeat of one beat every repeat of the other
-- (with 5 repeats each, p ≈ 0.008 by a rank test): **slower** or
-- **faster** (tgl against tgl@base).  `!` after the ratio: a spread above
-- stats.FLAG_PCT, the two figures may be off by more than they say.  Each
-- variant is compared with the same variant, not best against best, so a
-- slowdown in a variant that is not the fastest still shows.
--
-- Rows are tables with median, min, max, spread_pct (as stats.summary
-- makes them); a figure that failed has no positive median.
package.path = (debug.getinfo(1, 'S').source:match('^@(.*)/[^/]*$') or '.') .. '/?.lua;' .. package.path
local stats = require 'stats'
local M = {}

local function ok(r) return r and type(r.median) == 'number' and r.median > 0 end

-- The verdict on tgl's row a against tgl@base's row b, and its kind
-- ('within', 'worse', 'better', 'failed'); higher: a larger figure is
-- better (steps/s) rather than smaller (ns/step, MiB); words: what worse
-- and better are called (default { 'slower', 'faster' }); res: the
-- figures' resolution (a peak RSS is printed to 0.1 MiB): ranges that come
-- within res of each other count as overlapping (default 0).
function M.verdict(a, b, higher, words, res)
  words, res = words or { 'slower', 'faster' }, (res or 0) * (1 + 1e-9)   -- (10.9 + 0.1 >= 11.0 in binary)
  if not ok(b) then return b and '**tgl@base failed**' or 'no tgl@base figure', 'failed' end
  if not ok(a) then return a and '**tgl failed**' or 'no tgl figure', 'failed' end
  if a.min <= b.max + res and b.min <= a.max + res then return 'within spread', 'within' end
  if (a.median > b.median) == (higher ~= false) then return '**' .. words[2] .. '**', 'better' end
  return '**' .. words[1] .. '**', 'worse'
end

-- "1.02× (3%, 5%)!": tgl's speed over tgl@base's, both spreads, '!' when
-- either is above stats.FLAG_PCT.
function M.ratio(a, b, higher)
  if not (ok(a) and ok(b)) then return '–' end
  local q = (higher ~= false) and a.median / b.median or b.median / a.median
  local flag = (a.spread_pct > stats.FLAG_PCT or b.spread_pct > stats.FLAG_PCT) and '!' or ''
  return ('%.2f× (%.0f%%, %.0f%%)%s'):format(q, a.spread_pct, b.spread_pct, flag)
end

-- Writes, through w(...) (one line a call), the comparison table:
--   cols    the cell's column names, e.g. { 'threads', 'model', 'batch' }
--   items   a list of { cell = { values of cols }, variant =, tgl = row|nil,
--           base = row|nil, higher = bool (default true), fmt = '%.0f',
--           unit = 'examples/s', words = { worse, better }, res = 0 (M.verdict) }
--   note    a paragraph after the table's legend (optional)
-- and a line counting the verdicts (bench/lib/compare_base.sh reads it);
-- returns the counts { within =, worse =, better =, failed = }.
function M.write(w, title, cols, items, note)
  local n = { within = 0, worse = 0, better = 0, failed = 0 }
  w('## ', title)
  w('')
  w('Each variant against the same variant of the baseline, the two processes run back to back in ',
    'an order that alternates from one cell to the next. **tgl/tgl@base**: tgl\'s speed over the ',
    'baseline\'s (above 1: tgl faster) with the two spreads ((max − min) / median of the repeats) in ',
    'brackets, tgl\'s first; `!`: a spread above ', stats.FLAG_PCT, '%. **Verdict**: *within spread* when the ',
    'two min–max ranges overlap (the run does not separate them), else **slower** or **faster**: every ',
    'repeat of one beat every repeat of the other (with 5 repeats each, p ≈ 0.008 by a rank test).')
  w('')
  if note then w(note); w('') end
  local head, sep = {}, {}
  for i, c in ipairs(cols) do head[i] = c; sep[i] = '---' end
  for _, c in ipairs({ 'variant', 'tgl (min–max)', 'tgl@base (min–max)', 'tgl/tgl@base', 'verdict' }) do
    head[#head + 1] = c; sep[#sep + 1] = c == 'variant' and '---' or (c == 'verdict' and '---' or '---:')
  end
  w('| ', table.concat(head, ' | '), ' |')
  w('| ', table.concat(sep, ' | '), ' |')
  local function fig(r, fmt)
    if not r then return '–' end
    if not ok(r) then return 'failed' end
    return (fmt .. ' (' .. fmt .. '–' .. fmt .. ')'):format(r.median, r.min, r.max)
  end
  for _, it in ipairs(items) do
    local fmt = it.fmt or '%.0f'
    local v, kind = M.verdict(it.tgl, it.base, it.higher, it.words, it.res)
    n[kind] = n[kind] + 1
    local line = {}
    for i, c in ipairs(it.cell) do line[i] = tostring(c) end
    line[#line + 1] = it.variant .. (it.unit and (' (' .. it.unit .. ')') or '')
    line[#line + 1] = fig(it.tgl, fmt)
    line[#line + 1] = fig(it.base, fmt)
    line[#line + 1] = M.ratio(it.tgl, it.base, it.higher)
    line[#line + 1] = v
    w('| ', table.concat(line, ' | '), ' |')
  end
  w('')
  w(('**tgl against tgl@base: %d row%s: %d within spread, %d worse (slower or more memory), %d better, ' ..
     '%d without both figures.**'):format(#items, #items == 1 and '' or 's', n.within, n.worse, n.better, n.failed))
  w('')
  return n
end

return M
