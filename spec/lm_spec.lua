-- lm_spec.lua — the language-model pieces (tgl.lm, doc/lm.md): the
-- class-factored crossentropy against the full softmax renormalised over
-- each class (values, gradients, finite differences; float64), truncated
-- BPTT by windows (a scan, as examples/rnnlm.lua builds it) against the
-- same window unrolled by hand, the corpus reader (empty lines, unknown
-- words, a missing file), the vocabulary, RNNLM's frequency-binned classes
-- on hand-made count tables, and the example's save / reload round trip.
tgl = tgl or require 'tgl'
local tgl = tgl
local lm = require 'tgl.lm'
local S = dofile('spec/support.lua')

local function tmpfile(text)
  local p = os.tmpname()
  S.write_file(p, text)
  return p
end

local function ints(a)
  local t = {}
  for i = 1, a:size(1) do t[i] = a:get(i) end
  return t
end

-- The reference: per row, the full softmax over the word logits of the
-- rows owner gives it, renormalised over them, and the class softmax,
-- built from ordinary ops (log_softmax over the whole row of word logits,
-- then the log of the class's share subtracted).
local function reference(h, Wc, Ws, cls, tgt, owner)
  local T = #cls
  local lc = tgl.log_softmax(h:dot(Wc:T()), 2)        -- (T, C)
  local lw = tgl.log_softmax(h:dot(Ws:T()), 2)        -- (T, K): the full softmax
  local total
  for t = 1, T do
    local mask = {}
    for j = 1, #owner do mask[j] = owner[j] == t and 1 or 0 end
    local m = tgl.constant(tgl.array(mask, 'float64'))
    -- log P(w | c) = log p_full(w) - log sum_{j in c} p_full(j)
    local lwc = lw[{ t, tgt[t] }] - tgl.log(tgl.sum(tgl.exp(lw[t]) * m))
    local l = -lc[{ t, cls[t] }] - lwc
    total = total and total + l or l
  end
  return total
end

describe('tgl.lm.class_xent (the class-factored softmax crossentropy)', function()
  tgl.manual_seed(7)
  local T, H, C, K = 3, 4, 3, 7
  local ha = tgl.randn(T, H):astype('float64')
  local wca = tgl.randn(C, H):astype('float64')
  local wsa = tgl.randn(K, H):astype('float64')
  local cls, tgt, owner = { 2, 1, 3 }, { 3, 4, 7 }, { 1, 1, 1, 2, 3, 3, 3 }
  local ca, ta, oa = tgl.array(cls, 'int64'), tgl.array(tgt, 'int64'), tgl.array(owner, 'int64')
  local h, Wc, Ws = tgl.dmatrix('h'), tgl.dmatrix('Wc'), tgl.dmatrix('Ws')
  local c, t, o = tgl.lvector('c'), tgl.lvector('t'), tgl.lvector('o')

  it('equals the full softmax renormalised over the class, times P(class)', function()
    local f = tgl.compile { inputs = { h, Wc, Ws, c, t, o }, outputs = lm.class_xent(h, Wc, Ws, c, t, o) }
    local got = f(ha, wca, wsa, ca, ta, oa)
    -- by hand, in Lua doubles
    local want = {}
    for r = 1, T do
      local function dot(W, j)
        local s = 0
        for k = 1, H do s = s + W:get(j, k) * ha:get(r, k) end
        return s
      end
      local zc, sc = {}, 0
      for j = 1, C do zc[j] = math.exp(dot(wca, j)); sc = sc + zc[j] end
      local sw = 0
      for j = 1, K do if owner[j] == r then sw = sw + math.exp(dot(wsa, j)) end end
      want[r] = -math.log(zc[cls[r]] / sc) - math.log(math.exp(dot(wsa, tgt[r])) / sw)
    end
    S.assert_close(want, got, 1e-12, 1e-12, 'class_xent')
    local g = tgl.compile { inputs = { h, Wc, Ws, c, t, o }, outputs = reference(h, Wc, Ws, cls, tgt, owner) }
    S.assert_close(tgl.sum(got):get(), g(ha, wca, wsa, ca, ta, oa), 1e-12, 1e-12, 'reference graph')
  end)

  it('has the gradients of the renormalised full softmax (h, Wc, Ws)', function()
    local cost = tgl.sum(lm.class_xent(h, Wc, Ws, c, t, o) * tgl.constant(tgl.array({ 0.5, -1.5, 2 }, 'float64')))
    local rcost
    do
      -- the same weights per row on the reference
      local lc = tgl.log_softmax(h:dot(Wc:T()), 2)
      local lw = tgl.log_softmax(h:dot(Ws:T()), 2)
      local wts = { 0.5, -1.5, 2 }
      for r = 1, T do
        local mask = {}
        for j = 1, K do mask[j] = owner[j] == r and 1 or 0 end
        local m = tgl.constant(tgl.array(mask, 'float64'))
        local l = -lc[{ r, cls[r] }] - (lw[{ r, tgt[r] }] - tgl.log(tgl.sum(tgl.exp(lw[r]) * m)))
        rcost = rcost and rcost + wts[r] * l or wts[r] * l
      end
    end
    local gs = tgl.grad(cost, { h, Wc, Ws })
    local rs = tgl.grad(rcost, { h, Wc, Ws })
    local f = tgl.compile { inputs = { h, Wc, Ws, c, t, o }, outputs = { gs[1], gs[2], gs[3], rs[1], rs[2], rs[3] } }
    local r = { f(ha, wca, wsa, ca, ta, oa) }
    for k, name in ipairs({ 'h', 'Wc', 'Ws' }) do
      S.assert_close(r[k + 3], r[k], 1e-10, 1e-12, 'gradient wrt ' .. name)
    end
    -- each word row gets a gradient, but row 4, alone in its class
    -- (P(w | c) = 1 whatever the weights)
    for j = 1, K do
      local a = r[3][j]:abs():sum():get()
      assert(j == 4 and a == 0 or j ~= 4 and a > 0, 'word row ' .. j .. ': gradient ' .. a)
    end
  end)

  it('matches finite differences (verify_grad, float64)', function()
    tgl.verify_grad(function(hh, wc, ws)
      return tgl.sum(lm.class_xent(hh, wc, ws, ca, ta, oa))
    end, { ha, wca, wsa }, { eps = 1e-6, tol = 1e-6 })
  end)

  it('runs in float32 with the same values (to float32 precision)', function()
    local h32, wc32, ws32 = tgl.fmatrix('h'), tgl.fmatrix('Wc'), tgl.fmatrix('Ws')
    local f = tgl.compile { inputs = { h32, wc32, ws32, c, t, o }, outputs = lm.class_xent(h32, wc32, ws32, c, t, o) }
    local g = tgl.compile { inputs = { h, Wc, Ws, c, t, o }, outputs = lm.class_xent(h, Wc, Ws, c, t, o) }
    S.assert_close(g(ha, wca, wsa, ca, ta, oa),
                   f(ha:astype('float32'), wca:astype('float32'), wsa:astype('float32'), ca, ta, oa):astype('float64'),
                   1e-5, 1e-5, 'float32')
  end)

  it('gives clear errors for bad indices and for second derivatives', function()
    local f = tgl.compile { inputs = { h, Wc, Ws, c, t, o }, outputs = lm.class_xent(h, Wc, Ws, c, t, o) }
    local ok, msg = pcall(f, ha, wca, wsa, tgl.array({ 2, 1, 4 }, 'int64'), ta, oa)
    assert(not ok and msg:find('class 4 of row 3 is not in 1..3', 1, true), msg)
    ok, msg = pcall(f, ha, wca, wsa, ca, tgl.array({ 3, 3, 7 }, 'int64'), oa)
    assert(not ok and msg:find('target 3 of row 2 is a word row owned by row 1', 1, true), msg)
    ok, msg = pcall(f, ha, wca, wsa, ca, ta, tgl.array({ 1, 1, 1, 2, 3, 3, 4 }, 'int64'))
    assert(not ok and msg:find('owner 4 of word row 7 is not in 1..3', 1, true), msg)
    ok, msg = pcall(f, ha, wca, wsa, ca, ta, tgl.array({ 1, 1, 1 }, 'int64'))
    assert(not ok and msg:find('3 owners for 7 word rows', 1, true), msg)
    ok, msg = pcall(lm.class_xent, h, Wc, tgl.fmatrix('w'), c, t, o)
    assert(not ok and msg:find('word rows must be a float64 matrix', 1, true), msg)
    local g = tgl.grad(tgl.sum(lm.class_xent(h, Wc, Ws, c, t, o)), h)
    ok, msg = pcall(tgl.grad, tgl.sum(g), h)
    assert(not ok and msg:find('second derivatives of class_xent are not implemented', 1, true), msg)
  end)

  it('class_index lays out the rows of each target class', function()
    local cl = lm.classes({ 5, 3, 1, 1 }, 2, { unigram = true })   -- classes {1,2}, {3,4}
    local cs, ts, os_, rows = lm.class_index(cl, { 4, 2, 3 })
    assert.same({ 2, 1, 2 }, ints(cs))
    assert.same({ 2, 4, 5 }, ints(ts))
    assert.same({ 1, 1, 2, 2, 3, 3 }, ints(os_))
    assert.same({ 3, 4, 1, 2, 3, 4 }, ints(rows))
  end)
end)

describe('truncated BPTT by windows', function()
  it('a scan over the window equals the window unrolled by hand (cost and gradients)', function()
    tgl.manual_seed(3)
    local V, H, back, n = 6, 3, 2, 5      -- window of 5 steps, losses on the last 3
    local cl = lm.classes({ 4, 3, 2, 2, 1, 1 }, 3)
    local Ea, Ra = tgl.randn(V, H):astype('float64'), (tgl.randn(H, H) * 0.5):astype('float64')
    local Wca, Wwa = tgl.randn(cl.n, H):astype('float64'), tgl.randn(V, H):astype('float64')
    local h0a = tgl.rand(H):astype('float64')
    local wins = { 1, 4, 2, 6, 3 }
    local targets = { 2, 6, 5 }
    local ca, ta, oa, ra = lm.class_index(cl, targets)
    local E, R, Wc, Ww = tgl.dmatrix('E'), tgl.dmatrix('R'), tgl.dmatrix('Wc'), tgl.dmatrix('Ww')
    local h0 = tgl.dvector('h0')
    local win, c, t, o, rows = tgl.lvector('win'), tgl.lvector('c'), tgl.lvector('t'), tgl.lvector('o'),
                               tgl.lvector('rows')
    -- as examples/rnnlm.lua builds it
    local X = E[win]
    local hs = tgl.scan {
      fn = function(x_t, h_prev, R_) return tgl.sigmoid(x_t + h_prev:dot(R_)) end,
      sequences = { X }, outputs_info = { h0 }, non_sequences = { R },
    }
    local Ws = Ww[rows]
    local cost = tgl.sum(lm.class_xent(hs[{ { back + 1, -1 } }], Wc, Ws, c, t, o))
    -- by hand: the same steps, one after the other
    local hp, hl = h0, {}
    for k = 1, n do
      hp = tgl.sigmoid(E[wins[k]] + hp:dot(R))
      if k > back then hl[#hl + 1] = hp end
    end
    local hcost = tgl.sum(lm.class_xent(tgl.stack(hl), Wc, Ww[rows], c, t, o))
    local wrt = { E, R, Wc, Ww, h0 }
    local g1, g2 = tgl.grad(cost, wrt), tgl.grad(hcost, wrt)
    local outs = { cost, hcost }
    for k = 1, #wrt do outs[#outs + 1] = g1[k]; outs[#outs + 1] = g2[k] end
    -- examples/rnnlm.lua's R gradient: [h0; h_1..h_{n-1}]' . dcost/dX
    local hprev = tgl.concatenate({ tgl.dimshuffle(h0, { 'x', 1 }), hs[{ { 1, -2 } }] }, 1)
    outs[#outs + 1] = hprev:T():dot(tgl.grad(cost, X))
    local f = tgl.compile { inputs = { E, R, Wc, Ww, h0, win, c, t, o, rows }, outputs = outs }
    local r = { f(Ea, Ra, Wca, Wwa, h0a, tgl.array(wins, 'int64'), ca, ta, oa, ra) }
    S.assert_close(r[2], r[1], 1e-12, 1e-12, 'cost')
    local names = { 'E', 'R', 'Wc', 'Ww', 'h0' }
    for k = 1, #wrt do
      S.assert_close(r[2 + 2 * k], r[1 + 2 * k], 1e-10, 1e-12, 'gradient wrt ' .. names[k])
    end
    S.assert_close(r[6], r[#r], 1e-10, 1e-12, "R's gradient as one product after the loop")
    -- the truncation: the steps before the window get nothing, and a word
    -- only in the window's first steps still gets its (nonzero) gradient
    assert(math.abs(r[3]:get(1, 1)) > 0, 'word 1 (window step 1) has no gradient')
  end)
end)

describe('the corpus reader and the vocabulary', function()
  it('reads one sentence a line, ends each with </s>, skips empty lines', function()
    local p = tmpfile('the cat sat\n\n  \nthe dog\n')
    local v = lm.vocab(p)
    assert.same({ '</s>', 'the', 'cat', 'sat', 'dog', '<unk>' }, v.words)
    assert.same({ 2, 2, 1, 1, 1, 0 }, v.counts)
    local ids, n = lm.read(p, v)
    assert.equal(7, n)
    assert.same({ 2, 3, 4, 1, 2, 5, 1 }, ints(ids))
    os.remove(p)
  end)

  it('reads words outside the vocabulary as <unk>', function()
    local p = tmpfile('the cat\n')
    local q = tmpfile('the zebra cat\n')
    local v = lm.vocab(p)
    local ids, n = lm.read(q, v)
    assert.equal(4, n)
    assert.same({ v.index.the, v.index['<unk>'], v.index.cat, 1 }, ints(ids))
    os.remove(p); os.remove(q)
  end)

  it('names a missing file in its error', function()
    local ok, msg = pcall(lm.vocab, '/nonexistent/train.txt')
    assert(not ok and msg:find('tgl.lm.vocab: cannot read the corpus file /nonexistent/train.txt', 1, true), msg)
    ok, msg = pcall(lm.read, '/nonexistent/valid.txt', lm.vocab_from({ '</s>', '<unk>' }, { 1, 0 }))
    assert(not ok and msg:find('tgl.lm.read: cannot read the corpus file /nonexistent/valid.txt', 1, true), msg)
  end)
end)

describe("RNNLM's frequency-binned classes", function()
  it('bins ids by unigram mass (-old-classes): counts 5,3,1,1', function()
    -- masses .5 .3 .1 .1: 2 classes -> the mass passes 1/2 after id 2
    local cl = lm.classes({ 5, 3, 1, 1 }, 2, { unigram = true })
    assert.same({ 1, 1, 2, 2 }, cl.of)
    assert.same({ 1, 3 }, cl.first)
    assert.same({ 2, 4 }, cl.last)
    -- 3 classes: passes 1/3 after id 1, 2/3 after id 2
    assert.same({ 1, 2, 3, 3 }, lm.classes({ 5, 3, 1, 1 }, 3, { unigram = true }).of)
  end)

  it('bins ids by square-root mass by default: counts 9,4,1,1,1', function()
    -- sqrt shares .75 .5 .25 .25 .25 (sum 2): .375 .25 .125 .125 .125
    assert.same({ 1, 1, 2, 2, 2 }, lm.classes({ 9, 4, 1, 1, 1 }, 2).of)
    -- unigram: 9/16 > 1/2 already after id 1
    assert.same({ 1, 2, 2, 2, 2 }, lm.classes({ 9, 4, 1, 1, 1 }, 2, { unigram = true }).of)
    -- more classes than ids: one id each
    local cl = lm.classes({ 2, 1 }, 5)
    assert.same({ 1, 2 }, cl.of)
    assert.equal(2, cl.n)
  end)

  it('rejects a bad class count', function()
    local ok, msg = pcall(lm.classes, { 1, 2 }, 0)
    assert(not ok and msg:find('number of classes must be a positive integer', 1, true), msg)
  end)
end)

describe('examples/rnnlm.lua', function()
  it('trains, saves, and scores a test file with the reloaded model', function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute('mkdir -p ' .. dir)
    local lines = {}
    local words = { 'a', 'b', 'c', 'd', 'e', 'f' }
    for k = 1, 120 do
      lines[k] = words[k % 6 + 1] .. ' ' .. words[(k * 7) % 6 + 1] .. ' ' .. words[(k * 5) % 6 + 1]
    end
    S.write_file(dir .. '/train.txt', table.concat(lines, '\n') .. '\n')
    S.write_file(dir .. '/valid.txt', table.concat(lines, '\n', 1, 20) .. '\n')
    local bin = os.getenv('TGL_BIN') or arg[-1]
    local cmd = ('%q examples/rnnlm.lua -train %s/train.txt -valid %s/valid.txt -rnnlm %s/m.npz '
                 .. '-hidden 8 -class 3 -bptt 3 -bptt-block 5 -one-iter -samples 1 2>&1'):format(bin, dir, dir, dir)
    local p = io.popen(cmd)
    local out = p:read('*a')
    p:close()
    local ppl = tonumber(out:match('RESULT words_per_s=%d+ valid_ppl=([%d.]+) epochs=1 precision=float32 threads=1'))
    assert(ppl and ppl > 1 and ppl < 9, out)
    p = io.popen(('%q examples/rnnlm.lua -test %s/valid.txt -rnnlm %s/m.npz -samples 0 2>&1'):format(bin, dir, dir))
    local out2 = p:read('*a')
    p:close()
    local tppl = tonumber(out2:match('test: %d+ words, ppl ([%d.]+)'))
    -- the saved model scores the validation file as training last did
    assert(tppl and math.abs(tppl - ppl) < 1e-2 * ppl, out2)
    -- the full softmax (-class 1): trains, and reloads to the same score
    p = io.popen(('%q examples/rnnlm.lua -train %s/train.txt -valid %s/valid.txt -rnnlm %s/f.npz '
                  .. '-hidden 8 -class 1 -bptt 3 -bptt-block 5 -one-iter -samples 1 2>&1'):format(bin, dir, dir, dir))
    out = p:read('*a')
    p:close()
    ppl = tonumber(out:match('RESULT words_per_s=%d+ valid_ppl=([%d.]+) epochs=1'))
    assert(ppl and ppl > 1 and ppl < 9, out)
    p = io.popen(('%q examples/rnnlm.lua -test %s/valid.txt -rnnlm %s/f.npz -samples 0 2>&1'):format(bin, dir, dir))
    out2 = p:read('*a')
    p:close()
    tppl = tonumber(out2:match('test: %d+ words, ppl ([%d.]+)'))
    assert(tppl and math.abs(tppl - ppl) < 1e-2 * ppl, out2)
    os.execute('rm -rf ' .. dir)
  end)
end)
