-- tgl — the Lua API of the tgl engine: `local tgl = require 'tgl'`.
--
-- This file assembles the public module from its parts: tgl.core (the FFI
-- binding), tgl.array (concrete arrays), tgl.io (.npy/.npz files).  Names
-- and semantics follow shared/API.md.
local core = require 'tgl.core'
local array = require 'tgl.array'
local io_ = require 'tgl.io'
local ffi, C = core.ffi, core.C

local tgl = {}

-- Configuration read by the engine's Lua layer.  floatX is the default
-- float dtype of arrays and symbolic variables.
tgl.config = {
  floatX = os.getenv('TGL_FLOATX') or 'float32',
}

tgl.version = ffi.string(C.tgl_version())

-- arrays
for _, name in ipairs({ 'array', 'empty', 'zeros', 'ones', 'full', 'arange', 'rand', 'randn',
                        'manual_seed', 'get_rng_state', 'set_rng_state' }) do
  tgl[name] = array[name]
end
tgl.is_array = core.is_array

-- files
tgl.save = io_.save
tgl.load = io_.load

-- devices
tgl.cuda = {
  built = function() return C.tgl_cuda_built() ~= 0 end,
  is_available = function() return C.tgl_cuda_device_count() > 0 end,
  device_count = function() return tonumber(C.tgl_cuda_device_count()) end,
}

-- Versions of tgl and what it was built with, as a table.
function tgl.build_info()
  return {
    tgl = tgl.version,
    luajit = jit and jit.version or 'unknown',
    blas = ffi.string(C.tgl_blas_info()),
    cuda = C.tgl_cuda_built() ~= 0 and ffi.string(C.tgl_cuda_version()) or false,
  }
end

return tgl
