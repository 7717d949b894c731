-- op_matrix_spec.lua — the op matrix (issue 24, PyTorch's OpInfo style;
-- doc/contributing.md "The op matrix"): every op of the engine's catalog
-- × every dtype it accepts × shape patterns (0-d, 0-size axes,
-- broadcasting on each axis of each operand, lower-rank operands) × input
-- layouts (contiguous, transposed, strided and reversed views) × value
-- sets (random in the op's domain; NaN, ±Inf, ±0, huge and subnormal
-- values for the elementwise ops and reductions), run eagerly (the CPU
-- reference kernels) and compiled in FAST_RUN (generated kernels),
-- FAST_COMPILE and DEBUG, each compared with a float64 reference computed
-- in Lua from plain numbers (elementwise ops, reductions) or with the
-- eager result (the other ops); dtypes an op refuses give a clear error;
-- gradients and Rop against central finite differences in float64.  The
-- table is spec/op_matrix_cases.lua; an op of the catalog with no entry
-- there fails 'every op of the catalog has an entry'.
--
-- Each graph is compiled once per (entry, dtype, shape pattern, mode) and
-- called on every value set and layout.  By default FAST_RUN (libtcc's
-- kernels) runs every pattern, FAST_COMPILE and DEBUG the first two
-- patterns of each entry, and FAST_RUN/cc (the system compiler's
-- kernels, compile = 'sync') the first pattern of the float dtypes of the
-- elementwise ops and reductions;
-- TGL_OPMATRIX_FULL=1 runs every mode on every pattern, more value sets
-- and the gradient checks on every pattern.  The last test prints
-- "op matrix: N cases" (one case: one result compared with its reference).
--
-- What it found when it was written (each fixed, each case kept): relu
-- and clip dropped a NaN (maximum propagates it); clip gave lo, not hi,
-- where lo > hi (documented as min(max(x, lo), hi)); float32 mod
-- overflowed in its quotient (-2.5 % 1e-45 gave inf); a kernel made under
-- compile = 'tcc' kept libtcc's code in a later function compiled under
-- 'sync'.
tgl = tgl or require 'tgl'
local tgl = tgl
local ffi = require 'ffi'
local C = require('tgl.core').C
local S = dofile('spec/support.lua')
local K = dofile('spec/op_matrix_cases.lua')

local FULL = os.getenv('TGL_OPMATRIX_FULL') == '1'
local MODES = { 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }
local LAYOUTS = { 'contiguous', 'transposed', 'strided', 'reversed' }

-- |got - want| <= abs + rel * |want| (scaled by the magnitude of the
-- terms for sums); integers and bools exact.  float32: a few units in the
-- last place (the generated kernels use vector exp/tanh/log).
local TOL = { float32 = { rel = 4e-6, abs = 0 }, float64 = { rel = 1e-12, abs = 0 } }

-- cases by the catalog's family of the op (elemwise, reduce, blas, shape,
-- subtensor, nnet, control), and the derivative, dtype-error and
-- coverage checks apart
local counts, total = {}, 0
local function count(family, n)
  n = n or 1
  counts[family] = (counts[family] or 0) + n
  total = total + n
end
local function family_of(e)
  local s = C.tgl_op_property(C.tgl_op_lookup(e.op), 'family')
  return s ~= nil and ffi.string(s) or '?'
end

local saved = {}
-- libtcc's kernels everywhere but FAST_RUN/cc: no background cc compiles
-- (each costs a few tenths of a second of CPU with a cold cache)
setup(function()
  saved.floatX, saved.compile = tgl.config.floatX, tgl.config.compile
  tgl.config.floatX, tgl.config.compile = 'float32', 'tcc'
end)
teardown(function() tgl.config.floatX, tgl.config.compile = saved.floatX, saved.compile end)

-- ---------------------------------------------------------------------------
-- arrays

local PTR = { float32 = 'float *', float64 = 'double *', int32 = 'int32_t *', int64 = 'int64_t *',
              uint8 = 'uint8_t *', bool = 'uint8_t *' }
local function is_float(dt) return dt == 'float32' or dt == 'float64' end

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- an array's elements as Lua numbers, C order (bools 0 / 1)
local function values(a)
  local c = a:contiguous()
  local n = c:nelement()
  local t = {}
  if n == 0 then return t end
  local p = ffi.cast(PTR[c.dtype], c:data())
  for i = 0, n - 1 do t[i + 1] = tonumber(p[i]) end
  return t
end

-- the value v as the dtype holds it
local f32 = ffi.new('float[1]')
local function to_dtype(v, dt)
  if type(v) == 'boolean' then v = v and 1 or 0 end
  if dt == 'float32' then f32[0] = v; return tonumber(f32[0]) end
  if dt == 'float64' then return v end
  if dt == 'bool' then return v ~= 0 and 1 or 0 end
  -- integer arithmetic wraps
  local bits = dt == 'uint8' and 8 or dt == 'int32' and 32 or 64
  if bits == 64 then return v end
  local m = 2 ^ bits
  v = v % m
  if dt ~= 'uint8' and v >= m / 2 then v = v - m end
  return v
end

local function contiguous_array(vals, shape, dt)
  if numel(shape) == 0 then return tgl.zeros(shape, { dtype = dt }) end
  if #shape == 0 then return tgl.full({}, vals[1], { dtype = dt }) end
  return tgl.array(vals, dt):reshape(shape)
end

-- An array of `shape` holding vals (C order) laid out as `layout`:
-- 'transposed' (a 2-d input is the transpose of a contiguous array; other
-- ranks: strided), 'strided' (every other element of a last axis twice as
-- long), 'reversed' (a last axis read backwards: negative stride).  0-d
-- and 0-size arrays stay contiguous.
local function make(vals, shape, dt, layout)
  local n, r = numel(shape), #shape
  if layout == 'contiguous' or r == 0 or n == 0 then return contiguous_array(vals, shape, dt) end
  if layout == 'transposed' and r == 2 then
    local t, R, Cc = {}, shape[1], shape[2]
    for j = 1, Cc do for i = 1, R do t[#t + 1] = vals[(i - 1) * Cc + j] end end
    return contiguous_array(t, { Cc, R }, dt):T()
  end
  local last = shape[r]
  local big = {}
  for k = 1, r - 1 do big[k] = shape[k] end
  local idx = {}
  for k = 1, r - 1 do idx[k] = {} end
  local t = {}
  if layout == 'reversed' then
    for row = 0, n / last - 1 do
      for j = last, 1, -1 do t[#t + 1] = vals[row * last + j] end
    end
    big[r] = last
    idx[r] = { last, 1, -1 }
  else
    for row = 0, n / last - 1 do
      for j = 1, last do t[#t + 1] = vals[row * last + j]; t[#t + 1] = dt == 'bool' and 1 or 77 end
    end
    big[r] = 2 * last
    idx[r] = { 1, 2 * last - 1, 2 }
  end
  local a = contiguous_array(t, big, dt)[idx]
  return a
end

local function shape_str(s) return S.shape_str(s) end

-- ---------------------------------------------------------------------------
-- comparison

-- nil when got (an array) holds want (Lua numbers, C order) in `shape`
-- and dtype `dt` within tol; NaN matches NaN; zeros' signs compared when
-- signed_zero; else a message naming the first mismatch.
local function mismatch(want, got, dt, shape, tol, signed_zero, scale)
  if not tgl.is_array(got) then return 'not an array: ' .. tostring(got) end
  if got.dtype ~= dt then return ('dtype %s, expected %s'):format(got.dtype, dt) end
  if shape_str(got:shape()) ~= shape_str(shape) then
    return ('shape %s, expected %s'):format(shape_str(got:shape()), shape_str(shape))
  end
  local g = values(got)
  if #g ~= #want then return ('%d elements, expected %d'):format(#g, #want) end
  tol = tol or TOL[dt]
  for i = 1, #want do
    local w, v = want[i], g[i]
    local ok
    if w ~= w then ok = v ~= v
    elseif not tol or w == math.huge or w == -math.huge then ok = v == w
    else
      local abs = tol.abs + (scale and scale[i] or 0) * tol.rel
      ok = v == v and math.abs(v - w) <= abs + tol.rel * math.abs(w)
    end
    if ok and signed_zero and is_float(dt) and w == 0 and v == 0 and (1 / w > 0) ~= (1 / v > 0) then ok = false end
    if not ok then
      return ('element %d (C order) is %.17g, expected %.17g (%s %s)'):format(i, v, w, dt, shape_str(shape))
    end
  end
  return nil
end

-- ---------------------------------------------------------------------------
-- broadcasting (NumPy's rule) for the Lua reference

local function bshape(shapes)
  local r = 0
  for _, s in ipairs(shapes) do r = math.max(r, #s) end
  local out = {}
  for k = 1, r do
    local d = 1
    for _, s in ipairs(shapes) do
      local e = s[#s - r + k] or 1
      if e ~= 1 then d = e end
    end
    out[k] = d
  end
  return out
end

-- the flat index (1-based) into an input of shape s for output position
-- pos (0-based digits of the output shape)
local function bindex(s, pos, r)
  local i = 0
  for k = 1, #s do
    local p = pos[r - #s + k]
    i = i * s[k] + (s[k] == 1 and 0 or p)
  end
  return i + 1
end

local function elementwise_ref(e, ins, shapes, out_dt, calc_dt)
  local out = bshape(shapes)
  local n = numel(out)
  local r = #out
  local pos = {}
  for k = 1, r do pos[k] = 0 end
  local want = {}
  for i = 1, n do
    local args = {}
    for j, v in ipairs(ins) do
      args[j] = v[bindex(shapes[j], pos, r)]
      if e.math and not is_float(calc_dt) then args[j] = to_dtype(args[j], 'float32') end
    end
    args[#args + 1] = calc_dt
    want[i] = to_dtype(e.ref(unpack(args)), out_dt)
    for k = r, 1, -1 do
      pos[k] = pos[k] + 1
      if pos[k] < out[k] then break end
      pos[k] = 0
    end
  end
  return want, out
end

-- the reduction reference: axes (nil: all), keepdims
local function reduce_ref(e, vals, shape, axis, keep, out_dt)
  local r = #shape
  local red = {}
  if axis == nil then for k = 1, r do red[k] = true end
  elseif type(axis) == 'table' then for _, a in ipairs(axis) do red[a < 0 and r + 1 + a or a] = true end
  else red[axis < 0 and r + 1 + axis or axis] = true end
  local oshape, kept = {}, {}
  for k = 1, r do
    if not red[k] then oshape[#oshape + 1] = shape[k]; kept[#kept + 1] = k
    elseif keep then oshape[#oshape + 1] = 1 end
  end
  local groups, mags = {}, {}
  local on = numel(oshape)
  for i = 1, on do groups[i] = {}; mags[i] = 0 end
  local pos = {}
  for k = 1, r do pos[k] = 0 end
  for i = 1, numel(shape) do
    local o = 0
    for _, k in ipairs(kept) do o = o * shape[k] + pos[k] end
    local g = groups[o + 1]
    g[#g + 1] = vals[i]
    if vals[i] == vals[i] and math.abs(vals[i]) < math.huge then mags[o + 1] = mags[o + 1] + math.abs(vals[i]) end
    for k = r, 1, -1 do
      pos[k] = pos[k] + 1
      if pos[k] < shape[k] then break end
      pos[k] = 0
    end
  end
  local want = {}
  for i = 1, on do
    want[i] = to_dtype(e.ref(groups[i]), out_dt)
    if e.mean then mags[i] = mags[i] / math.max(1, #groups[i]) end
    if e.op == 'prod' then mags[i] = math.abs(want[i]) * #groups[i] end
  end
  return want, oshape, mags
end

-- ---------------------------------------------------------------------------
-- value sets

-- the domain generator of input k for dtype dt
local function domain_of(e, k, dt)
  local d = e.domain
  if type(d) == 'table' then d = d[k] end
  if d then return d(dt) end
  return K.default_domain(dt)
end

-- value sets for one pattern: lists of flat value tables, one per input
local function value_sets(e, shapes, dts, seed)
  math.randomseed(seed)
  local sets = {}
  local nrand = FULL and 3 or 1
  for _ = 1, nrand do
    local set = {}
    for k, s in ipairs(shapes) do
      local g, t = domain_of(e, k, dts[k]), {}
      for i = 1, numel(s) do t[i] = to_dtype(g(), dts[k]) end
      set[k] = t
    end
    sets[#sets + 1] = { name = 'random', vals = set }
  end
  if e.special then
    -- the specials cycled through the elements, each input offset so that
    -- a (k,1) and (1,k) pair meet every pair of values
    local set = {}
    for k, s in ipairs(shapes) do
      local sp = is_float(dts[k]) and K.specials(dts[k]) or K.int_specials(dts[k])
      local t = {}
      local off = (k - 1) * 3
      for i = 1, numel(s) do t[i] = to_dtype(sp[(i - 1 + off) % #sp + 1], dts[k]) end
      set[k] = t
    end
    sets[#sets + 1] = { name = 'special', vals = set }
    if e.family == 'reduce' and is_float(dts[1]) then
      -- reductions: the finite specials alone (±0, subnormals, halves),
      -- so that rows hold them without a NaN or an infinity swamping them
      local fin = {}
      for _, v in ipairs(K.specials(dts[1])) do
        if v == v and math.abs(v) < 1e30 then fin[#fin + 1] = v end
      end
      local t = {}
      for i = 1, numel(shapes[1]) do t[i] = to_dtype(fin[(i - 1) % #fin + 1], dts[1]) end
      sets[#sets + 1] = { name = 'finite special', vals = { t } }
    end
  end
  return sets
end

-- ---------------------------------------------------------------------------
-- running an elementwise or reduction entry

local function var_for(shape, dt, name)
  local bc = {}
  for k = 1, #shape do bc[k] = shape[k] == 1 end
  return tgl.tensor { dtype = dt, ndim = #shape, broadcastable = bc, name = name }
end

-- FAST_RUN/cc: FAST_RUN with tgl.config.compile = 'sync', the system
-- compiler's kernels (-O3, libmvec) from the first call; plain FAST_RUN
-- runs libtcc's until the background compile swaps them (doc/compile.md).
-- Each cc compile costs a few tenths of a second with a cold kernel
-- cache (CI's), so by default FAST_RUN/cc runs the first pattern of the
-- float dtypes of the elementwise ops and reductions (their rows long
-- enough for the vector loops); TGL_OPMATRIX_FULL=1 runs it everywhere.
local function modes_for(pi, e, dt)
  if FULL then return { 'FAST_RUN', 'FAST_COMPILE', 'DEBUG', 'FAST_RUN/cc' } end
  if pi == 1 and e and e.family ~= 'other' and is_float(dt) then
    return { 'FAST_RUN', 'FAST_COMPILE', 'DEBUG', 'FAST_RUN/cc' }
  end
  if pi <= 2 then return MODES end
  return { 'FAST_RUN' }
end

local function compile_in(mode, inputs, outputs)
  if mode == 'FAST_RUN/cc' then
    local f = S.with_settings({ compile = 'sync' }, function()
      return tgl.compile { inputs = inputs, outputs = outputs, mode = 'FAST_RUN' }
    end)
    local prog = f:program()
    assert(not prog:find('[tcc]', 1, true), 'compile = sync ran libtcc kernels:\n' .. prog)
    return f
  end
  if mode == 'FAST_RUN' then
    -- libtcc's kernels on every call for a program first compiled here (a
    -- background swap mid-spec would make the tier checked depend on
    -- timing; a program already at cc stays there)
    local f = S.with_settings({ compile = 'tcc' }, function()
      return tgl.compile { inputs = inputs, outputs = outputs, mode = 'FAST_RUN' }
    end)
    return f
  end
  return tgl.compile { inputs = inputs, outputs = outputs, mode = mode }
end

local function entry_name(e) return e.desc and (e.op .. ' (' .. e.desc .. ')') or e.op end


-- the op names in the FAST_RUN programs seen (for the COVERED checks)
local produced = {}

local function note_program(f)
  local prog = f:program()
  for name in prog:gmatch('= ([%w_]+)[#(]') do produced[name] = true end
  return prog
end

local function run_mapped(e)
  local fam = family_of(e)
  for _, dt in ipairs(e.dtypes) do
    for pi, p in ipairs(e.patterns) do
      local shapes, axis, keep
      if e.family == 'reduce' then shapes, axis, keep = { p[1] }, p[2], p[3] else shapes = p end
      local dts = e.in_dtypes and e.in_dtypes(dt) or {}
      for k = 1, #shapes do dts[k] = dts[k] or dt end
      local vars = {}
      for k, s in ipairs(shapes) do vars[k] = var_for(s, dts[k], 'x' .. k) end
      local what = ('%s %s %s'):format(entry_name(e), dt, e.family == 'reduce'
        and (shape_str(shapes[1]) .. ' axis ' .. (type(axis) == 'table' and '{' .. table.concat(axis, ',') .. '}'
             or tostring(axis)) .. (keep and ' keepdims' or '')) or table.concat((function()
               local t = {}
               for k, s in ipairs(shapes) do t[k] = shape_str(s) end
               return t
             end)(), ' and '))
      -- max, min, argmax, argmin over an empty axis: an error
      local empty_err = false
      if e.empty_error then
        local s, r = shapes[1], #shapes[1]
        for k = 1, r do
          local on = axis == nil or axis == k or axis == k - r - 1
          if type(axis) == 'table' then for _, a in ipairs(axis) do on = on or a == k end end
          if on and s[k] == 0 then empty_err = true end
        end
      end
      local sym
      if e.family == 'reduce' then sym = e.fn(vars[1], axis, keep) else sym = e.fn(unpack(vars)) end
      local sets = value_sets(e, shapes, dts, 7000 + pi)
      local out_dt = sym.dtype
      local wants, arrays_of = {}, {}
      for si, set in ipairs(sets) do
        local want, oshape, scale
        if e.family == 'reduce' and not empty_err then
          want, oshape, scale = reduce_ref(e, set.vals[1], shapes[1], axis, keep, out_dt)
        elseif e.family ~= 'reduce' then
          want, oshape = elementwise_ref(e, set.vals, shapes, out_dt, dt)
        end
        wants[si] = { want, oshape, scale }
        arrays_of[si] = {}
        for li, layout in ipairs(LAYOUTS) do
          local arrays = {}
          for k, s in ipairs(shapes) do arrays[k] = make(set.vals[k], s, dts[k], layout) end
          arrays_of[si][li] = arrays
        end
      end
      -- mode by mode: each mode's kernels run before the next compile (a
      -- kernel is shared by the functions that use it, and FAST_RUN/cc
      -- raises it to the system compiler's code)
      local modes = { 'eager' }
      for _, m in ipairs(modes_for(pi, e, dt)) do modes[#modes + 1] = m end
      for _, mode in ipairs(modes) do
        local f
        if mode == 'eager' then
          if e.family == 'reduce' then f = function(x) return e.fn(x, axis, keep) end else f = e.fn end
        else
          f = compile_in(mode, vars, sym)
          if mode == 'FAST_RUN' and pi <= 2 then note_program(f) end
        end
        for si, set in ipairs(sets) do
          local want, oshape, scale = unpack(wants[si])
          for li, layout in ipairs(LAYOUTS) do
            local label = ('%s, %s values, %s'):format(what, set.name, layout)
            local ok, got = pcall(f, unpack(arrays_of[si][li]))
            if empty_err then
              assert(not ok and tostring(got):find('zero%-size reduction'),
                     label .. ' ' .. mode .. ': expected a zero-size error, got ' .. tostring(got))
            else
              if not ok then error(label .. ' ' .. mode .. ': ' .. tostring(got), 0) end
              local m = mismatch(want, got, out_dt, oshape, nil, e.signed_zero, scale)
              if m then error(('%s %s: %s'):format(label, mode, m), 0) end
            end
            count(fam)
          end
        end
      end
    end
  end
end

-- an int input {int = values, shape = shape}: its values and shape
local function int_input(inp)
  local t = type(inp.int) == 'table' and inp.int or { inp.int }
  return t, inp.shape or { #t }
end

-- ---------------------------------------------------------------------------
-- dtypes refused: a clear error naming the op, symbolic and eager

local function run_rejects(e)
  if e.family == 'other' then
    -- input reject_input of the first sample given the refused dtype
    for dt, pattern in pairs(e.reject or {}) do
      local vars, arrays = {}, {}
      for k, inp in ipairs(e.samples[1]) do
        local shape, vals
        if inp.int then vals, shape = int_input(inp) else shape = inp end
        local d = k == e.reject_input and dt or inp.int and 'int64' or 'float64'
        if not vals or k == e.reject_input then
          vals = {}
          for i = 1, numel(shape) do vals[i] = 1 end
        end
        vars[k] = var_for(shape, d, 'x' .. k)
        arrays[k] = make(vals, shape, d, 'contiguous')
      end
      for _, xs in ipairs({ vars, arrays }) do
        local ok, err = pcall(e.fn, unpack(xs))
        assert(not ok, ('%s accepted %s for input %d'):format(entry_name(e), dt, e.reject_input))
        err = tostring(err)
        assert(err:find('tgl.' .. (e.reject_name or e.op), 1, true) and err:find(pattern, 1, true),
               ('%s with %s: the error does not say %q: %s'):format(entry_name(e), dt, pattern, err))
        count('dtype errors')
      end
    end
    return
  end
  for dt, pattern in pairs(e.reject or {}) do
    local shapes = e.family == 'reduce' and { e.patterns[1][1] } or e.patterns[1]
    local vars, arrays = {}, {}
    for k, s in ipairs(shapes) do
      vars[k] = var_for(s, dt, 'x' .. k)
      local sp, t = K.int_specials(dt), {}
      for i = 1, numel(s) do t[i] = sp[(i - 1) % #sp + 1] end
      arrays[k] = make(t, s, dt, 'contiguous')
    end
    for _, xs in ipairs({ vars, arrays }) do
      local ok, err = pcall(e.fn, unpack(xs))
      assert(not ok, ('%s accepted %s'):format(entry_name(e), dt))
      err = tostring(err)
      assert(err:find('tgl.' .. e.op, 1, true) and err:find(pattern, 1, true),
             ('%s of %s: the error does not say %q: %s'):format(entry_name(e), dt, pattern, err))
      count('dtype errors')
    end
  end
end

-- ---------------------------------------------------------------------------
-- gradients and Rop against central finite differences (float64)

local EPS, GTOL = 1e-6, 1e-6

local function rand_array(shape, g)
  local t = {}
  for i = 1, numel(shape) do t[i] = g() end
  return contiguous_array(t, shape, 'float64')
end

-- xs: float64 arrays; build(vars) -> variable; wrt: input indices.  Checks
-- Rop(out, wrt, v) = (f(x + eps v) - f(x - eps v)) / 2 eps and the
-- pullback through <grad sum(out * u), v> = <u, J v>.
local function check_fd(label, xs, build, wrt, tol)
  tol = tol or GTOL
  local vars = {}
  for i, x in ipairs(xs) do vars[i] = var_for(x:shape(), x.dtype, 'x' .. i) end
  local out = build(unpack(vars))
  local wv, vv, va = {}, {}, {}
  for k, i in ipairs(wrt) do
    wv[k] = vars[i]
    va[k] = rand_array(xs[i]:shape(), function() return 2 * math.random() - 1 end)
    vv[k] = var_for(xs[i]:shape(), 'float64', 'v' .. k)
  end
  local uvar = tgl.tensor { dtype = 'float64', ndim = out.ndim, name = 'u' }
  local r = tgl.Rop(out, wv, vv, { disconnected = 'ignore' })
  local gs = tgl.grad(tgl.sum(tgl.mul(tgl.cast(out, 'float64'), uvar)), wv, { disconnected = 'ignore' })
  local dot
  for k, g in ipairs(gs) do
    local term = tgl.sum(tgl.mul(tgl.cast(g, 'float64'), vv[k]))
    dot = dot and dot + term or term
  end
  local inputs = {}
  for _, v in ipairs(vars) do inputs[#inputs + 1] = v end
  for _, v in ipairs(vv) do inputs[#inputs + 1] = v end
  local fo = tgl.compile { inputs = vars, outputs = out }
  local fr = tgl.compile { inputs = inputs, outputs = r }
  local ginputs = { unpack(inputs) }
  ginputs[#ginputs + 1] = uvar
  local fg = tgl.compile { inputs = ginputs, outputs = dot, name = 'pullback' }
  local function args_with(xs_, extra)
    local a = {}
    for i, x in ipairs(xs_) do a[i] = x end
    for _, v in ipairs(extra) do a[#a + 1] = v end
    return a
  end
  local y = fo(unpack(xs))
  local ua = rand_array(y:shape(), function() return 2 * math.random() - 1 end)
  local jv = fr(unpack(args_with(xs, va)))
  local xp, xm = {}, {}
  for i, x in ipairs(xs) do xp[i], xm[i] = x, x end
  for k, i in ipairs(wrt) do
    xp[i] = tgl.add(xs[i], tgl.mul(va[k], EPS))
    xm[i] = tgl.add(xs[i], tgl.mul(va[k], -EPS))
  end
  local fp, fm = values(fo(unpack(xp))), values(fo(unpack(xm)))
  local fd = {}
  for k = 1, #fp do fd[k] = (fp[k] - fm[k]) / (2 * EPS) end
  local got = values(jv)
  assert(#got == #fd, label .. ': Rop has ' .. #got .. ' elements, expected ' .. #fd)
  for k = 1, #fd do
    -- (a NaN value, as the mean over an empty axis, has a NaN tangent)
    if not (math.abs(got[k] - fd[k]) <= tol * math.max(1, math.abs(fd[k])) or (got[k] ~= got[k] and fd[k] ~= fd[k])) then
      error(('%s: Rop element %d is %.12g, finite differences %.12g'):format(label, k, got[k], fd[k]), 0)
    end
  end
  count('Rop')
  local inner = fg(unpack(args_with(args_with(xs, va), { ua })))
  local uf, want, size = values(ua), 0, 0
  for k = 1, #fd do want = want + uf[k] * fd[k]; size = size + math.abs(uf[k] * fd[k]) end
  -- <u, J v> is NaN where the values are (then only Rop's NaNs are checked)
  assert(want ~= want or math.abs(inner:get() - want) <= tol * math.max(1, size),
         ('%s: the pullback gives <grad, v> = %.12g, finite differences <u, J v> = %.12g'):format(label,
           inner:get(), want))
  count('gradient')
end

local function run_grad_mapped(e)
  if e.grad ~= nil then return end
  for pi, p in ipairs(e.patterns) do
    if FULL or pi <= 4 then
      local shapes, axis, keep
      if e.family == 'reduce' then shapes, axis, keep = { p[1] }, p[2], p[3] else shapes = p end
      if not (e.empty_error and numel(shapes[1]) == 0) then
        math.randomseed(9000 + pi)
        local xs = {}
        for k, s in ipairs(shapes) do
          local g = type(e.gdomain) == 'table' and e.gdomain[k] or e.gdomain
          xs[k] = rand_array(s, g)
        end
        local wrt = e.wrt
        if not wrt then wrt = {}; for k = 1, #xs do wrt[k] = k end end
        local build
        if e.family == 'reduce' then build = function(x) return e.fn(x, axis, keep) end
        else build = e.fn end
        check_fd(('%s, pattern %d'):format(entry_name(e), pi), xs, build, wrt)
      end
    end
  end
end

-- ---------------------------------------------------------------------------
-- the other ops: every mode against the eager result (or FAST_COMPILE's)

local OTOL = { float32 = { rel = 1e-5, abs = 1e-6 }, float64 = { rel = 1e-12, abs = 1e-11 } }


local function run_other(e)
  for _, dt in ipairs(e.dtypes) do
    for pi, sample in ipairs(e.samples) do
      local vars, shapes, dts = {}, {}, {}
      for k, inp in ipairs(sample) do
        if inp.int then
          local _, sh = int_input(inp)
          shapes[k], dts[k] = sh, 'int64'
        else
          shapes[k], dts[k] = inp, dt
        end
        vars[k] = var_for(shapes[k], dts[k], 'x' .. k)
      end
      local label0 = ('%s %s sample %d'):format(entry_name(e), dt, pi)
      local sym = e.fn(unpack(vars))
      local modes = modes_for(pi, e, dt)
      math.randomseed(5000 + pi)
      local sets = {}
      for r = 1, (FULL and 3 or 1) do
        local set = {}
        for k, inp in ipairs(sample) do
          if inp.int then set[k] = (int_input(inp))
          else
            local g, t = domain_of(e, k, dt), {}
            for i = 1, numel(inp) do t[i] = to_dtype(g() * (e.scale or 1), dt) end
            set[k] = t
          end
        end
        sets[r] = { name = 'random', vals = set }
      end
      if e.special and is_float(dt) then
        local set, sp = {}, K.specials(dt)
        for k, inp in ipairs(sample) do
          if inp.int then set[k] = (int_input(inp))
          else
            local t = {}
            -- specials among random values, so that most windows and rows hold one
            local g = domain_of(e, k, dt)
            for i = 1, numel(inp) do t[i] = to_dtype(i % 3 == 1 and sp[(i - 1) % #sp + 1] or g(), dt) end
            set[k] = t
          end
        end
        sets[#sets + 1] = { name = 'special', vals = set }
      end
      -- the references first (eager, or FAST_COMPILE's), then mode by
      -- mode (see run_mapped)
      local cases = {}
      local fc = e.eager == false and compile_in('FAST_COMPILE', vars, sym)
      for _, set in ipairs(sets) do
        for _, layout in ipairs(LAYOUTS) do
          local arrays = {}
          for k = 1, #sample do
            arrays[k] = make(set.vals[k], shapes[k], dts[k], sample[k].int and 'contiguous' or layout)
          end
          local label = ('%s, %s values, %s'):format(label0, set.name, layout)
          local ref, how
          if sample.error then
            -- refused inputs: a clear error, eagerly and in every mode
            for _, f in ipairs({ e.fn, fc or false }) do
              if f then
                local ok, err = pcall(f, unpack(arrays))
                assert(not ok and tostring(err):find(sample.error, 1, true),
                       ('%s: expected an error saying %q, got %s'):format(label, sample.error, tostring(err)))
                count(family_of(e))
              end
            end
          elseif fc then
            ref, how = fc(unpack(arrays)), 'FAST_COMPILE'
          else
            local ok, r = pcall(e.fn, unpack(arrays))
            if not ok then error(label .. ' eager: ' .. tostring(r), 0) end
            ref, how = r, 'eager'
            assert(tgl.is_array(ref), label .. ': eager gave ' .. tostring(ref))
            assert(ref.dtype == sym.dtype and ref:dim() == sym.ndim,
                   ('%s: eager gives %s %d-d, the symbolic form %s %d-d'):format(label, ref.dtype, ref:dim(), sym.dtype, sym.ndim))
          end
          if ref and e.lua_ref and layout == 'contiguous' then
            -- the reference kernels against the float64 reference in Lua
            local w = e.lua_ref(set.vals[1], shapes[1])
            for i = 1, #w do w[i] = to_dtype(w[i], ref.dtype) end
            local m = mismatch(w, ref, ref.dtype, shapes[1], OTOL[ref.dtype])
            if m then error(('%s %s against Lua: %s'):format(label, how, m), 0) end
            count(family_of(e))
          end
          cases[#cases + 1] = { arrays = arrays, label = label, ref = ref, how = how, want = ref and values(ref) }
          count(family_of(e))
        end
      end
      for _, mode in ipairs(modes) do
        local f = compile_in(mode, vars, sym)
        if mode == 'FAST_RUN' then
          local prog = note_program(f)
          for _, op in ipairs(pi == 1 and e.produces or {}) do
            assert(prog:find('= ' .. op .. '(', 1, true), label0 .. ': the FAST_RUN program runs no ' .. op .. ':\n' .. prog)
          end
        end
        for _, c in ipairs(cases) do
          local ok, got = pcall(f, unpack(c.arrays))
          if sample.error then
            assert(not ok and tostring(got):find(sample.error, 1, true),
                   ('%s %s: expected an error saying %q, got %s'):format(c.label, mode, sample.error, tostring(got)))
          else
            if not ok then error(c.label .. ' ' .. mode .. ': ' .. tostring(got), 0) end
            local m = mismatch(c.want, got, c.ref.dtype, c.ref:shape(), OTOL[c.ref.dtype])
            if m then error(('%s %s against %s: %s'):format(c.label, mode, c.how, m), 0) end
          end
          count(family_of(e))
        end
      end
    end
  end
end

local function run_grad_other(e)
  if e.grad ~= nil then return end
  local has64 = false
  for _, dt in ipairs(e.dtypes) do has64 = has64 or dt == 'float64' end
  if not has64 then return end
  for pi, sample in ipairs(e.samples) do
    if (FULL or pi <= 2) and not sample.error then
      math.randomseed(9500 + pi)
      local xs, wrt = {}, {}
      for k, inp in ipairs(sample) do
        if inp.int then
          local t, sh = int_input(inp)
          xs[k] = contiguous_array(t, sh, 'int64')
        else
          local d = type(e.domain) == 'table' and e.domain[k]
          xs[k] = rand_array(inp, d and d('float64') or function() return 4 * math.random() - 2 end)
          wrt[#wrt + 1] = k
        end
      end
      check_fd(('%s, sample %d'):format(entry_name(e), pi), xs, e.fn, e.wrt or wrt)
    end
  end
end

-- the unoptimised graph's op names below v
local G = require 'tgl.graph'
local function ops_in(v)
  local seen, ops = {}, {}
  local function walk(n)
    local id = tonumber(C.tgl_node_id(n))
    if seen[id] then return end
    seen[id] = true
    if C.tgl_node_kind_of(n) == G.KIND.apply then
      ops[ffi.string(C.tgl_op_name(C.tgl_node_op(n)))] = true
      for k = 0, C.tgl_node_ninputs(n) - 1 do walk(C.tgl_node_input_at(n, k)) end
    end
  end
  walk(v.n)
  return ops
end

-- ---------------------------------------------------------------------------

describe('the op matrix', function()
  it('every op of the catalog has an entry, or is covered through a public op, or says why not', function()
    local have = {}
    for _, e in ipairs(K.entries) do have[e.op] = true end
    for name in pairs(K.COVERED or {}) do have[name] = true end
    for name in pairs(K.UNTESTABLE or {}) do have[name] = true end
    local missing = {}
    for op = 0, C.tgl_op_count() - 1 do
      local name = ffi.string(C.tgl_op_name(op))
      if not have[name] then missing[#missing + 1] = name end
    end
    assert(#missing == 0, 'ops of the catalog with no entry in spec/op_matrix_cases.lua: ' .. table.concat(missing, ', '))
    for name in pairs(have) do assert(C.tgl_op_lookup(name) >= 0, 'an entry for an op the catalog lacks: ' .. name) end
  end)

  for _, e in ipairs(K.entries) do
    if e.family ~= 'other' then
      it(entry_name(e) .. ': every dtype, shape, layout and value set, eager and compiled, against Lua', function()
        run_rejects(e)
        run_mapped(e)
        run_grad_mapped(e)
      end)
    else
      it(entry_name(e) .. ': every dtype, sample and layout, compiled against the reference kernels', function()
        run_rejects(e)
        run_other(e)
        run_grad_other(e)
      end)
    end
  end

  it('covers each internal op through the public op that produces it', function()
    for name, c in pairs(K.COVERED) do
      local found
      if c.build then
        local inputs, out = c.build()
        if c.graph then found = ops_in(out)[name]
        else found = tgl.compile { inputs = inputs, outputs = out }:program():find('= ' .. name .. '(', 1, true) end
      else
        found = produced[name]
      end
      assert(found, name .. ' is not produced by ' .. c.via)
      count('covered')
    end
  end)

  -- found by the matrix: FAST_RUN/cc after FAST_RUN (libtcc) ran libtcc's
  -- kernel, shared by program, at tier 1
  it("a kernel made under compile = 'tcc' runs the system compiler's code once a function is compiled under 'sync'", function()
    local _, code = S.sh('command -v ' .. tgl.config.cc)
    if code ~= 0 then return S.missing_dep('a C compiler (' .. tgl.config.cc .. ')') end
    local x = tgl.tensor { dtype = 'float64', ndim = 2, name = 'x' }
    -- a program no other test makes (its own constant)
    local y = tgl.tanh(x * 1.8125) - 0.4375
    local f1 = compile_in('FAST_RUN', { x }, y)
    assert(f1:program():find('[tcc]', 1, true), f1:program())
    local f2 = compile_in('FAST_RUN/cc', { x }, y)
    assert(f2:program():find('[cc]', 1, true), f2:program())
    -- the first function shares the kernel: it runs cc code now, same values
    assert(f1:program():find('[cc]', 1, true), f1:program())
    local a = tgl.array({ { 0.5, -1 }, { 2, 0 } }, 'float64')
    local want = {}
    for i, v in ipairs({ 0.5, -1, 2, 0 }) do want[i] = math.tanh(v * 1.8125) - 0.4375 end
    for _, f in ipairs({ f1, f2 }) do
      local m = mismatch(want, f(a), 'float64', { 2, 2 })
      assert(m == nil, m)
    end
  end)

  it('reports the number of cases', function()
    local fams = {}
    for f in pairs(counts) do fams[#fams + 1] = f end
    table.sort(fams)
    local parts = {}
    for _, f in ipairs(fams) do parts[#parts + 1] = ('%s %d'):format(f, counts[f]) end
    print(('\nop matrix: %d cases (%s)%s'):format(total, table.concat(parts, ', '), FULL and ' [full]' or ''))
    assert(total > 0)
  end)
end)
