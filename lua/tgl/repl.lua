-- tgl.repl — the Lua side of the tgl REPL (host/repl.c): compiling what the
-- user typed (auto-print expressions, detect unfinished multi-line input),
-- printing results, and tab-completion candidates.  Kept in Lua so specs
-- can test the REPL's decisions without a terminal.
local ffi = require 'ffi'

local M = {}

local keywords = {
  'and', 'break', 'do', 'else', 'elseif', 'end', 'false', 'for', 'function',
  'goto', 'if', 'in', 'local', 'nil', 'not', 'or', 'repeat', 'return', 'then',
  'true', 'until', 'while',
}
local is_keyword = {}
for _, k in ipairs(keywords) do is_keyword[k] = true end

-- True when a syntax error message says the input stopped early, i.e. more
-- lines could complete it (lua.c's incomplete(): the message ends in '<eof>').
function M.is_incomplete(msg)
  return type(msg) == 'string' and msg:sub(-7) == "'<eof>'"
end

-- Compiles REPL input.  Tries it as an expression first ("return " .. src),
-- so `1+1` and `f()` print their values, then as a statement.  A leading
-- '=' is Lua 5.1's print shorthand and is accepted.
-- Returns fn on success; nil, message, incomplete otherwise, where
-- incomplete is true when more input could make it compile.
function M.compile(src, chunkname)
  chunkname = chunkname or '=stdin'
  if src:sub(1, 1) == '=' then src = src:sub(2) end
  local fn, experr = loadstring('return ' .. src, chunkname)
  if fn then
    -- Run it with the values passing through a local identity function
    -- rather than straight to `return`: `return error('x')` is a tail
    -- call, and LuaJIT drops the chunk's frame, so the message would lose
    -- its "stdin:1:" position.  The newline ends a trailing `--` comment;
    -- `x;` only compiles without the wrapper.
    return loadstring('local __tgl_repl_values = function(...) return ... end '
                      .. 'return __tgl_repl_values(' .. src .. '\n)', chunkname) or fn
  end
  local stmt, err = loadstring(src, chunkname)
  if stmt then return stmt end
  -- Incomplete as a statement (`function f()`), or as an expression
  -- (`f(1,`): a prefix of either may be finished by the next line.
  return nil, err, M.is_incomplete(err) or M.is_incomplete(experr)
end

-- The REPL's rendering of a chunk's results: tostring of each value
-- (arrays print through their __tostring), separated by tabs.  nil when
-- there is nothing to print.
function M.format(...)
  local n = select('#', ...)
  if n == 0 then return nil end
  local parts = {}
  for i = 1, n do parts[i] = tostring((select(i, ...))) end
  return table.concat(parts, '\t')
end

-- Prints a chunk's results on stdout (the host calls this after each chunk).
function M.show(...)
  local s = M.format(...)
  if s then
    io.stdout:write(s, '\n')
    io.stdout:flush()
  end
end

-- Method tables of cdata types, which Lua cannot enumerate from a value:
-- the metatype's __index is out of reach of getmetatable.  A module that
-- calls ffi.metatype registers its methods here so `a:<Tab>` completes.
local cdata_methods = {}

-- Registers methods (a table) as the completion source for cdata of ctype
-- (a ctype or a C type string).  fields, optional, is a table whose keys
-- are fields the value shows through `.` but that are not methods (they
-- complete after '.', not after ':').
function M.register_methods(ctype, methods, fields)
  assert(type(methods) == 'table', 'tgl.repl.register_methods: methods must be a table')
  assert(fields == nil or type(fields) == 'table', 'tgl.repl.register_methods: fields must be a table')
  cdata_methods[#cdata_methods + 1] = { ct = ffi.typeof(ctype), methods = methods, fields = fields }
end

-- True when x is cdata of the C type named ctname (false when that type
-- is not declared).
local function is_ctype(ctname, x)
  local ok, ct = pcall(ffi.typeof, ctname)
  return ok and ffi.istype(ct, x)
end

-- The method table and the field table (or nil) for a cdata value: a
-- registered one, else tgl's own: arrays' (tgl.array.methods, which later
-- modules extend) and symbolic variables' (tgl.variable.methods and
-- .fields).  nil for other cdata.
local function methods_of_cdata(x)
  for _, e in ipairs(cdata_methods) do
    if ffi.istype(e.ct, x) then return e.methods, e.fields end
  end
  local array, variable = package.loaded['tgl.array'], package.loaded['tgl.variable']
  if type(array) == 'table' and type(array.methods) == 'table' and is_ctype('tgl_aref', x) then
    return array.methods, array.fields
  end
  if type(variable) == 'table' and type(variable.methods) == 'table' and is_ctype('tgl_vref', x) then
    return variable.methods, variable.fields
  end
  return nil
end

local MAX_DEPTH = 16  -- __index chains longer than this are not followed

-- The table whose keys a value shows through `.` and `:`: the value itself
-- for a table, then its metatable's __index when that is a table.  For
-- cdata, a registered method table.  Never calls metamethods: completion
-- must have no side effects.
-- A metatable may list the keys its __index function serves (a proxy
-- such as tgl.config) in a __complete table of names; they are shown as a
-- table of their own.
local function index_tables(x, with_fields)
  local out, seen = {}, {}
  if type(x) == 'cdata' then
    local methods, fields = methods_of_cdata(x)
    if with_fields and type(fields) == 'table' then out[#out + 1] = fields end
    out[#out + 1] = methods
    x = methods
  end
  local depth = 0
  while x ~= nil and depth < MAX_DEPTH do
    if type(x) == 'table' then
      if seen[x] then break end
      seen[x] = true
      if x ~= out[#out] then out[#out + 1] = x end
    end
    local mt = debug.getmetatable(x)
    local listed = type(mt) == 'table' and rawget(mt, '__complete') or nil
    if type(listed) == 'table' and not seen[listed] then
      seen[listed] = true
      local keys = {}
      for _, k in ipairs(listed) do keys[k] = true end
      out[#out + 1] = keys
    end
    local idx = type(mt) == 'table' and rawget(mt, '__index') or nil
    if type(idx) ~= 'table' then break end
    x, depth = idx, depth + 1
  end
  return out
end

-- x.key without metamethods (following table __index chains only).
local function lookup(x, key)
  for _, t in ipairs(index_tables(x)) do
    local v = rawget(t, key)
    if v ~= nil then return v end
  end
  return nil
end

local function callable(v)
  if type(v) == 'function' then return true end
  local mt = debug.getmetatable(v)
  return type(mt) == 'table' and rawget(mt, '__call') ~= nil
end

-- Completion candidates for the word being typed: globals and keywords
-- for a bare name (`pri`), fields for a dotted path (`string.fo`,
-- `tgl.ze`), and methods — callable fields only, and for an object with a
-- class only its class's — after ':' (`a:sh`).
-- Names starting with '_' are left out unless the typed part starts with
-- '_'.  The path is walked from env (default _G).  Returns full words,
-- sorted.
function M.complete(text, env)
  env = env or _G
  local head, sep, partial = text:match('^(.-)([.:])([%w_]*)$')
  local obj, found = env, {}
  if head then
    for part in (head .. '.'):gmatch('(.-)%.') do
      if not part:match('^[%a_][%w_]*$') then return {} end
      obj = lookup(obj, part)
      if obj == nil then return {} end
    end
    head = head .. sep
  else
    if text ~= '' and not text:match('^[%a_][%w_]*$') then return {} end
    head, partial = '', text
    for _, k in ipairs(keywords) do found[k] = true end
  end
  -- names starting with '_' are internals (f._fn, __call, __index): shown
  -- only when the typed part asks for them
  local hidden = partial:sub(1, 1) ~= '_'
  -- After ':' of an object (a table whose metatable's __index is a table:
  -- its class), the methods are what the class chain provides; a callable
  -- the object holds itself is a field (f.fn{n_calls = N} takes no self),
  -- so f:fn would pass f as its argument.  Plain tables (modules) keep
  -- their own functions.
  local mt = type(obj) == 'table' and debug.getmetatable(obj) or nil
  local own_are_fields = sep == ':' and type(mt) == 'table' and type(rawget(mt, '__index')) == 'table'
  local seen = {}  -- a key shadows the same key further down the chain
  for _, t in ipairs(index_tables(obj, sep == '.')) do
    local fields_only = own_are_fields and rawequal(t, obj)
    for k, v in next, t do
      if type(k) == 'string' and not seen[k] then
        seen[k] = true
        if k:match('^[%a_][%w_]*$') and not is_keyword[k]
           and not (hidden and k:sub(1, 1) == '_')
           and (sep ~= ':' or (callable(v) and not fields_only)) then
          found[k] = true
        end
      end
    end
  end
  local out = {}
  for k in pairs(found) do
    if k:sub(1, #partial) == partial then out[#out + 1] = head .. k end
  end
  table.sort(out)
  return out
end

return M
