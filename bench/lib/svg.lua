-- bench/lib/svg.lua — a few lines of SVG writing for the benchmark charts
-- and examples/mlp_fashion.lua's training curve (no plotting dependency).
--   local doc = svg.new(w, h)
--   doc:rect(x, y, w, h, {fill=, stroke=, title=}) ; doc:line(x1, y1, x2, y2, {stroke=, width=})
--   doc:polyline({{x,y},...}, {stroke=, width=}) ; doc:circle(x, y, r, {fill=})
--   doc:text(x, y, s, {size=, anchor='start'|'middle'|'end', weight=, fill=, rotate=})
--   doc:save(path) ; doc:render() --> string
--   svg.bar_panels(path, opts): a grid of log-scale bar charts (below)
local M = {}
local Doc = {}
Doc.__index = Doc

local function esc(s)
  return (tostring(s):gsub('[&<>"]', { ['&'] = '&amp;', ['<'] = '&lt;', ['>'] = '&gt;', ['"'] = '&quot;' }))
end
M.escape = esc

local function num(v) return (('%.2f'):format(v):gsub('%.?0+$', '')) end

function M.new(w, h)
  local d = setmetatable({ w = w, h = h, parts = {} }, Doc)
  d:rect(0, 0, w, h, { fill = 'white' })
  return d
end

function Doc:add(s) self.parts[#self.parts + 1] = s end

function Doc:rect(x, y, w, h, o)
  o = o or {}
  local s = ('<rect x="%s" y="%s" width="%s" height="%s" fill="%s"%s'):format(num(x), num(y), num(w), num(h),
    o.fill or 'none', o.stroke and (' stroke="%s"'):format(o.stroke) or '')
  if o.title then s = s .. ('><title>%s</title></rect>'):format(esc(o.title)) else s = s .. '/>' end
  self:add(s)
end

function Doc:line(x1, y1, x2, y2, o)
  o = o or {}
  self:add(('<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%s"%s/>'):format(
    num(x1), num(y1), num(x2), num(y2), o.stroke or '#000', o.width or 1,
    o.dash and (' stroke-dasharray="%s"'):format(o.dash) or ''))
end

function Doc:polyline(pts, o)
  o = o or {}
  local p = {}
  for i, q in ipairs(pts) do p[i] = num(q[1]) .. ',' .. num(q[2]) end
  self:add(('<polyline points="%s" fill="none" stroke="%s" stroke-width="%s"/>'):format(
    table.concat(p, ' '), o.stroke or '#000', o.width or 1.5))
end

function Doc:circle(x, y, r, o)
  o = o or {}
  self:add(('<circle cx="%s" cy="%s" r="%s" fill="%s"/>'):format(num(x), num(y), num(r), o.fill or '#000'))
end

function Doc:text(x, y, s, o)
  o = o or {}
  self:add(('<text x="%s" y="%s" font-size="%s" text-anchor="%s"%s%s fill="%s">%s</text>'):format(
    num(x), num(y), o.size or 12, o.anchor or 'start',
    o.weight and (' font-weight="%s"'):format(o.weight) or '',
    o.rotate and (' transform="rotate(%s %s %s)"'):format(o.rotate, num(x), num(y)) or '',
    o.fill or '#222', esc(s)))
end

function Doc:render()
  return table.concat({
    ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '):format(
      self.w, self.h, self.w, self.h) .. 'font-family="DejaVu Sans, Helvetica, Arial, sans-serif">',
    table.concat(self.parts, '\n'), '</svg>', '' }, '\n')
end

function Doc:save(path)
  local f = assert(io.open(path, 'w'))
  f:write(self:render())
  f:close()
end

-- A grid of bar-chart panels on a log scale (bench/run's reports: mlp, nn).
--   svg.bar_panels(path, {
--     title = 'heading', ncol = C, nrow = R, nbars = bars per group,
--     fmt = function(v) -> tick label, whiskers = true (draw min-max),
--     panels = { {col = c, row = r, title = 'panel heading',
--                 groups = { {label = 'batch 1', bars = { [i] = {v =, min =, max =, color =, title =} }} }} },
--     legend = { {label, color}, ... } })
-- A bar's index i is its place in the group (bars may be missing); a
-- panel without any bar is left empty.
function M.bar_panels(path, o)
  local PW, PH, ML, MT, MB = 430, 250, 56, 34, 38
  local W = o.ncol * (PW + 20) + 20
  local legend_rows = math.ceil(#o.legend / 5)
  local H = o.nrow * (PH + MT + MB) + 40 + legend_rows * 20 + 20
  local doc = M.new(W, H)
  doc:text(W / 2, 22, o.title, { size = 15, anchor = 'middle', weight = 'bold' })
  for _, p in ipairs(o.panels) do
    local x0 = 20 + (p.col - 1) * (PW + 20)
    local y0 = 40 + (p.row - 1) * (PH + MT + MB)
    local lo, hi = math.huge, 0
    for _, g in ipairs(p.groups) do
      for i = 1, o.nbars do
        local b = g.bars[i]
        if b then lo = math.min(lo, b.min); hi = math.max(hi, b.max) end
      end
    end
    if hi > 0 then
      local d0, d1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
      if d1 == d0 then d1 = d0 + 1 end
      local px, py, pw, ph = x0 + ML, y0 + MT, PW - ML, PH - MT
      local function Y(v) return py + ph - (math.log10(v) - d0) / (d1 - d0) * ph end
      doc:text(x0 + PW / 2 + ML / 2, y0 + 18, p.title, { size = 13, anchor = 'middle', weight = 'bold' })
      for d = d0, d1 do
        local yy = Y(10 ^ d)
        doc:line(px, yy, px + pw, yy, { stroke = '#ddd' })
        doc:text(px - 6, yy + 4, o.fmt(10 ^ d), { size = 10, anchor = 'end' })
        if d < d1 then
          for k = 2, 9 do local y2 = Y(k * 10 ^ d); doc:line(px, y2, px + pw, y2, { stroke = '#f2f2f2' }) end
        end
      end
      doc:line(px, py + ph, px + pw, py + ph, { stroke = '#333' })
      doc:line(px, py, px, py + ph, { stroke = '#333' })
      local gw = pw / #p.groups
      local bw = (gw - 10) / o.nbars
      for gi, g in ipairs(p.groups) do
        local gx = px + (gi - 1) * gw + 5
        for si = 1, o.nbars do
          local b = g.bars[si]
          if b then
            local yy = Y(math.max(b.v, 10 ^ d0))
            doc:rect(gx + (si - 1) * bw, yy, math.max(1, bw - 0.5), py + ph - yy, { fill = b.color or '#444', title = b.title })
            if o.whiskers and b.max > b.min then      -- the slowest–fastest repeat
              local xc = gx + (si - 0.5) * bw
              local y1, y2 = Y(math.max(b.min, 10 ^ d0)), Y(b.max)
              doc:line(xc, y1, xc, y2, { stroke = '#222' })
              doc:line(xc - bw / 4, y2, xc + bw / 4, y2, { stroke = '#222' })
              doc:line(xc - bw / 4, y1, xc + bw / 4, y1, { stroke = '#222' })
            end
          end
        end
        doc:text(gx + (gw - 10) / 2, py + ph + 14, g.label, { size = 11, anchor = 'middle' })
      end
    end
  end
  local ly = H - legend_rows * 20 - 10
  for i, l in ipairs(o.legend) do
    local lx = 30 + ((i - 1) % 5) * ((W - 60) / 5)
    local yy = ly + math.floor((i - 1) / 5) * 20
    doc:rect(lx, yy - 10, 12, 12, { fill = l[2] or '#444' })
    doc:text(lx + 17, yy, l[1], { size = 12 })
  end
  doc:save(path)
end

return M
