-- bench/lib/csv.lua — the benchmark CSV files (no quoting: fields never
-- hold commas): read(path) returns the rows as tables keyed by the header's
-- column names, numbers converted.
local M = {}

local function split(line)
  local t = {}
  for f in (line .. ','):gmatch('([^,]*),') do t[#t + 1] = f end
  return t
end
M.split = split

function M.read(path)
  local rows, cols = {}, nil
  for line in io.lines(path) do
    if line ~= '' then
      local f = split(line)
      if not cols then cols = f else
        local r = {}
        for i, c in ipairs(cols) do r[c] = tonumber(f[i]) or f[i] end
        rows[#rows + 1] = r
      end
    end
  end
  return rows, cols
end

return M
