-- bench/lib/svg.lua — a few lines of SVG writing for the benchmark charts
-- and examples/mlp_fashion.lua's training curve (no plotting dependency).
--   local doc = svg.new(w, h)
--   doc:rect(x, y, w, h, {fill=, stroke=, title=}) ; doc:line(x1, y1, x2, y2, {stroke=, width=})
--   doc:polyline({{x,y},...}, {stroke=, width=}) ; doc:circle(x, y, r, {fill=})
--   doc:text(x, y, s, {size=, anchor='start'|'middle'|'end', weight=, fill=, rotate=})
--   doc:save(path) ; doc:render() --> string
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

return M
