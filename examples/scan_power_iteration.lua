-- examples/scan_power_iteration.lua — the dominant eigenvector of a
-- symmetric matrix by power iteration, b <- A b / |A b|, as a tgl.scan.
-- The matrix is built with a known answer: A = Q diag(lambda) Q with Q a
-- Householder reflection (orthogonal and symmetric), so A's eigenvectors are
-- Q's columns and the dominant one is Q's first column, eigenvalue 10.
-- Two loops: a fixed number of steps (n_steps), and a do-while loop that
-- stops when b no longer changes (tgl.until_).
--   tgl examples/scan_power_iteration.lua
tgl.manual_seed(7)
local n = 6
local lambdas = tgl.array({ 10, 5, 3, 2, 1, 0.5 }, 'float64')
local v = tgl.randn(n, { dtype = 'float64' })
local I = tgl.zeros(n, n, { dtype = 'float64' })
for i = 1, n do I:set(1, i, i) end
local Q = I - tgl.outer(v, v) * (2 / tgl.sum(v * v):get())
local A = (Q * lambdas):dot(Q)                     -- Q diag(lambda) Q^T, Q^T = Q
local q1 = Q[{ {}, 1 }]                            -- the known dominant eigenvector

local As, b0 = tgl.dmatrix('A'), tgl.dvector('b0')
local function step(b, A_)
  local Ab = A_:dot(b)
  return Ab / tgl.sqrt(tgl.sum(Ab * Ab))
end

-- 1. 60 steps: the error shrinks by lambda2/lambda1 = 0.5 a step.
local bs = tgl.scan { fn = step, outputs_info = { b0 }, non_sequences = { As }, n_steps = 60, name = 'power' }
local b = bs[-1]
local power = tgl.compile { inputs = { As, b0 }, outputs = { b, b:dot(As:dot(b)) }, name = 'power' }
local start = tgl.ones(n, { dtype = 'float64' })
local bv, lambda = power(A, start)
local cosine = math.abs(tgl.sum(bv * q1):get())
print(('60 steps:   eigenvalue %.12f (known 10)   |cos(b, q1)| = %.15f'):format(lambda:get(), cosine))
assert(math.abs(lambda:get() - 10) < 1e-9 and math.abs(cosine - 1) < 1e-9, 'power iteration did not converge')

-- 2. Until converged: fn returns its output, no updates, and the stopping
-- condition; n_steps is then the most steps allowed.
local bs2 = tgl.scan {
  fn = function(b_prev, A_)
    local b_new = step(b_prev, A_)
    return b_new, {}, tgl.until_(tgl.lt(tgl.max(tgl.abs(b_new - b_prev)), 1e-12))
  end,
  outputs_info = { b0 }, non_sequences = { As }, n_steps = 1000, name = 'power_until',
}
local power2 = tgl.compile { inputs = { As, b0 }, outputs = { bs2[-1], bs2:size(1) }, name = 'power_until' }
local bv2, steps = power2(A, start)
local cosine2 = math.abs(tgl.sum(bv2 * q1):get())
print(('until_:     %d steps          |cos(b, q1)| = %.15f'):format(steps:get(), cosine2))
assert(steps:get() < 1000 and math.abs(cosine2 - 1) < 1e-9, 'the until_ loop did not converge')
