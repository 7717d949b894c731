-- torch.save / torch.load: Torch7's names for writing and reading Lua
-- objects made of tensors, numbers, strings, booleans, nested tables and nn
-- modules (and criterions), in tgl's own file format (not Torch7's binary
-- format: a file written by Torch7 does not load here, nor the reverse).
--
-- The file is a NumPy .npz archive (tgl.save: written to a temporary file
-- and renamed, so a failed save leaves the old file): each tensor is an
-- entry 'a1', 'a2', ..., and the entry 'torch' is a uint8 array holding a
-- text description of the object that refers to those entries.  NumPy can
-- therefore open the tensors of a saved file.  The description is read by
-- a small parser here (never executed as Lua code), so a damaged or
-- hostile file gives an error and nothing else.
--
-- The description: a version line "tgl-torch 1", then one value:
--   n <number>              a number ('%.17g', or inf, -inf, nan)
--   s <length> <bytes>      a string (the bytes follow one space)
--   b 0 | b 1               a boolean
--   a <k>                   the tensor saved as entry 'a<k>'
--   r <id>                  a table (or module) already written: the same
--                           object again (sharing is kept, cycles too)
--   T <id> <count> ...      a table and its <count> key/value pairs
--   M <id> <class> <count> ...  an object whose metatable is the class
--                           <class> ('nn.Linear'): its fields as pairs
-- A tensor that appears twice is saved once and loads back as one array;
-- views of one memory (getParameters' flat tensors and the modules'
-- weights) load back as separate arrays.
local tgl = require 'tgl'
local core = require 'tgl.core'

return function(torch, h)
  local err = h.err
  local VERSION = 'tgl-torch 1'

  -- The fields of a module that are caches (compiled functions, shared
  -- variables, the last forward's results, a sequence module's carried
  -- state, Dropout's noise buffers): made again when needed, so not
  -- saved.  nn's rule, as its clone() applies it: a field whose name
  -- starts with '_' and that holds a table other than an array.
  local function is_cache(key, val)
    return type(key) == 'string' and key:sub(1, 1) == '_' and type(val) == 'table'
           and not torch.isTensor(val)
  end

  -- The class table of a typename ('nn.Linear' -> nn.Linear), loading nn
  -- when asked for one of its classes.
  local function class_of(name)
    local pkg, cls = name:match('^(%w+)%.([%w_]+)$')
    if pkg == 'nn' then
      local nn = require 'nn'
      return nn[cls]
    end
    return nil
  end

  local function number_text(x)
    if x ~= x then return 'nan' end
    if x == math.huge then return 'inf' end
    if x == -math.huge then return '-inf' end
    return ('%.17g'):format(x)
  end

  -- torch.save(path, obj)
  function torch.save(path, obj)
    if type(path) ~= 'string' then err('torch.save', 'path must be a string, got %s', type(path)) end
    local out, arrays, ids = { VERSION, '\n' }, {}, {}
    local n_arrays, n_tables = 0, 0
    local array_ids = {}
    local function put(...) for i = 1, select('#', ...) do out[#out + 1] = select(i, ...) end end
    local function write(v, where)
      local tv = type(v)
      if tv == 'number' then
        put('n ', number_text(v), '\n')
      elseif tv == 'string' then
        put('s ', tostring(#v), ' ', v, '\n')
      elseif tv == 'boolean' then
        put('b ', v and '1' or '0', '\n')
      elseif core.is_array(v) then
        local k = array_ids[v]
        if not k then
          n_arrays = n_arrays + 1
          k = n_arrays
          array_ids[v] = k
          arrays['a' .. k] = v
        end
        put('a ', tostring(k), '\n')
      elseif tv == 'table' then
        if ids[v] then put('r ', tostring(ids[v]), '\n'); return end
        n_tables = n_tables + 1
        ids[v] = n_tables
        local mt = getmetatable(v)
        local cname = mt and type(mt.__typename) == 'string' and mt.__typename or nil
        if mt and not (cname and class_of(cname) == mt) then
          err('torch.save', '%s: a table with a metatable that is not a torch or nn class (%s)',
              where, cname or 'no __typename')
        end
        local keys = {}
        for key, val in pairs(v) do
          if not (cname and is_cache(key, val)) then
            local tk = type(key)
            if tk ~= 'number' and tk ~= 'string' and tk ~= 'boolean' then
              err('torch.save', '%s: a key of type %s (keys are numbers, strings or booleans)', where, tk)
            end
            keys[#keys + 1] = key
          end
        end
        -- a fixed order: the same object always gives the same file
        table.sort(keys, function(a, b)
          if type(a) ~= type(b) then return type(a) < type(b) end
          if type(a) == 'boolean' then return (not a) and b end
          return a < b
        end)
        if cname then put('M ', tostring(n_tables), ' ', cname, ' ', tostring(#keys), '\n')
        else put('T ', tostring(n_tables), ' ', tostring(#keys), '\n') end
        for _, key in ipairs(keys) do
          write(key, where)
          write(v[key], where .. '.' .. tostring(key))
        end
      else
        err('torch.save', '%s is a %s: torch.save writes tensors, numbers, strings, booleans, tables '
            .. 'and nn modules', where, tv)
      end
    end
    write(obj, 'the object')
    local text = table.concat(out)
    local bytes = tgl.zeros(#text, { dtype = 'uint8' })
    local p = core.ffi.cast('uint8_t *', bytes:data())
    core.ffi.copy(p, text, #text)
    arrays.torch = bytes
    local ok, e = pcall(tgl.save, path, arrays)
    if not ok then err('torch.save', '%s', (tostring(e):gsub('^[^\n:]*:%d+: ', ''))) end
  end

  -- torch.load(path) -> the object
  function torch.load(path)
    if type(path) ~= 'string' then err('torch.load', 'path must be a string, got %s', type(path)) end
    local ok, entries = pcall(tgl.load, path)
    if not ok then
      err('torch.load', '%s', (tostring(entries):gsub('^[^\n:]*:%d+: ', ''):gsub('^tgl%.load: ', '')))
    end
    local function bad(fmt, ...)
      err('torch.load', "'%s' is not a torch.save file of tgl (%s)", path, fmt:format(...))
    end
    if type(entries) ~= 'table' or not core.is_array(entries.torch) or entries.torch.dtype ~= 'uint8'
        or entries.torch:dim() ~= 1 then
      bad("no 'torch' entry")
    end
    local d = entries.torch:contiguous()
    local text = core.ffi.string(core.ffi.cast('const char *', d:data()), d:nelement())
    if text:sub(1, #VERSION + 1) ~= VERSION .. '\n' then bad('unknown version line') end
    local pos = #VERSION + 2
    local tables = {}
    local function word()
      local s, e = text:find('^[^ \n]+', pos)
      if not s then bad('truncated or damaged description at byte %d', pos) end
      pos = e + 1
      local sep = text:sub(pos, pos)
      if sep ~= ' ' and sep ~= '\n' then bad('damaged description at byte %d', pos) end
      pos = pos + 1
      return text:sub(s, e)
    end
    local function count()
      local w = word()
      local v = tonumber(w)
      if not v or v < 0 or v ~= math.floor(v) then bad('a count expected at byte %d, got %q', pos, w) end
      return v
    end
    local read
    local function fields(t, n)
      for _ = 1, n do
        local k = read()
        if k == nil or k ~= k then bad('a nil or NaN key') end
        t[k] = read()
      end
    end
    function read()
      local tag = word()
      if tag == 'n' then
        local w = word()
        if w == 'nan' then return 0 / 0 elseif w == 'inf' then return math.huge
        elseif w == '-inf' then return -math.huge end
        local v = tonumber(w)
        if not v then bad('a number expected, got %q', w) end
        return v
      elseif tag == 's' then
        local n = count()
        if pos - 1 + n > #text then bad('a string runs past the end') end
        local v = text:sub(pos, pos + n - 1)
        pos = pos + n
        if text:sub(pos, pos) ~= '\n' then bad('damaged string at byte %d', pos) end
        pos = pos + 1
        return v
      elseif tag == 'b' then
        local w = word()
        if w ~= '0' and w ~= '1' then bad('a boolean expected, got %q', w) end
        return w == '1'
      elseif tag == 'a' then
        local k = count()
        local a = entries['a' .. k]
        if not core.is_array(a) then bad("the entry 'a%d' is missing", k) end
        return a
      elseif tag == 'r' then
        local id = count()
        if not tables[id] then bad('a reference to table %d before it', id) end
        return tables[id]
      elseif tag == 'T' then
        local id = count()
        local t = {}
        tables[id] = t
        fields(t, count())
        return t
      elseif tag == 'M' then
        local id = count()
        local cname = word()
        local cls = class_of(cname)
        if not cls then bad('unknown class %s', cname) end
        local t = setmetatable({}, cls)
        tables[id] = t
        fields(t, count())
        return t
      end
      bad('unknown tag %q at byte %d', tag, pos)
    end
    local v = read()
    if pos <= #text then bad('extra bytes after the object') end
    return v
  end
end
