-- nn's containers: nn.Container (modules, add, get, size), nn.Sequential
-- (each module's output feeds the next), nn.Concat and nn.ConcatTable
-- (every module gets the same input; outputs joined along a dimension,
-- or given as a table), nn.Parallel and nn.ParallelTable (module i gets
-- slice i of the input, or element i of the input table), printed as
-- Torch7 prints them.  Loaded by nn/init.lua, which passes the nn table.
local tgl = require 'tgl'

return function(nn)
  local function is_int(v) return type(v) == 'number' and v == math.floor(v) end
  local function first_line(m) return (tostring(m):gsub('\n.*', '')) end

  local Container = nn.class('Container', nn.Module)
  Container._takes = 'any'

  function Container:__init()
    nn.Module.__init(self)
    self.modules = {}
  end

  function Container:add(m)
    if type(m) ~= 'table' or type(m.graph) ~= 'function' then
      nn._raise(('%s:add: expected a module, got %s'):format(nn.type(self), nn.type(m)))
    end
    self.modules[#self.modules + 1] = m
    self._compiled = nil
    return self
  end

  -- share(mlp, ...): child i shares the named fields with mlp's child i
  -- (Torch7's Container:share).
  function Container:share(mlp, ...)
    if type(mlp) ~= 'table' or type(mlp.modules) ~= 'table' or #mlp.modules ~= #self.modules then
      nn._raise(('%s:share: expected a container of %d modules to share with, got %s')
            :format(nn.type(self), #self.modules, nn.type(mlp)))
    end
    for i, m in ipairs(self.modules) do m:share(mlp.modules[i], ...) end
    self._compiled = nil
    return self
  end

  -- reset([stdv]): each child's reset.
  function Container:reset(stdv)
    for _, m in ipairs(self.modules) do m:reset(stdv) end
    return self
  end

  -- Module i's graph on x, recorded (its output and gradInput fields) and
  -- named by its path; a failure says which module, in this container's
  -- terms (the innermost container names it; outer ones pass it on).
  function Container:_child(i, x)
    local m = self.modules[i]
    nn._enter(i)
    local ok, y = pcall(nn._graph, m, x)
    if not ok then
      nn._leave()
      if type(y) == 'string' and y:find('^nn%.[%w_]+: module %(') then error(y, 0) end
      error(('%s: module (%d) %s: %s'):format(nn.type(self), i, first_line(m),
                                              tostring(y):gsub('^[^\n:]*%.lua:%d+: ', '')), 0)
    end
    nn._record(m, y, x)
    nn._leave()
    return y
  end

  -- An error of this container itself (not of a module inside).
  function Container:_error(fmt, ...)
    error(('%s: ' .. fmt):format(nn.type(self), ...), 0)
  end

  function Container:_needModules()
    if #self.modules == 0 then self:_error('has no modules') end
  end

  local Sequential = nn.class('Sequential', Container)

  function Sequential:graph(x)
    local cur = x
    for i = 1, #self.modules do cur = self:_child(i, cur) end
    return cur
  end

  -- Torch7's text: "nn.Sequential {\n  [input -> (1) -> (2) -> output]\n  (1): ...\n}"
  function Sequential:__tostring__()
    local tab, line, next = '  ', '\n', ' -> '
    local s = nn.type(self) .. ' {' .. line .. tab .. '[input'
    for i = 1, #self.modules do s = s .. next .. '(' .. i .. ')' end
    s = s .. next .. 'output]'
    for i, m in ipairs(self.modules) do
      s = s .. line .. tab .. '(' .. i .. '): ' .. tostring(m):gsub(line, line .. tab)
    end
    return s .. line .. '}'
  end

  -- The branching containers' text, as Torch7 prints them:
  --   nn.ConcatTable {
  --     input
  --       |`-> (1): nn.Linear(4 -> 2)
  --        `-> (2): nn.Identity
  --        ... -> output
  --   }
  -- (a module's own lines continue under its branch).
  local function branches(self)
    local lines = { nn.type(self) .. ' {', '  input' }
    local n = #self.modules
    for i, m in ipairs(self.modules) do
      local head = i < n and '  |`-> ' or '   `-> '
      local cont = i < n and '  |    ' or '       '
      lines[#lines + 1] = '  ' .. head .. '(' .. i .. '): ' .. tostring(m):gsub('\n', '\n  ' .. cont)
    end
    lines[#lines + 1] = '     ... -> output'
    lines[#lines + 1] = '}'
    return table.concat(lines, '\n')
  end

  -- Each output must be an array of the same number of dimensions, at
  -- least dim; returns them joined along dim.
  local function join(self, ys, dim, what)
    for i, y in ipairs(ys) do
      if type(y) == 'table' then
        self:_error('module (%d) %s gives a table; %s joins arrays', i, first_line(self.modules[i]), nn.type(self))
      end
      if y.ndim ~= ys[1].ndim then
        self:_error('module (%d) gives a %d-d output, module (1) a %d-d one', i, y.ndim, ys[1].ndim)
      end
    end
    if dim > ys[1].ndim then
      self:_error('%s %d is past the %d dimensions of the modules\' outputs', what, dim, ys[1].ndim)
    end
    return tgl.concatenate(ys, dim)
  end

  local function check_dim(fname, what, d)
    if not is_int(d) or d < 1 then
      nn._raise(('%s: %s must be a positive integer, got %s'):format(fname, what, tostring(d)))
    end
  end

  -- nn.Concat(dimension): every module gets the input; their outputs
  -- (arrays) joined along dimension (counted in the outputs, batch axis
  -- included, as Torch7's).
  local Concat = nn.class('Concat', Container)
  function Concat:__init(dimension)
    check_dim('nn.Concat', 'the dimension', dimension)
    Container.__init(self)
    self.dimension = dimension
  end
  function Concat:graph(x)
    self:_needModules()
    local ys = {}
    for i = 1, #self.modules do ys[i] = self:_child(i, nn._alias(x)) end
    return join(self, ys, self.dimension, 'dimension')
  end
  Concat.__tostring__ = branches

  -- nn.ConcatTable(): every module gets the input; the output is the
  -- table of their outputs.
  local ConcatTable = nn.class('ConcatTable', Container)
  function ConcatTable:__init()
    Container.__init(self)
    self.output = {}   -- a table before the first forward, as Torch7's
  end
  function ConcatTable:graph(x)
    self:_needModules()
    local ys = {}
    for i = 1, #self.modules do ys[i] = self:_child(i, nn._alias(x)) end
    return ys
  end
  ConcatTable.__tostring__ = branches

  -- x:select(d, i) as Torch7's: dimension d dropped at index i.
  local function select(x, d, i)
    local idx = {}
    for k = 1, x.ndim do idx[k] = k == d and i or {} end
    return x[idx]
  end

  -- nn.Parallel(inputDimension, outputDimension): module i gets slice i
  -- of the input along inputDimension (Torch7's select); their outputs
  -- are joined along outputDimension.  As in Torch7 the input's size
  -- along inputDimension says how many modules run (at most all).
  local Parallel = nn.class('Parallel', Container)
  Parallel._takes = 'array'
  function Parallel:__init(inputDimension, outputDimension)
    check_dim('nn.Parallel', 'inputDimension', inputDimension)
    check_dim('nn.Parallel', 'outputDimension', outputDimension)
    Container.__init(self)
    self.inputDimension, self.outputDimension = inputDimension, outputDimension
  end
  function Parallel:graph(x)
    self:_needModules()
    local d = self.inputDimension
    if d > x.ndim then self:_error('inputDimension %d is past the %d dimensions of the input', d, x.ndim) end
    local n = #self.modules
    local shape = nn._shape_of(x)
    if shape then
      if shape[d] > n then
        self:_error('the input has %d slices along dimension %d, but there are %d modules', shape[d], d, n)
      end
      n = shape[d]
      if n == 0 then self:_error('the input has no slices along dimension %d', d) end
    end
    local ys = {}
    for i = 1, n do ys[i] = self:_child(i, select(x, d, i)) end
    return join(self, ys, self.outputDimension, 'outputDimension')
  end
  Parallel.__tostring__ = branches

  -- nn.ParallelTable(): module i gets element i of the input table; the
  -- output is the table of their outputs.  Elements past the last module
  -- are not used (their gradInput is zero), as Torch7 ignores them.
  local ParallelTable = nn.class('ParallelTable', Container)
  ParallelTable._takes = 'table'
  function ParallelTable:__init()
    Container.__init(self)
    self.output, self.gradInput = {}, {}
  end
  function ParallelTable:graph(x)
    self:_needModules()
    if #x < #self.modules then
      self:_error('the input is a table of %d, but there are %d modules', #x, #self.modules)
    end
    local ys = {}
    for i = 1, #self.modules do ys[i] = self:_child(i, x[i]) end
    return ys
  end
  ParallelTable.__tostring__ = branches

  nn._select = select
end
