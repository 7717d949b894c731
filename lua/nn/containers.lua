-- nn's containers: nn.Container (modules, add, get, size) and
-- nn.Sequential (each module's output feeds the next), printed as Torch7
-- prints them.  Loaded by nn/init.lua, which passes the nn table.
return function(nn)
  local Container = nn.class('Container', nn.Module)

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

  local Sequential = nn.class('Sequential', Container)

  function Sequential:graph(x)
    local cur = x
    for i, m in ipairs(self.modules) do
      nn._enter(i)
      local ok, y = pcall(m.graph, m, cur)
      if not ok then
        nn._leave()
        -- the innermost container names the module; outer ones pass it on
        if type(y) == 'string' and y:find('^nn%.[%w_]+: module %(') then error(y, 0) end
        error(('%s: module (%d) %s: %s'):format(nn.type(self), i, tostring(m):gsub('\n.*', ''),
                                                tostring(y):gsub('^[^\n:]*%.lua:%d+: ', '')), 0)
      end
      nn._record(m, y, cur)
      nn._leave()
      cur = y
    end
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
end
