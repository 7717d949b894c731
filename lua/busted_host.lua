-- busted_host.lua — runs busted inside the tgl host, so specs `require 'tgl'`
-- exactly as users' scripts do.  Usage: tgl lua/busted_host.lua [busted args]
require 'busted.runner'({ standalone = false })
