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
-- (in order), by_name}, defines[name] = value, enums[name] = value.
local layout
local function c_layout()
  if layout then return layout end
  local bin = assert(os.getenv('TGL_ABI_LAYOUT'),
                     'TGL_ABI_LAYOUT must name the abi_layout program (ctest sets it)')
  local p = assert(io.popen(q(bin)))
  local text = p:read('*a')
  assert(p:close(), 'abi_layout failed')
  layout = { structs = {}, order = {}, defines = {}, enums = {} }
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
    elseif f[1] == 'enum' then
      layout.enums[f[2]] = tonumber(f[3])
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

-- The enumerators of every enum a header defines, in order.
local function header_enumerators(path)
  local names = {}
  for body in header_code(path):gmatch('typedef%s+enum%s+[%a_][%w_]*%s*(%b{})') do
    for name in body:gmatch('[{,]%s*(TGL_[%w_]+)') do names[#names + 1] = name end
  end
  return names
end

describe('the Lua layer takes the C contract from C', function()
  local TGL_H = root .. '/include/tgl.h'
  local C = core.C
  local graph = require 'tgl.graph'
  local array = require 'tgl.array'

  it("reads every enumerator of tgl.h through ffi.C, with the C compiler's value", function()
    local c = c_layout()
    local names = header_enumerators(TGL_H)
    assert.is_true(#names >= 30, 'only ' .. #names .. ' enumerators parsed')
    local listed = 0
    for _, name in ipairs(names) do
      local ok, v = pcall(function() return C[name] end)
      assert.is_true(ok and type(v) == 'number', name .. ' does not resolve through ffi.C: ' .. tostring(v))
      if c.enums[name] ~= nil then
        listed = listed + 1
        assert.are.equal(c.enums[name], v, name)
      end
    end
    -- every enumerator abi_layout prints is one the parse found
    local n = 0
    for name in pairs(c.enums) do
      n = n + 1
      assert.is_not_nil(C[name], name)
    end
    assert.are.equal(n, listed)
    assert.are.equal(3, c.enums.TGL_NODE_APPLY)
  end)

  it('numbers dtypes, node kinds, devices, linkers and modes as tgl.h does', function()
    local n = 0
    for name, id in pairs(array.DTYPE) do
      n = n + 1
      assert.are.equal(C.tgl_dtype_from_name(name), id, name)
      assert.are.equal(name, array.DTYPE_NAME[id])
    end
    assert.are.equal(C.TGL_NDTYPES, n)
    assert.are.equal(C.TGL_BOOL, array.DTYPE.bool)
    assert.are.same({ input = C.TGL_NODE_INPUT, constant = C.TGL_NODE_CONSTANT,
                      shared = C.TGL_NODE_SHARED, apply = C.TGL_NODE_APPLY }, graph.KIND)
    assert.are.equal(C.TGL_DEVICE_CPU, array.DEVICE_CPU)
    -- the kinds the variables show are the engine's
    local x = tgl.vector('x')
    assert.are.equal('input', x.kind)
    assert.are.equal('apply', (x + 1).kind)
    assert.are.equal('shared', tgl.shared(tgl.zeros(2)).kind)
    assert.are.equal('constant', tgl.constant(2).kind)
  end)

  it('builds op parameters with the flags of tgl.h', function()
    local D = core.defines
    for _, name in ipairs({ 'TGL_IDX_INDEX', 'TGL_IDX_SLICE', 'TGL_IDX_START_INPUT', 'TGL_IDX_STOP_INPUT',
                            'TGL_IDX_STEP_INPUT', 'TGL_IDX_NO_START', 'TGL_IDX_NO_STOP', 'TGL_IDX_LUA',
                            'TGL_INC_SET', 'TGL_REDUCE_KEEPDIMS' }) do
      assert.are.equal('number', type(D[name]), name)
    end
    local m, n = tgl.matrix('m'), tgl.lscalar('n')
    -- m[{2, {1, n}}]: an index, then a slice whose stop is an input, 1-based
    local P = C.tgl_node_params(m[{ 2, { 1, n } }].n)
    assert.are.equal(8, P.n)
    assert.are.same({ D.TGL_IDX_INDEX, 1 }, { tonumber(P.i[0]), tonumber(P.i[1]) })
    assert.are.equal(D.TGL_IDX_SLICE + D.TGL_IDX_STOP_INPUT + D.TGL_IDX_LUA, tonumber(P.i[4]))
    -- m[{{}, {2}}]: no start, no stop on axis 1
    P = C.tgl_node_params(m[{ 1, {} }].n)
    assert.are.equal(D.TGL_IDX_SLICE + D.TGL_IDX_NO_START + D.TGL_IDX_NO_STOP, tonumber(P.i[4]))
    assert.are.equal(D.TGL_REDUCE_KEEPDIMS, C.tgl_node_params(tgl.sum(m, 2, { keepdims = true }).n).flags)
    assert.are.equal(0, C.tgl_node_params(tgl.sum(m, 2).n).flags)
    assert.are.equal(D.TGL_INC_SET, C.tgl_node_params(tgl.set_subtensor(m[1], 0).n).flags)
    assert.are.equal(0, C.tgl_node_params(tgl.inc_subtensor(m[1], 1).n).flags)
  end)

  it("exports every op of the engine's catalog but graph.INTERNAL_OPS, under its own name", function()
    local count = C.tgl_op_count()
    assert.are.equal(count, #graph.OPS)
    local catalog, exported = {}, 0
    for id = 0, count - 1 do
      local name = ffi.string(C.tgl_op_name(id))
      local syn = C.tgl_op_synopsis(id)
      assert.is_true(syn ~= nil and ffi.string(syn) ~= '', name .. ' has no synopsis')
      assert.are.same({ name = name, synopsis = ffi.string(syn) }, graph.OPS[id + 1])
      catalog[name] = true
      if graph.INTERNAL_OPS[name] == nil then
        exported = exported + 1
        assert.are.equal('function', type(graph[name]),
                         ("op '%s' of the catalog has no function in lua/tgl/graph.lua: bind it, "
                          .. 'or list it in graph.INTERNAL_OPS saying what users call instead'):format(name))
        assert.are.equal(graph[name], tgl[name], name)
      end
    end
    assert.is_true(C.tgl_op_synopsis(count) == nil)
    assert.is_true(C.tgl_op_synopsis(-1) == nil)
    -- each exclusion names an op of the catalog, and says why
    for name, why in pairs(graph.INTERNAL_OPS) do
      assert.is_true(catalog[name], 'graph.INTERNAL_OPS lists ' .. name .. ', which is not an op')
      assert.are.equal('string', type(why))
      -- not exported from tgl.graph (arange and scan are tgl functions of their own)
      assert.is_true(tgl[name] == nil or tgl[name] ~= graph[name], name)
    end
    assert.is_true(exported >= 50, exported .. ' ops exported')
    for _, name in ipairs({ 'tanh', 'add', 'and_', 'sum', 'argmax', 'dot', 'dimshuffle', 'softmax',
                            'one_hot', 'ifelse', 'switch', 'cast', 'inc_subtensor' }) do
      assert.are.equal('function', type(tgl[name]), name)
    end
    for _, name in ipairs({ 'gemm', 'fused', 'output', 'rop_direction', 'softmax_crossentropy_dx',
                            'class_xent_delta', 'axes_size', 'subtensor', 'fill_like' }) do
      assert.is_nil(tgl[name], name)
    end
  end)

  -- The keys tgl.h documents for tgl_config_set (its comment's list).
  local function documented_keys()
    local text = read_file(TGL_H)
    local block = assert(text:match('Sets a setting of the context.-Unknown keys'), 'tgl_config_set comment')
    local keys = {}
    for names in block:gmatch('\n %*   ([%a_][%w_, ]-)%s%s+%S') do
      for k in names:gmatch('[%a_][%w_]*') do keys[#keys + 1] = k end
    end
    table.sort(keys)
    return keys
  end

  it('lists every setting of the engine in tgl.config, from tgl_config_key', function()
    local keys, set = {}, {}
    for i = 0, C.tgl_config_count() - 1 do
      local k = ffi.string(C.tgl_config_key(i))
      keys[#keys + 1], set[k] = k, true
      assert.is_true(C.tgl_config_get(core.ctx, k) ~= nil, k .. ' has no value')
    end
    assert.is_true(C.tgl_config_key(C.tgl_config_count()) == nil)
    assert.is_true(C.tgl_config_key(-1) == nil)
    local sorted = { unpack(keys) }
    table.sort(sorted)
    -- the header documents exactly these
    assert.are.same(documented_keys(), sorted)
    -- and config.c handles exactly these (a key added to tgl_config_set
    -- and tgl_config_get must be added to its list of keys too)
    local handled, seen = {}, {}
    for k in read_file(root .. '/src/engine/config.c'):gmatch('strcmp%(key, "([%w_]+)"%)') do
      if not seen[k] then seen[k] = true; handled[#handled + 1] = k end
    end
    table.sort(handled)
    assert.are.same(sorted, handled)
    -- tgl.config shows and completes each, after floatX
    local mt = getmetatable(tgl.config)
    local want = { 'floatX', unpack(keys) }
    assert.are.same(want, mt.__complete)
    local shown = {}
    for k in tostring(tgl.config):gmatch('\n  ([%w_]+) = ') do shown[#shown + 1] = k end
    assert.are.same(want, shown)
    for _, k in ipairs(keys) do assert.is_not_nil(tgl.config[k], k) end
    assert.is_true(set.exit_wait and set.whole_step and set.exclude)
  end)

  it('keeps tgl.config in a bottom module that no module reaches past', function()
    assert.are.equal(require 'tgl.config', tgl.config)
    local p = assert(io.popen('ls ' .. q(root .. '/lua/tgl')))
    local files = {}
    for f in p:lines() do if f:match('%.lua$') then files[#files + 1] = f end end
    p:close()
    assert.is_true(#files >= 10, #files .. ' modules')
    for _, f in ipairs(files) do
      local src = read_file(root .. '/lua/tgl/' .. f)
      for _, pat in ipairs({ 'package%.loaded%.tgl%f[^%w_]', "package%.loaded%[%s*['\"]tgl['\"]%s*%]" }) do
        assert.is_nil(src:find(pat), 'lua/tgl/' .. f .. ' reaches up through package.loaded.tgl')
      end
    end
    -- tgl.config requires nothing of tgl but the FFI binding
    local requires = {}
    for m in read_file(root .. '/lua/tgl/config.lua'):gmatch("require%s*%(?%s*'([%w_.]+)'") do
      requires[#requires + 1] = m
    end
    assert.are.same({ 'tgl.core' }, requires)
  end)
end)
