-- tgl.io — NumPy's file formats from Lua, installed as tgl.save and
-- tgl.load:
--
--   tgl.save('w.npy', a)                          -- one array: .npy
--   tgl.save('ckpt.npz', {W = W, b = b})          -- named arrays: .npz
--   tgl.save('ckpt.npz', {W = W}, {compress = true})   -- deflated entries
--   tgl.load('w.npy')  --> array ;  tgl.load('ckpt.npz')  --> {W = ..., b = ...}
--
-- load tells the formats apart by the file's first bytes, not its name.
-- The C side (src/io/npy.c, npz.c) writes atomically and checks every
-- byte it reads; this file checks arguments and converts to and from Lua.
local core = require 'tgl.core'
local ffi, C = core.ffi, core.C
local check, argerror = core.check, core.argerror

local M = {}

local npz_out_t = ffi.typeof('tgl_npz *[1]')
local names_t = ffi.typeof('const char *[?]')
local arrays_t = ffi.typeof('const tgl_array *[?]')

local function ends_with(path, ext)
  return path:lower():sub(-#ext) == ext
end

-- A name for messages: NUL bytes and other control characters escaped.
local function shown(s)
  return (s:gsub('%c', function(c) return ('\\%d'):format(c:byte()) end))
end

-- tgl.save(path, array_or_table [, {compress = bool}])
function M.save(path, obj, opts)
  if type(path) ~= 'string' then
    argerror('save', 'path must be a string, got %s', type(path))
  end
  opts = core.check_options('save', opts, { compress = 'boolean' })
  if core.is_array(obj) then
    if ends_with(path, '.npz') then
      argerror('save', 'a single array goes to a .npy file; give a table of arrays for .npz')
    end
    if opts.compress then
      argerror('save', 'compress applies to .npz archives (a table of arrays); .npy files '
               .. 'are never compressed')
    end
    check(C.tgl_npy_save(core.ctx, path, obj.p), 'save')
    return
  end
  if type(obj) ~= 'table' then
    argerror('save', 'expected an array or a table of named arrays, got %s', type(obj))
  end
  if ends_with(path, '.npy') then
    argerror('save', 'a table of arrays goes to a .npz file; give a single array for .npy')
  end
  local names = {}
  for k, v in pairs(obj) do
    if type(k) ~= 'string' then
      argerror('save', 'the table\'s keys name the arrays and must be strings, got %s key %s',
               type(k), tostring(k))
    end
    if k == '' then argerror('save', 'array names must not be empty') end
    if k:find('\0', 1, true) then
      argerror('save', "array name '%s' contains a NUL byte", shown(k))
    end
    if not core.is_array(v) then
      argerror('save', "the value for key '%s' is a %s, not an array", shown(k), type(v))
    end
    names[#names + 1] = k
  end
  -- Sorted, so that the same table always gives the same file.
  table.sort(names)
  local n = #names
  -- The C strings point into the Lua strings, which names keeps alive.
  local cnames, carrays = names_t(math.max(n, 1)), arrays_t(math.max(n, 1))
  for i, k in ipairs(names) do
    cnames[i - 1] = k
    carrays[i - 1] = obj[k].p
  end
  check(C.tgl_npz_save(core.ctx, path, n, cnames, carrays, opts.compress and 1 or 0), 'save')
end

local format_t = ffi.typeof('int[1]')

-- tgl.load(path) --> array (.npy) or table of arrays by name (.npz)
function M.load(path)
  if type(path) ~= 'string' then
    argerror('load', 'path must be a string, got %s', type(path))
  end
  -- The C side looks at the first bytes (and refuses a FIFO, a directory
  -- or a device without waiting on it: Lua's io.open would block).
  local format = format_t()
  check(C.tgl_file_format(core.ctx, path, format), 'load')
  if format[0] == core.defines.TGL_FILE_NPY then
    local out = core.out_array_t()
    check(C.tgl_npy_load(core.ctx, path, out), 'load')
    return core.wrap(out[0])
  end
  local out = npz_out_t()   -- TGL_FILE_NPZ
  check(C.tgl_npz_load(core.ctx, path, out), 'load')
  local z, t = out[0], {}
  -- The archive owns its arrays: take a reference to each before freeing it.
  for i = 0, z.n - 1 do
    C.tgl_array_retain(z.arrays[i])
    t[ffi.string(z.names[i])] = core.wrap(z.arrays[i])
  end
  C.tgl_npz_free(z)
  return t
end

return M
