-- tgl.function — tgl.compile and the compiled function object: calling
-- with conversion and checks (or none, with trust_input), f.fn{n_calls=N},
-- profiles, and tgl.debugprint.
local core = require 'tgl.core'
local array = require 'tgl.array'
local G = require 'tgl.graph'
local ffi, C = core.ffi, core.C
local check, argerror = core.check, core.argerror

local M = {}

local node_list = ffi.typeof('tgl_node *[?]')
local array_list = ffi.typeof('tgl_array *[?]')
-- The names of tgl.compile's linker= and mode=, the engine's ids
-- (tgl_linker, tgl_mode).
local LINKERS = { cvm = C.TGL_LINKER_CVM, cvm_nogc = C.TGL_LINKER_CVM_NOGC, vm = C.TGL_LINKER_VM }
local MODES = { FAST_RUN = C.TGL_MODE_FAST_RUN, FAST_COMPILE = C.TGL_MODE_FAST_COMPILE,
                DEBUG = C.TGL_MODE_DEBUG }
local KIND = G.KIND

local function is_var(x) return G.is_var(x) end

local function as_list(x)
  if x == nil then return {}, false end
  if is_var(x) then return { x }, true end
  if type(x) ~= 'table' then return nil end
  return x, false
end

-- Normalizes updates: {{W, expr}, ...} or {[W] = expr, ...}.
local function update_pairs(updates)
  local list = {}
  if updates == nil then return list end
  if type(updates) ~= 'table' then argerror('compile', 'updates must be a table of {shared, expression} pairs') end
  for k, v in pairs(updates) do
    if type(k) == 'number' then
      if type(v) ~= 'table' or v[1] == nil or v[2] == nil then
        argerror('compile', 'update %d must be a pair {shared_variable, expression}', k)
      end
      list[#list + 1] = { v[1], v[2], k }
    elseif is_var(k) then
      list[#list + 1] = { k, v, #list + 1 }
    else
      argerror('compile', 'updates must be a table of {shared, expression} pairs')
    end
  end
  table.sort(list, function(a, b) return a[3] < b[3] end)
  return list
end

-- ---------------------------------------------------------------------------
-- Outputs lent to the caller, and their buffers reused (issue 23, item 6).
--
-- A call's output box (tgl_aref) carries no ffi.gc finalizer: registering
-- one and running it cost more than the rest of a small call, and a
-- finalizer that runs while LuaJIT records a trace aborts the trace.  The
-- function itself holds the array's reference, in its lent list: the
-- pointer, and the box in a weak-valued table.  Once a garbage collection
-- has cleared the box, no Lua code can reach the array any more, and its
-- buffer goes back to the function's pool (tgl_function_recycle), one
-- before each call, so that call's output reuses it instead of allocating.
-- The engine keeps a buffer only when nobody else holds it or its storage
-- (a view made from the output, a shared variable given it as its value):
-- an output the caller still holds, directly or through a view, is never
-- written over.  A collection is seen through a sentinel, a weak table
-- whose one value every full cycle clears, so the lent list is scanned
-- once per cycle, not once per call.
--
-- A lent list outlives its function while boxes it lent are alive (an
-- orphan, scanned at each cycle until they are gone), and the lists still
-- holding arrays when Lua closes are released by `closer` below.

local aref_t = core.aref_t
local WEAK_V = { __mode = 'v' }
local sentinel = setmetatable({ {} }, WEAK_V)
local generation = 0
local all_lent = {}  -- every lent list with arrays (orphans included)

local function new_lent()
  local L = {
    box = setmetatable({}, WEAK_V),  -- [k] = the box lent k-th (k from 1)
    ptr = array_list(8), cap = 8, n = 0,  -- ptr[k - 1]: its array's reference
    dead = array_list(8), dcap = 8, ndead = 0,  -- arrays whose box was collected
    gen = generation, fn = nil,  -- fn: the tgl_function *, nil once it is freed
    recycled = 0,  -- arrays handed back to the function's pool so far
  }
  all_lent[L] = true
  return L
end

local function grown(list, cap)
  local new = array_list(cap * 2)
  ffi.copy(new, list, ffi.sizeof('tgl_array *') * cap)
  return new, cap * 2
end

-- Moves the arrays whose box was collected to the dead list (an orphan's
-- are released) and packs the others; once per garbage-collection cycle.
local function scan(L)
  L.gen = generation
  -- What a whole cycle of calls did not reuse is released: the pool holds
  -- at most one cycle's dropped outputs, not the peak of a burst forever.
  for k = 0, L.ndead - 1 do C.tgl_array_release(L.dead[k]) end
  L.ndead = 0
  local box, ptr, n, j = L.box, L.ptr, L.n, 0
  for k = 0, n - 1 do
    local b = box[k + 1]
    if b == nil then
      if L.fn == nil then
        C.tgl_array_release(ptr[k])
      else
        if L.ndead == L.dcap then L.dead, L.dcap = grown(L.dead, L.dcap) end
        L.dead[L.ndead] = ptr[k]
        L.ndead = L.ndead + 1
      end
    else
      if j ~= k then ptr[j] = ptr[k]; box[j + 1] = b end
      j = j + 1
    end
  end
  for k = j + 1, n do box[k] = nil end
  L.n = j
  if L.fn == nil and j == 0 then all_lent[L] = nil end
end

-- Called when a collection has been seen: orphans give back what they can.
local function new_generation()
  generation = generation + 1
  sentinel[1] = {}
  for L in pairs(all_lent) do
    if L.fn == nil then scan(L) end
  end
end

-- A new box for array p (one reference, now the lent list's).
local function lend(L, p)
  local n = L.n
  if n == L.cap then L.ptr, L.cap = grown(L.ptr, L.cap) end
  L.ptr[n] = p
  local b = aref_t(p)
  L.box[n + 1] = b
  L.n = n + 1
  return b
end

-- The function's finalizer: the arrays no box holds are released, the
-- others stay in the (now orphan) list until their boxes are collected.
local function retire(L, fnp)
  L.fn = nil
  for k = 0, L.ndead - 1 do C.tgl_array_release(L.dead[k]) end
  L.ndead = 0
  scan(L)
  C.tgl_function_free(fnp)
end

-- When Lua closes, every array still lent is released (no Lua code runs
-- after the finalizers).
M._closer = ffi.gc(ffi.new('char[1]'), function()
  for L in pairs(all_lent) do
    for k = 0, L.n - 1 do C.tgl_array_release(L.ptr[k]) end
    for k = 0, L.ndead - 1 do C.tgl_array_release(L.dead[k]) end
    L.n, L.ndead = 0, 0
  end
  all_lent = {}
end)

local Function = {}
Function.__index = Function

-- Converts one argument to the declared input type (not under trust_input).
local function convert(self, i, v)
  local want = self.in_dtype[i]
  if core.is_array(v) then
    if v.dtype ~= want then return v:astype(want) end
    return v
  end
  if type(v) == 'number' or type(v) == 'boolean' or type(v) == 'table' then
    local ok, a = pcall(array.array, v, want)
    if ok then return a end
    argerror(self.name, 'input %d: %s', i, tostring(a):gsub('^.-tgl%.array: ', ''))
  end
  if v == nil then argerror(self.name, 'input %d is missing (the function takes %d inputs)', i, self.nin) end
  argerror(self.name, 'input %d must be an array, a number or a table, got %s', i, type(v))
end

-- Binds argument i (1-based) into the C input list, converted unless the
-- function trusts its input.
local function bind(self, i, a, ins, keep)
  if self.trust_input then
    -- No conversions; the engine still checks dtypes and ranks, so a wrong
    -- argument is an error, never a crash.
    if not core.is_array(a) then
      argerror(self.name, 'input %d must be an array with trust_input (got %s)', i, type(a))
    end
  else
    a = convert(self, i, a)
  end
  keep[i] = a
  ins[i - 1] = a.p
end

local function call(self, ...)
  local n = select('#', ...)
  local nin = self.nin
  local ins, keep = self._ins, self._keep
  if n ~= nin then
    argerror(self.name, 'takes %d inputs, got %d', nin, n)
  end
  -- Up to three inputs without a loop over the varargs: LuaJIT compiles
  -- the call into the caller's loop as straight code.
  if nin <= 3 then
    local a1, a2, a3 = ...
    if nin >= 1 then bind(self, 1, a1, ins, keep) end
    if nin >= 2 then bind(self, 2, a2, ins, keep) end
    if nin >= 3 then bind(self, 3, a3, ins, keep) end
  else
    for i = 1, nin do bind(self, i, (select(i, ...)), ins, keep) end
  end
  local outs = self._outs
  local L = self._lent
  if sentinel[1] == nil then new_generation() end
  if L.gen ~= generation then scan(L) end
  -- One dropped output per output back to the pool: this call reuses them.
  local fnp = self._fn
  local nout = self.nout
  for _ = 1, nout do
    local k = L.ndead
    if k == 0 then break end
    k = k - 1
    L.ndead = k
    L.recycled = L.recycled + 1
    C.tgl_function_recycle(fnp, L.dead[k])
  end
  local st = C.tgl_function_call(core.ctx, fnp, ins, outs, self.trust_input and 1 or 0)
  for i = 1, nin do keep[i] = nil end
  if st ~= 0 then
    local msg = ffi.string(C.tgl_ctx_error(core.ctx))
    C.tgl_ctx_clear_error(core.ctx)
    error(('tgl.%s: %s'):format(self.name, msg:gsub('^' .. self.name:gsub('%p', '%%%0') .. ': ', '')),
          core.user_level())
  end
  if nout == 0 then return end
  -- A function on a device returns host arrays (API.md, "Devices"): the
  -- device arrays are copied and dropped, not lent.
  if outs[0].device ~= C.TGL_DEVICE_CPU then
    if nout == 1 then return core.wrap(outs[0]):cpu() end
    local r = {}
    for i = 1, nout do r[i] = core.wrap(outs[i - 1]):cpu() end
    return unpack(r, 1, nout)
  end
  core.collect_if_needed()
  if nout == 1 then return lend(L, outs[0]) end
  if nout == 2 then return lend(L, outs[0]), lend(L, outs[1]) end
  local r = {}
  for i = 1, nout do r[i] = lend(L, outs[i - 1]) end
  return unpack(r, 1, nout)
end

Function.__call = call

-- f:profile_summary(): the per-op time table (compile with profile = true).
function Function:profile_summary()
  local text = ffi.new('char *[1]')
  check(C.tgl_function_profile(core.ctx, self._fn, text), 'profile_summary')
  local s = ffi.string(text[0])
  C.tgl_free(text[0])
  return s
end

-- f:whole_step(): nil while the CVM runs the program; once a straight-line
-- program has been called twice on the same shapes and bound to fixed
-- buffers (doc/compile.md, "Whole-step plan"): { bytes = the arena the
-- fixed buffers share (their planned peak), sum = what they would hold with
-- a buffer each, fixed = instructions run as direct kernel calls, dynamic =
-- the others, generated = whether the step's generated C function runs it }.
function Function:whole_step()
  local bytes, nf, nd, gen = ffi.new('int64_t[1]'), ffi.new('int[1]'), ffi.new('int[1]'),
                             ffi.new('int[1]')
  if C.tgl_function_whole_step(self._fn, bytes, nf, nd, gen) == 0 then return nil end
  local sum = ffi.new('int64_t[1]')
  C.tgl_function_step_memory(self._fn, sum, nil) -- a bound program has no scan body
  return { bytes = tonumber(bytes[0]), sum = tonumber(sum[0]), fixed = nf[0], dynamic = nd[0],
           generated = gen[0] ~= 0 }
end

-- f:step_memory(): the memory of the function's bound steps, its own and
-- its scan bodies' (as bound for their last run): { steps = how many are
-- bound, sum = bytes their fixed buffers would hold with a buffer each,
-- bytes = the arenas they hold (the planned peaks) }.
function Function:step_memory()
  local sum, peak = ffi.new('int64_t[1]'), ffi.new('int64_t[1]')
  local n = C.tgl_function_step_memory(self._fn, sum, peak)
  return { steps = n, sum = tonumber(sum[0]), bytes = tonumber(peak[0]) }
end

-- The CVM program as text.
function Function:program()
  local text = ffi.new('char *[1]')
  check(C.tgl_function_program(core.ctx, self._fn, text), 'program')
  local s = ffi.string(text[0])
  C.tgl_free(text[0])
  return s
end

-- Blocks until the optimizing compiler's kernels (compiled in the
-- background under tgl.config.compile = 'tiered') are swapped in.
function Function:wait_compiled()
  check(C.tgl_function_wait_compiled(core.ctx, self._fn), 'wait_compiled')
  return self
end

-- f:output_stats(): how the outputs' buffers are reused: { held = outputs
-- whose box may still be held (not yet collected), free = dropped outputs
-- waiting to be reused, recycled = outputs handed back to the function's
-- pool so far }.
function Function:output_stats()
  local L = self._lent
  if sentinel[1] == nil then new_generation() end
  if L.gen ~= generation then scan(L) end
  return { held = L.n, free = L.ndead, recycled = L.recycled }
end

-- Output i (1-based) of the last run, e.g. after f.fn{n_calls = N}.
function Function:output(i)
  local out = core.out_array_t()
  check(C.tgl_function_output(core.ctx, self._fn, (i or 1) - 1, out), 'output')
  return core.wrap(out[0]):cpu()
end

function Function:__tostring()
  return ('tgl.function %s (%d inputs, %d outputs, %d updates)'):format(self.name, self.nin,
                                                                        self.nout, self.nupd)
end

-- tgl.compile{inputs=, outputs=, updates=, givens=, mode=, linker=, profile=, name=}
local FN_OPTIONS = { n_calls = 'number' }
local COMPILE_OPTIONS = {
  inputs = 'table|variable', outputs = 'table|variable', updates = 'table', givens = 'table',
  mode = 'string', linker = 'string', profile = 'boolean', name = 'string',
}
local COMPILE_USAGE = 'tgl.compile{inputs = {...}, outputs = ...}'

function M.compile(spec, ...)
  -- Theano's positional form, tgl.compile({x}, y), would otherwise read
  -- {x} as a table without inputs or outputs: a function of nothing.
  if select('#', ...) > 0 or G.is_var(spec) or (type(spec) == 'table' and spec[1] ~= nil) then
    error('tgl.compile takes one table: ' .. COMPILE_USAGE, core.user_level())
  end
  if type(spec) ~= 'table' then
    argerror('compile', 'expected a table: %s, got %s', COMPILE_USAGE, type(spec))
  end
  core.check_options('compile', spec, COMPILE_OPTIONS)
  local inputs = as_list(spec.inputs)
  if not inputs then argerror('compile', 'inputs must be a table of variables') end
  local outputs, single = as_list(spec.outputs)
  if not outputs then argerror('compile', 'outputs must be a variable or a table of variables') end
  for i, v in ipairs(inputs) do
    if not is_var(v) then argerror('compile', 'input %d is a %s, not a variable', i, type(v)) end
  end
  local outs = {}
  for i, v in ipairs(outputs) do
    if core.is_array(v) or type(v) == 'number' then v = G.as_node(v, 'compile') end
    if not is_var(v) then argerror('compile', 'output %d is a %s, not a variable', i, type(v)) end
    outs[i] = v
  end
  local ups = update_pairs(spec.updates)
  local mode = spec.mode or 'FAST_RUN'
  if MODES[mode] == nil then argerror('compile', "mode must be 'FAST_RUN', 'FAST_COMPILE' or 'DEBUG', got %s", tostring(mode)) end
  local linker = spec.linker or (mode == 'DEBUG' and 'vm' or 'cvm')
  if LINKERS[linker] == nil then argerror('compile', "linker must be 'cvm', 'cvm_nogc' or 'vm', got %s", tostring(linker)) end
  local name = spec.name or 'function'
  if type(name) ~= 'string' then argerror('compile', 'name must be a string') end

  -- Everything that is computed: outputs, then update expressions.
  local exprs = {}
  for i, v in ipairs(outs) do exprs[#exprs + 1] = v end
  local upd_vars = {}
  for k, u in ipairs(ups) do
    local var, e = u[1], u[2]
    if not is_var(var) then argerror('compile', 'update %d: the target is not a shared variable', k) end
    if not is_var(e) then e = G.as_node(e, 'compile') end
    -- Updates keep the variable's dtype: a float64 step on a float32
    -- weight is cast (as Theano does with floatX).
    if e.dtype ~= var.dtype and e.dtype:match('^float') and var.dtype:match('^float') then
      e = G.cast(e, var.dtype)
    end
    upd_vars[k] = var
    exprs[#exprs + 1] = e
  end
  -- givens: substitute before compiling.
  if spec.givens then
    if type(spec.givens) ~= 'table' then argerror('compile', 'givens must be a table {[var] = expression}') end
    local from, to = {}, {}
    for k, v in pairs(spec.givens) do
      if not is_var(k) then argerror('compile', 'givens keys must be variables') end
      from[#from + 1] = k
      to[#to + 1] = is_var(v) and v or G.as_node(v, 'compile')
    end
    local n = #exprs
    local src, res = node_list(n), node_list(n)
    for i = 1, n do src[i - 1] = exprs[i].n end
    local f, t = node_list(#from), node_list(#to)
    for i = 1, #from do f[i - 1] = from[i].n; t[i - 1] = to[i].n end
    check(C.tgl_clone_replace(core.ctx, n, src, #from, f, t, res), 'compile')
    for i = 1, n do exprs[i] = G.wrap_node(res[i - 1]) end
  end

  local nin, nout, nupd = #inputs, #outs, #ups
  local cin = node_list(math.max(nin, 1))
  for i = 1, nin do cin[i - 1] = inputs[i].n end
  local cout = node_list(math.max(nout, 1))
  for i = 1, nout do cout[i - 1] = exprs[i].n end
  local uv, ue = node_list(math.max(nupd, 1)), node_list(math.max(nupd, 1))
  for k = 1, nupd do uv[k - 1] = upd_vars[k].n; ue[k - 1] = exprs[nout + k].n end
  local opt = ffi.new('tgl_compile_options')
  opt.linker = LINKERS[linker]
  opt.mode = MODES[mode]
  opt.profile = spec.profile and 1 or 0
  opt.name = name
  local out = ffi.new('tgl_function *[1]')
  check(C.tgl_function_new(core.ctx, nin, cin, nout, cout, nupd, uv, ue, opt, out), 'compile')

  local lent = new_lent()
  lent.fn = out[0]
  local self = setmetatable({
    _fn = ffi.gc(out[0], function(fnp) retire(lent, fnp) end),
    _lent = lent,
    _ins = array_list(math.max(nin, 1)),
    _outs = array_list(math.max(nout, 1)),
    _keep = {},
    nin = nin, nout = nout, nupd = nupd, name = name, mode = mode, linker = linker,
    trust_input = false, inputs = inputs, outputs = outs,
    in_dtype = {},
  }, Function)
  for i = 1, nin do self.in_dtype[i] = inputs[i].dtype end
  -- f.fn{n_calls = N}: the C outer loop, with the inputs of the last call.
  self.fn = function(opts, ...)
    -- f:fn{...} passes f itself first (f.fn is a field holding a function,
    -- not a method); its keys would read as unknown options
    if rawequal(opts, self) then
      local given = ...
      local n = type(given) == 'table' and given.n_calls or given
      argerror(name .. '.fn', 'call it with a dot: f.fn{n_calls = %s}, not f:fn{...} '
               .. '(fn is a field of the function, not a method)',
               type(n) == 'number' and tostring(n) or 'N')
    end
    if type(opts) == 'table' then core.check_options(name .. '.fn', opts, FN_OPTIONS) end
    local n = type(opts) == 'table' and opts.n_calls or opts or 1
    if type(n) ~= 'number' or n < 0 or n ~= math.floor(n) then
      argerror(name, 'n_calls must be a non-negative integer')
    end
    local st = C.tgl_function_run(core.ctx, self._fn, n)
    if st ~= 0 then
      local msg = ffi.string(C.tgl_ctx_error(core.ctx))
      C.tgl_ctx_clear_error(core.ctx)
      msg = msg:gsub('^' .. name:gsub('%p', '%%%0') .. ': ', '')
      error(('tgl.%s: %s'):format(name, msg), 2)
    end
    if nout == 0 then return end
    local r = {}
    for i = 1, nout do r[i] = self:output(i) end
    return unpack(r, 1, nout)
  end
  return self
end

-- ---------------------------------------------------------------------------
-- debugprint

local PTR = { [0] = 'float *', 'double *', 'int32_t *', 'int64_t *', 'uint8_t *', 'uint8_t *' }

-- The first element of an array descriptor, as a Lua number.
local function scalar_value(a)
  return tonumber(ffi.cast(PTR[a.dtype_id], a._data)[0])
end

local label_buf = ffi.new('char[256]')

-- Calls visit(n, depth) on every node under the roots (raw tgl_node *),
-- depth-first, each node's inputs in order; a node seen before is passed
-- again (with again = true) but not descended into.  Iterative: deep
-- graphs do not exhaust the Lua stack.
local function walk(roots, visit)
  local seen = {}
  local stack, depths, sp = {}, {}, 0
  for r = #roots, 1, -1 do sp = sp + 1; stack[sp] = roots[r]; depths[sp] = 0 end
  while sp > 0 do
    local n, d = stack[sp], depths[sp]
    sp = sp - 1
    local key = tonumber(C.tgl_node_id(n))
    local again = seen[key]
    visit(n, d, again)
    if not again then
      seen[key] = true
      for i = C.tgl_node_ninputs(n) - 1, 0, -1 do
        sp = sp + 1
        stack[sp] = C.tgl_node_input_at(n, i)
        depths[sp] = d + 1
      end
    end
  end
end

-- Indentation deeper than this is shown as a number, so that a deep chain
-- prints in size proportional to its length.
local MAX_INDENT = 40

local function node_line(n, ids)
  local id = ids[tonumber(C.tgl_node_id(n))]
  local t = C.tgl_node_type(n)
  local bc = {}
  for i = 1, t.ndim do bc[i] = bit.band(t.bcast, 2 ^ (i - 1)) ~= 0 and '1' or '?' end
  local kind = C.tgl_node_kind_of(n)
  local label, extra = nil, ''
  if kind == KIND.apply then
    label = ffi.string(C.tgl_op_name(C.tgl_node_op(n)))
    if C.tgl_node_payload_label(n, label_buf, 256) ~= 0 then extra = ' ' .. ffi.string(label_buf) end
    if label == 'output' then extra = (' #%d'):format(tonumber(C.tgl_node_params(n).i[0]) + 1) end
    local nout = C.tgl_node_noutputs(n)
    if nout > 1 then extra = extra .. (' (%d outputs)'):format(nout) end
  elseif kind == KIND.constant then
    local v = C.tgl_node_value(n)
    -- The value is shown only when it is one element in host memory.
    if v._size == 1 and v.device == array.DEVICE_CPU then label = ('constant{%g}'):format(scalar_value(v))
    else label = 'constant' end
  elseif kind == KIND.shared then label = 'shared'
  else label = 'input' end
  local name = ffi.string(C.tgl_node_name(n))
  local src = ffi.string(C.tgl_node_source(n))
  return ('%s [id %s]%s %s (%s%s)%s%s'):format(label, id, name ~= '' and (" '" .. name .. "'") or '',
    array.DTYPE_NAME[t.dtype], table.concat(bc, ','), t.ndim == 1 and ',' or '', extra,
    src ~= '' and ('  ' .. src) or '')
end

local function letters(k)
  local s = ''
  repeat
    s = string.char(65 + (k - 1) % 26) .. s
    k = math.floor((k - 1) / 26)
  until k == 0
  return s
end

-- tgl.debugprint(x or {x, y} or f): the graph as an indented tree (a
-- compiled function: its CVM program).  Repeated subtrees print once.
function M.debugprint(x)
  if getmetatable(x) == Function then return x:program() end
  local roots = as_list(x)
  if not roots then argerror('debugprint', 'expected a variable, a table of variables or a function') end
  local ids, count, lines = {}, 0, {}
  local raw = {}
  for i, r in ipairs(roots) do
    if not is_var(r) then argerror('debugprint', 'expected variables, got %s', type(r)) end
    raw[i] = r.n
  end
  walk(raw, function(n, depth)
    local key = tonumber(C.tgl_node_id(n))
    if not ids[key] then count = count + 1; ids[key] = letters(count) end
    local prefix = depth <= MAX_INDENT and (' |'):rep(depth)
      or (' |'):rep(MAX_INDENT) .. (' ~%d |'):format(depth)
    lines[#lines + 1] = prefix .. node_line(n, ids)
  end)
  return table.concat(lines, '\n')
end

-- tgl.optimize(x or {x, ...} [, 'FAST_RUN'|'FAST_COMPILE']): the graph the
-- compiler would run (rewritten: stable forms, GEMMs, fused kernels).
function M.optimize(x, mode)
  if mode ~= nil and mode ~= 'FAST_RUN' and mode ~= 'FAST_COMPILE' then
    argerror('optimize', "mode must be 'FAST_RUN' or 'FAST_COMPILE', got %s", tostring(mode))
  end
  local roots, single = as_list(x)
  if not roots then argerror('optimize', 'expected a variable or a table of variables') end
  local n = #roots
  local inn, outn = node_list(math.max(n, 1)), node_list(math.max(n, 1))
  for i, v in ipairs(roots) do
    if not is_var(v) then argerror('optimize', 'expected variables, got %s', type(v)) end
    inn[i - 1] = v.n
  end
  check(C.tgl_optimize(core.ctx, mode == 'FAST_COMPILE' and C.TGL_OPT_STABILIZE or C.TGL_OPT_FAST_RUN,
                       n, inn, outn), 'optimize')
  local res = {}
  for i = 1, n do res[i] = G.wrap_node(outn[i - 1]) end
  if single then return res[1] end
  return res
end

-- tgl.todot(x or f [, path]): the graph in Graphviz's dot language (a
-- compiled function: its optimized graph, fused groups and GEMMs as boxes,
-- in-place steps marked).  With a path ending in .svg/.png/.pdf, renders
-- it with `dot` when installed (an error otherwise) and returns the path.
function M.todot(x, path)
  local roots
  local inplace = {}
  if getmetatable(x) == Function then
    roots = {}
    for i = 0, x.nout + x.nupd - 1 do
      local r = C.tgl_function_root(x._fn, i)
      roots[#roots + 1] = G.wrap_node(r)
    end
    inplace = setmetatable({}, { __index = function(_, key) return false end })
    local fnp = x._fn
    local raw = {}
    for i, r in ipairs(roots) do raw[i] = r.n end
    walk(raw, function(n, _, again)
      if not again and C.tgl_function_inplace(fnp, n) ~= 0 then
        inplace[tonumber(C.tgl_node_id(n))] = true
      end
    end)
  else
    roots = as_list(x)
    if not roots then argerror('todot', 'expected a variable, a table of variables or a function') end
  end
  local lines = { 'digraph tgl {', '  rankdir=BT;', '  node [fontname="Helvetica", fontsize=10];' }
  local function id(n) return 'n' .. tonumber(C.tgl_node_id(n)) end
  local raw = {}
  for i, r in ipairs(roots) do raw[i] = r.n end
  walk(raw, function(n, _, again)
    if again then return end
    local key = tonumber(C.tgl_node_id(n))
    local kind = C.tgl_node_kind_of(n)
    local t = C.tgl_node_type(n)
    local name = ffi.string(C.tgl_node_name(n))
    local label, shape, style = '', 'ellipse', ''
    if kind == KIND.apply then
      local op = ffi.string(C.tgl_op_name(C.tgl_node_op(n)))
      label = op
      if C.tgl_node_payload_label(n, label_buf, 256) ~= 0 then label = ffi.string(label_buf) end
      if op == 'output' then label = ('output %d'):format(tonumber(C.tgl_node_params(n).i[0]) + 1) end
      shape = (op == 'fused' or op == 'gemm' or op == 'gemv' or op == 'ger') and 'box' or 'ellipse'
      if op == 'fused' then style = ', style=filled, fillcolor="#dde8f7"' end
      if op == 'gemm' or op == 'gemv' or op == 'ger' then style = ', style=filled, fillcolor="#f7e3c8"' end
      if inplace[key] then label = label .. '\\n(in place)' end
    elseif kind == KIND.constant then label = 'constant'; shape = 'plaintext'
    elseif kind == KIND.shared then label = 'shared ' .. name; shape = 'note'
    else label = 'input ' .. name; shape = 'invhouse' end
    label = label .. '\\n' .. array.DTYPE_NAME[t.dtype] .. ' ' .. t.ndim .. '-d'
    lines[#lines + 1] = ('  %s [label="%s", shape=%s%s];'):format(id(n), label:gsub('"', '\\"'), shape, style)
    for i = 0, C.tgl_node_ninputs(n) - 1 do
      lines[#lines + 1] = ('  %s -> %s;'):format(id(C.tgl_node_input_at(n, i)), id(n))
    end
  end)
  lines[#lines + 1] = '}'
  local text = table.concat(lines, '\n') .. '\n'
  if not path then return text end
  if type(path) ~= 'string' then argerror('todot', 'path must be a string') end
  local fmt = path:match('%.(%w+)$')
  if fmt == 'dot' or fmt == 'gv' or not fmt then
    local f = assert(io.open(path, 'w'))
    f:write(text)
    f:close()
    return path
  end
  if os.execute('command -v dot >/dev/null 2>&1') ~= 0 then
    argerror('todot', "rendering %s needs Graphviz's dot (apt-get install graphviz)", path)
  end
  local tmp = os.tmpname()
  local f = assert(io.open(tmp, 'w'))
  f:write(text)
  f:close()
  local rc = os.execute(('dot -T%s %q -o %q 2>/dev/null'):format(fmt, tmp, path))
  os.remove(tmp)
  if rc ~= 0 then argerror('todot', 'dot failed to render %s', path) end
  return path
end

M.Function = Function
return M
