-- tgl.scan — symbolic loops (doc/scan.md), as in Theano.
--
-- The step function runs once, on placeholder variables standing for one
-- step's slices and earlier outputs; what it returns is the loop's body,
-- a graph.  The engine (src/scan, tgl_scan) turns it into one scan node:
-- shared variables and outer variables the body reads become the loop's
-- non-sequences, the body is compiled to an inner program, and the loop
-- runs in C.  Updates the step function returns for shared variables are
-- carried as loop state (each step sees the previous step's value) and
-- the final value is returned as an update for tgl.compile.
local core = require 'tgl.core'
local graph = require 'tgl.graph'
local ffi, C = core.ffi, core.C
local argerror, check = core.argerror, core.check
local is_var = graph.is_var

local M = {}

local node_list = ffi.typeof('tgl_node *[?]')
local int_list = ffi.typeof('int[?]')
local out_node = ffi.typeof('tgl_node *[1]')

-- tgl.until_(cond): the stop condition a step function returns last.
local until_mt = { __tostring = function() return 'tgl.until_(...)' end }
function M.until_(cond)
  if not is_var(cond) then
    argerror('until_', 'the condition must be a symbolic boolean scalar (a comparison), got %s',
             core.is_array(cond) and 'an array' or type(cond))
  end
  return setmetatable({ cond = cond }, until_mt)
end
local function is_until(v) return getmetatable(v) == until_mt end

-- Every value a call returned, and how many (nils included).
local function pack(...) return { n = select('#', ...), ... } end

local function type_name(x)
  local t = C.tgl_node_type(x.n)
  local dims = {}
  for i = 1, t.ndim do dims[i] = bit.band(bit.rshift(t.bcast, i - 1), 1) == 1 and '1' or '?' end
  return ('%s (%s%s)'):format(graph.DTYPE_NAME[t.dtype], table.concat(dims, ','),
                              t.ndim == 1 and ',' or '')
end

-- A placeholder with x's type less its leading axis (a step's slice).
local function slice_placeholder(x, name)
  local t = C.tgl_node_type(x.n)
  local e = ffi.new('tgl_type')
  e.dtype, e.ndim, e.bcast = t.dtype, t.ndim - 1, bit.rshift(t.bcast, 1)
  local out = out_node()
  check(C.tgl_node_input(core.ctx, e, name, out), 'scan')
  return graph.wrap_node(out[0])
end

-- A placeholder of x's own type.
local function same_placeholder(x, name)
  local t = C.tgl_node_type(x.n)
  local out = out_node()
  check(C.tgl_node_input(core.ctx, t, name, out), 'scan')
  return graph.wrap_node(out[0])
end

local function var_name(x, dflt)
  local n = ffi.string(C.tgl_node_name(x.n))
  return n ~= '' and n or dflt
end

-- Checks a taps list: integers, strictly increasing after sorting, no repeats.
local function taps_of(fname, what, taps, dflt)
  if taps == nil then return { dflt } end
  if type(taps) == 'number' then taps = { taps } end
  if type(taps) ~= 'table' or #taps == 0 then
    argerror(fname, '%s: taps must be a non-empty list of integers', what)
  end
  local t = {}
  for i, v in ipairs(taps) do
    if type(v) ~= 'number' or v ~= math.floor(v) then
      argerror(fname, '%s: tap %d is %s, not an integer', what, i, tostring(v))
    end
    t[i] = v
  end
  table.sort(t)
  for i = 2, #t do
    if t[i] == t[i - 1] then argerror(fname, '%s: tap %d appears twice', what, t[i]) end
  end
  return t
end

-- Normalizes updates returned by a step function (its second value):
-- {{W, e}, ...} or {[W] = e}.  name: the scan's, for messages.
local function update_list(fname, updates, name)
  local list = {}
  if updates == nil then return list end
  local function fail(fmt, ...) argerror(fname, "'%s': " .. fmt, name, ...) end
  if type(updates) ~= 'table' or is_var(updates) or core.is_array(updates) then
    fail('the step function returned %s as its second value where a table of updates '
         .. '({shared, expression} pairs) or tgl.until_(cond) was expected', core.type_of(updates))
  end
  for k, v in pairs(updates) do
    local var, expr
    if type(k) == 'number' and type(v) == 'table' and not is_var(v) then
      var, expr = v[1], v[2]
    elseif type(k) == 'number' then
      -- a list of values in the updates' place: outputs, most likely
      fail('the step function returned a table holding %s at position %d as its second value, '
           .. 'where a table of updates ({shared, expression} pairs) was expected (outputs come '
           .. 'first, all in one table: return {o1, o2}, updates)', core.type_of(v), k)
    else
      var, expr = k, v
    end
    if not is_var(var) or C.tgl_node_kind_of(var.n) ~= graph.KIND.shared then
      local what = core.type_of(var)
      if is_var(var) and var_name(var, '') ~= '' then what = ("'%s'"):format(var_name(var)) end
      fail('the step function returned an update for %s, which is not a shared variable', what)
    end
    list[#list + 1] = { var, graph.as_node(expr, fname) }
  end
  return list
end

local SCAN_OPTIONS = {
  fn = 'function', sequences = 'table|variable|array', outputs_info = 'table|variable|array|number',
  non_sequences = 'table|variable|array', n_steps = 'number|variable', go_backwards = 'boolean',
  truncate_gradient = 'number', name = 'string', strict = 'boolean',
}

-- A list argument that may be a single value: x -> {x}.
local function as_list(v)
  if v == nil then return {}, 0 end
  if is_var(v) or core.is_array(v) or type(v) == 'number' then return { v }, 1 end
  return v, table.maxn(v)
end

function M.scan(opts)
  if type(opts) ~= 'table' or is_var(opts) then
    argerror('scan', 'expected an options table: tgl.scan{fn = ..., sequences = {...}, '
             .. 'outputs_info = {...}, non_sequences = {...}}')
  end
  local name = type(opts.name) == 'string' and opts.name or 'scan'
  -- messages name the scan: "tgl.scan: 'rnn': ..."
  core.check_options(("scan: '%s'"):format(name), opts, SCAN_OPTIONS)
  local fn = opts.fn
  local fname = 'scan'
  local function fail(fmt, ...) argerror(fname, "'%s': " .. fmt, name, ...) end
  if fn == nil then fail("option 'fn' (the step function) is required") end

  -- Sequences: {x, ...} or {{input = x, taps = {...}}, ...}.
  local seqs, nseq_in = as_list(opts.sequences)
  local S = {}        -- {x = node, taps = {...}, ph = {placeholders}}
  for i = 1, nseq_in do
    local e = seqs[i]
    local x, taps
    if type(e) == 'table' and not is_var(e) and not core.is_array(e) then
      core.check_options('scan', e, { input = 'variable|array|table', taps = 'table|number' })
      x, taps = e.input, e.taps
      if x == nil then fail("sequence %d: 'input' is missing", i) end
    else
      x = e
    end
    if x == nil then fail('sequence %d is nil', i) end
    x = graph.as_node(x, fname)
    if graph.nd_of(x) < 1 then
      fail('sequence %d is a scalar; a sequence has a leading axis of steps', i)
    end
    if opts.go_backwards then x = x[{ { -1, 1, -1 } }] end
    S[i] = { x = x, taps = taps_of(fname, ('sequence %d'):format(i), taps, 0) }
  end

  -- Outputs: an initial value (fed back through tap -1), {initial=, taps=},
  -- or nil/false (not fed back).
  local infos, ninfo = as_list(opts.outputs_info)
  local R = {}        -- fed-back outputs in order: {pos =, init =, taps =, ph = {}}
  local info_at = {}  -- position in fn's results -> R entry
  for i = 1, ninfo do
    local e = infos[i]
    if e ~= nil and e ~= false then
      local init, taps
      if type(e) == 'table' and not is_var(e) and not core.is_array(e) then
        core.check_options('scan', e, { initial = 'variable|array|number|table', taps = 'table|number' })
        init, taps = e.initial, e.taps
        if init == nil then fail("outputs_info %d: 'initial' is missing", i) end
      else
        init = e
      end
      init = graph.as_node(init, fname)
      taps = taps_of(fname, ('outputs_info %d'):format(i), taps, -1)
      for _, tp in ipairs(taps) do
        if tp >= 0 then
          fail('outputs_info %d: tap %d; the taps of an output must be negative (-1 is '
               .. 'the previous step)', i, tp)
        end
      end
      local single = #taps == 1 and taps[1] == -1
      if not single and graph.nd_of(init) < 1 then
        fail('outputs_info %d: taps %s need an initial value with a leading axis holding '
             .. 'the %d earlier steps', i, table.concat(taps, ','), -taps[1])
      end
      local r = { pos = i, init = init, taps = taps, single = single }
      R[#R + 1] = r
      info_at[i] = r
    end
  end

  -- Placeholders, in fn's argument order.
  local args = {}
  for i, s in ipairs(S) do
    s.ph = {}
    for a, tp in ipairs(s.taps) do
      local p = slice_placeholder(s.x, ('%s[t%+d]'):format(var_name(s.x, 'seq' .. i), tp))
      s.ph[a] = p
      args[#args + 1] = p
    end
  end
  for _, r in ipairs(R) do
    r.ph = {}
    for a, tp in ipairs(r.taps) do
      local p = r.single and same_placeholder(r.init, ('out%d[t-1]'):format(r.pos))
                          or slice_placeholder(r.init, ('out%d[t%d]'):format(r.pos, tp))
      r.ph[a] = p
      args[#args + 1] = p
    end
  end
  -- A non-sequence that is an expression (W[{rows}], W * 2) gets its own
  -- placeholder: the loop reads its value, computed once before the loop,
  -- and the backward scan accumulates the gradient of that value (one
  -- GEMM over the steps for a product) rather than of the leaves it reads
  -- (zeros of the whole of W added into at every step).  Leaves (shared
  -- variables, outer inputs) and constants are passed as they are: the
  -- engine makes the leaves the body reads non-sequences itself.
  local nonseqs, nns = as_list(opts.non_sequences)
  local NS = {}
  for j = 1, nns do
    local w = nonseqs[j]
    if w == nil then fail('non_sequences %d is nil', j) end
    w = is_var(w) and w or graph.as_node(w, fname)
    if w.kind == 'apply' then
      local ph = same_placeholder(w, var_name(w, 'nonseq' .. j))
      NS[#NS + 1] = { x = w, ph = ph }
      w = ph
    end
    args[#args + 1] = w
  end

  -- The body.  What fn returns is told apart by kind: outputs (a value, or
  -- one table of them), then a table of updates, then tgl.until_(cond);
  -- a mistake names what came where, and how many outputs outputs_info
  -- declares.
  local ret = pack(fn(unpack(args, 1, #args)))
  local r1, r2, r3 = ret[1], ret[2], ret[3]
  local function is_output(v) return is_var(v) or core.is_array(v) or type(v) == 'number' end
  local function outputs_word(n) return n == 1 and 'output' or 'outputs' end
  if is_until(r1) then fail('the step function returned tgl.until_ in place of its outputs') end
  -- outputs returned as separate values: return a, b instead of {a, b}
  local given = type(r1) == 'table' and not is_output(r1) and table.maxn(r1) or (r1 ~= nil and 1 or 0)
  local extra = 0
  while is_output(ret[2 + extra]) do extra = extra + 1 end
  if extra > 0 and r1 ~= nil then
    fail('the step function returned %d %s %s (several outputs are returned as one table, '
         .. 'return {o1, o2, ...}; after it may come a table of updates, then tgl.until_(cond))',
         given + extra, outputs_word(given + extra),
         ninfo > 0 and ('where outputs_info declares %d'):format(ninfo) or 'as separate values')
  end
  local outs, updates, stop
  if is_until(r3) then stop = r3 elseif r3 ~= nil then
    fail('the step function returned %s as its third value where tgl.until_(cond) was expected '
         .. '(a stop condition is written tgl.until_(cond))', core.type_of(r3))
  end
  if ret.n > 3 then
    fail('the step function returned %d values; it returns its outputs (one value or one table), '
         .. 'then optionally a table of updates and tgl.until_(cond)', ret.n)
  end
  if is_until(r2) then
    if stop then fail('the step function returned two tgl.until_ conditions') end
    stop, r2 = r2, nil
  end
  updates = update_list(fname, r2, name)
  local single_out = false
  if r1 == nil then
    outs = {}
  elseif is_output(r1) then
    outs, single_out = { r1 }, true
  elseif type(r1) == 'table' then
    outs = {}
    for k = 1, table.maxn(r1) do
      if r1[k] == nil then fail('output %d of the step function is nil', k) end
      outs[k] = r1[k]
    end
    -- {outputs} alone may also be a table of updates: Theano allows fn to
    -- return only updates; here updates come second.
  else
    fail('the step function returned %s; expected an output, a table of outputs, then '
         .. 'optionally updates and tgl.until_(cond)', type(r1))
  end
  for k, o in ipairs(outs) do outs[k] = graph.as_node(o, fname) end
  if #outs == 0 and #updates == 0 then fail('the step function returns no output') end
  if ninfo > #outs then
    for i = #outs + 1, ninfo do
      if info_at[i] then
        fail('the step function returned %d %s where outputs_info declares %d (it has an initial '
             .. 'value for output %d)', #outs, outputs_word(#outs), ninfo, i)
      end
    end
  end
  -- Fed-back outputs keep their type: check here, naming fn's output.
  for _, r in ipairs(R) do
    local o = outs[r.pos]
    local want = C.tgl_node_type(r.ph[1].n)
    local got = C.tgl_node_type(o.n)
    if want.dtype ~= got.dtype or want.ndim ~= got.ndim then
      fail('output %d is %s at each step, but its initial value gives %s (an output fed back '
           .. 'keeps its dtype and rank: cast the initial value or the output)',
           r.pos, type_name(o), type_name(r.ph[1]))
    end
  end
  local cond
  if stop then
    cond = stop.cond
    local t = C.tgl_node_type(cond.n)
    if t.ndim ~= 0 then fail('the until condition must be a scalar, got %s', type_name(cond)) end
    if t.dtype ~= graph.DTYPE.bool then
      fail('the until condition must be boolean (a comparison), got %s', type_name(cond))
    end
  end

  -- Shared variables the step updates: loop state (placeholder in the body).
  local U = {}
  if #updates > 0 and #NS > 0 then
    -- an expression non-sequence may read a variable the step updates,
    -- whose value changes from step to step: the body reads the
    -- expressions themselves again, and the updated variables in them
    -- become the loop's state below
    local roots = {}
    for _, o in ipairs(outs) do roots[#roots + 1] = o end
    for _, u in ipairs(updates) do roots[#roots + 1] = u[2] end
    if cond then roots[#roots + 1] = cond end
    local nr, nf = #roots, #NS
    local rin, rout = node_list(nr), node_list(nr)
    local fa, ta = node_list(nf), node_list(nf)
    for i = 1, nr do rin[i - 1] = roots[i].n end
    for i = 1, nf do fa[i - 1], ta[i - 1] = NS[i].ph.n, NS[i].x.n end
    check(C.tgl_clone_replace(core.ctx, nr, rin, nf, fa, ta, rout), fname)
    local i = 0
    for k = 1, #outs do i = i + 1; outs[k] = graph.wrap_node(rout[i - 1]) end
    for k = 1, #updates do i = i + 1; updates[k] = { updates[k][1], graph.wrap_node(rout[i - 1]) } end
    if cond then cond = graph.wrap_node(rout[nr - 1]) end
    NS = {}
  end
  if #updates > 0 then
    local from, to = {}, {}
    for k, u in ipairs(updates) do
      local var, expr = u[1], u[2]
      local t1, t2 = C.tgl_node_type(var.n), C.tgl_node_type(expr.n)
      if t1.dtype ~= t2.dtype or t1.ndim ~= t2.ndim then
        fail('the update of %s gives %s, the variable is %s', var_name(var, 'a shared variable'),
             type_name(expr), type_name(var))
      end
      local ph = same_placeholder(var, var_name(var, 'shared') .. '[t-1]')
      U[k] = { var = var, expr = expr, ph = ph }
      from[k], to[k] = var, ph
    end
    -- Every inner value reads the evolving state instead of the variable.
    local roots = {}
    for _, o in ipairs(outs) do roots[#roots + 1] = o end
    for _, u in ipairs(U) do roots[#roots + 1] = u.expr end
    if cond then roots[#roots + 1] = cond end
    local nr, nf = #roots, #from
    local rin, rout = node_list(nr), node_list(nr)
    local fa, ta = node_list(nf), node_list(nf)
    for i = 1, nr do rin[i - 1] = roots[i].n end
    for i = 1, nf do fa[i - 1], ta[i - 1] = from[i].n, to[i].n end
    check(C.tgl_clone_replace(core.ctx, nr, rin, nf, fa, ta, rout), fname)
    local i = 0
    for k = 1, #outs do i = i + 1; outs[k] = graph.wrap_node(rout[i - 1]) end
    for k = 1, #U do i = i + 1; U[k].expr = graph.wrap_node(rout[i - 1]) end
    if cond then cond = graph.wrap_node(rout[nr - 1]) end
  end

  -- The spec: sequences, then recurrent outputs (fn's, then the updated
  -- shared variables), outputs not fed back, the until condition.
  local keep = {}
  local inner_in, inner_out = {}, {}
  local seq_nodes, seq_ntaps, seq_taps = {}, {}, {}
  for i, s in ipairs(S) do
    seq_nodes[i] = s.x
    seq_ntaps[i] = #s.taps
    for a, tp in ipairs(s.taps) do seq_taps[#seq_taps + 1] = tp; inner_in[#inner_in + 1] = s.ph[a] end
  end
  local rec_inits, rec_ntaps, rec_taps = {}, {}, {}
  local function lead(x) -- x with a leading axis of one step
    local order = { 'x' }
    for d = 1, graph.nd_of(x) do order[d + 1] = d end
    return graph.dimshuffle(x, order)
  end
  for _, r in ipairs(R) do
    rec_inits[#rec_inits + 1] = r.single and lead(r.init) or r.init
    rec_ntaps[#rec_ntaps + 1] = #r.taps
    for a, tp in ipairs(r.taps) do rec_taps[#rec_taps + 1] = tp; inner_in[#inner_in + 1] = r.ph[a] end
    inner_out[#inner_out + 1] = outs[r.pos]
  end
  for _, u in ipairs(U) do
    rec_inits[#rec_inits + 1] = lead(u.var)
    rec_ntaps[#rec_ntaps + 1] = 1
    rec_taps[#rec_taps + 1] = -1
    inner_in[#inner_in + 1] = u.ph
    inner_out[#inner_out + 1] = u.expr
  end
  local nofb = {}
  for k = 1, #outs do
    if not info_at[k] then nofb[#nofb + 1] = k; inner_out[#inner_out + 1] = outs[k] end
  end
  if cond then inner_out[#inner_out + 1] = cond end
  -- the expression non-sequences, after every other inner input
  local ns_nodes = {}
  for j, w in ipairs(NS) do ns_nodes[j] = w.x; inner_in[#inner_in + 1] = w.ph end

  local n_steps = opts.n_steps
  if type(n_steps) == 'number' then
    if n_steps ~= math.floor(n_steps) or n_steps < 0 then
      fail('n_steps must be a whole number of steps (0 or more), got %s', tostring(n_steps))
    end
    n_steps = graph.constant(n_steps, 'int64')
  elseif n_steps ~= nil then
    local t = C.tgl_node_type(n_steps.n)
    if t.ndim ~= 0 or not (t.dtype == graph.DTYPE.int64 or t.dtype == graph.DTYPE.int32
                           or t.dtype == graph.DTYPE.uint8) then
      fail('n_steps must be an integer scalar, got %s', type_name(n_steps))
    end
  end
  if #S == 0 and n_steps == nil then
    fail('with no sequences, n_steps is required')
  end
  local tg = opts.truncate_gradient or -1
  if tg ~= math.floor(tg) or (tg < 0 and tg ~= -1) then
    fail('truncate_gradient must be -1 (no truncation) or a number of steps, got %s', tostring(tg))
  end

  local spec = ffi.new('tgl_scan_spec')
  local keepalive = {}
  local function nodes(list)
    local a = node_list(#list + 1)
    for i, v in ipairs(list) do a[i - 1] = v.n end
    keepalive[#keepalive + 1] = a
    return a
  end
  local function ints(list)
    local a = int_list(#list + 1)
    for i, v in ipairs(list) do a[i - 1] = v end
    keepalive[#keepalive + 1] = a
    return a
  end
  spec.name = name
  spec.nseq = #S
  spec.seq_ntaps = ints(seq_ntaps)
  spec.seq_taps = ints(seq_taps)
  spec.nrec = #rec_inits
  spec.rec_ntaps = ints(rec_ntaps)
  spec.rec_taps = ints(rec_taps)
  spec.nnofb = #nofb
  spec.nnonseq = #NS
  spec.has_until = cond and 1 or 0
  spec.reverse = 0
  spec.truncate_gradient = tg
  spec.inner_in = nodes(inner_in)
  spec.inner_out = nodes(inner_out)
  spec.n_steps = n_steps and n_steps.n or nil
  spec.seqs = nodes(seq_nodes)
  spec.inits = nodes(rec_inits)
  spec.nonseqs = #NS > 0 and nodes(ns_nodes) or nil
  -- the updated variables' outputs hold their initial value, then every
  -- step (TGL_SCAN_KEEP_WITH_INIT), for the final value below
  for k = 1, #rec_inits + #nofb do keep[k] = (k > #R and k <= #rec_inits) and 3 or 0 end
  spec.keep = #U > 0 and ints(keep) or nil
  local out = out_node()
  C.tgl_graph_maybe_collect(core.ctx)
  check(C.tgl_scan(core.ctx, spec, graph.user_source(), out), fname)
  local node = graph.wrap_node(out[0])
  local function output(k)
    local o = out_node()
    check(C.tgl_node_output(core.ctx, node.n, k, o), fname)
    return graph.wrap_node(o[0])
  end

  -- Results in fn's order; updates as {{var, final value}, ...}.
  local result = {}
  for k, r in ipairs(R) do result[r.pos] = output(k - 1) end
  local nrec = #rec_inits
  for j, k in ipairs(nofb) do result[k] = output(nrec + j - 1) end
  -- The final value: the last entry of the variable's state output, which
  -- holds the variable's value before the steps (keep 3 above), so no step
  -- leaves the value as it was.  scan_save_mem keeps only the last entry.
  local ups = {}
  for j, u in ipairs(U) do
    local all = output(#R + j - 1)
    ups[j] = { u.var, all[-1] }
  end
  keepalive = nil
  if #outs == 1 and single_out then return result[1], ups end
  if #outs == 1 then return result[1], ups end
  return result, ups
end

return M
