-- examples/lib/cli.lua — what the examples' command lines share: a usage
-- error is one line on stderr, "prog: what was wrong", and exit status 1,
-- as a command-line tool does; never a Lua traceback (the tgl host prints
-- one for an error a script raises, which is right for a bug in the
-- script and wrong for a missing file or a bad option).  The script sets
-- package.path to examples/lib/ from its own directory before requiring
-- this (see examples/rnnlm.lua).
local M = {}

-- Writes "prog: message" (fmt formatted with the rest) to stderr and
-- exits with status 1.  usage, optional, follows on the next line.
function M.die(prog, usage, fmt, ...)
  io.stdout:flush()
  io.stderr:write(prog, ': ', fmt:format(...), '\n')
  if usage then io.stderr:write(usage, usage:sub(-1) == '\n' and '' or '\n') end
  os.exit(1)
end

-- The message of a Lua error without its "file:line: " position (the
-- error is the input's, not the script's).
function M.message(err)
  local msg = tostring(err)
  return (msg:gsub('^[^\n]-:%d+: ', '', 1))
end

-- f(...) and its results; an error it raises (a file that cannot be read,
-- a corpus that is not text) ends the program through M.die, its message
-- without position.
function M.try(prog, f, ...)
  local res = { pcall(f, ...) }
  if not res[1] then M.die(prog, nil, '%s', M.message(res[2])) end
  return unpack(res, 2, table.maxn(res))
end

-- Reads --key value pairs from args into opts: each key must be in opts
-- (or be one of the `optional` names, default {threads = true}), the
-- value a number unless the key is in `strings`.  A bad argument ends the
-- program through M.die, saying which argument and why, then usage.
function M.parse_args(prog, args, opts, strings, usage, optional)
  optional = optional or { threads = true }
  local i = 1
  while args and args[i] do
    local a = args[i]
    local k = a:match('^%-%-([%w_]+)$')
    if not k then M.die(prog, usage, 'unexpected argument %s (options are --name value)', a) end
    if opts[k] == nil and not optional[k] then M.die(prog, usage, 'unknown option %s', a) end
    local v = args[i + 1]
    if v == nil then M.die(prog, usage, '%s needs a value', a) end
    if strings[k] then
      opts[k] = v
    else
      opts[k] = tonumber(v)
      if opts[k] == nil then M.die(prog, usage, '%s needs a number, got %s', a, v) end
    end
    i = i + 2
  end
  return opts
end

-- The directory of scripts/corpus.lua's fortunes corpus in the build
-- directory of the checkout the script is in (script_dir: the script's
-- directory; from any working directory), built on first use; a failed
-- build ends the program through M.die.
function M.fortunes(prog, script_dir)
  local root = script_dir == 'examples' and '.' or script_dir:match('^(.*)/examples$') or script_dir .. '/..'
  local dir = (root == '.' and '' or root .. '/') .. 'build/data/fortunes'
  local f = io.open(dir .. '/train.txt', 'rb')
  if f then
    f:close()
  else
    local cmd = ("'%s' '%s/scripts/corpus.lua' fortunes '%s'"):format(arg[-1] or 'tgl', root, dir)
    print('building the corpus: ' .. cmd)
    if os.execute(cmd) ~= 0 then M.die(prog, nil, 'could not build the corpus (%s)', cmd) end
  end
  return dir
end

return M
