-- lm_class_xent_sgd_spec.lua — tgl.lm.class_xent_sgd (RNNLM's output
-- layer trained one word at a time, doc/lm.md) and examples/rnnlm.lua's
-- `-output-update word`:
--   * the op against the same word-by-word sequence written in plain Lua
--     (Lua doubles) over random shapes, class partitions and repeated
--     classes, float64 (1e-12) and float32 (relative 1e-4);
--   * with lr = 0, its hidden errors and losses against class_xent over
--     the gathered rows Ww[rows] and its gradient (the in-place read
--     equals the gathered reference), and against finite differences;
--   * bad input: a row outside the word matrix, a gradient or a Rop asked
--     of it;
--   * the example trained one epoch on a tiny corpus in float64 with
--     `-output-update word` against the whole training written by hand
--     (forward, per-word output updates, truncated BPTT of the block,
--     block updates of E and R), weight by weight.
tgl = tgl or require 'tgl'
local tgl = tgl
local lm = require 'tgl.lm'
local ffi = require 'ffi'
local S = dofile('spec/support.lua')

-- The sequence by hand: h (T x H), Wc (C x H), Ww (V x H) Lua tables of
-- rows; cls[t]; word[t] (the target's row of Ww); class rows crow[c] (a
-- list of Ww rows); lr; beta[t].  Returns err, loss, Wc', Ww' (new tables).
local function ref_sgd(h, Wc, Ww, cls, word, crow, lr, beta)
  local H = #h[1]
  local function copy(M)
    local R = {}
    for i, r in ipairs(M) do R[i] = { unpack(r) } end
    return R
  end
  Wc, Ww = copy(Wc), copy(Ww)
  local function dot(a, b)
    local s = 0
    for k = 1, H do s = s + a[k] * b[k] end
    return s
  end
  local err, loss = {}, {}
  for t = 1, #h do
    local ht = h[t]
    local function softmax(rows, M)
      local z, m = {}, -math.huge
      for i, r in ipairs(rows) do z[i] = dot(M[r], ht); m = math.max(m, z[i]) end
      local s = 0
      for i = 1, #z do z[i] = math.exp(z[i] - m); s = s + z[i] end
      for i = 1, #z do z[i] = z[i] / s end
      return z
    end
    local crows = {}
    for c = 1, #Wc do crows[c] = c end
    local pc = softmax(crows, Wc)
    local wrows = crow[cls[t]]
    local pw = softmax(wrows, Ww)
    local l = -math.log(pc[cls[t]])
    local e = {}
    for k = 1, H do e[k] = 0 end
    local keep = 1 - lr * beta[t]
    local function step(M, r, d)
      for k = 1, H do e[k] = e[k] + d * M[r][k] end
      for k = 1, H do M[r][k] = M[r][k] * keep - lr * d * ht[k] end
    end
    for c = 1, #Wc do step(Wc, c, pc[c] - (c == cls[t] and 1 or 0)) end
    for i, r in ipairs(wrows) do
      if r == word[t] then l = l - math.log(pw[i]) end
      step(Ww, r, pw[i] - (r == word[t] and 1 or 0))
    end
    err[t], loss[t] = e, l
  end
  return err, loss, Wc, Ww
end

local function rows_of(a)
  local R = {}
  for i = 1, a:size(1) do
    R[i] = {}
    for k = 1, a:size(2) do R[i][k] = a:get(i, k) end
  end
  return R
end

-- A random case: T words over a vocabulary of V rows split into C
-- contiguous classes (tgl.lm.classes' layout), targets drawn so classes
-- repeat.
local function random_case(rng)
  local T, H, V = rng(1, 6), rng(1, 9), rng(2, 12)
  local C = rng(1, math.min(V, 4))
  -- class boundaries: C non-empty contiguous ranges
  local first, last, of = {}, {}, {}
  local cuts, used = {}, {}
  while #cuts < C - 1 do
    local x = rng(2, V)
    if not used[x] then used[x] = true; cuts[#cuts + 1] = x end
  end
  table.sort(cuts)
  local starts = { 1, unpack(cuts) }
  for c = 1, C do
    first[c], last[c] = starts[c], (starts[c + 1] or V + 1) - 1
    for id = first[c], last[c] do of[id] = c end
  end
  local cl = { of = of, first = first, last = last, n = C }
  local targets = {}
  for t = 1, T do targets[t] = rng(1, V) end
  return T, H, V, cl, targets
end

local function compiled(dt)
  local h, Wc, Ww = tgl.matrix('h', dt), tgl.matrix('Wc', dt), tgl.matrix('Ww', dt)
  local c, t, o, r = tgl.lvector('c'), tgl.lvector('t'), tgl.lvector('o'), tgl.lvector('r')
  local lr, beta = tgl.scalar('lr', dt), tgl.vector('beta', dt)
  local err, loss, dWc, dWs = lm.class_xent_sgd(h, Wc, Ww, c, t, o, r, lr, beta)
  return tgl.compile { inputs = { h, Wc, Ww, c, t, o, r, lr, beta }, outputs = { err, loss, dWc, dWs } }
end

describe('tgl.lm.class_xent_sgd (RNNLM per-word output updates)', function()
  local f64, f32 = compiled('float64'), compiled('float32')
  local seed = 11
  local function rng(a, b)
    seed = (seed * 1103515245 + 12345) % 2147483648
    return a + seed % (b - a + 1)
  end

  for _, dt in ipairs({ 'float64', 'float32' }) do
    it('equals the word-by-word sequence by hand over random shapes (' .. dt .. ')', function()
      local f = dt == 'float64' and f64 or f32
      for case = 1, 25 do
        local T, H, V, cl, targets = random_case(rng)
        tgl.manual_seed(case)
        local ha = tgl.randn(T, H):astype(dt)
        local wca = tgl.randn(cl.n, H):astype(dt)
        local wwa = tgl.randn(V, H):astype(dt)
        local lr = case % 3 == 0 and 0.5 or 0.1
        local beta = {}
        for t = 1, T do beta[t] = t % 2 == 0 and 0.3 or 0 end
        local c, tg, o, r = lm.class_index(cl, targets)
        local err, loss, dWc, dWs = f(ha, wca, wwa, c, tg, o, r, tgl.array(lr, dt),
                                      tgl.array(beta, dt))
        -- the reference reads the arrays as the op does (rounded to dt)
        local crow, cls = {}, {}
        for k = 1, cl.n do
          crow[k] = {}
          for id = cl.first[k], cl.last[k] do crow[k][#crow[k] + 1] = id end
        end
        for t = 1, T do cls[t] = cl.of[targets[t]] end
        local E, L, Wc2, Ww2 = ref_sgd(rows_of(ha), rows_of(wca), rows_of(wwa), cls, targets,
                                       crow, lr, beta)
        local tol = dt == 'float64' and 1e-12 or 1e-4
        local function close(got, want, what)
          local scale = math.max(1, math.abs(want))
          assert(math.abs(got - want) <= tol * scale,
                 ('case %d %s: got %.17g, want %.17g'):format(case, what, got, want))
        end
        for t = 1, T do
          close(loss:get(t), L[t], 'loss ' .. t)
          for k = 1, H do close(err:get(t, k), E[t][k], ('err %d,%d'):format(t, k)) end
        end
        local W0 = rows_of(wca)
        for ci = 1, cl.n do
          for k = 1, H do close(W0[ci][k] + dWc:get(ci, k), Wc2[ci][k], 'Wc') end
        end
        -- applying dWs as inc_subtensor(Ww[rows], dWs) does (repeats add)
        local Wn = rows_of(wwa)
        for j = 1, r:size(1) do
          local id = r:get(j)
          for k = 1, H do Wn[id][k] = Wn[id][k] + dWs:get(j, k) end
        end
        for id = 1, V do
          for k = 1, H do close(Wn[id][k], Ww2[id][k], ('Ww %d,%d'):format(id, k)) end
        end
      end
    end)
  end

  it('with lr 0: class_xent and its gradient over the gathered rows, and finite differences', function()
    local h, Wc, Ww = tgl.dmatrix('h'), tgl.dmatrix('Wc'), tgl.dmatrix('Ww')
    local c, t, o, r = tgl.lvector('c'), tgl.lvector('t'), tgl.lvector('o'), tgl.lvector('r')
    local loss = lm.class_xent(h, Wc, Ww[r], c, t, o)
    local gathered = tgl.compile { inputs = { h, Wc, Ww, c, t, o, r },
                                   outputs = { loss, tgl.grad(tgl.sum(loss), h) } }
    for case = 1, 10 do
      local T, H, V, cl, targets = random_case(rng)
      tgl.manual_seed(100 + case)
      local ha, wca, wwa = tgl.randn(T, H):astype('float64'), tgl.randn(cl.n, H):astype('float64'),
                           tgl.randn(V, H):astype('float64')
      local ca, ta, oa, ra = lm.class_index(cl, targets)
      local zero, nob = tgl.array(0, 'float64'), tgl.zeros(T):astype('float64')
      local err, l, dWc, dWs = f64(ha, wca, wwa, ca, ta, oa, ra, zero, nob)
      local L, G = gathered(ha, wca, wwa, ca, ta, oa, ra)
      S.assert_close(l, L, 1e-12)
      S.assert_close(err, G, 1e-12)
      assert.equal(0, tgl.max(tgl.abs(dWc)):get())
      assert.equal(0, tgl.max(tgl.abs(dWs)):get())
      -- central differences of the summed loss in each entry of h
      local eps = 1e-6
      for i = 1, T do
        for k = 1, H do
          local hp, hm = ha:clone(), ha:clone()
          hp:set(ha:get(i, k) + eps, i, k)
          hm:set(ha:get(i, k) - eps, i, k)
          local _, lp = f64(hp, wca, wwa, ca, ta, oa, ra, zero, nob)
          local _, lm_ = f64(hm, wca, wwa, ca, ta, oa, ra, zero, nob)
          local fd = (tgl.sum(lp):get() - tgl.sum(lm_):get()) / (2 * eps)
          assert(math.abs(fd - err:get(i, k)) < 1e-6, ('fd %g vs %g'):format(fd, err:get(i, k)))
        end
      end
    end
  end)

  it('a row outside the word matrix is a clear error; it has no gradient', function()
    local cl = lm.classes({ 3, 2, 1 }, 2)
    local c, t, o, r = lm.class_index(cl, { 2, 3 })
    r:set(9, 1)
    local ok, msg = pcall(f64, tgl.ones(2, 2):astype('float64'), tgl.ones(cl.n, 2):astype('float64'),
                          tgl.ones(3, 2):astype('float64'), c, t, o, r, tgl.array(0.1, 'float64'),
                          tgl.zeros(2):astype('float64'))
    assert.is_false(ok)
    assert.matches('row 1 of the word rows is 9, not a row of the word matrix %(1..3%)', msg)
    local h = tgl.dmatrix('h')
    local err = lm.class_xent_sgd(h, tgl.dmatrix('Wc'), tgl.dmatrix('Ww'), tgl.lvector('c'),
                                  tgl.lvector('t'), tgl.lvector('o'), tgl.lvector('r'),
                                  tgl.dscalar('lr'), tgl.dvector('b'))
    local ok2, msg2 = pcall(tgl.grad, tgl.sum(err), h)
    assert.is_false(ok2)
    assert.matches('class_xent_sgd is a training step', msg2)
    local ok3, msg3 = pcall(tgl.Rop, err, h, tgl.dmatrix('v'))
    assert.is_false(ok3)
    assert.matches('class_xent_sgd is a training step', msg3)
  end)
end)

describe('examples/rnnlm.lua -output-update word', function()
  it('one epoch equals the training written by hand (float64, weight by weight)', function()
    local dir = S.tmpdir('lm_class_xent_sgd')
    local train = dir .. '/train.txt'
    S.write_file(train, 'a b c a b\nb c a d\nc a b b a c\na a b\nd c b a b c a\n')
    S.write_file(dir .. '/valid.txt', 'a b c\n')
    local H, CLS, BPTT, BLOCK, ALPHA, BETA = 3, 2, 3, 4, 0.2, 0.05
    local model = dir .. '/m.npz'
    local cmd = ('%q examples/rnnlm.lua -train %s -valid %s/valid.txt -rnnlm %s -hidden %d -class %d '
                 .. '-bptt %d -bptt-block %d -alpha %g -beta %g -rand-seed 1 -one-iter -double '
                 .. '-samples 0 -output-update word > %s/log.txt 2>&1'):format(
      os.getenv('TGL_BIN') or arg[-1], train, dir, model, H, CLS, BPTT, BLOCK, ALPHA, BETA, dir)
    local rc = os.execute(cmd)
    assert(rc == 0 or rc == true, 'the example failed: ' .. (S.read_file(dir .. '/log.txt') or ''))
    local z = tgl.load(model)

    -- the same start: vocabulary, classes, RNNLM's initialisation
    local vocab = lm.vocab(train)
    local ids, n = lm.read(train, vocab)
    local V = vocab.size
    local cl = lm.classes(vocab.counts, CLS)
    local saved = tgl.config.floatX
    tgl.config.floatX = 'float64'
    tgl.manual_seed(1)
    local function init(r, c)
      return ((tgl.rand(r, c) + tgl.rand(r, c) + tgl.rand(r, c) - 1.5) * 0.2):astype('float64')
    end
    local E, R, Ww = rows_of(init(V, H)), rows_of(init(H, H)), rows_of(init(V, H))
    local Wc = rows_of(init(math.min(CLS, V), H))
    tgl.config.floatX = saved
    while #Wc > cl.n do Wc[#Wc] = nil end
    local crow = {}
    for k = 1, cl.n do
      crow[k] = {}
      for id = cl.first[k], cl.last[k] do crow[k][#crow[k] + 1] = id end
    end
    local p = ffi.cast('int64_t *', ids:data())
    local function sig(x) return 1 / (1 + math.exp(-x)) end

    -- the training by hand
    local BACK = BPTT - 1
    local hstate = {}
    for k = 1, H do hstate[k] = 1 end
    local pos = 0
    while pos < n do
      local m = math.min(BLOCK, n - pos)
      local win = {}
      for k = 0, BACK + m - 1 do
        local at = pos - BACK - 1 + k
        win[k + 1] = at >= 0 and tonumber(p[at]) or 1
      end
      local hs = { [0] = hstate }
      for i = 1, BACK + m do
        hs[i] = {}
        for j = 1, H do
          local s = E[win[i]][j]
          for k = 1, H do s = s + hs[i - 1][k] * R[k][j] end
          hs[i][j] = sig(s)
        end
      end
      local hl, cls, word, beta = {}, {}, {}, {}
      for t = 1, m do
        hl[t] = hs[BACK + t]
        word[t] = tonumber(p[pos + t - 1])
        cls[t] = cl.of[word[t]]
        beta[t] = (pos + t) % 10 == 0 and BETA or 0
      end
      local err
      err, _, Wc, Ww = ref_sgd(hl, Wc, Ww, cls, word, crow, ALPHA, beta)
      -- truncated BPTT of the window, from the block's hidden errors
      local carry, gX, gR = {}, {}, {}
      for k = 1, H do carry[k] = 0; gR[k] = {}; for j = 1, H do gR[k][j] = 0 end end
      for i = BACK + m, 1, -1 do
        local g = {}
        for j = 1, H do
          local e = carry[j] + (i > BACK and err[i - BACK][j] or 0)
          g[j] = e * hs[i][j] * (1 - hs[i][j])
        end
        gX[i] = g
        for k = 1, H do
          local s = 0
          for j = 1, H do s = s + R[k][j] * g[j]; gR[k][j] = gR[k][j] + hs[i - 1][k] * g[j] end
          carry[k] = s
        end
      end
      local dE = {}
      for i = 1, BACK + m do
        local w = win[i]
        dE[w] = dE[w] or {}
        for j = 1, H do dE[w][j] = (dE[w][j] or 0) - ALPHA * (gX[i][j] + BETA * E[w][j]) end
      end
      for w, d in pairs(dE) do for j = 1, H do E[w][j] = E[w][j] + d[j] end end
      for k = 1, H do
        for j = 1, H do R[k][j] = R[k][j] - ALPHA * (gR[k][j] + BETA * R[k][j]) end
      end
      hstate = hs[m]
      pos = pos + m
    end

    for name, want in pairs({ E = E, R = R, Wc = Wc, Ww = Ww }) do
      local got = z[name]
      assert.equal(#want, got:size(1))
      for i = 1, #want do
        for k = 1, H do
          local g, w = got:get(i, k), want[i][k]
          assert(math.abs(g - w) < 1e-10, ('%s[%d][%d]: got %.17g, want %.17g'):format(name, i, k, g, w))
        end
      end
    end
  end)
end)
