-- tgl.grad — differentiation from Lua: tgl.grad (reverse mode, through
-- the engine's tgl_grad), tgl.jacobian, tgl.hessian, and tgl.verify_grad
-- (finite differences in float64).
local core = require 'tgl.core'
local array = require 'tgl.array'
local G = require 'tgl.graph'
local ffi, C = core.ffi, core.C
local check, argerror = core.check, core.argerror

local M = {}
local node_list = ffi.typeof('tgl_node *[?]')
local is_var = G.is_var

-- tgl.grad(cost, wrt [, {disconnected='raise'|'ignore', known_grads={[v]=g}}])
-- wrt is one variable (one gradient returned) or a table (a table back).
-- M.grad_as(fname, ...) is tgl.grad whose messages name fname: the
-- function the user called (tgl.Lop, tgl.hessian_vector_product, ...).
local GRAD_OPTIONS = { disconnected = 'string', known_grads = 'table' }
function M.grad_as(fname, cost, wrt, opts)
  opts = core.check_options(fname, opts, GRAD_OPTIONS)
  local single = is_var(wrt)
  local list = single and { wrt } or wrt
  if type(list) ~= 'table' then argerror(fname, 'wrt must be a variable or a table of variables') end
  for i, v in ipairs(list) do
    if not is_var(v) then argerror(fname, 'wrt %d is a %s, not a variable', i, type(v)) end
  end
  if cost ~= nil and not is_var(cost) then argerror(fname, 'cost must be a variable, got %s', type(cost)) end
  local disc = opts.disconnected or 'raise'
  if disc ~= 'raise' and disc ~= 'ignore' and disc ~= 'warn' then
    argerror(fname, "disconnected must be 'raise', 'ignore' or 'warn', got %s", tostring(disc))
  end
  local kv, kg = {}, {}
  for v, g in pairs(opts.known_grads or {}) do
    if not is_var(v) then argerror(fname, 'known_grads keys must be variables') end
    kv[#kv + 1] = v
    kg[#kg + 1] = is_var(g) and g or G.as_node(g, fname)
  end
  -- Differentiate the numerically stable form of the cost (log_softmax
  -- instead of log(softmax), the fused crossentropy, ...): its gradient
  -- is stable too.  Only when the wrt are leaves and no known gradients
  -- name intermediate nodes, which the rewrites could replace.
  if cost and #kv == 0 then
    local leaves = true
    for _, v in ipairs(list) do
      if v.kind == 'apply' then leaves = false end
    end
    if leaves then
      local inn, outn = node_list(1), node_list(1)
      inn[0] = cost.n
      check(C.tgl_optimize(core.ctx, C.TGL_OPT_STABILIZE, 1, inn, outn), fname)
      cost = G.wrap_node(outn[0])
    end
  end
  local n = #list
  local cw, out = node_list(math.max(n, 1)), node_list(math.max(n, 1))
  for i = 1, n do cw[i - 1] = list[i].n end
  local ckv, ckg = node_list(math.max(#kv, 1)), node_list(math.max(#kv, 1))
  for i = 1, #kv do ckv[i - 1] = kv[i].n; ckg[i - 1] = kg[i].n end
  check(C.tgl_grad(core.ctx, cost and cost.n or nil, n, cw, #kv, ckv, ckg,
                   disc == 'raise' and C.TGL_DISCONNECTED_RAISE or C.TGL_DISCONNECTED_ZERO,
                   out), fname)
  local res = {}
  for i = 1, n do res[i] = G.wrap_node(out[i - 1]) end
  if disc == 'warn' then
    -- 'ignore' gave zeros for the disconnected ones: say which they are.
    for i = 1, n do
      if res[i].op == 'fill_like' and C.tgl_node_input_at(res[i].n, 0) == list[i].n then
        local who = list[i].name and ("'" .. list[i].name .. "'") or 'an unnamed variable'
        io.stderr:write(('tgl.%s: warning: the cost does not depend on %s (wrt %d); its '
                         .. 'gradient is zero\n'):format(fname, who, i))
      end
    end
  end
  if single then return res[1] end
  return res
end

function M.grad(cost, wrt, opts) return M.grad_as('grad', cost, wrt, opts) end

-- tgl.jacobian(f, wrt): rows d f[i] / d wrt for a vector (or scalar) f,
-- stacked on a new first axis; one table entry per wrt when wrt is a
-- table.  For a vector f the rows come from a tgl.scan over i = 1..#f (as
-- Theano's jacobian does), so f's length may be known only at run time;
-- the scan rewrites move the work that does not depend on i out of the
-- loop.  {size = n} is accepted for older scripts and checked at run time
-- through n_steps.
local SIZE_OPTIONS = { size = 'number' }
function M.jacobian(f, wrt, opts)
  opts = core.check_options('jacobian', opts, SIZE_OPTIONS)
  if not is_var(f) then argerror('jacobian', 'f must be a variable') end
  if f.ndim > 1 then argerror('jacobian', 'f must be a scalar or a vector, got %d dimensions', f.ndim) end
  local single = is_var(wrt)
  local list = single and { wrt } or wrt
  if type(list) ~= 'table' or #list == 0 then
    argerror('jacobian', 'wrt must be a variable or a table of variables')
  end
  local res
  if f.ndim == 0 then
    res = M.grad(f, list, { disconnected = 'ignore' })
  else
    local scan = require('tgl.scan').scan
    local n = f:size(1)
    local rows = G.symbolic_arange(1, n)
    local outs = scan{
      fn = function(i) return M.grad(f[i], list, { disconnected = 'ignore' }) end,
      sequences = { rows }, n_steps = opts.size, name = 'jacobian',
    }
    res = #list == 1 and { outs } or outs
  end
  if single then return res[1] end
  return res
end

-- tgl.hessian(cost, wrt): the jacobian of the gradient (a scan over the
-- gradient's elements); for a matrix wrt, the gradient is flattened first,
-- so the result is (#wrt, shape of wrt...).
function M.hessian(cost, wrt, opts)
  opts = core.check_options('hessian', opts, SIZE_OPTIONS)
  local single = is_var(wrt)
  local list = single and { wrt } or wrt
  local res = {}
  for k, v in ipairs(list) do
    local g = M.grad(cost, v)
    if v.ndim > 1 then g = G.flatten(g, 1) end
    res[k] = M.jacobian(g, v, opts)
  end
  if single then return res[1] end
  return res
end

-- tgl.verify_grad(fn, {arrays...} [, {eps=1e-6, tol=1e-5, seed=}]): checks
-- the gradient tgl builds for fn(vars...) against central finite
-- differences in float64, on a random projection of fn's output.  Raises,
-- naming the worst element and its position, when they disagree.
function M.verify_grad(fn, points, opts)
  -- on the points' device (a cuda array's gradient is checked on cuda),
  -- the finite differences taken on host copies of the points
  local device
  for _, p in ipairs(type(points) == 'table' and points or {}) do
    if core.is_array(p) and p.device ~= 'cpu' then device = p.device end
  end
  local function compile(spec)
    local config = require 'tgl.config'
    local was = config.device
    config.device = device or was
    local ok, f = pcall(require('tgl.function').compile, spec)
    config.device = was
    if not ok then error(f, 0) end
    return f
  end
  opts = core.check_options('verify_grad', opts, { eps = 'number', tol = 'number', seed = 'number' })
  if type(fn) ~= 'function' then argerror('verify_grad', 'fn must be a function of variables') end
  if type(points) ~= 'table' or #points == 0 then argerror('verify_grad', 'points must be a non-empty table of arrays') end
  local eps, tol = opts.eps or 1e-6, opts.tol or 1e-5
  local xs, vars = {}, {}
  for i, p in ipairs(points) do
    if type(p) == 'number' or (type(p) == 'table' and not core.is_array(p)) then p = array.array(p, 'float64') end
    if not core.is_array(p) then argerror('verify_grad', 'point %d must be an array', i) end
    xs[i] = p:cpu():astype('float64')
    local bc = {}
    for d = 1, xs[i]:dim() do bc[d] = false end
    vars[i] = G.tensor { dtype = 'float64', ndim = xs[i]:dim(), broadcastable = bc, name = 'x' .. i }
  end
  local out = fn(unpack(vars))
  if not is_var(out) then argerror('verify_grad', 'fn must return a variable') end
  if out.dtype ~= 'float64' then out = G.cast(out, 'float64') end
  -- A fixed random projection makes a scalar cost of any output shape.
  local probe = compile { inputs = vars, outputs = out, name = 'verify_grad_probe' }
  local shape = probe(unpack(xs)):shape()
  local saved = array.get_rng_state()
  array.manual_seed(opts.seed or 4242)
  local proj = array.rand(shape, { dtype = 'float64', low = 0.5, high = 1.5 })
  array.set_rng_state(saved)
  local cost = G.sum(G.mul(out, G.constant(proj)))
  local grads = M.grad(cost, vars, { disconnected = 'ignore' })
  local fcost = compile { inputs = vars, outputs = cost, name = 'verify_grad_cost' }
  local fgrad = compile { inputs = vars, outputs = grads, name = 'verify_grad_grads' }
  local analytic = { fgrad(unpack(xs)) }
  local worst = { err = -1 }
  for i, x in ipairs(xs) do
    local flat = x:reshape(-1)   -- a view: writes go to x
    local g = analytic[i]:reshape(-1)
    for k = 1, flat:nelement() do
      local v = flat:get(k)
      flat:set(v + eps, k)
      local fp = fcost(unpack(xs)):get()
      flat:set(v - eps, k)
      local fm = fcost(unpack(xs)):get()
      flat:set(v, k)
      local num = (fp - fm) / (2 * eps)
      local ana = g:get(k)
      local err = math.abs(ana - num) / math.max(1, math.abs(num), math.abs(ana))
      if err ~= err then err = math.huge end
      if err > worst.err then
        worst = { err = err, input = i, pos = k, ana = ana, num = num, shape = x:shape() }
      end
    end
  end
  if worst.err > tol then
    -- 1-based position of the flat index within the input's shape
    local idx, rem = {}, worst.pos - 1
    for d = #worst.shape, 1, -1 do
      idx[d] = rem % worst.shape[d] + 1
      rem = math.floor(rem / worst.shape[d])
    end
    error(('tgl.verify_grad: the gradient of input %d is wrong at (%s): tgl gives %.10g, '
           .. 'finite differences %.10g (error %.3g > tol %.3g)'):format(worst.input,
           table.concat(idx, ','), worst.ana, worst.num, worst.err, tol), core.user_level())
  end
  return worst.err
end

return M
