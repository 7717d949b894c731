#!/usr/bin/env bash
# check-layers.sh — the dependency rules between the directories of src/,
# checked on the source text (no build needed; CI runs it first):
#
#   engine   no file under src/engine includes a header of src/cgen,
#            src/cpu, src/cuda, src/sim, src/scan, src/rop or src/dist, or names one of their
#            symbols: a name with their prefix (tgl_cgen_, tgl_cpu_, tgl_dist_,
#            tgl_cuda_, tgl_sim_, tgl_scan_, tgl_rop_), a function or object their
#            headers declare, or one their .c files define for other files.
#            Features and backends plug in through tables (the op catalog,
#            src/backends.c); the engine never calls them by name.
#   backend  the backends do not know each other: none of src/cpu,
#            src/cuda and src/sim includes anything of another or names
#            one of its symbols.
#   io       src/io knows no graph: it includes no graph header of
#            src/engine (graph.h, program.h, fused_prog.h, ops/, opt/) and names
#            no tgl_node.
#
# Comments and string literals are not read, so a comment may say where
# something lives.  Each violation is printed as FILE:LINE: rule: what; the
# exit status is then 1.  Known violations waiting for the change that
# removes them are listed, one FILE:SYMBOL a line with the issue item that
# removes it, in scripts/layers-allow.txt; an entry that no longer matches
# anything fails too, so that the list only shrinks.
#
# Usage: scripts/check-layers.sh [ROOT]   (default: this repository; the
# allow-list is ROOT/scripts/layers-allow.txt when present)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
[ -d "$root/src/engine" ] || { echo "check-layers: no src/engine under '$root'" >&2; exit 2; }
cd "$root"
exec perl -e '
use strict; use warnings;
my %feature = map { $_ => 1 } qw(cgen cpu cuda sim scan rop dist);
my @backends = qw(cpu cuda sim);

# The file as code: comments and string/char literals blanked, newlines
# kept, so that line numbers stay right.
sub code_of {
    my ($path) = @_;
    open(my $fh, "<", $path) or die "check-layers: cannot read $path: $!\n";
    local $/; my $t = <$fh>; close $fh;
    $t =~ s{(^[ \t]*\#[ \t]*include[^\n]*|/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\x27(?:\\.|[^\x27\\\n])*\x27)}{
        my $m = $1;
        if ($m =~ m{^[ \t]*\#}) { $m }                         # an include: kept
        elsif ($m =~ m{^["\x27]}) { my $q = substr($m, 0, 1); "$q$q" }
        else { (my $nl = $m) =~ s/[^\n]//g; $nl }             # a comment: its newlines
    }gmse;
    return $t;
}
sub files_under { my @d = grep { -d } @_; return () unless @d;
    return sort grep { /\.[ch]$/ } split /\n/, `find @d -type f`; }

# The symbols of directory d: those its headers declare (functions and
# extern objects at file scope) and those its .c files define without
# static; the prefix tgl_<d>_ covers the rest.
my %sym;
for my $d (sort keys %feature) {
    for my $f (files_under("src/$d")) {
        my $c = code_of($f);
        while ($c =~ /^(?!static\b|typedef\b|struct\b|union\b|enum\b|#|\w+:[^:])[A-Za-z_][^;{}()=#]*?\b(tgl_\w+)\s*[(=\[;]/mg) {  # (a goto label at column 0 declares nothing)
            my $s = $1;
            next if $f =~ /\.c$/ && $s =~ /^tgl_impl_/;  # catalog entries (ops.h declares them)
            $sym{$d}{$s} = 1;
        }
        while ($f =~ /\.h$/ && $c =~ /^(?:extern|static\s+inline)\b[^;{]*?\b(tgl_\w+)\s*[(\[;]/mg) {
            $sym{$d}{$1} = 1;
        }
    }
}
my @viol;   # [file, line, rule, symbol-or-header, message]
sub scan_file {
    my ($f, $rule, $dirs, $extra) = @_;
    my @lines = split /\n/, code_of($f), -1;
    for my $i (0 .. $#lines) {
        my $l = $lines[$i];
        if ($l =~ /^\s*#\s*include\s*[<"]([a-z_]+)\/([^">]+)[">]/) {
            my ($dir, $rest) = ($1, $2);
            if (grep { $_ eq $dir } @$dirs) {
                push @viol, [$f, $i + 1, $rule, "$dir/$rest", "includes src/$dir ($dir/$rest)"];
            }
            if ($extra && $extra->{include} && "$dir/$rest" =~ $extra->{include}) {
                push @viol, [$f, $i + 1, $rule, "$dir/$rest", "includes $dir/$rest, a graph header"];
            }
            next;
        }
        while ($l =~ /\b(tgl_\w+)/g) {
            my $s = $1;
            for my $d (@$dirs) {
                if ((index($s, "tgl_${d}_") == 0 || $sym{$d}{$s})) {
                    push @viol, [$f, $i + 1, $rule, $s, "names $s of src/$d"];
                    last;
                }
            }
            if ($extra && $extra->{symbol} && $s =~ $extra->{symbol}) {
                push @viol, [$f, $i + 1, $rule, $s, "names $s (a graph type)"];
            }
        }
    }
}

my $nengine = 0;
for my $f (files_under("src/engine")) { $nengine++; scan_file($f, "engine", [sort keys %feature]); }
for my $b (@backends) {
    my @others = grep { $_ ne $b } @backends;
    scan_file($_, "backend", \@others) for files_under("src/$b");
}
my @io = files_under("src/io");
scan_file($_, "io", [], { include => qr{^engine/(graph\.h|program\.h|fused_prog\.h|ops/|opt/)},
                          symbol => qr{^tgl_node} }) for @io;

# The allow-list: FILE:SYMBOL (a header path for an include), then a
# comment naming the issue item that removes it.
my (%allow, @allow_order);
my $allow_file = "scripts/layers-allow.txt";
if (-f $allow_file) {
    open(my $fh, "<", $allow_file) or die "check-layers: cannot read $allow_file: $!\n";
    while (my $l = <$fh>) {
        chomp $l; $l =~ s/#.*//; $l =~ s/^\s+|\s+$//g;
        next if $l eq "";
        $allow{$l} = { line => $., used => 0 }; push @allow_order, $l;
    }
}
my ($fail, $allowed) = (0, 0);
for my $v (@viol) {
    my ($f, $n, $rule, $what, $msg) = @$v;
    my $key = "$f:$what";
    if ($allow{$key}) { $allow{$key}{used}++; $allowed++; next; }
    print "$f:$n: layer rule \"$rule\": $msg\n"; $fail++;
}
for my $k (@allow_order) {
    next if $allow{$k}{used};
    print "$allow_file:$allow{$k}{line}: stale entry \"$k\": nothing matches it any more; remove it\n";
    $fail++;
}
if ($fail) {
    print "check-layers: $fail violation(s); the rules are at the top of scripts/check-layers.sh\n";
    exit 1;
}
my $nsym = 0; $nsym += scalar keys %{$sym{$_}} for keys %sym;
printf "check-layers: OK: %d engine files name none of %d feature/backend symbols; backends apart; src/io graph-free%s\n",
    $nengine, $nsym, $allowed ? " ($allowed known, in $allow_file)" : "";
'
