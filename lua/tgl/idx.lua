-- tgl.idx — tgl.io.read_idx(path): IDX files (MNIST, Fashion-MNIST), plain
-- or gzip-compressed, as arrays (uint8 pixels stay uint8).
local core = require 'tgl.core'
local C = core.C

local M = {}

function M.read_idx(path)
  if type(path) ~= 'string' then core.argerror('io.read_idx', 'path must be a string, got %s', type(path)) end
  local out = core.out_array_t()
  core.check(C.tgl_idx_load(core.ctx, path, out), 'io.read_idx')
  return core.wrap(out[0])
end

return M
