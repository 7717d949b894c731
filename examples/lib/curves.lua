-- examples/lib/curves.lua — what the examples that race two optimisers
-- (examples/hf_autoencoder.lua, hf_rnn_addition.lua) share: the two
-- training curves side by side, and history.csv and curve.svg (their
-- command line is examples/lib/cli.lua's).  A curve is a list of { t = seconds, err = }
-- from t = 0.  The script sets package.path to examples/lib/ and
-- bench/lib/ (for svg.lua) from its own directory before requiring this.
local svg_ok, svg = pcall(require, 'svg')
local M = {}

-- The error a curve had reached at time t.
function M.at(curve, t)
  local e = curve[1].err
  for _, p in ipairs(curve) do if p.t <= t then e = p.err end end
  return e
end

-- The error a curve ended with: its last point, taken by the step that
-- crossed the budget (the parameters the run leaves behind).  The table's
-- last row, the summary and the SVG legend all quote this one figure.
function M.final(curve)
  return curve[#curve].err, curve[#curve].t
end

-- Prints the two curves at 10 times from 0 to 0.9 * seconds and then at
-- the end of each run (M.final): a header with the column title `label`
-- ('error': 'HF error', 'SGD error') and the errors formatted with fmt
-- (e.g. '%12.2f').
function M.print_table(hf_curve, sgd_curve, seconds, label, fmt)
  print(('\n%8s  %12s  %12s'):format('time', 'HF ' .. label, 'SGD ' .. label))
  for k = 0, 9 do
    local t = seconds * k / 10
    print(('%7.1fs  ' .. fmt .. '  ' .. fmt):format(t, M.at(hf_curve, t), M.at(sgd_curve, t)))
  end
  local hf_err, hf_t = M.final(hf_curve)
  local sgd_err, sgd_t = M.final(sgd_curve)
  print(('%8s  ' .. fmt .. '  ' .. fmt):format('end', hf_err, sgd_err))
  print(('(end: after the step that crossed the %.0f s budget: HF at %.1f s, SGD at %.1f s)')
        :format(seconds, hf_t, sgd_t))
end

-- dir/history.csv: method,seconds,<column> rows for both curves.
function M.write_csv(dir, column, hf_curve, sgd_curve)
  os.execute(('mkdir -p %q'):format(dir))
  local f = assert(io.open(dir .. '/history.csv', 'w'))
  f:write('method,seconds,' .. column .. '\n')
  for _, p in ipairs(hf_curve) do f:write(('hf,%.3f,%.6f\n'):format(p.t, p.err)) end
  for _, p in ipairs(sgd_curve) do f:write(('sgd,%.3f,%.6f\n'):format(p.t, p.err)) end
  f:close()
end

-- dir/curve.svg: both curves on a log error axis against training time.
-- o: script (name for the warning when svg.lua is missing), dir, seconds,
-- title, ylabel, tick_fmt (error axis labels), final_fmt (the legend's
-- final errors), floor (optional: errors below it are drawn at it),
-- min_hi (optional: the axis reaches at least this error), decorate
-- (optional: function(doc, PX, PY, ml, pw) drawing more under the axes).
function M.write_svg(o, hf_curve, sgd_curve)
  if not svg_ok then
    io.stderr:write(o.script .. ': curve.svg not written: bench/lib/svg.lua not found next to examples/\n')
    return
  end
  local hf_final, sgd_final = M.final(hf_curve), M.final(sgd_curve)
  local Wd, Hd, ml, mr, mt, mb = 640, 380, 64, 24, 44, 50
  local doc = svg.new(Wd, Hd)
  local pw, ph = Wd - ml - mr, Hd - mt - mb
  local lo, hi = math.huge, 0
  for _, c in ipairs({ hf_curve, sgd_curve }) do
    for _, p in ipairs(c) do lo = math.min(lo, p.err); hi = math.max(hi, p.err) end
  end
  if o.floor then lo = math.max(lo, o.floor) end
  if o.min_hi then hi = math.max(hi, o.min_hi) end
  -- log scale on the error axis
  local llo, lhi = math.log10(lo * 0.9), math.log10(hi * 1.1)
  local tmax = o.seconds
  for _, c in ipairs({ hf_curve, sgd_curve }) do tmax = math.max(tmax, c[#c].t) end
  local function PX(t) return ml + t / tmax * pw end
  local function PY(e)
    if o.floor then e = math.max(e, o.floor) end
    return mt + ph - (math.log10(e) - llo) / (lhi - llo) * ph
  end
  doc:text(Wd / 2, 22, o.title, { size = 14, anchor = 'middle', weight = 'bold' })
  for k = 0, 5 do
    local e = 10 ^ (llo + (lhi - llo) * k / 5)
    local yy = PY(e)
    doc:line(ml, yy, ml + pw, yy, { stroke = '#e5e5e5' })
    doc:text(ml - 6, yy + 4, o.tick_fmt:format(e), { size = 10, anchor = 'end' })
  end
  for k = 0, 5 do
    local t = tmax * k / 5
    doc:text(PX(t), mt + ph + 16, ('%.0f'):format(t), { size = 10, anchor = 'middle' })
  end
  if o.decorate then o.decorate(doc, PX, PY, ml, pw) end
  doc:line(ml, mt + ph, ml + pw, mt + ph, { stroke = '#333' })
  doc:line(ml, mt, ml, mt + ph, { stroke = '#333' })
  doc:text(ml + pw / 2, Hd - 12, 'training time (s)', { size = 12, anchor = 'middle' })
  doc:text(16, mt + ph / 2, o.ylabel, { size = 12, anchor = 'middle', rotate = -90 })
  for _, c in ipairs({ { hf_curve, '#d62728', 'Hessian-free' }, { sgd_curve, '#1f77b4', 'SGD' } }) do
    local pts = {}
    for i, p in ipairs(c[1]) do pts[i] = { PX(p.t), PY(p.err) } end
    doc:polyline(pts, { stroke = c[2], width = 2 })
  end
  doc:line(ml + pw - 150, mt + 14, ml + pw - 126, mt + 14, { stroke = '#d62728', width = 2 })
  doc:text(ml + pw - 120, mt + 18, ('Hessian-free (' .. o.final_fmt .. ')'):format(hf_final), { size = 11 })
  doc:line(ml + pw - 150, mt + 32, ml + pw - 126, mt + 32, { stroke = '#1f77b4', width = 2 })
  doc:text(ml + pw - 120, mt + 36, ('SGD (' .. o.final_fmt .. ')'):format(sgd_final), { size = 11 })
  doc:save(o.dir .. '/curve.svg')
end

return M
