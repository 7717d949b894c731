-- cdef_spec.lua — the Lua <-> C mirror.  The FFI declarations are generated
-- from the headers at build time (cmake/tgl_cdef.cmake -> tgl.cdef); these
-- specs check the result against the headers and the C compiler anyway:
-- every exported function resolves through ffi, the public structs have
-- C's layout (spec/c/abi_layout.c prints the compiler's view, TGL_ABI_LAYOUT
-- names it), the header's constants reach Lua, and a declaration added to a
-- header reaches the generated module with no hand edit.
local tgl = require 'tgl'
local core = require 'tgl.core'
local cdef = require 'tgl.cdef'
local ffi = require 'ffi'

local here = debug.getinfo(1, 'S').source:match('^@(.*)[/\\]') or 'spec'
local root = here .. '/..'

local read_file = dofile('spec/support.lua').read_file

local write_file = dofile('spec/support.lua').write_file

local function q(s)
  return "'" .. tostring(s):gsub("'", [['\'']]) .. "'"
end

-- A header's text without comments (they mention names in prose).
local function header_code(path)
  return (read_file(path):gsub('/%*.-%*/', ' '):gsub('//[^\n]*', ''))
end

-- The functions a header exports: the names declared after `api` (a
-- visibility macro such as TGL_API), preprocessor lines aside.
local function exported(path, api)
  local names = {}
  local code = ('\n' .. header_code(path)):gsub('\n[ \t]*#[^\n]*', '\n')
  for decl in code:gmatch('%f[%w_]' .. api .. '%f[^%w_]([^;]-)%(') do
    names[#names + 1] = decl:match('([%a_][%w_]*)%s*$')
  end
  return names
end

-- The structs a header defines with a body: typedef struct <name> { ... }.
local function header_structs(path)
  local names = {}
  for name in header_code(path):gmatch('typedef%s+struct%s+([%a_][%w_]*)%s*{') do
    names[#names + 1] = name
  end
  return names
end

-- The fields of a struct as LuaJIT sees them, in order (ffi.typeinfo walks
-- the ctype's chain of members); nil when this LuaJIT lacks ffi.typeinfo.
local function luajit_fields(ctype)
  if not ffi.typeinfo then return nil end
  local fields = {}
  local id = ffi.typeinfo(tonumber(ffi.typeof(ctype))).sib
  while id do
    local info = ffi.typeinfo(id)
    local child = ffi.typeinfo(bit.band(info.info, 0xffff))
    fields[#fields + 1] = { name = info.name, offset = info.size, size = child.size }
    id = info.sib
  end
  return fields
end

-- Lua's name of a C field: tgl.core gives tgl_array's data, shape, strides
-- and size a leading underscore (fields would shadow the methods).
local LUA_FIELD = { tgl_array = { data = '_data', shape = '_shape', strides = '_strides',
                                  size = '_size' } }
local function lua_field(struct, field)
  return LUA_FIELD[struct] and LUA_FIELD[struct][field] or field
end

-- What abi_layout prints, parsed: structs[name] = {size, align, fields
-- (in order), by_name}, defines[name] = value.
local layout
local function c_layout()
  if layout then return layout end
  local bin = assert(os.getenv('TGL_ABI_LAYOUT'),
                     'TGL_ABI_LAYOUT must name the abi_layout program (ctest sets it)')
  local p = assert(io.popen(q(bin)))
  local text = p:read('*a')
  assert(p:close(), 'abi_layout failed')
  layout = { structs = {}, order = {}, defines = {} }
  for line in text:gmatch('[^\n]+') do
    local f = {}
    for part in (line .. '\t'):gmatch('([^\t]*)\t') do f[#f + 1] = part end
    if f[1] == 'struct' then
      layout.structs[f[2]] = { size = tonumber(f[3]), align = tonumber(f[4]), fields = {},
                               by_name = {} }
      layout.order[#layout.order + 1] = f[2]
    elseif f[1] == 'field' then
      local s = assert(layout.structs[f[2]], line)
      local field = { name = f[3], offset = tonumber(f[4]), size = tonumber(f[5]) }
      s.fields[#s.fields + 1] = field
      s.by_name[f[3]] = field
    elseif f[1] == 'define' then
      layout.defines[f[2]] = tonumber(f[3])
    elseif f[1] == 'string' then
      layout.defines[f[2]] = f[3]
    else
      error('abi_layout printed an unknown record: ' .. line)
    end
  end
  return layout
end

describe('the FFI binding', function()
  local TGL_H = root .. '/include/tgl.h'
  local HOST_H = root .. '/host/tgl_host.h'

  it('resolves every TGL_API function of include/tgl.h in the engine namespace', function()
    local names = exported(TGL_H, 'TGL_API')
    -- the parse found the header's functions, not a handful
    assert.is_true(#names >= 80, 'only ' .. #names .. ' TGL_API functions parsed')
    local missing = {}
    for _, name in ipairs(names) do
      local ok, f = pcall(function() return core.C[name] end)
      if not ok or type(f) ~= 'cdata' then missing[#missing + 1] = name .. ': ' .. tostring(f) end
    end
    assert.are.same({}, missing)
  end)

  it('resolves every function host/tgl_host.h exports through ffi.C in the host', function()
    local names = exported(HOST_H, 'TGL_HOST_API')
    assert.are.same({ 'tgl_host_interrupt_flag' }, names)
    for _, name in ipairs(names) do
      local ok, f = pcall(function() return ffi.C[name] end)
      assert.is_true(ok, tostring(f))
      assert.are.equal('cdata', type(f))
    end
    -- and tgl.core handed the flag to the engine
    assert.is_true(core.interrupt_flag ~= nil)
  end)

  it('lays out every public struct of tgl.h as the C compiler does', function()
    local c = c_layout()
    -- abi_layout.c lists every struct the header defines
    for _, name in ipairs(header_structs(TGL_H)) do
      assert.is_truthy(c.structs[name], 'spec/c/abi_layout.c does not list struct ' .. name)
    end
    for _, name in ipairs(c.order) do
      local s = c.structs[name]
      assert.are.equal(s.size, ffi.sizeof(name), 'sizeof(' .. name .. ')')
      assert.are.equal(s.align, ffi.alignof(name), 'alignof(' .. name .. ')')
      for _, f in ipairs(s.fields) do
        local lf = lua_field(name, f.name)
        assert.are.equal(f.offset, ffi.offsetof(name, lf), ('offsetof(%s, %s)'):format(name, lf))
      end
      local lj = luajit_fields(name)
      if lj then
        -- the same fields in the same order, each of C's size
        local listed, unlisted = {}, {}
        for _, f in ipairs(s.fields) do listed[lua_field(name, f.name)] = true end
        for _, f in ipairs(lj) do
          if not listed[f.name] then unlisted[#unlisted + 1] = f.name end
        end
        assert.are.same({}, unlisted, 'fields of ' .. name .. ' that spec/c/abi_layout.c lacks')
        assert.are.equal(#s.fields, #lj, name .. ': number of fields')
        for k, f in ipairs(lj) do
          local cf = s.fields[k]
          assert.are.equal(lua_field(name, cf.name), f.name, name .. ': field ' .. k)
          assert.are.equal(cf.size, f.size, ('sizeof %s.%s'):format(name, f.name))
        end
      end
    end
  end)

  it("gives Lua the header's #define constants with the C compiler's values", function()
    local c = c_layout()
    for name, value in pairs(c.defines) do
      assert.are.equal(value, core.defines[name], name)
    end
    -- every object-like TGL_* macro of the header with a value is there
    -- (TGL_API, the visibility attribute, is empty for the FFI)
    for name, value in header_code(TGL_H):gmatch('#%s*define%s+(TGL_[%w_]+)[ \t]+([^\n]-)%s*\n') do
      if value ~= '' and name ~= 'TGL_API' then
        assert.is_not_nil(core.defines[name], name .. ' is missing from tgl.cdef.defines')
      end
    end
    assert.are.equal(8, core.MAX_DIMS)
    assert.are.equal(core.defines.TGL_MAX_DIMS, core.MAX_DIMS)
    assert.are.equal(core.defines.TGL_MAX_PARAMS, core.MAX_PARAMS)
    assert.are.equal(core.defines.TGL_VERSION, tgl.version)
  end)

  it('sizes the Lua layer by TGL_MAX_DIMS', function()
    local dims = {}
    for k = 1, core.MAX_DIMS do dims[k] = 1 end
    assert.are.equal(core.MAX_DIMS, tgl.zeros(dims):dim())
    dims[#dims + 1] = 1
    local ok, err = pcall(tgl.zeros, dims)
    assert.is_false(ok)
    assert.truthy(tostring(err):find(('at most %d are supported'):format(core.MAX_DIMS), 1, true),
                  tostring(err))
  end)
end)

describe('the cdef generator (cmake/tgl_cdef.cmake)', function()
  local cmake = os.getenv('TGL_CMAKE') or 'cmake'
  local cc = os.getenv('TGL_CC') or 'cc'
  local tmp = (os.getenv('TGL_TEST_TMP') or '/tmp/tgl_test_tmp') .. '/cdef_spec'
  os.execute('mkdir -p ' .. q(tmp))

  -- Runs the generator over header text; returns the module (or nil), and
  -- the generator's output.
  local function generate(text)
    write_file(tmp .. '/t.h', text)
    os.remove(tmp .. '/cdef.lua')
    local p = assert(io.popen(('%s -DCC=%s -DHEADERS=declarations=%s -DOUT=%s -DWORK=%s -P %s 2>&1')
      :format(q(cmake), q(cc), q(tmp .. '/t.h'), q(tmp .. '/cdef.lua'), q(tmp .. '/work'),
              q(root .. '/cmake/tgl_cdef.cmake'))))
    local out = p:read('*a')
    p:close()
    local chunk = loadfile(tmp .. '/cdef.lua')
    return chunk and chunk(), out
  end

  it('carries a function and a constant added to the header with no hand edit', function()
    local m, out = generate(read_file(root .. '/include/tgl.h'):gsub('#endif /%* TGL_H %*/', [[
#define TGL_SPEC_ADDED (TGL_MAX_DIMS * 2 + 1u)
TGL_API tgl_status tgl_spec_added(tgl_ctx *ctx, int64_t n[TGL_SPEC_ADDED]);
#endif]]))
    assert.is_truthy(m, out)
    assert.truthy(m.declarations:find('tgl_status tgl_spec_added(tgl_ctx *ctx, int64_t n[(8 * 2 + 1u)]);',
                                      1, true), m.declarations)
    assert.are.equal(17, m.defines.TGL_SPEC_ADDED)
    -- the rest is what the build generated from the real header
    assert.are.equal(cdef.declarations, (m.declarations:gsub('tgl_status tgl_spec_added[^\n]*\n', '')))
  end)

  it('stops on a TGL_* constant it cannot turn into a Lua value', function()
    local m, out = generate('#include <stdint.h>\n#define TGL_SPEC_CAST ((int64_t)1)\n')
    assert.is_nil(m)
    assert.truthy(out:find('#define TGL_SPEC_CAST ((int64_t)1)', 1, true), out)
  end)
end)
