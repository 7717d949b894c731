-- tgl.optim — optimisers built on tgl's symbolic machinery.
--
-- tgl.optim.hf{...}: Hessian-free optimisation (Martens 2010, "Deep
-- learning via Hessian-free optimization", ICML): each step solves the
-- damped Gauss-Newton system (G + λI) d = -g approximately by truncated
-- conjugate gradient, where G·v products come from tgl.gauss_newton_product
-- (two passes, no matrix formed) and g is the gradient on a (large) batch.
-- CG starts from the previous solution (decayed), stops by Martens'
-- relative-progress criterion, keeps iterates on a geometric schedule for
-- backtracking, and λ follows the Levenberg-Marquardt rule on the reduction
-- ratio ρ.  See doc/optim.md.
--
-- Parameter-space vectors (gradients, CG iterates, directions) are Lua
-- tables of arrays, one per parameter, shaped and typed like it; the few
-- vector operations CG needs (dot, axpy) run eagerly on those arrays.
local core = require 'tgl.core'
local G = require 'tgl.graph'
local fun = require 'tgl.function'
local grad = require 'tgl.grad'
local rop = require 'tgl.rop'

local argerror = core.argerror
local is_var = G.is_var

local M = {}

-- ---------------------------------------------------------------------------
-- Vectors in parameter space: tables of arrays.

-- x·y, summed over the parameters, as a Lua number (BLAS dot on flat views).
local function vdot(x, y)
  local s = 0
  for k = 1, #x do
    local n = x[k]:nelement()
    s = s + G.dot(x[k]:reshape(n), y[k]:reshape(n)):get()
  end
  return s
end

-- a*x + y (a fresh table of fresh arrays; nil x counts as zero).
local function vaxpy(a, x, y)
  local r = {}
  for k = 1, #y do r[k] = (x and a ~= 0) and (y[k] + x[k] * a) or y[k] end
  return r
end

local function vscale(a, x)
  local r = {}
  for k = 1, #x do r[k] = x[k] * a end
  return r
end

-- ---------------------------------------------------------------------------
-- tgl.optim.hf{...}

local HF_OPTIONS = {
  params = 'table', inputs = 'table', cost = 'variable', out = 'variable',
  loss = 'string|function',
  damping = 'number', damping_boost = 'number', damping_drop = 'number',
  min_damping = 'number', adapt_damping = 'boolean',
  max_cg_iters = 'number', min_cg_iters = 'number', cg_decay = 'number', cg_tol = 'number',
  backtrack = 'boolean', backtrack_gamma = 'number',
  line_search = 'boolean', line_search_c = 'number', line_search_shrink = 'number',
  line_search_max = 'number', max_step_norm = 'number',
  mode = 'string', name = 'string', verbose = 'boolean',
}
local LOSSES = { softmax_crossentropy = true, mse = true }

local HF = {}
HF.__index = HF

local function positive(name, v, allow_zero)
  if v ~= v or v == math.huge or v < 0 or (v == 0 and not allow_zero) then
    argerror('optim.hf', "option '%s' must be a %s number, got %s", name,
             allow_zero and 'non-negative finite' or 'positive finite', tostring(v))
  end
end

function M.hf(opts)
  if type(opts) ~= 'table' then
    argerror('optim.hf', 'expected a table {params=, inputs=, cost=, out=, loss=, ...}, got %s', type(opts))
  end
  core.check_options('optim.hf', opts, HF_OPTIONS)
  for _, k in ipairs({ 'params', 'inputs', 'cost', 'out', 'loss' }) do
    if opts[k] == nil then argerror('optim.hf', "option '%s' is required", k) end
  end
  if type(opts.loss) == 'string' and not LOSSES[opts.loss] then
    argerror('optim.hf', "loss must be 'softmax_crossentropy', 'mse' or a function(out, w) "
             .. "returning H_L·w, got '%s'", opts.loss)
  end
  local params = opts.params
  if #params == 0 then argerror('optim.hf', 'params must be a non-empty table of shared variables') end
  for i, p in ipairs(params) do
    if not is_var(p) or p.kind ~= 'shared' then
      argerror('optim.hf', 'params[%d] must be a shared variable, got %s', i,
               is_var(p) and ('a ' .. tostring(p.kind) .. ' variable') or type(p))
    end
    if not p.dtype:match('^float') then
      argerror('optim.hf', 'params[%d] must be floating point, got %s', i, p.dtype)
    end
  end
  for i, x in ipairs(opts.inputs) do
    if not is_var(x) then argerror('optim.hf', 'inputs[%d] must be a variable, got %s', i, type(x)) end
  end
  if opts.cost.ndim ~= 0 then argerror('optim.hf', 'cost must be a scalar, got %d dimensions', opts.cost.ndim) end

  local self = setmetatable({
    params = params, inputs = opts.inputs, loss = opts.loss,
    damping = opts.damping or 1,
    initial_damping = opts.damping or 1,
    damping_boost = opts.damping_boost or 3 / 2,
    damping_drop = opts.damping_drop or 2 / 3,
    min_damping = opts.min_damping or 0,
    adapt_damping = opts.adapt_damping ~= false,
    max_cg_iters = opts.max_cg_iters or 250,
    min_cg_iters = opts.min_cg_iters or 1,
    cg_decay = opts.cg_decay or 0.95,
    cg_tol = opts.cg_tol or 5e-4,
    backtrack = opts.backtrack ~= false,
    backtrack_gamma = opts.backtrack_gamma or 1.3,
    line_search = opts.line_search or false,
    line_search_c = opts.line_search_c or 1e-2,
    line_search_shrink = opts.line_search_shrink or 0.8,
    line_search_max = opts.line_search_max or 20,
    max_step_norm = opts.max_step_norm,
    verbose = opts.verbose or false,
    name = opts.name or 'hf',
    n_steps = 0,
  }, HF)
  positive('damping', self.damping, true)
  positive('damping_boost', self.damping_boost)
  positive('damping_drop', self.damping_drop)
  positive('min_damping', self.min_damping, true)
  positive('cg_decay', self.cg_decay, true)
  positive('cg_tol', self.cg_tol)
  for _, k in ipairs({ 'max_cg_iters', 'min_cg_iters', 'line_search_max' }) do
    local v = self[k]
    if v ~= math.floor(v) or v < 1 then
      argerror('optim.hf', "option '%s' must be a positive integer, got %s", k, tostring(v))
    end
  end
  if self.backtrack_gamma <= 1 then
    argerror('optim.hf', "option 'backtrack_gamma' must be > 1, got %s", tostring(self.backtrack_gamma))
  end
  if self.line_search_shrink <= 0 or self.line_search_shrink >= 1 then
    argerror('optim.hf', "option 'line_search_shrink' must be in (0, 1), got %s", tostring(self.line_search_shrink))
  end
  if self.max_step_norm then positive('max_step_norm', self.max_step_norm) end

  -- The compiled functions.  CG's vectors live in shared variables, one
  -- per parameter: the gradient g, the iterate x, the residual r = -g - Ax,
  -- the direction p and A p (A = G + λI); each CG iteration is three
  -- compiled calls (A p and pᵀAp; the x and r updates and the dot products
  -- the stopping rule needs; the new direction), so the vector arithmetic
  -- is fused and runs in place.
  local mode = opts.mode
  local name = self.name
  local ins = {}
  for i, x in ipairs(opts.inputs) do ins[i] = x end
  self._out, self._mode = opts.out, mode
  self.f_cost = fun.compile { inputs = ins, outputs = opts.cost, mode = mode, name = name .. '_cost' }
  local gr = grad.grad(opts.cost, params)
  local function vec(tag)
    local t = {}
    for k, p in ipairs(params) do
      t[k] = G.shared(p:get_value() * 0, tag .. '_' .. (p.name or tostring(k)))
    end
    return t
  end
  local g, x, r, pd, Ap = vec('hf_g'), vec('hf_x'), vec('hf_r'), vec('hf_p'), vec('hf_Ap')
  self._g, self._x, self._Ap = g, x, Ap
  local function dot(a, b)
    local s
    for k = 1, #a do
      local t = G.sum(a[k] * b[k])
      s = s and s + t or t
    end
    return s
  end
  local dt = params[1].dtype
  local lam, alpha, beta, decay = G.scalar('lambda', dt), G.scalar('alpha', dt), G.scalar('beta', dt),
                                   G.scalar('decay', dt)
  local ups = {}
  for k = 1, #params do ups[k] = { g[k], gr[k] } end
  self.f_grad = fun.compile { inputs = ins, outputs = opts.cost, updates = ups, mode = mode,
                              name = name .. '_grad' }
  -- A p = G p + λ p, and pᵀ A p
  local gp = rop.gauss_newton_product(opts.out, params, pd, opts.loss)
  local ap = {}
  ups = {}
  for k = 1, #params do ap[k] = gp[k] + lam * pd[k]; ups[k] = { Ap[k], ap[k] } end
  local ins_l = {}
  for i, v in ipairs(ins) do ins_l[i] = v end
  ins_l[#ins_l + 1] = lam
  self.f_Ap = fun.compile { inputs = ins_l, outputs = dot(pd, ap), updates = ups, mode = mode,
                            name = name .. '_Ap' }
  -- CG's start: x = decay·x (the previous solution), p = x (for A x0)
  ups = {}
  for k = 1, #params do
    local xk = x[k] * decay
    ups[#ups + 1] = { x[k], xk }; ups[#ups + 1] = { pd[k], xk }
  end
  self.f_start = fun.compile { inputs = { decay }, outputs = {}, updates = ups, mode = mode,
                               name = name .. '_start' }
  -- r = -g - A x0 (A x0 in Ap), p = r; outputs rᵀr, xᵀg, xᵀr
  ups = {}
  local rn = {}
  for k = 1, #params do
    rn[k] = -g[k] - Ap[k]
    ups[#ups + 1] = { r[k], rn[k] }; ups[#ups + 1] = { pd[k], rn[k] }
  end
  self.f_residual = fun.compile { inputs = {}, outputs = { dot(rn, rn), dot(x, g), dot(x, rn) },
                                  updates = ups, mode = mode, name = name .. '_residual' }
  -- x += α p, r -= α A p; outputs rᵀr, xᵀg, xᵀr (for φ(x) = ½xᵀ(g - r))
  ups = {}
  local xn = {}
  rn = {}
  for k = 1, #params do
    xn[k] = x[k] + alpha * pd[k]; rn[k] = r[k] - alpha * Ap[k]
    ups[#ups + 1] = { x[k], xn[k] }; ups[#ups + 1] = { r[k], rn[k] }
  end
  self.f_xr = fun.compile { inputs = { alpha }, outputs = { dot(rn, rn), dot(xn, g), dot(xn, rn) },
                            updates = ups, mode = mode, name = name .. '_xr' }
  -- p = r + β p
  ups = {}
  for k = 1, #params do ups[k] = { pd[k], r[k] + beta * pd[k] } end
  self.f_dir = fun.compile { inputs = { beta }, outputs = {}, updates = ups, mode = mode,
                             name = name .. '_dir' }
  return self
end

-- ---------------------------------------------------------------------------
-- Pieces of a step, usable on their own.

local function as_inputs(self, fname, data)
  if type(data) ~= 'table' then
    argerror(fname, 'inputs must be a table of %d arrays (one per symbolic input), got %s',
             #self.inputs, type(data))
  end
  if #data ~= #self.inputs then
    argerror(fname, 'expected %d input arrays (one per symbolic input), got %d', #self.inputs, #data)
  end
  return data
end

-- The current parameter values (a table of arrays).
function HF:get_params()
  local r = {}
  for k, p in ipairs(self.params) do r[k] = p:get_value() end
  return r
end

function HF:set_params(values)
  for k, p in ipairs(self.params) do p:set_value(values[k]) end
end

-- The cost at the current parameters on a batch (a Lua number).
function HF:evaluate(data)
  as_inputs(self, self.name .. ':evaluate', data)
  return self.f_cost(unpack(data)):get()
end

-- The cost and gradient (a table of arrays) on a batch.
function HF:gradient(data)
  local c = self.f_grad(unpack(as_inputs(self, self.name .. ':gradient', data)))
  local r = {}
  for k, v in ipairs(self._g) do r[k] = v:get_value() end
  return c:get(), r
end

-- G·v on a batch (v and the result are tables of arrays); compiled on first use.
function HF:gv(data, v)
  as_inputs(self, self.name .. ':gv', data)
  if not self.f_gv then
    local vs, ins = {}, {}
    for i, x in ipairs(self.inputs) do ins[i] = x end
    for k, p in ipairs(self.params) do
      vs[k] = G.tensor { dtype = p.dtype, ndim = p.ndim, name = 'v_' .. (p.name or tostring(k)) }
      ins[#ins + 1] = vs[k]
    end
    local gv = rop.gauss_newton_product(self._out, self.params, vs, self.loss)
    self.f_gv = fun.compile { inputs = ins, outputs = gv, mode = self._mode, name = self.name .. '_gv' }
  end
  local args = {}
  for i = 1, #data do args[i] = data[i] end
  for k = 1, #v do args[#args + 1] = v[k] end
  return { self.f_gv(unpack(args)) }
end

-- The cost at θ + d (θ the parameters, values given), leaving the parameters at θ + d.
local function cost_at(self, theta, d, data)
  local vals = {}
  for k = 1, #theta do vals[k] = d and (theta[k] + d[k]) or theta[k] end
  self:set_params(vals)
  return self.f_cost(unpack(data)):get()
end

-- Truncated CG on (G + λI) x = -g (g in the shared gradient, G on the
-- curvature batch), from decay × the previous solution.  Returns the
-- iterates kept for backtracking ({x = table of arrays, phi =, iter =},
-- the last one last) and the iteration count.  φ(x) = ½xᵀ(G+λI)x + gᵀx,
-- the quadratic model, is ½xᵀ(g - r) with r = -g - Ax.
function HF:cg(curv, lambda, decay)
  local args = {}
  for i = 1, #curv do args[i] = curv[i] end
  args[#args + 1] = lambda
  local function snapshot()
    local t = {}
    for k, v in ipairs(self._x) do t[k] = v:get_value() end
    return t
  end
  self.f_start(decay)
  if decay ~= 0 then self.f_Ap(unpack(args)) end     -- A x0 (x0 = 0: A x0 = 0 already)
  if decay == 0 then for _, v in ipairs(self._Ap) do v:set_value(v:get_value({ borrow = true }) * 0) end end
  local rr, xg, xr = self.f_residual()
  rr, xg, xr = rr:get(), xg:get(), xr:get()
  local phi = 0.5 * (xg - xr)
  local phis, kept = {}, {}
  local next_keep, gamma_pow = 1, 1
  local i = 0
  while i < self.max_cg_iters do
    local pAp = self.f_Ap(unpack(args)):get()
    if not (pAp > 0) or rr == 0 then break end   -- converged, or no positive curvature left
    i = i + 1
    local rr_new
    rr_new, xg, xr = self.f_xr(rr / pAp)
    rr_new, xg, xr = rr_new:get(), xg:get(), xr:get()
    phi = 0.5 * (xg - xr)
    phis[i] = phi
    if i >= next_keep then
      kept[#kept + 1] = { x = snapshot(), phi = phi, iter = i }
      while next_keep <= i do
        gamma_pow = gamma_pow * self.backtrack_gamma
        next_keep = math.ceil(gamma_pow)
      end
    end
    -- Martens' criterion: little relative progress over the last k iterations
    local k = math.max(10, math.ceil(0.1 * i))
    if i >= self.min_cg_iters and i > k and phi < 0
       and (phi - phis[i - k]) / phi < k * self.cg_tol then
      break
    end
    self.f_dir(rr_new / rr)
    rr = rr_new
  end
  if #kept == 0 or kept[#kept].iter ~= i then kept[#kept + 1] = { x = snapshot(), phi = phi, iter = i } end
  return kept, i
end

-- One HF step: the gradient on grad_data, curvature products on curv_data
-- (default grad_data).  Updates the parameters and returns a table of
-- statistics (see doc/optim.md).
function HF:step(grad_data, curv_data)
  local fname = self.name .. ':step'
  as_inputs(self, fname, grad_data)
  curv_data = curv_data and as_inputs(self, fname, curv_data) or grad_data
  local t0 = core.C.tgl_wall_time()
  local theta = self:get_params()
  local f0 = self.f_grad(unpack(grad_data)):get()
  local lambda = self.damping
  local kept, iters = self:cg(curv_data, lambda, self.n_steps == 0 and 0 or self.cg_decay)

  -- Backtracking: from the last iterate kept, walk back while the cost drops.
  local chosen = #kept
  local f_chosen = cost_at(self, theta, kept[chosen].x, grad_data)
  local evals = 1
  if self.backtrack then
    for j = #kept - 1, 1, -1 do
      local fj = cost_at(self, theta, kept[j].x, grad_data)
      evals = evals + 1
      if fj < f_chosen then chosen, f_chosen = j, fj else break end
    end
  end
  local d, phi = kept[chosen].x, kept[chosen].phi
  local g = {}
  for k, v in ipairs(self._g) do g[k] = v:get_value({ borrow = true }) end
  local gd = vdot(g, d)

  -- Reduction ratio: actual over predicted (the damped quadratic model).
  local rho = (f_chosen - f0) / phi
  if phi >= 0 then rho = -math.huge end
  if f_chosen ~= f_chosen then rho = -math.huge end

  -- Optional step size cap, then optional Armijo line search along d.
  local rate = 1
  local f1 = f_chosen
  local dnorm = math.sqrt(vdot(d, d))
  if self.max_step_norm and dnorm > self.max_step_norm then
    rate = self.max_step_norm / dnorm
    f1 = cost_at(self, theta, vscale(rate, d), grad_data)
    evals = evals + 1
  end
  if self.line_search then
    local tries = 0
    while not (f1 <= f0 + self.line_search_c * rate * gd) do
      tries = tries + 1
      if tries > self.line_search_max then rate = 0; break end
      rate = rate * self.line_search_shrink
      f1 = cost_at(self, theta, vscale(rate, d), grad_data)
      evals = evals + 1
    end
  elseif not (f1 < f0) then
    rate = 0                                   -- reject a step that does not reduce the cost
  end
  if rate == 0 then
    self:set_params(theta)
    f1 = f0
  elseif rate ~= 1 or chosen ~= #kept or self.backtrack then
    -- the parameters hold θ + (last evaluated); make sure they hold θ + rate·d
    self:set_params(vaxpy(rate, d, theta))
  end

  -- Levenberg-Marquardt damping.
  local lambda_used = lambda
  if self.adapt_damping then
    if rho < 0.25 or rho ~= rho then lambda = lambda * self.damping_boost
    elseif rho > 0.75 then lambda = lambda * self.damping_drop end
    if lambda < self.min_damping then lambda = self.min_damping end
    self.damping = lambda
  end
  self.n_steps = self.n_steps + 1
  local stats = {
    step = self.n_steps, cost_before = f0, cost = f1, damping = lambda_used, new_damping = self.damping,
    rho = rho, cg_iters = iters, cg_chosen = kept[chosen].iter, phi = phi, grad_dot_step = gd,
    step_norm = dnorm * rate, rate = rate, accepted = rate > 0, cost_evals = evals,
    seconds = core.C.tgl_wall_time() - t0,
  }
  if self.verbose then
    io.stderr:write(('%s step %d: cost %.6g -> %.6g  λ %.3g -> %.3g  ρ %.3f  CG %d (chose %d)  rate %.3g  %.2fs\n')
      :format(self.name, stats.step, f0, f1, lambda_used, self.damping, rho, iters, stats.cg_chosen, rate, stats.seconds))
  end
  return stats
end

-- Forgets the state carried between steps (damping, CG's starting point,
-- the step count); the parameters are left as they are.
function HF:reset()
  self.damping, self.n_steps = self.initial_damping, 0
end

function HF:__tostring()
  return ('tgl.optim.hf (%d params, damping %g, %d steps)'):format(#self.params, self.damping, self.n_steps)
end

return M
