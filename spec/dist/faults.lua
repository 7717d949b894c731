-- spec/dist/faults.lua — a job spec/dist_spec.lua starts to see how tgl.dist
-- fails: every mode must end the whole job with a non-zero status and a
-- clear message, within the timeout, never hang.
--
--   mpirun -np 2 tgl spec/dist/faults.lua MODE
--   raise      rank 2 raises an error while rank 1 waits in an allreduce
--   kill       rank 2 is killed (SIGKILL) while rank 1 waits in an allreduce
--   skip       rank 2 skips a barrier and sleeps; rank 1's barrier times
--              out (1 s) and raises; its exit ends rank 2's sleep too
--   step       rank 2 raises in the middle of a training loop whose
--              compiled step all-reduces its gradients (the buckets of
--              rank 1 wait on the progress thread)
--   noinit     an allreduce without tgl.dist.init() in a launched process
local tgl = require 'tgl'
local mode = arg[1]

if mode == 'noinit' then
  tgl.dist.allreduce(tgl.ones({ 2 }), 'sum') -- raises: call tgl.dist.init() first
  os.exit(0)
end

local rank = tgl.dist.init { timeout = mode == 'skip' and 1 or 30 }
io.write(('started %d\n'):format(rank))
io.flush()

if mode == 'raise' then
  if rank == 2 then error('rank 2 fails on purpose') end
  tgl.dist.allreduce(tgl.ones({ 4 }), 'sum')
elseif mode == 'kill' then
  if rank == 2 then
    local pid = io.open('/proc/self/stat'):read('*l'):match('^(%d+)')
    os.execute('kill -9 ' .. pid)
    -- os.execute runs a shell, whose parent is this process: kill the
    -- parent of that shell
    os.execute('kill -9 $PPID')
  end
  tgl.dist.allreduce(tgl.ones({ 4 }), 'sum')
elseif mode == 'skip' then
  if rank == 2 then os.execute('sleep 30') os.exit(0) end
  tgl.dist.barrier()
elseif mode == 'step' then
  local x = tgl.matrix('x')
  local W = tgl.shared(tgl.ones({ 3, 2 }), 'W')
  local cost = tgl.sum(tgl.dot(x, W) ^ 2)
  local g = tgl.grad(cost, W)
  local f = tgl.compile { inputs = { x }, outputs = { cost },
                          updates = { { W, W - 0.01 * tgl.allreduce(g, 'mean') } } }
  for i = 1, 20 do
    if rank == 2 and i == 5 then error('rank 2 fails at step 5 on purpose') end
    f(tgl.ones({ 4, 3 }))
  end
end
io.write(('finished %d\n'):format(rank))
