-- tgl.config — the settings (tgl.config in the public API), in a module of
-- its own at the bottom of the stack: tgl.array and tgl.graph read floatX
-- here, so no module reaches up into `tgl` for it.
--
-- floatX (the default float dtype) lives in Lua; every other setting is
-- the engine's (tgl_config_set), so assigning one checks it at once.  The
-- keys come from the engine (tgl_config_count / tgl_config_key): a setting
-- the engine adds is in tgl.config, its tostring and its Tab completion
-- with no edit here, read and written as text unless VALUE below says how
-- Lua presents it:
--   exclude = {'rule', ...}  rewrite rules switched off (or TGL_EXCLUDE=a,b)
--   threads, cache_max_bytes, exit_wait  numbers
--   whole_step = true|false|'bound'  bind straight-line programs to fixed
--     buffers after two calls on the same shapes, and generate their C;
--     'bound' binds without generating
--   allow_tf32 = true|false  float32 products on the GPU may use TF32
--   cc, cflags, cache_dir, compile ('tiered'|'sync'|'tcc'|'cc')  text
local core = require 'tgl.core'
local ffi, C = core.ffi, core.C

local floatX = os.getenv('TGL_FLOATX') or 'float32'

-- Every setting, in the order tostring(tgl.config) shows them: floatX,
-- then the engine's in its order.
local keys = { 'floatX' }
local engine_keys = {}
for i = 0, C.tgl_config_count() - 1 do
  local k = ffi.string(C.tgl_config_key(i))
  keys[#keys + 1] = k
  engine_keys[k] = true
end

-- A known rewrite rule's name -> true.
local function rule_names()
  local known = {}
  for i = 0, C.tgl_rule_count() - 1 do known[ffi.string(C.tgl_rule_name(i))] = true end
  return known
end

local function number(v) return tonumber(v) end

-- How Lua presents the engine's settings that are not plain text: get
-- turns the engine's text into the Lua value, set checks a Lua value and
-- turns it into the engine's text.
local VALUE = {
  exclude = {
    get = function(v)
      local list = {}
      for name in v:gmatch('[^,]+') do list[#list + 1] = name end
      return list
    end,
    set = function(v)
      -- unknown names are a typo, not a no-op: refuse them
      local known = rule_names()
      local names = type(v) == 'table' and v or {}
      if type(v) == 'string' then for nm in v:gmatch('[^,%s]+') do names[#names + 1] = nm end end
      for _, nm in ipairs(names) do
        if not known[nm] then
          core.argerror('config', "exclude: unknown rewrite rule '%s' (see tgl.rules())", tostring(nm))
        end
      end
      if type(v) == 'table' then v = table.concat(v, ',') end
      return v
    end,
  },
  threads = { get = number },
  cache_max_bytes = { get = number },
  exit_wait = { get = number },
  allow_tf32 = {
    get = function(v) return v == 'true' end,
    set = function(v)
      if type(v) ~= 'boolean' then
        core.argerror('config', 'allow_tf32 must be true or false, got %s', tostring(v))
      end
      return tostring(v)
    end,
  },
  whole_step = {
    get = function(v) return v == 'bound' and 'bound' or v == 'on' end,
    set = function(v)
      if type(v) ~= 'boolean' and v ~= 'bound' then
        core.argerror('config', "whole_step must be true, false or 'bound', got %s", tostring(v))
      end
      return v == 'bound' and 'bound' or (v and 'on' or 'off')
    end,
  },
}

-- A setting's value as Lua source: strings quoted, lists in braces.
local function literal(v)
  if type(v) == 'string' then return ('%q'):format(v) end
  if type(v) == 'table' then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = ('%q'):format(x) end
    return #parts == 0 and '{}' or '{ ' .. table.concat(parts, ', ') .. ' }'
  end
  return tostring(v)
end

return setmetatable({}, {
  -- the settings, for the REPL's Tab completion (tgl.repl)
  __complete = keys,
  -- tostring(tgl.config), which the REPL prints: each setting and its value
  __tostring = function(self)
    local lines = { 'tgl.config {' }
    for _, k in ipairs(keys) do
      lines[#lines + 1] = ('  %s = %s,'):format(k, literal(self[k]))
    end
    lines[#lines + 1] = '}'
    return table.concat(lines, '\n')
  end,
  __index = function(_, k)
    if k == 'floatX' then return floatX end
    if engine_keys[k] then
      local v = ffi.string(C.tgl_config_get(core.ctx, k))
      local conv = VALUE[k]
      if conv and conv.get then return conv.get(v) end
      return v
    end
    return nil
  end,
  __newindex = function(_, k, v)
    if k == 'floatX' then
      if v ~= 'float32' and v ~= 'float64' then
        core.argerror('config', "floatX must be 'float32' or 'float64', got %s", tostring(v))
      end
      floatX = v
    elseif engine_keys[k] then
      local conv = VALUE[k]
      if conv and conv.set then v = conv.set(v) end
      if v == nil then v = '' end
      core.check(C.tgl_config_set(core.ctx, k, tostring(v)), 'config')
    else
      core.argerror('config', "unknown setting '%s'", tostring(k))
    end
  end,
})
