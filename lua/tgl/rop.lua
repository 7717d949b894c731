-- tgl.Rop, tgl.Lop and the curvature products (doc/rop.md).
--
--   tgl.Rop(f, wrt, v)   J·v in one forward pass (the engine's tgl_rop)
--   tgl.Lop(f, wrt, u)   uᵀ·J: the pullback (tgl_grad with known gradients)
--   tgl.hessian_vector_product(cost, params, v)      H·v = Rop of the gradient
--   tgl.gauss_newton_product(out, params, v, loss)   Jᵀ H_L J v, two passes
--
-- f, wrt, v and u are a variable or a table of variables (v and u may hold
-- arrays or numbers, made constants); results follow f's shape for Rop and
-- wrt's for Lop and the products.
local core = require 'tgl.core'
local G = require 'tgl.graph'
local ffi, C = core.ffi, core.C
local check, argerror = core.check, core.argerror
local is_var = G.is_var

local M = {}
local node_list = ffi.typeof('tgl_node *[?]')

local function as_list(fname, what, x)
  if is_var(x) then return { x }, true end
  if type(x) ~= 'table' or core.is_array(x) or #x == 0 then
    argerror(fname, '%s must be a variable or a non-empty table of variables', what)
  end
  for i, v in ipairs(x) do
    if not is_var(v) then argerror(fname, '%s %d is a %s, not a variable', what, i, type(v)) end
  end
  return x, false
end

-- The functions that check a direction at run time, as the engine's
-- rop_direction op numbers them (src/rop/direction.c): its message names
-- the one the user called.
local CALLER = { Rop = 0, hessian_vector_product = 1, gauss_newton_product = 2 }

-- A hash of the user's line ("file:line", below 2^31), part of a
-- rop_direction node's identity so that its message names the line that
-- built it.
local function line_hash()
  local src = G.user_source() or ''
  local h = 0
  for k = 1, #src do h = (h * 31 + src:byte(k)) % 2147483647 end
  return h
end

local function var_label(var)
  return var.name and ("'" .. var.name .. "'") or 'unnamed'
end

-- The shape a direction has now, when it is known before the function
-- runs: an array's, or a shared variable's current value's.
local function known_shape(d, given)
  if core.is_array(given) then return given:shape() end
  if is_var(d) and d.kind == 'shared' then return d:get_value { borrow = true }:shape() end
end

-- The directions: one per variable, variables or arrays/numbers (made
-- constants of the variable's dtype), checked against the variable: the
-- rank and dtype now, the sizes now when both are known (an array or a
-- shared variable's value against a shared variable), and, for Rop and
-- the curvature products (at_run = true), when the function runs, by a
-- rop_direction node in front of each direction (its source: the user's
-- line).  An axis where the direction is broadcastable may have size 1.
local function directions(fname, what, v, vars, single, of, at_run)
  local list
  if single then
    list = { v }
  elseif type(v) == 'table' and not core.is_array(v) and not is_var(v) then
    list = v
  else
    argerror(fname, '%s must be a table with one entry per variable (%d), got %s', what, #vars,
             type(v))
  end
  if #list ~= #vars then
    argerror(fname, '%s has %d entries for %d variables', what, #list, #vars)
  end
  local out = {}
  for i, given in ipairs(list) do
    local var = vars[i]
    if given == nil then argerror(fname, '%s %d is nil', what, i) end
    local d = is_var(given) and given or G.as_node(given, fname)
    if d.ndim ~= var.ndim then
      argerror(fname, '%s %d has %d dimensions, %s %d (%s) has %d', what, i, d.ndim, of, i,
               var_label(var), var.ndim)
    end
    if not (d.dtype == 'float32' or d.dtype == 'float64') then
      argerror(fname, '%s %d is %s; directions are floats', what, i, d.dtype)
    end
    local ds = known_shape(d, given)
    local vs = var.kind == 'shared' and var:get_value { borrow = true }:shape() or nil
    if ds and vs then
      local bc = d.broadcastable
      for k = 1, #ds do
        if ds[k] ~= vs[k] and not (bc[k] and ds[k] == 1) then
          argerror(fname, 'direction %d for %s has shape (%s%s), %s has (%s%s)', i,
                   var.name and var_label(var) or 'an unnamed shared variable',
                   table.concat(ds, ','), #ds == 1 and ',' or '', var.name or 'the variable',
                   table.concat(vs, ','), #vs == 1 and ',' or '')
        end
      end
    end
    if at_run then
      d = G.apply(fname, 'rop_direction', { d, var }, 2, { i = { i, CALLER[fname], line_hash() } })
    end
    out[i] = d
  end
  return out
end

local DISC = { disconnected = 'string' }
local function disconnected_of(fname, opts)
  local d = opts.disconnected or 'raise'
  if d ~= 'raise' and d ~= 'ignore' then
    argerror(fname, "disconnected must be 'raise' or 'ignore', got %s", tostring(d))
  end
  return d == 'raise' and C.TGL_DISCONNECTED_RAISE or C.TGL_DISCONNECTED_ZERO
end

-- J·v, its messages naming fname: the function the user called (Rop, or
-- a curvature product built on it).
local function rop(fname, f, wrt, v, opts)
  opts = core.check_options(fname, opts, DISC)
  local fs, fsingle = as_list(fname, 'f', f)
  local ws, wsingle = as_list(fname, 'wrt', wrt)
  for i, w in ipairs(ws) do
    if not (w.dtype == 'float32' or w.dtype == 'float64') then
      argerror(fname, 'wrt %d (%s) is %s: only float variables have a derivative', i,
               var_label(w), w.dtype)
    end
  end
  local vs = directions(fname, 'v', v, ws, wsingle, 'wrt', true)
  local cf, cw, cv, out = node_list(#fs), node_list(#ws), node_list(#ws), node_list(#fs)
  for i, x in ipairs(fs) do cf[i - 1] = x.n end
  for i = 1, #ws do cw[i - 1] = ws[i].n; cv[i - 1] = vs[i].n end
  check(C.tgl_rop(core.ctx, #fs, cf, #ws, cw, cv, disconnected_of(fname, opts), out), fname)
  local res = {}
  for i = 1, #fs do res[i] = G.wrap_node(out[i - 1]) end
  if fsingle then return res[1] end
  return res
end

-- uᵀJ, its messages naming fname.
local function lop(fname, f, wrt, u, opts)
  opts = core.check_options(fname, opts, DISC)
  local fs, fsingle = as_list(fname, 'f', f)
  local ws, wsingle = as_list(fname, 'wrt', wrt)
  local us = directions(fname, 'u', u, fs, fsingle, 'f')
  local known = {}
  for i, x in ipairs(fs) do
    if known[x] then argerror(fname, 'f %d repeats an earlier output', i) end
    known[x] = us[i]
  end
  local res = require('tgl.grad').grad_as(fname, nil, ws, { known_grads = known,
                                                            disconnected = opts.disconnected or 'raise' })
  if wsingle then return res[1] end
  return res
end

-- tgl.Rop(f, wrt, v [, {disconnected = 'raise'|'ignore'}])
function M.Rop(f, wrt, v, opts) return rop('Rop', f, wrt, v, opts) end

-- tgl.Lop(f, wrt, u [, {disconnected = 'raise'|'ignore'}]): uᵀJ, the
-- pullback of u (u shaped like f).
function M.Lop(f, wrt, u, opts) return lop('Lop', f, wrt, u, opts) end

-- tgl.hessian_vector_product(cost, params, v): H·v exactly, as the
-- R-operator of the gradient (one backward, then one forward pass).
function M.hessian_vector_product(cost, params, v)
  local fname = 'hessian_vector_product'
  if not is_var(cost) then argerror(fname, 'cost must be a variable') end
  local ps, single = as_list(fname, 'params', params)
  local g = require('tgl.grad').grad_as(fname, cost, ps)
  return rop(fname, single and g[1] or g, single and ps[1] or ps, v)
end

-- H_L·w for the common losses, the loss being a function of `out`:
--   softmax_crossentropy  out are logits (rows), the cost the mean over rows
--                         of crossentropy(softmax(out), labels):
--                         H_L w = (p ⊙ w − p · rowsum(p ⊙ w)) / rows
--   mse                   cost = mean((out − y)²) over every element:
--                         H_L w = 2 w / #out
local LOSSES = {
  softmax_crossentropy = function(out, w)
    local p = G.softmax(out, -1)
    local pw = p * w
    local hw = pw - p * G.sum(pw, -1, { keepdims = true })
    if out.ndim >= 2 then hw = hw / G.cast(out:size(1), out.dtype) end
    return hw
  end,
  mse = function(out, w)
    local n = G.cast(G.prod(G.shape(out)), out.dtype)
    return w * 2 / n
  end,
}
M.LOSSES = LOSSES

-- tgl.gauss_newton_product(out, params, v, loss): Jᵀ H_L J v, the
-- Gauss-Newton (generalized Gauss-Newton) matrix of the loss composed with
-- the network `out` times v, in two passes: Rop for J v, then the loss's
-- curvature, then Lop. loss is 'softmax_crossentropy', 'mse', or a function
-- (out, w) returning H_L·w.
function M.gauss_newton_product(out, params, v, loss)
  local fname = 'gauss_newton_product'
  if not is_var(out) then argerror(fname, 'out must be a variable (the network output)') end
  local ps, single = as_list(fname, 'params', params)
  local hl
  if type(loss) == 'function' then
    hl = loss
  elseif type(loss) == 'string' then
    hl = LOSSES[loss]
    if not hl then
      local names = {}
      for k in pairs(LOSSES) do names[#names + 1] = k end
      table.sort(names)
      argerror(fname, "unknown loss '%s' (known: %s, or a function(out, w) returning H_L w)",
               loss, table.concat(names, ', '))
    end
  else
    argerror(fname, "loss must be 'softmax_crossentropy', 'mse' or a function(out, w), got %s",
             type(loss))
  end
  local jv = rop(fname, out, single and ps[1] or ps, v)
  local hjv = hl(out, jv)
  if not is_var(hjv) or hjv.ndim ~= out.ndim then
    argerror(fname, 'the loss curvature must return a variable shaped like out')
  end
  return lop(fname, out, single and ps[1] or ps, hjv)
end

return M
