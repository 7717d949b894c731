-- tgl.core — the FFI binding of include/tgl.h and the helpers every other
-- tgl module uses: the engine namespace (C), this Lua state's context (ctx),
-- error raising (check) and array ownership (wrap).
--
-- The declarations come from the headers, not from this file: the build
-- generates the module tgl.cdef (cmake/tgl_cdef.cmake) from include/tgl.h
-- and host/tgl_host.h, and an install puts it next to this file.  A
-- function added to tgl.h is in ffi.C after the next build.  Declare no
-- tgl_* function or type by hand: LuaJIT keeps a function's first
-- declaration and ignores later ones, and rejects a second struct.
local ffi = require 'ffi'

local ok_cdef, cdef = pcall(require, 'tgl.cdef')
if not ok_cdef then
  error('tgl: the generated FFI declarations (module tgl.cdef) are missing: build tgl '
        .. '(it writes <build>/lua/tgl/cdef.lua) and run scripts with the tgl host, or put '
        .. "the build's lua/ directory on LUA_PATH: " .. tostring(cdef), 0)
end

-- The array descriptor's fields data/shape/strides/size are _data, _shape,
-- _strides and _size here (same layout; spec/cdef_spec.lua checks the
-- offsets against C): struct fields shadow methods on cdata, and users call
-- a:data(), a:shape(), a:size(d).
local function underscore_array_fields(decls)
  local shadowed = { data = true, shape = true, strides = true, size = true }
  local renamed = 0
  local out, found = decls:gsub('(typedef struct tgl_array%s*{)(.-)(}%s*tgl_array%s*;)',
    function(open, body, close)
      body = body:gsub('%f[%w_]([%a_][%w_]*)(%s*[;%[])', function(name, rest)
        if shadowed[name] then
          renamed = renamed + 1
          return '_' .. name .. rest
        end
      end)
      return open .. body .. close
    end)
  assert(found == 1 and renamed == 4,
         'tgl: tgl.h no longer has struct tgl_array with data, shape, strides and size')
  return out
end

ffi.cdef(underscore_array_fields(cdef.declarations))
ffi.cdef(cdef.host)
ffi.cdef [[
/* What Lua holds: a box around the pointer.  Pointer cdata would turn
   a + 1 and a - b into pointer arithmetic; a struct gets the metamethods. */
typedef struct tgl_aref { tgl_array *p; } tgl_aref;
/* What Lua holds for a graph node (nodes live as long as the context). */
typedef struct tgl_vref { tgl_node *n; } tgl_vref;
]]

local core = { ffi = ffi }

-- The headers' TGL_* constants (tgl.h's #defines), e.g. TGL_MAX_DIMS.
core.defines = cdef.defines
core.MAX_DIMS = cdef.defines.TGL_MAX_DIMS
core.MAX_PARAMS = cdef.defines.TGL_MAX_PARAMS

-- The engine: the host links libtgl, so its symbols are in ffi.C; plain
-- luajit loads the shared library instead.
local C = ffi.C
if not pcall(function() return C.tgl_version end) then
  local libname = os.getenv('TGL_LIBRARY') or 'tgl'
  if libname == '' then
    error("tgl: environment variable TGL_LIBRARY='' is not valid: expected the path of "
          .. 'libtgl.so (or leave it unset)', 0)
  end
  local ok, lib = pcall(ffi.load, libname)
  if not ok then
    error('tgl: cannot find the tgl engine library (run scripts with the tgl host, '
          .. 'or set TGL_LIBRARY to the path of libtgl.so): ' .. tostring(lib), 0)
  end
  C = lib
end
core.C = C

-- One context per Lua state: error text and the random generator.
core.ctx = ffi.gc(C.tgl_ctx_new(), C.tgl_ctx_free)
assert(core.ctx ~= nil, 'tgl: out of memory creating the context')
-- Every TGL_* variable was checked when the context was made (config.c);
-- a bad one is an error here, once, naming it and the accepted values.
do
  local bad = C.tgl_config_env_error(core.ctx)
  if bad ~= nil then
    error('tgl: ' .. ffi.string(bad):gsub('\n', '\ntgl: '), 0)
  end
end

-- The host's Ctrl-C flag, when running inside the tgl host (declared by
-- host/tgl_host.h; plain luajit has no such symbol).
do
  local okf, flag = pcall(function() return ffi.C.tgl_host_interrupt_flag() end)
  if okf and flag ~= nil then
    C.tgl_ctx_set_interrupt_flag(core.ctx, flag)
    core.interrupt_flag = flag
  end
end

local aref_t = ffi.typeof('tgl_aref')
local out_array = ffi.typeof('tgl_array *[1]')
core.aref_t = aref_t
core.out_array_t = out_array

local function release_ref(r) C.tgl_array_release(r.p) end

-- Whether a chunk (debug.getinfo's source) is one of tgl's own Lua files:
-- the tgl, nn, torch and optim rooms (lua/tgl, lua/nn, lua/torch, lua/optim).  Errors skip
-- their frames, so they point at the user's line whichever room raised.
local function is_internal(source)
  return source:find('[/\\]tgl[/\\][%w_]+%.lua$') or source:find('[/\\]nn[/\\][%w_]+%.lua$')
      or source:find('[/\\]torch[/\\][%w_]+%.lua$') or source:find('[/\\]optim[/\\][%w_]+%.lua$')
end
core.is_internal = is_internal

-- The stack level of the first function outside tgl's own Lua files, so
-- errors point at the user's line whatever depth tgl raised them from.
local function user_level()
  local level = 3  -- the caller of the function that calls error()
  while true do
    local info = debug.getinfo(level, 'S')
    if not info then return 1 end
    if not is_internal(info.source) then return level - 1 end
    level = level + 1
  end
end
core.user_level = user_level

-- Raises a Lua error for a failed status.  The engine's message starts with
-- the C function's name; users see the Lua function's name instead.
function core.check(status, fname)
  if status == 0 then return end
  local msg = ffi.string(C.tgl_ctx_error(core.ctx))
  msg = msg:gsub('^tgl_[%w_]+: ', '')
  if msg == '' then msg = 'failed with status ' .. tonumber(status) end
  C.tgl_ctx_clear_error(core.ctx)
  error(('tgl.%s: %s'):format(fname, msg), user_level())
end

-- Raises a Lua error naming the function, pointing at the user's line.
function core.argerror(fname, fmt, ...)
  error(('tgl.%s: ' .. fmt):format(fname, ...), user_level())
end

-- The number of single-character edits that turn a into b (Levenshtein).
local function edit_distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end
core.edit_distance = edit_distance

-- The known key nearest to an unknown one, when it is near enough to be
-- a likely typo ('output' -> 'outputs', 'keepdim' -> 'keepdims').
local function nearest_key(key, known)
  local best, bestd
  for k in pairs(known) do
    local d = edit_distance(key:lower(), k:lower())
    if not bestd or d < bestd or (d == bestd and k < best) then best, bestd = k, d end
  end
  if best and bestd <= math.max(2, math.floor(#key / 3)) then return best end
end

-- A table's keys, sorted (lua/nn uses it too).
local function sorted_keys(known)
  local keys = {}
  for k in pairs(known) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end
core.sorted_keys = sorted_keys

-- Does v have the type named by want ('number', 'string', 'boolean',
-- 'table', 'function', 'array', 'variable', 'any'; alternatives joined
-- with '|', e.g. 'string|number')?
local vref_t = ffi.typeof('tgl_vref')
local function has_type(v, want)
  for w in want:gmatch('[^|]+') do
    if w == 'any' or type(v) == w and not (w == 'table' and ffi.istype(aref_t, v))
       or (w == 'array' and ffi.istype(aref_t, v))
       or (w == 'variable' and ffi.istype(vref_t, v)) then
      return true
    end
  end
  return false
end

local function type_of(v)
  if ffi.istype(aref_t, v) then return 'an array' end
  if ffi.istype(vref_t, v) then return 'a variable' end
  local t = type(v)
  return (t:match('^[aeiou]') and 'an ' or 'a ') .. t
end
-- "a variable", "an array", "a number", ...: what v is, for messages.
core.type_of = type_of

-- Checks a public function's options table against its known keys, each
-- with the type its value must have ({keepdims = 'boolean', ...}).  nil is
-- an empty table.  An unknown key raises, naming the nearest known key;
-- a positional entry or a value of the wrong type raises too.  Returns
-- the table (or a fresh empty one).
function core.check_options(fname, opts, known)
  if opts == nil then return {} end
  local keys = sorted_keys(known)
  if type(opts) ~= 'table' then
    core.argerror(fname, 'options must be a table, got %s (known options: %s)',
                  type(opts), table.concat(keys, ', '))
  end
  for k, v in pairs(opts) do
    local want = known[k]
    if want == nil then
      if type(k) ~= 'string' then
        core.argerror(fname, 'options are named (%s), got a value at position %s',
                    table.concat(keys, ', '), tostring(k))
      end
      local near = nearest_key(k, known)
      if near then
        core.argerror(fname, "unknown option '%s' (did you mean '%s'?)", k, near)
      end
      core.argerror(fname, "unknown option '%s' (known options: %s)", k, table.concat(keys, ', '))
    end
    if not has_type(v, want) then
      local alts = {}
      for w in want:gmatch('[^|]+') do
        alts[#alts + 1] = (w:match('^[aeiou]') and 'an ' or 'a ') .. w
      end
      core.argerror(fname, "option '%s' must be %s, got %s", k, table.concat(alts, ' or '), type_of(v))
    end
  end
  return opts
end

-- Live array bytes above which the next allocation runs a full collection:
-- LuaJIT's collector cannot see C-side memory, so we tell it (as Torch7 did).
local gc_threshold = 256 * 1024 * 1024

-- Takes ownership of a fresh tgl_array* (one reference) and returns the
-- garbage-collected box (tgl_aref) users hold; C calls take box.p.
-- Runs a full collection when the engine's live bytes passed the
-- threshold (tgl.function's output pool calls it after each call).
local function collect_if_needed()
  local live = tonumber(C.tgl_memory_live_bytes())
  if live > gc_threshold then
    collectgarbage()
    live = tonumber(C.tgl_memory_live_bytes())
    if live * 2 > gc_threshold then gc_threshold = live * 2 end
  end
end
core.collect_if_needed = collect_if_needed

function core.wrap(p)
  collect_if_needed()
  return ffi.gc(aref_t(p), release_ref)
end
core.release_ref = release_ref

function core.is_array(x)
  return ffi.istype(aref_t, x)
end

-- Dtype name -> id, accepting the aliases tgl_dtype_from_name knows.
function core.dtype_id(name, fname)
  if type(name) ~= 'string' then
    core.argerror(fname or 'dtype', 'dtype must be a string, got %s', type(name))
  end
  local id = C.tgl_dtype_from_name(name)
  if id < 0 then
    core.argerror(fname or 'dtype', "unknown dtype '%s' (expected float32, float64, "
                  .. 'int32, int64, uint8 or bool)', name)
  end
  return id
end

function core.dtype_name(id)
  return ffi.string(C.tgl_dtype_name(id))
end

return core
