-- nn's table modules: JoinTable and SplitTable (a table of arrays to one
-- array and back), CAddTable, CSubTable and CMulTable (elementwise over
-- a table's arrays), with Torch7's arguments and batch rules.  Each is
-- its graph, as the layers are; the table it takes or gives is a Lua
-- table of symbolic variables.  Loaded by nn/init.lua.
local tgl = require 'tgl'

return function(nn)
  local function is_int(v) return type(v) == 'number' and v == math.floor(v) end
  local function first_line(m) return (tostring(m):gsub('\n.*', '')) end

  -- The input table's arrays (a flat table of at least min of them).
  local function arrays(self, x, min)
    for i, v in ipairs(x) do
      if type(v) == 'table' then
        error(('%s: expected a table of arrays, element %d is a table of %d'):format(first_line(self), i, #v), 0)
      end
    end
    if #x < min then
      error(('%s: expected a table of at least %d arrays, got %d'):format(first_line(self), min, #x), 0)
    end
    return x
  end

  -- Torch7's rule for JoinTable's and SplitTable's dimension: a negative
  -- one counts from the end of the input (-1 the last); with nInputDims,
  -- an input of nInputDims + 1 dimensions is a batch and the dimension
  -- moves past its first axis.
  local function dimension(self, ndim)
    local d = self.dimension
    if d < 0 then d = ndim + d + 1
    elseif self.nInputDims and ndim == self.nInputDims + 1 then d = d + 1 end
    if d < 1 or d > ndim then
      error(('%s: dimension %d is outside the %d dimensions of the input'):format(first_line(self),
            self.dimension, ndim), 0)
    end
    return d
  end

  local function check_args(fname, dim, nInputDims)
    if not is_int(dim) or dim == 0 then
      nn._raise(('%s: the dimension must be a non-zero integer, got %s'):format(fname, tostring(dim)))
    end
    if nInputDims ~= nil and (not is_int(nInputDims) or nInputDims < 1) then
      nn._raise(('%s: nInputDims must be a positive integer, got %s'):format(fname, tostring(nInputDims)))
    end
  end

  -- nn.JoinTable(dimension [, nInputDims]): the input table's arrays
  -- joined along dimension.
  local JoinTable = nn.class('JoinTable', nn.Module)
  JoinTable._takes = 'table'
  function JoinTable:__init(dim, nInputDims)
    check_args('nn.JoinTable', dim, nInputDims)
    nn.Module.__init(self)
    self.dimension, self.nInputDims = dim, nInputDims
    self.gradInput = {}
  end
  function JoinTable:graph(x)
    arrays(self, x, 1)
    for i, v in ipairs(x) do
      if v.ndim ~= x[1].ndim then
        error(('%s: element %d is %d-d, element 1 %d-d'):format(first_line(self), i, v.ndim, x[1].ndim), 0)
      end
    end
    return tgl.concatenate(x, dimension(self, x[1].ndim))
  end

  -- nn.SplitTable(dimension [, nInputDims]): the table of the input's
  -- slices along dimension (that dimension dropped).  How many there are
  -- is the input's size: m:graph(x) on a symbolic x cannot know it, so
  -- it works inside forward/backward only.
  local SplitTable = nn.class('SplitTable', nn.Module)
  function SplitTable:__init(dim, nInputDims)
    check_args('nn.SplitTable', dim, nInputDims)
    nn.Module.__init(self)
    self.dimension, self.nInputDims = dim, nInputDims
    self.output = {}
  end
  function SplitTable:graph(x)
    local d = dimension(self, x.ndim)
    local shape = nn._shape_of(x)
    if not shape then
      error(('%s: the number of slices is the input\'s size, unknown in a symbolic graph '
             .. '(use forward/backward on arrays)'):format(first_line(self)), 0)
    end
    local out = {}
    for i = 1, shape[d] do out[i] = nn._select(x, d, i) end
    return out
  end

  -- The elementwise ones: every array of the same number of dimensions
  -- (and, when the function runs, the same shape).
  local function same_ndim(self, x)
    for i, v in ipairs(x) do
      if v.ndim ~= x[1].ndim then
        error(('%s: element %d is %d-d, element 1 %d-d (the arrays must have the same shape)')
              :format(first_line(self), i, v.ndim, x[1].ndim), 0)
      end
    end
    return x
  end

  -- nn.CAddTable(): the sum of the input table's arrays.  Torch7's
  -- inplace argument is accepted and changes nothing.
  local CAddTable = nn.class('CAddTable', nn.Module)
  CAddTable._takes = 'table'
  function CAddTable:__init(inplace)
    nn.Module.__init(self)
    self.inplace = inplace
    self.gradInput = {}
  end
  function CAddTable:graph(x)
    same_ndim(self, arrays(self, x, 1))
    local y = x[1]
    for i = 2, #x do y = y + x[i] end
    return y
  end

  -- nn.CSubTable(): input[1] - input[2].
  -- a table before the first backward, as Torch7's
  local function table_gradInput(self)
    nn.Module.__init(self)
    self.gradInput = {}
  end

  local CSubTable = nn.class('CSubTable', nn.Module)
  CSubTable._takes = 'table'
  CSubTable.__init = table_gradInput
  function CSubTable:graph(x)
    same_ndim(self, arrays(self, x, 2))
    if #x ~= 2 then
      error(('%s: expected a table of 2 arrays, got %d'):format(first_line(self), #x), 0)
    end
    return x[1] - x[2]
  end

  -- nn.CMulTable(): the elementwise product of the input table's arrays.
  local CMulTable = nn.class('CMulTable', nn.Module)
  CMulTable._takes = 'table'
  CMulTable.__init = table_gradInput
  function CMulTable:graph(x)
    same_ndim(self, arrays(self, x, 1))
    local y = x[1]
    for i = 2, #x do y = y * x[i] end
    return y
  end

end
