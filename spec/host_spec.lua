-- host_spec.lua — behaviour of the tgl host binary (host/main.c, host/repl.c)
-- and of the REPL's Lua helpers (lua/tgl/repl.lua).  The binary runs as a
-- subprocess: TGL_BIN names it, TGL_TEST_TMP is a scratch directory.
-- Terminal behaviour (line editing, Tab, Ctrl-C at the prompt, history) is
-- driven through tmux (scripts/install-deps.sh --test installs it; CI and
-- scripts/test.sh fail without it).

local TGL = assert(os.getenv('TGL_BIN'), 'TGL_BIN must name the tgl binary')
local TMP = (os.getenv('TGL_TEST_TMP') or '/tmp/tgl_test_tmp') .. '/host'

-- Single-quotes s for sh.
local function q(s)
  return "'" .. tostring(s):gsub("'", [['\'']]) .. "'"
end

os.execute('mkdir -p ' .. q(TMP))

local write_file = dofile('spec/support.lua').write_file

local function read_file(path) return dofile('spec/support.lua').read_file(path, true) end

-- The exit code of a command run by os.execute: LuaJIT returns the raw
-- wait status; Lua 5.2+ returns ok, 'exit'|'signal', n.
local function exit_code(a, how, n)
  if type(a) == 'number' then
    if a % 256 == 0 then return a / 256 end
    return 128 + a % 128
  end
  if how == 'exit' then return n end
  return 128 + n
end

local seq = 0
-- Runs a shell command line with stdin from the string `input` (or
-- /dev/null); returns its stdout, stderr and exit code.
local function sh(cmd, input)
  seq = seq + 1
  local base = ('%s/run%d'):format(TMP, seq)
  local stdin = '/dev/null'
  if input then
    stdin = base .. '.in'
    write_file(stdin, input)
  end
  local code = exit_code(os.execute(('{ %s\n} <%s >%s 2>%s'):format(
    cmd, q(stdin), q(base .. '.out'), q(base .. '.err'))))
  return read_file(base .. '.out'), read_file(base .. '.err'), code
end

-- Runs tgl with a command-line tail (already quoted as needed).
local function run_tgl(args, input)
  return sh(q(TGL) .. ' ' .. args, input)
end

-- Writes a file under TMP and returns its path.
local function tmpfile(name, contents)
  local path = TMP .. '/' .. name
  write_file(path, contents)
  return path
end

-- What the suite needs beyond the build: missing, it fails the test in CI
-- and under scripts/test.sh, and makes it pending elsewhere (support.lua).
local support = dofile('spec/support.lua')
local strict_deps, missing_dep = support.strict_deps, support.missing_dep

local function sleep(s)
  os.execute('sleep ' .. s)
end

describe('the tgl host', function()

  describe('running scripts', function()
    it('passes script arguments in arg and as ...', function()
      local script = tmpfile('args.lua', [[
io.write(arg[0], '|', arg[1], '|', arg[2], '|', arg[-1], '|',
         select('#', ...), '|', (...), '|', select(2, ...))]])
      local out, err, code = run_tgl(q(script) .. " a 'b c'")
      assert.are.equal('', err)
      assert.are.equal(0, code)
      assert.are.equal(script .. '|a|b c|' .. TGL .. '|2|a|b c', out)
    end)

    it('puts everything before the script at negative arg indexes, as luajit does', function()
      local script = tmpfile('negargs.lua', [[io.write(arg[-3], '|', arg[-2], '|', arg[-1], '|', arg[1])]])
      local out, _, code = run_tgl("-e 'x = 1' " .. q(script) .. ' p')
      assert.are.equal(0, code)
      assert.are.equal(TGL .. '|-e|x = 1|p', out)
    end)

    it('runs several -e chunks in order, including an attached one', function()
      local out, err, code = run_tgl([[-e 'io.write(1)' -e 'io.write(2)' '-eio.write(3)']])
      assert.are.equal('', err)
      assert.are.equal(0, code)
      assert.are.equal('123', out)
    end)

    it('requires -l modules into a global, in order with -e', function()
      tmpfile('hostmod.lua', 'return { answer = 42 }')
      local out, err, code = sh('LUA_PATH=' .. q(TMP .. '/?.lua;;') .. ' ' .. q(TGL)
                                .. [[ -e 'io.write(type(hostmod), " ")' -l hostmod -e 'io.write(hostmod.answer)']])
      assert.are.equal('', err)
      assert.are.equal(0, code)
      assert.are.equal('nil 42', out)
    end)

    it('fails with status 1 when a -l module is missing', function()
      local out, err, code = run_tgl('-l no_such_module_xyz -e \'io.write("ran")\'')
      assert.are.equal(1, code)
      assert.are.equal('', out)
      assert.truthy(err:find("tgl: module 'no_such_module_xyz' not found", 1, true))
    end)

    it('preloads the tgl module as a global', function()
      local out, _, code = run_tgl([[-e 'io.write(type(tgl), " ", tostring(tgl == require("tgl")))']])
      assert.are.equal(0, code)
      assert.are.equal('table true', out)
    end)

    it('puts its lua directories first on package.path, then LUA_PATH', function()
      local out, _, code = sh('LUA_PATH=' .. q('/nonexistent/?.lua') .. ' ' .. q(TGL)
                              .. [[ -e 'io.write(package.path)']])
      assert.are.equal(0, code)
      -- run from the build tree: the source tree's lua/, then the build
      -- tree's (generated modules)
      local dir, gen = out:match('^([^;]+)/%?%.lua;[^;]+;([^;]+)/%?%.lua;')
      assert.truthy(dir, out)
      assert.are.equal(dir .. '/?.lua;' .. dir .. '/?/init.lua;' .. gen .. '/?.lua;'
                       .. gen .. '/?/init.lua;/nonexistent/?.lua', out)
      -- the first holds tgl/init.lua, so require 'tgl' and 'nn' resolve
      -- there; the second the FFI declarations generated from the headers
      assert.truthy(read_file(dir .. '/tgl/init.lua'))
      assert.truthy(read_file(gen .. '/tgl/cdef.lua'))
    end)

    it('prefers the installed lua directory next to the executable', function()
      local prefix = TMP .. '/prefix'
      os.execute(('rm -rf %s && mkdir -p %s/bin %s/share/tgl/lua/tgl && cp %s %s/bin/tgl'):format(
        q(prefix), q(prefix), q(prefix), q(TGL), q(prefix)))
      write_file(prefix .. '/share/tgl/lua/tgl/init.lua', "return { marker = 'installed' }")
      -- LD_LIBRARY_PATH: the copy must still find libtgl next to the original
      local libdir = TGL:match('^(.*)/[^/]*$') or '.'
      local out, err, code = sh('LD_LIBRARY_PATH=' .. q(libdir) .. ' ' .. q(prefix .. '/bin/tgl')
                                .. [[ -e 'io.write(tgl.marker, " ", package.path:match("^[^;]*"))']])
      assert.are.equal('', err)
      assert.are.equal(0, code)
      local real = sh('cd ' .. q(prefix) .. ' && pwd -P'):gsub('\n$', '')
      assert.are.equal('installed ' .. real .. '/share/tgl/lua/?.lua', out)
    end)

    it('prints versions of tgl, LuaJIT, BLAS, CUDA and MPI with -v and exits 0', function()
      local out, err, code = run_tgl('-v')
      assert.are.equal(0, code)
      assert.are.equal('', err)
      assert.truthy(out:find('tgl 0.1.0', 1, true), out)
      assert.truthy(out:find('LuaJIT 2', 1, true), out)
      assert.truthy(out:find('OpenBLAS', 1, true), out)
      assert.truthy(out:find('CUDA: built in %(runtime [%d.]+, %d+ devices?%)')
                    or out:find('CUDA: not built in', 1, true), out)
      assert.truthy(out:find('MPI: built in %(.+; tgl%.dist%)') or out:find('MPI: not built in', 1, true), out)
    end)

    it('prints usage with -h and --help and exits 0', function()
      for _, opt in ipairs({ '-h', '--help' }) do
        local out, _, code = run_tgl(opt)
        assert.are.equal(0, code)
        assert.truthy(out:find('^usage: tgl'), out)
        assert.truthy(out:find('-i ', 1, true))
      end
    end)

    it('rejects an unknown option with usage on stderr, naming it, status 1', function()
      local out, err, code = run_tgl('-x script.lua')
      assert.are.equal(1, code)
      assert.are.equal('', out)
      assert.truthy(err:find("tgl: '-x' is not a known option", 1, true), err)
      assert.truthy(err:find('usage: tgl', 1, true), err)
      local _, err2, code2 = run_tgl('--frobnicate')
      assert.are.equal(1, code2)
      assert.truthy(err2:find("'--frobnicate'", 1, true), err2)
    end)

    it('rejects -e without an argument', function()
      local _, err, code = run_tgl('-e')
      assert.are.equal(1, code)
      assert.truthy(err:find("tgl: '-e' needs an argument", 1, true), err)
    end)

    it('fails clearly on a missing script file', function()
      local out, err, code = run_tgl(q(TMP .. '/no_such_script.lua'))
      assert.are.equal(1, code)
      assert.are.equal('', out)
      assert.truthy(err:find('tgl: cannot open ' .. TMP .. '/no_such_script.lua: No such file',
                             1, true), err)
    end)

    it('reports a failing script with a traceback naming file:line, status 1', function()
      local script = tmpfile('fails.lua', 'local x = 1\nlocal function f()\n  error("boom")\nend\nf()\n')
      local out, err, code = run_tgl(q(script))
      assert.are.equal(1, code)
      assert.are.equal('', out)
      -- Lua shortens a long chunk name to ".../tail", so match its end.
      assert.truthy(err:find('^tgl: %S*fails%.lua:3: boom\nstack traceback:\n'), err)
      assert.truthy(err:find('fails.lua:3: in function', 1, true), err)
      assert.truthy(err:find('fails.lua:5: in main chunk', 1, true), err)
    end)

    it('reports a syntax error in a script, status 1', function()
      local script = tmpfile('syntax.lua', 'x = = 1\n')
      local _, err, code = run_tgl(q(script))
      assert.are.equal(1, code)
      assert.truthy(err:find('^tgl: %S*syntax%.lua:1:'), err)
    end)

    it('exits 1 silently for a nil error object (busted does this)', function()
      local out, err, code = run_tgl([[-e 'io.write("x") error()']])
      assert.are.equal(1, code)
      assert.are.equal('x', out)
      assert.are.equal('', err)
    end)

    it('prints non-string error objects through __tostring', function()
      local _, err, code = run_tgl([[-e 'error(setmetatable({}, {__tostring = function() return "custom" end}))']])
      assert.are.equal(1, code)
      assert.truthy(err:find('^tgl: custom\nstack traceback:'), err)
      local _, err2 = run_tgl([[-e 'error({})']])
      assert.truthy(err2:find('tgl: (error object is a table value)', 1, true), err2)
    end)

    it('exits with the status given to os.exit', function()
      local _, _, code = run_tgl([[-e 'os.exit(3)']])
      assert.are.equal(3, code)
      local _, _, code0 = run_tgl([[-e 'os.exit(0)' -e 'error("not reached")']])
      assert.are.equal(0, code0)
    end)

    it('closes the state on os.exit, so finalizers run, unless told not to', function()
      local chunk = [[-e 'keep = newproxy(true) getmetatable(keep).__gc = function() io.write("fin") end']]
      local out, _, code = run_tgl(chunk .. [[ -e 'os.exit(4)']])
      assert.are.equal(4, code)
      assert.are.equal('fin', out)
      -- without closing, memory is left to the OS: tell LeakSanitizer (in
      -- sanitizer builds) that this is deliberate
      local out2, _, code2 = sh('ASAN_OPTIONS=detect_leaks=0 ' .. q(TGL) .. ' ' .. chunk
                                .. [[ -e 'os.exit(true, false)']])
      assert.are.equal(0, code2)
      assert.are.equal('', out2)
    end)

    it('runs stdin as a script when stdin is not a terminal', function()
      local out, err, code = run_tgl('', 'local t = {}\nfor i = 1, 3 do t[i] = i * i end\nio.write(table.concat(t, ","))\n')
      assert.are.equal('', err)
      assert.are.equal(0, code)
      assert.are.equal('1,4,9', out)
    end)

    it('runs stdin as a script with -, passing arguments', function()
      local out, _, code = run_tgl('- a b', 'io.write(arg[0], "|", select("#", ...), "|", (...))')
      assert.are.equal(0, code)
      assert.are.equal('-|2|a', out)
    end)

    it('exits 1 with a traceback when the stdin script fails', function()
      local out, err, code = run_tgl('', 'io.write("before")\nerror("bad")\nio.write("after")\n')
      assert.are.equal(1, code)
      assert.are.equal('before', out)
      assert.truthy(err:find('^tgl: stdin:2: bad\nstack traceback:'), err)
    end)
  end)

  describe('REPL with stdin on a pipe (-i)', function()
    it('auto-prints expression values, tab-separated', function()
      local out, err, code = run_tgl('-i', '1+1\n"a", nil, 3\n')
      assert.are.equal('', err)
      assert.are.equal(0, code)
      assert.are.equal('2\na\tnil\t3\n', out)
    end)

    it('prints arrays through their __tostring', function()
      local out, err, code = run_tgl('-i', 'x = tgl.ones(2,2)\nx\n')
      assert.are.equal('', err)
      assert.are.equal(0, code)
      assert.are.equal(tostring(tgl.ones(2, 2)) .. '\n', out)
    end)

    it('prints nothing for statements and for calls that return nothing', function()
      local out, _, code = run_tgl('-i', 'x = 5\nlocal y = 2\nprint("p")\nx\n')
      assert.are.equal(0, code)
      assert.are.equal('p\n5\n', out)
    end)

    it('reads a multi-line function definition as one chunk', function()
      local out, err, code = run_tgl('-i', 'function f()\nreturn 1\nend\nf()\n')
      assert.are.equal('', err)
      assert.are.equal(0, code)
      assert.are.equal('1\n', out)
    end)

    it('continues an unfinished expression on the next line', function()
      local out, _, code = run_tgl('-i', 'math.max(1,\n7,\n3)\n{\n}\n')
      assert.are.equal(0, code)
      assert.truthy(out:find('^7\ntable: '), out)
    end)

    it('reports an error with a traceback and goes on, exit 0 at EOF', function()
      local out, err, code = run_tgl('-i', 'error("boom")\nprint("after")\n')
      assert.are.equal(0, code)
      assert.are.equal('after\n', out)
      assert.truthy(err:find('^tgl: stdin:1: boom\nstack traceback:\n'), err)
    end)

    it('reports a syntax error and goes on', function()
      local out, err, code = run_tgl('-i', 'x = = 1\n2\n')
      assert.are.equal(0, code)
      assert.are.equal('2\n', out)
      assert.truthy(err:find("^tgl: stdin:1: unexpected symbol near '='"), err)
    end)

    it('reports input left unfinished at end of input', function()
      local out, err, code = run_tgl('-i', 'print("x")\nfunction g(\n')
      assert.are.equal(0, code)
      assert.are.equal('x\n', out)
      assert.truthy(err:find("^tgl: stdin:1: .*'<eof>'\n$"), err)
    end)

    it('runs the script first, then reads the REPL', function()
      local script = tmpfile('before_repl.lua', 'g_from_script = 41\n')
      local out, _, code = run_tgl('-i ' .. q(script), 'g_from_script + 1\n')
      assert.are.equal(0, code)
      assert.are.equal('42\n', out)
    end)

    it('runs -e chunks, then the REPL', function()
      local out, _, code = run_tgl([[-e 'z = 6' -i]], 'z * 7\n')
      assert.are.equal(0, code)
      assert.are.equal('42\n', out)
    end)
  end)

  describe('tgl.repl.compile', function()
    local repl = require 'tgl.repl'

    it('compiles an expression so that it returns its values', function()
      local fn = repl.compile('1 + 1, "x"')
      assert.are.same({ 2, 'x' }, { fn() })
    end)

    it('keeps the position of an error raised by a returned call', function()
      local fn = repl.compile('error("e")')
      local ok, msg = pcall(fn)
      assert.is_false(ok)
      assert.are.equal('stdin:1: e', msg)
    end)

    it('compiles a statement', function()
      local fn = repl.compile('local a = 3; repl_spec_v = a * 2')
      fn()
      assert.are.equal(6, repl_spec_v)
      repl_spec_v = nil
    end)

    it('accepts the Lua 5.1 "=" shorthand', function()
      assert.are.equal(9, repl.compile('=3*3')())
    end)

    it('says that unfinished input is incomplete', function()
      for _, src in ipairs({ 'function f()', 'for i = 1, 2 do', 'x = {', 'f(1,', 'return [[' }) do
        local fn, msg, incomplete = repl.compile(src)
        assert.is_nil(fn)
        assert.is_string(msg)
        assert.is_true(incomplete, src)
      end
    end)

    it('says that a wrong chunk is not incomplete', function()
      for _, src in ipairs({ 'x = = 1', 'end', 'f(1,)' }) do
        local fn, msg, incomplete = repl.compile(src)
        assert.is_nil(fn)
        assert.truthy(msg:find('^stdin:1:'), msg)
        assert.is_false(incomplete, src)
      end
    end)

    it('formats values with tostring, tab-separated', function()
      local obj = setmetatable({}, { __tostring = function() return '<obj>' end })
      assert.are.equal('1\tnil\t<obj>\ttrue', repl.format(1, nil, obj, true))
      assert.is_nil(repl.format())
    end)
  end)

  describe('tgl.repl.complete', function()
    local repl = require 'tgl.repl'

    it('completes fields of a global table', function()
      assert.are.same({ 'string.format' }, repl.complete('string.fo'))
      local all = repl.complete('string.')
      assert.truthy(#all > 10)
      for _, w in ipairs(all) do assert.truthy(w:find('^string%.')) end
    end)

    it('completes globals and keywords for a bare name', function()
      -- busted sandboxes a test's globals; completion walks the real _G
      _G.repl_spec_unique_global = 1
      assert.are.same({ 'repl_spec_unique_global' }, repl.complete('repl_spec_uni'))
      _G.repl_spec_unique_global = nil
      local fu = repl.complete('fun')
      assert.are.same({ 'function' }, fu)
    end)

    it('walks a dotted path through nested tables', function()
      local env = { t = { sub = { field = 1, fig = 2, other = 3 } } }
      assert.are.same({ 't.sub.field', 't.sub.fig' }, repl.complete('t.sub.fi', env))
      assert.are.same({ 't.sub' }, repl.complete('t.s', env))
    end)

    it('completes methods after ":" from the metatable __index chain, callables only', function()
      local base = { size = function() end }
      local class = setmetatable({ shape = function() end, shx = 3 }, { __index = base })
      local env = { obj = setmetatable({ own = 1 }, { __index = class }) }
      assert.are.same({ 'obj:shape' }, repl.complete('obj:sh', env))
      assert.are.same({ 'obj:shape', 'obj:size' }, repl.complete('obj:s', env))
      assert.are.same({ 'obj.own', 'obj.shape', 'obj.shx', 'obj.size' }, repl.complete('obj.', env))
    end)

    it('completes string methods on a string value', function()
      assert.are.same({ 's:upper' }, repl.complete('s:up', { s = 'abc' }))
    end)

    it('completes methods of tgl arrays', function()
      local got = repl.complete('a:', { a = tgl.ones(2) })
      assert.truthy(#got > 0)
      for _, w in ipairs(got) do assert.truthy(w:find('^a:')) end
    end)

    it('uses method tables registered for a cdata type', function()
      local ffi = require 'ffi'
      ffi.cdef 'typedef struct repl_spec_point { double x, y; } repl_spec_point;'
      repl.register_methods('repl_spec_point', { norm = function() end, scale = function() end })
      local env = { p = ffi.new('repl_spec_point') }
      assert.are.same({ 'p:norm' }, repl.complete('p:no', env))
    end)

    it('completes the methods of a symbolic variable after ":" and its fields after "."', function()
      if type(tgl.vector) ~= 'function' then pending('tgl.vector does not exist yet') return end
      local env = { v = tgl.vector('v') }
      local got = repl.complete('v:', env)
      local set = {}
      for _, w in ipairs(got) do set[w] = true end
      for _, m in ipairs({ 'v:sum', 'v:dot', 'v:reshape', 'v:T', 'v:type' }) do
        assert.truthy(set[m], m .. ' in ' .. table.concat(got, ' '))
      end
      assert.is_nil(set['v:dtype'])  -- a field, not a method
      assert.are.same({ 'v:sum' }, repl.complete('v:su', env))
      assert.are.same({ 'v.name', 'v.ndim', 'v.neq' }, repl.complete('v.n', env))
      assert.are.same({ 'v.dtype' }, repl.complete('v.dt', env))
      -- arrays show their dtype field after '.'
      assert.are.same({ 'a.dtype' }, repl.complete('a.dt', { a = tgl.ones(2) }))
    end)

    it("completes a compiled function's public methods and fields, not its internals", function()
      if type(tgl.compile) ~= 'function' then pending('tgl.compile does not exist yet') return end
      local x = tgl.vector('x')
      local env = { f = tgl.compile { inputs = { x }, outputs = { x * 2 } } }
      local methods = repl.complete('f:', env)
      local fields = repl.complete('f.', env)
      for _, w in ipairs(methods) do assert.is_nil(w:find('^f:_'), w) end
      for _, w in ipairs(fields) do assert.is_nil(w:find('^f%._'), w) end
      assert.are.same({ 'f:profile_summary', 'f:program' }, repl.complete('f:pro', env))
      assert.are.same({ 'f.name', 'f.nin', 'f.nout', 'f.nupd' }, repl.complete('f.n', env))
      -- asked for, internals are still there
      assert.truthy(#repl.complete('f._', env) > 0)
    end)

    it('hides names starting with "_" unless the typed part starts with "_"', function()
      local env = { t = setmetatable({ _private = 1, public = 2 }, { __index = { __call = 1, meth = 3 } }) }
      assert.are.same({ 't.meth', 't.public' }, repl.complete('t.', env))
      assert.are.same({ 't.__call', 't._private' }, repl.complete('t._', env))
    end)

    it('completes the settings of tgl.config, a proxy table, and prints them', function()
      assert.are.same({ 'tgl.config.floatX' }, repl.complete('tgl.config.fl', { tgl = tgl }))
      local all = repl.complete('tgl.config.', { tgl = tgl })
      local set = {}
      for _, w in ipairs(all) do set[w] = true end
      for _, k in ipairs({ 'floatX', 'threads', 'exclude', 'compile', 'cache_dir' }) do
        assert.truthy(set['tgl.config.' .. k], k)
      end
      local s = repl.format(tgl.config)
      assert.is_nil(s:find('table: 0x', 1, true), s)
      assert.truthy(s:find('^tgl.config {\n'), s)
      assert.truthy(s:find('\n  floatX = "' .. tgl.config.floatX .. '",\n', 1, true), s)
      assert.truthy(s:find('\n  threads = ' .. tgl.config.threads .. ',\n', 1, true), s)
      assert.truthy(s:find('\n  exclude = {', 1, true), s)
    end)

    it('completes nothing for unknown paths or non-names, without calling __index', function()
      local called = false
      local env = { lazy = setmetatable({}, { __index = function() called = true end }) }
      assert.are.same({}, repl.complete('nosuch.x', env))
      assert.are.same({}, repl.complete('lazy.a.b', env))
      assert.are.same({}, repl.complete('1.5', env))
      assert.are.same({}, repl.complete('a..b', env))
      assert.is_false(called)
    end)
  end)

  describe('Ctrl-C (SIGINT)', function()
    -- Starts tgl in the background with stdin from input_file, waits until
    -- it writes "ready" on stderr, sends the given SIGINTs (a list of
    -- delays before each), and reports status, whether it was alive after
    -- the first signal, and milliseconds from the last signal to exit.
    -- A watchdog kills it after 15 s so a hang cannot wedge the suite.
    local function interrupt(args, delays, input)
      local errf = TMP .. '/sigint.err'
      local script = tmpfile('sigint.sh', ([[
%s %s <%s >%s.out 2>%s &
pid=$!
( sleep 15; kill -9 $pid ) >/dev/null 2>&1 &
wd=$!
i=0
until grep -q ready %s; do i=$((i+1)); [ $i -gt 300 ] && break; sleep 0.05; done
alive=
for d in %s; do
  sleep $d
  kill -INT $pid
  # alive: still running 3 s after the first Ctrl-C (polled: a loaded
  # machine or a sanitizer build exits more slowly than an idle one)
  [ -z "$alive" ] && { j=0; while kill -0 $pid 2>/dev/null && [ $j -lt 60 ]; do sleep 0.05; j=$((j+1)); done
                       kill -0 $pid 2>/dev/null && alive=yes || alive=no; }
  t0=$(date +%%s%%N)
done
wait $pid
rc=$?
t1=$(date +%%s%%N)
kill $wd 2>/dev/null
echo "$rc $alive $(( (t1 - t0) / 1000000 ))"
]]):format(q(TGL), args, q(input or '/dev/null'), q(errf), q(errf), q(errf),
           table.concat(delays, ' ')))
      local out = sh('sh ' .. q(script))
      local rc, alive, ms = out:match('^(%d+) (%a*) (%-?%d+)')
      return tonumber(rc), alive, tonumber(ms), read_file(errf)
    end

    it('stops an interpreted loop with an "interrupted" error, status 1, promptly', function()
      local rc, alive, ms, err = interrupt(
        [[-e 'jit.off() io.stderr:write("ready\n") while true do local t = {} for i = 1, 100 do t[i] = i end collectgarbage("step") end']],
        { 0.2 })
      assert.are.equal(1, rc)
      assert.are.equal('no', alive)  -- one Ctrl-C stopped it
      -- the line is named also when the hook fires inside collectgarbage (a
      -- C frame, which has no line: the report skips it to line 1)
      assert.truthy(err:find('tgl: (command line):1: interrupted!\nstack traceback:', 1, true), err)
      assert.truthy(ms < 3000, ms)
    end)

    it('stops a JIT-compiled loop that calls the engine, through the interrupt flag', function()
      -- the compiled trace never runs the debug hook; the engine's
      -- allocation sees the flag and fails, which leaves the trace
      local rc, alive, ms, err = interrupt(
        [[-e 'io.stderr:write("ready\n") while true do local a = tgl.zeros(1) end']], { 0.3 })
      assert.are.equal(1, rc)
      assert.are.equal('no', alive)
      assert.truthy(err:find('interrupted', 1, true), err)
      assert.truthy(ms < 3000, ms)
    end)

    it("reports Ctrl-C inside f.fn{n_calls = N} at the user's line, not tgl's own file", function()
      if type(tgl.compile) ~= 'function' then pending('tgl.compile does not exist yet') return end
      local script = tmpfile('sigint_fn.lua', [[
local x = tgl.vector('x')
local f = tgl.compile { inputs = { x }, outputs = { (x * 2 + 1):sum() } }
f(tgl.ones(1000))
io.stderr:write('ready\n')
f.fn { n_calls = 1e12 }
]])
      local rc, alive, ms, err = interrupt(q(script), { 0.3 })
      assert.are.equal(1, rc)
      assert.are.equal('no', alive)
      assert.truthy(err:find('^ready\ntgl: %S*sigint_fn%.lua:5: interrupted!\nstack traceback:'), err)
      assert.truthy(ms < 3000, ms)
    end)

    it('clears a Ctrl-C once its error is raised: a script that catches it goes on with tgl, '
      .. 'and a later Ctrl-C interrupts again', function()
      -- issue 19: the flag stayed set after pcall caught the interrupt, so
      -- every later engine call failed ("tgl.zeros: interrupted") and a
      -- checkpoint could not be saved
      local ckpt = TMP .. '/sigint_ckpt.npz'
      os.remove(ckpt)
      local script = tmpfile('sigint_catch.lua', ([[
local x = tgl.vector('x')
local W = tgl.shared(tgl.ones(1000), 'W')
local f = tgl.compile { inputs = { x }, outputs = { (x * W + 1):sum() }, updates = { { W, W * 0.5 + 0.5 } } }
f(tgl.ones(1000))
io.stderr:write('ready\n')
local ok, err = pcall(f.fn, { n_calls = 1e12 })
io.stderr:write('caught: ', tostring(ok), ' ', tostring(err), '\n')
local z = tgl.zeros(2, 3) + 4
tgl.save(%q, { W = W:get_value(), z = z })
local back = tgl.load(%q)
io.stderr:write(('saved %%d %%g %%d %%g\n'):format(back.W:size(1), back.W:get(1000), back.z:size(2), back.z:get(2, 3)))
local g = tgl.compile { inputs = { x }, outputs = x * 3 }
io.stderr:write('compiled ', tostring(g(tgl.ones(2)):get(2)), '\n')
f.fn { n_calls = 1e12 }
io.stderr:write('not reached\n')
]]):format(ckpt, ckpt))
      local rc, alive, ms, err = interrupt(q(script), { 0.3, 0.5 })
      assert.are.equal('yes', alive)  -- the first Ctrl-C was caught
      assert.are.equal(1, rc)         -- the second stopped the script
      -- the caught error names the line of the pcall (pcall is a C
      -- function: the report skips it, as it skips tgl's own files)
      assert.truthy(err:find('\ncaught: false %S*sigint_catch%.lua:6: interrupted!\n'), err)
      assert.truthy(err:find('\nsaved 1000 1 3 4\n', 1, true), err)
      assert.truthy(err:find('\ncompiled 3\n', 1, true), err)
      assert.truthy(err:find('\ntgl: %S*sigint_catch%.lua:14: interrupted!\nstack traceback:'), err)
      assert.is_nil(err:find('not reached', 1, true))
      local saved = tgl.load(ckpt)
      assert.are.same({ 1000 }, saved.W:shape())
      assert.are.equal(4, saved.z:get(1, 1))
      assert.truthy(ms < 3000, ms)
    end)

    it('lets a second Ctrl-C kill a chunk that cannot see the first', function()
      -- a JIT-compiled empty loop never reaches a hook or the engine's flag
      local rc, alive, _, err = interrupt(
        [[-e 'io.stderr:write("ready\n") while true do end']], { 0.3, 0.2 })
      assert.are.equal('yes', alive)
      assert.are.equal(130, rc)  -- killed by SIGINT (128 + 2)
      assert.is_nil(err:find('interrupted', 1, true))
    end)

    it('stops a chunk in the piped REPL, which then goes on to the next line', function()
      local input = tmpfile('sigint_repl.in',
        'jit.off() io.stderr:write("ready\\n") while true do end\nio.stderr:write("after\\n")\n')
      local rc, alive, _, err = interrupt('-i', { 0.2 }, input)
      assert.are.equal(0, rc)
      assert.are.equal('no', alive)
      assert.truthy(err:find('tgl: stdin:1: interrupted!', 1, true), err)
      assert.truthy(err:find('\nafter\n$'), err)
    end)
  end)

  local has_tmux = exit_code(os.execute('command -v tmux >/dev/null 2>&1')) == 0
  if not has_tmux then
    if strict_deps() then
      it('REPL on a terminal needs tmux', function() missing_dep('tmux') end)
    else
      pending('REPL on a terminal: tmux is not installed (scripts/install-deps.sh --test installs it)')
    end
    return
  end

  describe('REPL on a terminal (through tmux)', function()
    local sock, history

    -- tmux on a private server socket, so that nothing else is disturbed
    -- (and outside any tmux the tests themselves may run in).
    local function tmux(args)
      return sh('env -u TMUX tmux -L ' .. q(sock) .. ' ' .. args)
    end
    -- Sends keys: names in KEYS are keys (Enter, Tab, C-c, C-d), anything
    -- else is typed literally (so that "end" is not the End key).
    local KEYS = { Enter = true, Tab = true, ['C-c'] = true, ['C-d'] = true }
    local function keys(...)
      for _, k in ipairs({ ... }) do
        tmux('send-keys -t s ' .. (KEYS[k] and '' or '-l ') .. q(k))
      end
    end
    local function screen()
      return (tmux('capture-pane -p -t s'))
    end
    -- Waits up to 20 s for text (a Lua pattern when is_pattern) on the
    -- screen; returns the screen.  capture-pane drops trailing blanks, so an
    -- empty prompt shows as a line ">".
    local function wait_for(text, is_pattern)
      local s
      for _ = 1, 200 do
        s = screen() or ''
        if s:find(text, 1, not is_pattern) then return s end
        sleep(0.1)
      end
      error('timed out waiting for ' .. text .. ' on the screen:\n' .. s, 2)
    end

    -- Starts tgl in a fresh pane with TGL_HISTORY=history and waits for
    -- its prompt.
    local function start()
      -- the shell reports tgl's exit status and keeps the pane open
      local cmd = ('TGL_HISTORY=%s %s; echo "exit status $?"; sleep 60'):format(q(history), q(TGL))
      tmux('new-session -d -s s -x 160 -y 50 ' .. q(cmd))
      wait_for('\n>\n', true)
    end

    before_each(function()
      seq = seq + 1
      sock = ('tgl_spec_%d_%d'):format(os.time(), seq)
      history = TMP .. '/history_' .. seq
      os.remove(history)
      start()
    end)

    after_each(function()
      tmux('kill-server')
    end)

    it('shows a banner and auto-prints results', function()
      keys('6 * 7', 'Enter')
      local s = wait_for('42')
      assert.truthy(s:find('^tgl 0%.1%.0 %(LuaJIT'), s)
    end)

    it('completes a field with Tab', function()
      keys('string.form', 'Tab')
      wait_for('> string.format')
      keys("('%d!', 41 + 1)", 'Enter')
      wait_for('42!')
    end)

    it('completes methods with Tab after ":"', function()
      -- type ahead only at a fresh prompt: keys sent while a line still
      -- runs are echoed by the terminal before the REPL redraws them
      keys('repl_s = "abc"', 'Enter')
      wait_for('repl_s = "abc"\n>\n')
      keys('repl_s:upp', 'Tab')
      wait_for('> repl_s:upper')
      keys('()', 'Enter')
      wait_for('ABC')
    end)

    it('completes the methods of a symbolic variable with Tab after ":"', function()
      keys("repl_v = tgl.vector('v')", 'Enter')
      wait_for("repl_v = tgl.vector('v')\n>\n")
      keys('repl_v:resh', 'Tab')
      wait_for('> repl_v:reshape')
      keys('(2, -1).ndim', 'Enter')
      wait_for('\n2\n', true)
    end)

    it('prints tgl.config as its settings', function()
      keys('tgl.config', 'Enter')
      local s = wait_for('\n}\n', true)
      assert.is_nil(s:find('table: 0x', 1, true), s)
      assert.truthy(s:find('\ntgl.config {\n  floatX = "', 1, true), s)
    end)

    it('abandons the line and pending input on Ctrl-C at the prompt and goes on', function()
      keys('function never()', 'Enter')
      wait_for('\n>>\n', true)
      keys('error("should not run")', 'C-c')
      sleep(0.2)
      keys('print("still " .. "here")', 'Enter')
      local s = wait_for('still here')
      assert.is_nil(s:find('should not run\n', 1, true))
      assert.is_nil(s:find('tgl:', 1, true))
      assert.is_nil(s:find('exit status', 1, true))
    end)

    it('interrupts a running chunk with Ctrl-C and goes on', function()
      keys('jit.off() while true do end', 'Enter')
      sleep(0.3)
      keys('C-c')
      wait_for('interrupted!')
      keys('print("ok " .. "again")', 'Enter')
      wait_for('ok again')
    end)

    it('continues multi-line input with a ">> " prompt', function()
      keys('function sq(x)', 'Enter')
      wait_for('\n>>\n', true)
      keys('return x * x', 'Enter', 'end', 'Enter', 'sq(12)', 'Enter')
      wait_for('144')
    end)

    it('keeps the history of a session that ends in os.exit', function()
      keys('hist_marker_2 = 2', 'Enter', 'os.exit(5)', 'Enter')
      wait_for('exit status 5')
      local h = read_file(history) or ''
      assert.truthy(h:find('hist_marker_2', 1, true), h)
    end)

    it('leaves a history file in another format alone, with one warning', function()
      tmux('kill-server')
      -- a new server: no race with the one shutting down (a new session on
      -- the old socket can land on the dying server and vanish with it)
      sock = sock .. '_foreign'
      -- a file of its own: the tgl just killed may still be writing the other
      history = TMP .. '/history_foreign_' .. seq
      local lines = {}
      for i = 1, 1100 do lines[i] = 'foreign_line_' .. i end
      local foreign = table.concat(lines, '\n') .. '\n'
      write_file(history, foreign)
      start()
      local s = wait_for('is not a tgl (libedit) history file')
      local _, n = s:gsub('history file', '')
      assert.are.equal(1, n, s)
      keys('hist_marker_3 = 3', 'Enter', 'hist_marker_4 = 4', 'Enter')
      keys('C-d')
      wait_for('exit status 0')
      assert.are.equal(foreign, read_file(history))
    end)

    it('does not block on a history path that is a FIFO, with one warning', function()
      tmux('kill-server')
      sock = sock .. '_fifo'
      history = TMP .. '/history_fifo_' .. seq
      os.remove(history)
      local _, err, code = sh('mkfifo ' .. q(history))
      assert.are.equal(0, code, err)
      start()   -- times out if opening the FIFO blocked the REPL
      local s = wait_for('is not a regular file')
      local _, n = s:gsub('is not a regular file', '')
      assert.are.equal(1, n, s)
      keys('6 * 7', 'Enter')
      wait_for('42')
      keys('C-d')
      wait_for('exit status 0')
      os.remove(history)
    end)

    it('exits 0 on Ctrl-D and saves the history', function()
      keys('hist_marker_1 = 1', 'Enter')
      keys('C-d')
      wait_for('exit status 0')
      local h = read_file(history) or ''
      assert.truthy(h:find('hist_marker_1', 1, true), h)
    end)

    -- libedit's history_truncate_file copies the file through a temporary
    -- /tmp/.historyXXXXXX, which stays behind when anything interrupts it;
    -- the REPL needs no such file.  strace sees every file a session opens.
    it('opens no temporary file when it exits', function()
      if os.getenv('ASAN_OPTIONS') then
        -- a sanitizer build does not start under ptrace; the Release run checks this
        pending('strace and AddressSanitizer do not mix')
        return
      end
      if exit_code(os.execute('strace -f -qq -e trace=none true >/dev/null 2>&1')) ~= 0 then
        pending('strace is not installed or cannot trace here')
        return
      end
      tmux('kill-server')
      sock = sock .. '_strace' -- a new server: no race with the one shutting down
      local log = TMP .. '/strace_' .. seq
      os.remove(log)
      local cmd = ('TGL_HISTORY=%s strace -f -qq -e trace=openat,open,creat -o %s %s; '
        .. 'echo "exit status $?"; sleep 60'):format(q(history), q(log), q(TGL))
      tmux('new-session -d -s s -x 160 -y 50 ' .. q(cmd))
      wait_for('\n>\n', true)
      keys('hist_marker_3 = 3', 'Enter')
      wait_for('hist_marker_3 = 3\n>', false)
      keys('C-d')
      wait_for('exit status 0')
      local trace = read_file(log) or ''
      assert.truthy(trace:find(history, 1, true), trace)  -- the trace works
      local temps = {}
      for path in trace:gmatch('"(/tmp/[^"]*)"[^\n]*O_CREAT') do
        if path ~= history then temps[#temps + 1] = path end
      end
      assert.are.same({}, temps)
    end)
  end)
end)

-- Every TGL_* variable is checked when tgl starts: a bad (or empty) value
-- stops the host before it runs anything, with one line per variable naming
-- it, its value and what it accepts.
describe('TGL_* environment variables', function()
  local function env_run(env, args)
    return sh(env .. ' ' .. q(TGL) .. ' ' .. (args or "-e 'print(\"ran\")'"))
  end
  local function count(s, pat)
    local n = 0
    for _ in s:gmatch(pat) do n = n + 1 end
    return n
  end

  it('a bad value is reported once, naming the variable, and nothing runs', function()
    local cases = {
      { 'TGL_FLOATX=garbage', "TGL_FLOATX='garbage' is not valid: expected float32 or float64" },
      { 'TGL_FLOATX=', "TGL_FLOATX='' is not valid: expected float32 or float64" },
      { 'TGL_NUM_THREADS=abc', "TGL_NUM_THREADS='abc' is not valid: expected an integer from 0 to 256" },
      { 'TGL_NUM_THREADS=999', "TGL_NUM_THREADS='999' is not valid" },
      { 'TGL_NUM_THREADS=', "TGL_NUM_THREADS='' is not valid" },
      { 'TGL_COMPILE=fast', "TGL_COMPILE='fast' is not valid: expected tiered, sync, tcc or cc" },
      { 'TGL_EXCLUDE=constant_fold,no_such_rule',
        "TGL_EXCLUDE='constant_fold,no_such_rule' is not valid: expected a comma-separated list of rewrite rule names" },
      { 'TGL_CC=', "TGL_CC='' is not valid: expected a compiler command" },
      { 'TGL_CFLAGS=', "TGL_CFLAGS='' is not valid: expected compiler flags" },
      { 'TGL_CACHE_DIR=', "TGL_CACHE_DIR='' is not valid: expected a directory's path" },
    }
    for _, c in ipairs(cases) do
      local out, err, code = env_run(c[1])
      assert.are.equal(1, code, c[1])
      assert.are.equal('', out, c[1])
      local want = 'tgl: environment variable ' .. c[2]
      assert.are.equal(want, err:sub(1, #want), c[1] .. ': ' .. err)
      assert.are.equal(1, count(err, 'environment variable'), err)
      assert.is_nil(err:find('traceback', 1, true), err)
      -- the cache commands check too
      local _, err2, code2 = env_run(c[1], '--cache-info')
      assert.are.equal(1, code2, c[1])
      assert.are.equal(err, err2)
    end
  end)

  it('reports every bad variable, one line each', function()
    local out, err, code = env_run('TGL_FLOATX=f16 TGL_COMPILE=fast')
    assert.are.equal(1, code)
    assert.are.equal('', out)
    assert.are.equal("tgl: environment variable TGL_FLOATX='f16' is not valid: expected float32 or float64\n"
      .. "tgl: environment variable TGL_COMPILE='fast' is not valid: expected tiered, sync, tcc or cc\n", err)
  end)

  it('good values (and TGL_EXCLUDE= for no rule off) are taken', function()
    local out, err, code = env_run("TGL_FLOATX=float64 TGL_NUM_THREADS=2 TGL_COMPILE=sync TGL_EXCLUDE=",
      "-e 'print(tgl.ones(2).dtype, tgl.config.threads, tgl.config.compile, #tgl.config.exclude)'")
    assert.are.equal(0, code, err)
    assert.are.equal('float64\t2\tsync\t0\n', out)
    out, err, code = env_run('TGL_EXCLUDE=constant_fold', "-e 'print(tgl.config.exclude[1])'")
    assert.are.equal(0, code, err)
    assert.are.equal('constant_fold\n', out)
  end)

  it('a context made with a bad value keeps the default and says why (C API)', function()
    local tgl = require 'tgl'
    local ffi = require 'ffi'
    local C = require('tgl.core').C
    pcall(ffi.cdef, 'int setenv(const char *, const char *, int); int unsetenv(const char *);')
    ffi.C.setenv('TGL_COMPILE', 'fast', 1)
    ffi.C.setenv('TGL_NUM_THREADS', '3', 1)
    local ctx = C.tgl_ctx_new()
    ffi.C.unsetenv('TGL_COMPILE')
    ffi.C.unsetenv('TGL_NUM_THREADS')
    local msg = C.tgl_config_env_error(ctx)
    local text = msg ~= nil and ffi.string(msg) or nil
    local compile = ffi.string(C.tgl_config_get(ctx, 'compile'))
    local threads = ffi.string(C.tgl_config_get(ctx, 'threads'))
    C.tgl_ctx_free(ctx)
    assert.are.equal("environment variable TGL_COMPILE='fast' is not valid: expected tiered, sync, tcc or cc",
      text)
    assert.are.equal('tiered', compile)
    assert.are.equal('3', threads)
    ctx = C.tgl_ctx_new()
    assert.is_true(C.tgl_config_env_error(ctx) == nil)
    C.tgl_ctx_free(ctx)
    tgl.config.threads = tgl.config.threads   -- BLAS's thread count is process-wide
  end)
end)
