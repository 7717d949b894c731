-- examples/scan_polynomial.lua — evaluating a polynomial with tgl.scan, as in
-- Theano's scan tutorial: the coefficients are a sequence, scan pairs each
-- with its power (a second sequence, 0, 1, 2, ...; scan stops at the
-- shorter sequence) and the terms are summed.  Then the same polynomial by
-- Horner's rule: a scan that walks the coefficients backwards
-- (go_backwards) and feeds its result back (outputs_info).
--   tgl examples/scan_polynomial.lua
local coefficients = tgl.dvector('coefficients')
local x = tgl.dscalar('x')

-- 1. Sum of the terms c_k x^k.  The powers 0..9999: as many coefficients as
-- this supports; the loop runs min(#coefficients, 10000) steps.
local max_coefficients = 10000
local full_range = tgl.constant(tgl.arange(0, max_coefficients - 1, 1, { dtype = 'float64' }))
local components = tgl.scan {
  fn = function(coefficient, power, free_variable) return coefficient * free_variable ^ power end,
  sequences = { coefficients, full_range },   -- one slice of each per step
  non_sequences = { x },                      -- the same x at every step
  name = 'terms',
}
local polynomial = components:sum()
local calculate = tgl.compile { inputs = { coefficients, x }, outputs = polynomial, name = 'poly' }

-- 2. Horner's rule: p = (...((c_n x + c_{n-1}) x + ...) x + c_0, the last
-- coefficient first; p starts at 0 and is fed back at each step.
local ps = tgl.scan {
  fn = function(c, p, free_variable) return p * free_variable + c end,
  sequences = { coefficients }, outputs_info = { tgl.constant(0, 'float64') }, non_sequences = { x },
  go_backwards = true, name = 'horner',
}
local horner = tgl.compile { inputs = { coefficients, x }, outputs = ps[-1], name = 'horner' }

-- Check both against a plain Lua evaluation.
local coeffs = { 1, 0, 2, -0.5, 0.25 }            -- 1 + 2x^2 - 0.5x^3 + 0.25x^4
local ca = tgl.array(coeffs, 'float64')
for _, xv in ipairs({ 3, -1.5, 0.1 }) do
  local direct = 0
  for k, c in ipairs(coeffs) do direct = direct + c * xv ^ (k - 1) end
  local s, h = calculate(ca, xv):get(), horner(ca, xv):get()
  print(('x = %5.2f   scan sum of terms %12.6f   scan Horner %12.6f   direct %12.6f'):format(xv, s, h, direct))
  assert(math.abs(s - direct) < 1e-9 * math.max(1, math.abs(direct)), 'sum of terms differs from direct')
  assert(math.abs(h - direct) < 1e-9 * math.max(1, math.abs(direct)), 'Horner differs from direct')
end
print('both scans agree with the direct evaluation')
