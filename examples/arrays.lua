-- examples/arrays.lua — a tour of tgl arrays: creation, reproducible random
-- numbers, views, printing, and NumPy-compatible checkpoints.
--   tgl examples/arrays.lua [output-dir]
local outdir = arg[1] or os.getenv('TMPDIR') or '/tmp'

tgl.manual_seed(42)
local W = tgl.randn(4, 3)            -- float32, N(0, 1), the same on every machine
local b = tgl.zeros(3)
local idx = tgl.arange(5)            -- int64: 1, 2, 3, 4, 5
print('W =') print(W)
print('idx =') print(idx)

-- Views share storage: writing through W:T() changes W.
local Wt = W:T()
Wt:set(100, 1, 2)
print(('W[2][1] after writing Wt[1][2]: %g'):format(W:get(2, 1)))

-- Reshape is free for contiguous arrays; astype converts.
local grid = tgl.arange(0, 11):reshape(3, 4):astype('float64')
print(grid)

-- Checkpoints: a table of arrays goes to .npz, a single array to .npy.
local ckpt = outdir .. '/tgl_example_ckpt.npz'
tgl.save(ckpt, { W = W, b = b }, { compress = true })
local back = tgl.load(ckpt)
print(('reloaded %s: W %s, b %s, identical: %s'):format(ckpt, table.concat(back.W:shape(), 'x'),
      table.concat(back.b:shape(), 'x'), tostring(back.W:get(2, 1) == W:get(2, 1))))
os.remove(ckpt)

-- Large arrays print elided, with their shape.
print(tgl.rand(1000, 50))
