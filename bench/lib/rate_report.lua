-- bench/lib/rate_report.lua — what the examples-per-second reports
-- (bench/lib/mlp_report.lua, nn_report.lua) share: the grid of cells
-- (threads x model x batch x system), the rate's text, the run's notes on
-- missing systems and load, and the chart's panels (svg.bar_panels).
local M = {}

-- cell[threads][model][batch]['system/variant'] = row, with the sorted
-- lists of the thread counts and batch sizes present.
function M.grid(rows)
  local cell, threads_list, batches, seen_t, seen_b = {}, {}, {}, {}, {}
  for _, r in ipairs(rows) do
    if not seen_t[r.threads] then seen_t[r.threads] = true; threads_list[#threads_list + 1] = r.threads end
    if not seen_b[r.batch] then seen_b[r.batch] = true; batches[#batches + 1] = r.batch end
    local c = cell
    for _, k in ipairs({ r.threads, r.model, r.batch }) do c[k] = c[k] or {}; c = c[k] end
    c[r.system .. '/' .. r.variant] = r
  end
  table.sort(threads_list); table.sort(batches)
  return cell, threads_list, batches
end

-- The names of `names` (in their order) that some row has as its model.
function M.models(rows, names)
  local models = {}
  for _, m in ipairs(names) do
    for _, r in ipairs(rows) do if r.model == m then models[#models + 1] = m; break end end
  end
  return models
end

-- A rate as the tables print it: 1.23M, 123k, 12.3k, 1234; below 100,
-- one decimal when `fine` (else none).
function M.fmt_rate(v, fine)
  if not v then return '—' end
  if v >= 1e6 then return (('%.2f'):format(v / 1e6):gsub('%.?0+$', '')) .. 'M' end
  if v >= 1e5 then return ('%.0fk'):format(v / 1e3) end
  if v >= 1e4 then return ('%.1fk'):format(v / 1e3) end
  if fine and v < 100 then return ('%.1f'):format(v) end
  return ('%.0f'):format(v)
end

-- The run's missing systems and variants and its load average, through
-- w(...) (one line each); meta_order: meta's keys in the file's order.
function M.write_missing_and_load(w, meta, meta_order)
  for _, k in ipairs(meta_order) do
    local s = k:match('^missing%.(.+)$')
    if s then w('- Missing: **', s, '** — ', meta[k]) end
    local sv = k:match('^missing_variant%.(.+)$')
    if sv then w('- Missing variant: **', sv, '** — ', meta[k]) end
  end
  if meta.load_before then
    w('- Load average (1, 5, 15 min) before the run: ', meta.load_before, '; after: ', meta.load_after or '?',
      meta.load_max and ('; highest 1-min figure seen between processes: ' .. meta.load_max) or '',
      meta.run_seconds and ('; the run took ' .. meta.run_seconds .. ' s') or '',
      ' (other work on the machine skews the figures, the 2-thread ones most)')
  end
end

-- Writes the report's lines `out` to md_path and prints them.
function M.write_md(md_path, out)
  local f = assert(io.open(md_path, 'w'))
  f:write(table.concat(out, '\n'), '\n')
  f:close()
  print(table.concat(out, '\n'))
end

-- The chart's panels: one per (threads, model), a group per batch size,
-- a bar per system present in the cell: { v, min, max, color, title =
-- bar_title(system, row, model, batch, threads) }; panel_title(model,
-- threads) names the panel.
function M.panels(g, bar_title, panel_title)
  local panels = {}
  for ti, t in ipairs(g.threads_list) do
    for mi, m in ipairs(g.models) do
      local groups = {}
      for _, B in ipairs(g.batches) do
        local c = g.cell[t] and g.cell[t][m] and g.cell[t][m][B] or {}
        local bars = {}
        for si, s in ipairs(g.systems) do
          local r = c[s]
          if r then
            bars[si] = { v = r.examples_per_s, min = r.eps_min, max = r.eps_max, color = g.color[s],
                         title = bar_title(s, r, m, B, t) }
          end
        end
        groups[#groups + 1] = { label = 'batch ' .. B, bars = bars }
      end
      panels[#panels + 1] = { col = mi, row = ti, groups = groups, title = panel_title(m, t) }
    end
  end
  return panels
end

return M
