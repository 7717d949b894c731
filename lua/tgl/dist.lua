-- tgl.dist — data parallelism between processes over MPI (Open MPI).
--
--   -- mpirun -np 4 tgl train.lua
--   tgl.dist.init()                      -- joins the job (alone: a job of one)
--   tgl.dist.rank(), tgl.dist.size()     -- ranks count from 1 (MPI's rank 0 is 1)
--   tgl.dist.allreduce(a, 'sum')         -- in place, on arrays; returns a
--   tgl.dist.broadcast(a, 1)             -- in place, from rank 1
--   tgl.dist.allgather(a)                -- a new (size, ...) array
--   g = tgl.allreduce(gW, {op = 'mean'}) -- symbolic: inside the compiled step
--
-- The C side is src/dist (tgl.h's tgl_dist_*); doc/distributed.md says how
-- to launch, what is averaged, and what happens when a process fails.
local core = require 'tgl.core'
local ffi, C = core.ffi, core.C

local dist = {}

-- The reductions by name (tgl_dist_op).
dist.OPS = { sum = C.TGL_DIST_SUM, mean = C.TGL_DIST_MEAN, max = C.TGL_DIST_MAX,
             min = C.TGL_DIST_MIN, prod = C.TGL_DIST_PROD }

-- Raises the engine's error as tgl.dist.<fname>'s (the transport's own
-- "tgl.dist: " prefix dropped: the function is named instead).
local function check(status, fname)
  if status == 0 then return end
  local msg = ffi.string(C.tgl_ctx_error(core.ctx))
  C.tgl_ctx_clear_error(core.ctx)
  msg = msg:gsub('^tgl_[%w_]+: ', ''):gsub('^tgl%.dist[%w_.]*: ', '')
  if msg == '' then msg = 'failed with status ' .. tonumber(status) end
  core.argerror('dist.' .. fname, '%s', msg)
end

local function op_of(fname, op)
  if op == nil then return C.TGL_DIST_SUM end
  local id = type(op) == 'string' and dist.OPS[op]
  if not id then
    core.argerror('dist.' .. fname, "op must be 'sum', 'mean', 'max', 'min' or 'prod', got %s",
                  type(op) == 'string' and ("'" .. op .. "'") or tostring(op))
  end
  return id
end

local function need_array(fname, a)
  if not core.is_array(a) then
    core.argerror('dist.' .. fname, 'expected an array, got %s', type(a))
  end
end

-- true when tgl was built with MPI.
function dist.available() return C.tgl_dist_available() == 1 end

-- Joins the job the launcher started; a process started alone is rank 1
-- of 1.  opts: timeout (seconds a collective waits for the others before
-- failing; TGL_DIST_TIMEOUT, else 300), bucket_bytes (the size of the
-- gradient buckets compiled steps reduce together; TGL_DIST_BUCKET_BYTES,
-- else 1 MiB), overlap (true, false or 'auto': whether compiled steps
-- reduce their buckets on a progress thread while the backward pass goes
-- on; 'auto', the default, when a core is left free for it:
-- doc/distributed.md).  Returns rank, size.
local INIT_OPTIONS = { timeout = 'number', bucket_bytes = 'number', overlap = 'boolean|string' }
function dist.init(opts)
  opts = core.check_options('dist.init', opts, INIT_OPTIONS)
  if opts.overlap ~= nil and opts.overlap ~= true and opts.overlap ~= false and opts.overlap ~= 'auto' then
    core.argerror('dist.init', "overlap must be true, false or 'auto', got '%s'", tostring(opts.overlap))
  end
  if opts.timeout ~= nil and not (opts.timeout > 0) then
    core.argerror('dist.init', 'timeout must be a number of seconds > 0, got %s', tostring(opts.timeout))
  end
  if opts.bucket_bytes ~= nil and not (opts.bucket_bytes >= 1 and opts.bucket_bytes == math.floor(opts.bucket_bytes)) then
    core.argerror('dist.init', 'bucket_bytes must be a whole number of bytes >= 1, got %s',
                  tostring(opts.bucket_bytes))
  end
  check(C.tgl_dist_init(core.ctx, opts.timeout or 0), 'init')
  if opts.bucket_bytes then C.tgl_dist_set_bucket_bytes(opts.bucket_bytes) end
  if opts.overlap ~= nil then
    C.tgl_dist_set_overlap(opts.overlap == true and 1 or opts.overlap == false and 0 or -1)
  end
  return dist.rank(), dist.size()
end

function dist.initialized() return C.tgl_dist_initialized() == 1 end
-- This process's rank, from 1.
function dist.rank() return C.tgl_dist_rank() + 1 end
function dist.size() return C.tgl_dist_size() end
-- The number of processes the launcher started (0: none started this one).
function dist.launched_size() return C.tgl_dist_launched_size() end
function dist.timeout() return C.tgl_dist_timeout() end
function dist.bucket_bytes() return tonumber(C.tgl_dist_bucket_bytes()) end
-- Whether a step compiled now overlaps its buckets with the backward pass
-- (the setting, and for 'auto' the cores: tgl.config.threads per process).
function dist.overlap()
  return C.tgl_dist_overlaps(require('tgl.config').threads or 0) == 1
end
-- true on rank 1 (where checkpoints and progress are written).
function dist.is_root() return C.tgl_dist_rank() == 0 end

function dist.barrier()
  check(C.tgl_dist_barrier(core.ctx), 'barrier')
end

-- a = the reduction of every process's a, in place; returns a.
function dist.allreduce(a, op)
  need_array('allreduce', a)
  check(C.tgl_dist_allreduce(core.ctx, a.p, op_of('allreduce', op)), 'allreduce')
  return a
end

-- a = rank root's a (root from 1, default 1), in place; returns a.
function dist.broadcast(a, root)
  need_array('broadcast', a)
  root = root == nil and 1 or root
  if type(root) ~= 'number' or root ~= math.floor(root) then
    core.argerror('dist.broadcast', 'root must be a rank (an integer from 1), got %s', tostring(root))
  end
  check(C.tgl_dist_broadcast(core.ctx, a.p, root - 1), 'broadcast')
  return a
end

-- A new array (size, ...a's shape): every process's a, in rank order.
function dist.allgather(a)
  need_array('allgather', a)
  local out = core.out_array_t()
  check(C.tgl_dist_allgather(core.ctx, a.p, out), 'allgather')
  return core.wrap(out[0])
end

-- The part of n items (1..n) this process takes: first, last (last <
-- first when none).  Contiguous, in rank order, sizes differing by at
-- most one: every process computes every process's part the same way.
function dist.shard(n, rank, size)
  rank, size = rank or dist.rank(), size or dist.size()
  if type(n) ~= 'number' or n < 0 or n ~= math.floor(n) then
    core.argerror('dist.shard', 'n must be a count (an integer >= 0), got %s', tostring(n))
  end
  local base, extra = math.floor(n / size), n % size
  local first = (rank - 1) * base + math.min(rank - 1, extra) + 1
  local count = base + (rank <= extra and 1 or 0)
  return first, first + count - 1
end

-- Leaves the job (MPI_Finalize); the tgl host does it at exit.
function dist.shutdown()
  C.tgl_dist_shutdown(0)
end

return dist
