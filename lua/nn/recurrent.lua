-- nn's sequence modules: nn.LSTM, nn.GRU and nn.RNN, with the tensor
-- layout, parameter layout and fields of Element-Research's rnn package
-- (its SeqLSTM and SeqGRU; nn.SeqLSTM and nn.SeqGRU are the same classes
-- under those names).  A module takes a whole sequence, seqlen x batch x
-- inputSize (or seqlen x inputSize for one sequence), and gives every
-- step's output, seqlen x batch x outputSize.
--
-- Each module's graph is one tgl.scan over the steps: the input
-- projection of every step (x_t W_x + b) is one GEMM over seqlen x batch
-- rows before the loop, and the loop does the recurrent product and the
-- gates.  Backpropagation through time is tgl.grad through the scan, so
-- gradInput and the parameter gradients come from the nn core as for
-- every module (forward/backward compile the model's graph per input
-- shape).
--
-- The initial state (h0, and c0 for the LSTM) is a shared variable per
-- batch size borrowing an array the module keeps: zero, or with
-- remember() the previous forward's last state, copied in before each
-- forward (nn._before_forward); the forward function writes the last
-- state back (nn._add_update).  Backward reads the initial state the last
-- forward used, as SeqLSTM's does.  Loaded by nn/init.lua.
local tgl = require 'tgl'

return function(nn)
  local function is_int(v) return type(v) == 'number' and v == math.floor(v) end

  -- Methods shared by the three classes (the classes differ in their
  -- number of gates and their step).
  local Seq = {}

  -- self.inputSize/outputSize and SeqLSTM's spelling inputsize/outputsize.
  function Seq.init(self, fname, inputSize, outputSize, ngates)
    nn.Module.__init(self)
    if not is_int(inputSize) or inputSize < 1 or not is_int(outputSize) or outputSize < 1 then
      nn._raise(('%s: expected %s(inputSize, outputSize) with positive integers, got %s, %s')
            :format(fname, fname, tostring(inputSize), tostring(outputSize)))
    end
    local D, H = inputSize, outputSize
    self.inputSize, self.outputSize = D, H
    self.inputsize, self.outputsize, self.hiddensize = D, H, H
    local o = { dtype = self._dtype }
    self.weight = tgl.zeros(D + H, ngates * H, o)
    self.gradWeight = tgl.zeros(D + H, ngates * H, o)
    self.bias = tgl.zeros(ngates * H, o)
    self.gradBias = tgl.zeros(ngates * H, o)
    self.h0 = tgl.zeros(0, o)
    self._remember = 'neither'
    self.batchfirst = false
    self._states = {}
  end

  -- SeqLSTM's reset: weight normal(0, std), std = 1/sqrt(inputSize +
  -- outputSize) unless given; bias 0, except the gate block that SeqLSTM
  -- and SeqGRU set to 1 (the LSTM's forget gate, the GRU's update gate).
  function Seq.reset(self, std, one_block)
    std = std or 1 / math.sqrt(self.inputSize + self.outputSize)
    local W = self.weight
    W:copy(tgl.randn(W:size(1), W:size(2), { dtype = W.dtype }) * std)
    self.bias:fill(0)
    if one_block then
      local H = self.outputSize
      self.bias[{ { H + 1, 2 * H } }]:fill(1)
    end
    return self
  end

  function Seq.tostring(self)
    return ('%s(%d -> %d)'):format(nn.type(self), self.inputSize, self.outputSize)
  end

  -- remember([mode = 'both']): carry the last state of a forward into the
  -- next one ('both', 'train': at training only, 'eval': in evaluate mode
  -- only, 'neither'), as the rnn package's.
  function Seq.remember(self, mode)
    if mode == nil then mode = 'both' end
    if mode ~= 'both' and mode ~= 'train' and mode ~= 'eval' and mode ~= 'neither' then
      nn._raise(("%s:remember: expected 'both', 'train', 'eval' or 'neither', got %s")
            :format(nn.type(self), tostring(mode)))
    end
    self._remember = mode
    return self
  end

  -- The next forward starts from zero states.
  function Seq.forget(self)
    self._last = nil
    return self
  end

  local function remembering(self)
    local r = self._remember
    if self.train ~= false then return r == 'both' or r == 'train' end
    return r == 'both' or r == 'eval'
  end

  -- A shared variable borrowing arr, on the host as parameters are.
  local host_shared = require 'nn.host_shared'

  -- The state arrays of batch size N and dtype dt (made on first use):
  -- init[k] the initial value of state k (h, c) for the next forward,
  -- last[k] the last step's value the previous forward wrote.
  local function states(self, dt, N, nstates)
    local key = dt .. ':' .. N
    local st = self._states[key]
    if st then return st end
    st = { N = N, dt = dt, init = {}, last = {}, initv = {}, lastv = {} }
    local names = { 'h0', 'c0' }
    for k = 1, nstates do
      st.init[k] = tgl.zeros(N, self.outputSize, { dtype = dt })
      st.last[k] = tgl.zeros(N, self.outputSize, { dtype = dt })
      st.initv[k] = host_shared(st.init[k], nn.type(self) .. '.' .. names[k])
      st.lastv[k] = host_shared(st.last[k], nn.type(self) .. '.' .. names[k] .. '_next')
    end
    self._states[key] = st
    return st
  end

  -- Before each forward: the initial states for this call (zero, the
  -- user's userPrevOutput/userPrevCell, or the last states when
  -- remembering), and h0/c0 pointed at them.  Everything is checked
  -- before anything changes, so an error leaves the module as it was.
  local function prepare(self, st, nstates)
    local train = self.train ~= false
    local last = self._last
    -- a change of training/evaluate forgets, as SeqLSTM's training() and
    -- evaluate() do (here whichever way the flag was set); so does a
    -- change of dtype (type(), float(), double())
    if last and (self._lastTrain ~= train or last.dt ~= st.dt) then last = nil end
    local remember = remembering(self)
    if remember and last and last ~= st then
      nn._raise(('%s:forward: batch sizes must be the same to remember states (the last forward had %d, this one %d; call forget() first)')
            :format(nn.type(self), last.N, st.N))
    end
    local user = { self.userPrevOutput, self.userPrevCell }
    local names = { 'userPrevOutput', 'userPrevCell' }
    for k = 1, nstates do
      local u = user[k]
      if u ~= nil and (not tgl.is_array(u) or u:dim() ~= 2 or u:size(1) ~= st.N or u:size(2) ~= self.outputSize) then
        nn._raise(('%s:forward: %s must be an array of %dx%d (batch x outputSize), got %s')
              :format(nn.type(self), names[k], st.N, self.outputSize,
                      tgl.is_array(u) and table.concat(u:shape(), 'x') or type(u)))
      end
    end
    for k = 1, nstates do
      if user[k] ~= nil then st.init[k]:copy(user[k])
      elseif remember and last == st then st.init[k]:copy(st.last[k])
      else st.init[k]:fill(0) end
    end
    self.userPrevOutput, self.userPrevCell = nil, nil
    self._last, self._lastTrain = st, train
    self.h0 = st.init[1]
    if nstates > 1 then self.c0 = st.init[2] end
  end

  -- The graph of a sequence module: x is seqlen x batch x inputSize (or
  -- batch x seqlen x inputSize with batchfirst, or seqlen x inputSize);
  -- step(z_t, states..., Wh) returns the new states (the first one is
  -- the output).
  function Seq.graph(self, x, nstates, step)
    local D, H = self.inputSize, self.outputSize
    local G = self.weight:size(2)
    local single = x.ndim == 2
    if x.ndim ~= 2 and x.ndim ~= 3 then
      error(('%s: expected seqlen x batch x %d (or seqlen x %d), got a %d-d input')
            :format(tostring(self), D, D, x.ndim), 0)
    end
    local shape = nn._shape_of(x)
    if shape and shape[#shape] ~= D then
      error(('%s: expected seqlen x batch x %d (or seqlen x %d), got an input of %s (its last size must be inputSize %d)')
            :format(tostring(self), D, D, table.concat(shape, 'x'), D), 0)
    end
    -- seqlen and batch, symbolic, from the input's own shape (one
    -- sequence: a batch of 1, not broadcastable)
    local s = x:shape()
    local TN
    if single then TN = tgl.concatenate({ s[{ { 1, 1 } }], tgl.constant({ 1 }, 'int64') }, 1)
    elseif self.batchfirst then TN = tgl.concatenate({ s[{ { 2, 2 } }], s[{ { 1, 1 } }] }, 1)
    else TN = s[{ { 1, 2 } }] end
    local xs = x
    if single then xs = x:reshape(tgl.concatenate({ TN, tgl.constant({ D }, 'int64') }, 1), 3)
    elseif self.batchfirst then xs = x:dimshuffle { 2, 1, 3 } end
    local W, b = self:_var('weight'), self:_var('bias')
    local Wx, Wh = W[{ { 1, D } }], W[{ { D + 1, D + H } }]
    -- every step's x_t Wx + b at once: one GEMM over seqlen * batch rows
    local Z = (xs:reshape(-1, D):dot(Wx) + b)
              :reshape(tgl.concatenate({ TN, tgl.constant({ G }, 'int64') }, 1), 3)
    local init, st = {}, nil
    if shape then
      local N = single and 1 or (self.batchfirst and shape[1] or shape[2])
      st = states(self, x.dtype, N, nstates)
      nn._before_forward(function() prepare(self, st, nstates) end)
      for k = 1, nstates do init[k] = st.initv[k] end
    else
      -- a graph built without a concrete input (a user's m:graph(x)):
      -- zero states of the batch's size, NaN-safe (no x * 0)
      local t = xs[1]:dot(Wx[{ {}, { 1, H } }])
      local z = tgl.switch(tgl.eq(t, t), 0.0, 0.0):astype(x.dtype)
      for k = 1, nstates do init[k] = z end
    end
    -- Wh, a slice of weight, listed as a non-sequence: the scan gives it
    -- its own placeholder, so the gradient loop accumulates a Wh-sized
    -- buffer, not zeros of the whole weight at every step (doc/scan.md)
    local outs = tgl.scan { fn = step, sequences = { Z }, outputs_info = init,
                            non_sequences = { Wh }, name = nn.type(self):gsub('^nn%.', '') }
    if nstates == 1 then outs = { outs } end
    if st then
      for k = 1, nstates do nn._add_update(st.lastv[k], outs[k][-1]) end
    end
    local h = outs[1]
    if single then return h:reshape(-1, H) end
    if self.batchfirst then return h:dimshuffle { 2, 1, 3 } end
    return h
  end

  -- batchfirst changes the graph: part of the compiled functions' key
  -- (nn's mode_key), so setting it takes effect at the next call
  function Seq.graphKey(self) return self.batchfirst and 'b' or '' end

  local function install(cls)
    cls.remember, cls.forget, cls.__tostring__ = Seq.remember, Seq.forget, Seq.tostring
    cls._graphKey = Seq.graphKey
  end

  -- nn.LSTM(inputSize, outputSize) = nn.SeqLSTM: weight (inputSize +
  -- outputSize) x 4 outputSize, rows [x; h], columns [i | f | o | g];
  -- bias 4 outputSize.  Per step:
  --   a = x_t Wx + h_{t-1} Wh + b; i, f, o = sigmoid; g = tanh
  --   c_t = f c_{t-1} + i g;  h_t = o tanh(c_t)
  local LSTM = nn.class('LSTM', nn.Module)
  nn.SeqLSTM = LSTM
  install(LSTM)
  function LSTM:__init(inputSize, outputSize)
    Seq.init(self, 'nn.LSTM', inputSize, outputSize, 4)
    self.c0 = tgl.zeros(0, { dtype = self._dtype })
    self:reset()
  end
  function LSTM:reset(std) return Seq.reset(self, std, true) end
  function LSTM:graph(x)
    local H = self.outputSize
    return Seq.graph(self, x, 2, function(z_t, h_prev, c_prev, Wh)
      local a = z_t + h_prev:dot(Wh)
      local ifo = tgl.sigmoid(a[{ {}, { 1, 3 * H } }])
      local i = ifo[{ {}, { 1, H } }]
      local f = ifo[{ {}, { H + 1, 2 * H } }]
      local o = ifo[{ {}, { 2 * H + 1, 3 * H } }]
      local g = tgl.tanh(a[{ {}, { 3 * H + 1, 4 * H } }])
      local c = f * c_prev + i * g
      return { o * tgl.tanh(c), c }
    end)
  end

  -- nn.GRU(inputSize, outputSize) = nn.SeqGRU: weight (inputSize +
  -- outputSize) x 3 outputSize, rows [x; h], columns [r | u | candidate];
  -- bias 3 outputSize.  Per step:
  --   r, u = sigmoid(x_t Wx + h_{t-1} Wh + b) (their columns)
  --   n = tanh(x_t Wx_n + b_n + (r h_{t-1}) Wh_n)
  --   h_t = (1 - u) n + u h_{t-1}
  local GRU = nn.class('GRU', nn.Module)
  nn.SeqGRU = GRU
  install(GRU)
  function GRU:__init(inputSize, outputSize)
    Seq.init(self, 'nn.GRU', inputSize, outputSize, 3)
    self:reset()
  end
  function GRU:reset(std) return Seq.reset(self, std, true) end
  function GRU:graph(x)
    local H = self.outputSize
    return Seq.graph(self, x, 1, function(z_t, h_prev, Wh)
      local ru = tgl.sigmoid(z_t[{ {}, { 1, 2 * H } }] + h_prev:dot(Wh[{ {}, { 1, 2 * H } }]))
      local r = ru[{ {}, { 1, H } }]
      local u = ru[{ {}, { H + 1, 2 * H } }]
      local n = tgl.tanh(z_t[{ {}, { 2 * H + 1, 3 * H } }] + (r * h_prev):dot(Wh[{ {}, { 2 * H + 1, 3 * H } }]))
      return (1 - u) * n + u * h_prev
    end)
  end

  -- nn.RNN(inputSize, outputSize [, transfer = nn.Tanh()]): an Elman
  -- layer, h_t = transfer(x_t Wx + h_{t-1} Wh + b), weight (inputSize +
  -- outputSize) x outputSize with rows [x; h] (SeqLSTM's layout with one
  -- gate), bias outputSize (0 after reset).  transfer is any module
  -- without parameters that maps a batch x outputSize matrix elementwise
  -- (nn.Tanh, nn.Sigmoid, nn.ReLU, ...).
  local RNN = nn.class('RNN', nn.Module)
  install(RNN)
  function RNN:__init(inputSize, outputSize, transfer)
    Seq.init(self, 'nn.RNN', inputSize, outputSize, 1)
    if transfer == nil then transfer = nn.Tanh() end
    if type(transfer) ~= 'table' or type(transfer.graph) ~= 'function' then
      nn._raise(('nn.RNN: transfer must be a module (nn.Tanh(), nn.ReLU(), ...), got %s'):format(nn.type(transfer)))
    end
    if transfer:parameters() then
      nn._raise(('nn.RNN: the transfer module must have no parameters, got %s'):format(tostring(transfer)))
    end
    self.transfer = transfer
    self:reset()
  end
  function RNN:reset(std) return Seq.reset(self, std, false) end
  function RNN:graph(x)
    return Seq.graph(self, x, 1, function(z_t, h_prev, Wh)
      return self.transfer:graph(z_t + h_prev:dot(Wh))
    end)
  end
  function RNN:__tostring__()
    return ('%s(%d -> %d, %s)'):format(nn.type(self), self.inputSize, self.outputSize, tostring(self.transfer))
  end
end
