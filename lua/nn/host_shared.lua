-- nn/host_shared.lua — a shared variable borrowing an array, made on the
-- host whatever tgl.config.device says: the arrays nn keeps beside its
-- parameters (Dropout's noise, the sequence modules' states, optim's
-- flat-parameter updates) live on the host as the parameters do, and the
-- compiled function copies them to the device it runs on.
--   local host_shared = require 'nn.host_shared'
--   local v = host_shared(arr, 'nn.Dropout.noise')
local tgl = require 'tgl'

return function(arr, name)
  local dev = tgl.config.device
  tgl.config.device = 'cpu'
  local ok, v = pcall(tgl.shared, arr, name, { borrow = true })
  tgl.config.device = dev        -- back even when tgl.shared failed
  if not ok then error(v, 0) end
  return v
end
