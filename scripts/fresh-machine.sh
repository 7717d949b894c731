#!/usr/bin/env bash
# The fresh-machine check: runs the README's two commands, exactly as the
# README gives them, on a bare Debian 12 root, so that an install step
# missing from scripts/install-deps.sh fails here instead of on a new
# user's machine.  CI's own machine already has every package installed
# and cannot see such a step (issue 18: the quickstart failed on a bare
# machine while CI stayed green).
#
# Usage: scripts/fresh-machine.sh [--quick] [--keep] [--refresh] [--print-sources]
#   --quick    only the first command (scripts/quickstart.sh --epochs 1),
#              not the test command (scripts/test.sh)
#   --keep     keep the temporary root afterwards (for a look inside;
#              nothing stays mounted in it)
#   --refresh  bootstrap the root again instead of using the cached one
#   --print-sources  print the mirror and the apt sources the root would
#              get (read from the host's), and do nothing else
# Needs root (debootstrap, chroot, mounts); installs debootstrap on the host
# with apt-get when it is missing.  doc/contributing.md describes it.
#
# How it works:
# 1. A minimal bookworm root (debootstrap --variant=minbase, from the mirror
#    the host's own apt sources name) is cached as a tarball under
#    ${XDG_CACHE_HOME:-$HOME/.cache}/tgl/fresh-machine (TGL_FRESH_CACHE
#    overrides), keyed by suite, architecture and variant.  The tarball holds
#    the pristine root only, so every run starts bare.
# 2. A copy is unpacked into a temporary directory (under TMPDIR, else
#    /var/tmp), a clean clone of the committed HEAD goes to /root/tgl, and
#    apt gets the host's Debian sources (same mirror and suites) and its
#    fetch settings, the host's resolv.conf, and a policy-rc.d that keeps
#    services from starting.
# 3. In new mount and PID namespaces (so that every mount and every process
#    of the check, a test's tmux server too, ends with it, whatever way the
#    check ends), /proc, /sys, /dev, /dev/pts are mounted in the root and the
#    two commands run in a chroot as root with DEBIAN_FRONTEND=noninteractive.
# 4. The temporary root is removed on every exit path, only once nothing is
#    mounted in it.
# Environment: TGL_FRESH_CACHE (cache folder), TGL_FRESH_MIRROR (mirror URL,
# instead of the host's), TMPDIR; TGL_FRESH_APT_DIR (where the host's apt
# sources are read, /etc/apt: spec/fresh_machine_spec.sh points it at test
# files).
set -euo pipefail

SUITE=bookworm
VARIANT=minbase
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
me=fresh-machine

say() { printf '%s: %s\n' "$me" "$*" >&2; }
die() { say "error: $*"; exit 2; }
now() { date +%s; }
header() { printf '\n==> [%s] %s\n' "$me" "$*"; }

# ---------------------------------------------------------------------------
# The part that runs inside the new namespaces: mounts, then the commands.
# Arguments: ROOT QUICK.  Exit status: 0, or 10 (first command failed),
# 11 (test command failed), 2 (could not set up).
if [ "${1:-}" = "--inside-namespace" ]; then
  root=$2 quick=$3
  times=$(dirname "$root")/times     # the stage times, for the summary (outside the root)
  # unshare made every mount here private: none of these reaches the host.
  mount -t proc proc "$root/proc"
  mount -t sysfs -o ro sysfs "$root/sys" 2>/dev/null || mount --rbind /sys "$root/sys"
  mount --bind /dev "$root/dev"
  mount --bind /dev/pts "$root/dev/pts"
  # /dev/shm is its own mount on most hosts; a bind of /dev does not carry it.
  if mountpoint -q /dev/shm; then mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"; fi
  # A clean environment, as on a new machine logged into as root (TERM is
  # kept when the caller has one, as a terminal would give it).
  env_args=(env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
            DEBIAN_FRONTEND=noninteractive)
  [ -n "${TERM:-}" ] && env_args+=("TERM=$TERM")
  run_in_root() { chroot "$root" "${env_args[@]}" /bin/sh -c "cd /root/tgl && $1" </dev/null; }

  t0=$(now)
  header "1/2 the README's first command: scripts/quickstart.sh --epochs 1"
  if ! run_in_root 'scripts/quickstart.sh --epochs 1'; then
    say "stage quickstart took $(( $(now) - t0 )) s"
    exit 10
  fi
  echo "stage-time quickstart $(( $(now) - t0 ))" >"$times"
  [ "$quick" = 1 ] && exit 0
  t0=$(now)
  header "2/2 the README's test command: scripts/test.sh"
  if ! run_in_root 'scripts/test.sh'; then
    say "stage test took $(( $(now) - t0 )) s"
    exit 11
  fi
  echo "stage-time test $(( $(now) - t0 ))" >>"$times"
  exit 0
fi

# ---------------------------------------------------------------------------
# Options.
quick=0 keep=0 refresh=0 print_sources=0
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    --keep) keep=1 ;;
    --refresh) refresh=1 ;;
    --print-sources) print_sources=1 ;;
    -h|--help) sed -n '/^# Usage/,/^# with apt-get/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$a' (usage: scripts/fresh-machine.sh [--quick] [--keep] [--refresh] [--print-sources])" ;;
  esac
done
top=$(cd "$(dirname "$0")/.." && pwd)
t_all=$(now)
apt_dir=${TGL_FRESH_APT_DIR:-/etc/apt}

# ---------------------------------------------------------------------------
# The host's Debian sources: "URI SUITE COMPONENTS..." per line, for the
# bookworm suites only (bookworm, bookworm-updates, bookworm-security, ...),
# from the one-line /etc/apt/sources.list and the deb822
# /etc/apt/sources.list.d/debian.sources (Debian's two places for them).
host_sources() {
  local f=$apt_dir/sources.list
  if [ -r "$f" ]; then
    # deb [opts] URI SUITE COMPONENT...
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk -v s="$SUITE" \
      '$1 == "deb" && ($3 == s || index($3, s "-") == 1) { $1 = ""; sub(/^ /, ""); print }'
  fi
  f=$apt_dir/sources.list.d/debian.sources
  if [ -r "$f" ]; then
    awk -v s="$SUITE" '
      function flush(   i, j, nu, ns, u, su) {
        if (types ~ /(^| )deb( |$)/ && enabled != "no") {
          nu = split(uris, u, " "); ns = split(suites, su, " ")
          for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
            if (su[j] == s || index(su[j], s "-") == 1) print u[i], su[j], comps
        }
        types = uris = suites = comps = enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      { key = tolower($1); sub(/^[^:]*:[ \t]*/, ""); val = $0
        if (key == "types:") types = val; else if (key == "uris:") uris = val
        else if (key == "suites:") suites = val; else if (key == "components:") comps = val
        else if (key == "enabled:") enabled = tolower(val) }
      END { flush() }' "$f"
  fi
}
sources=$(host_sources | awk '!seen[$0]++')
mirror=$(awk -v s="$SUITE" '$2 == s { print $1; exit }' <<<"$sources")
if [ -n "${TGL_FRESH_MIRROR:-}" ]; then
  # The given mirror takes the place of the host's main one (suites kept).
  if [ -n "$mirror" ]; then
    sources=$(awk -v old="$mirror" -v new="$TGL_FRESH_MIRROR" '$1 == old { $1 = new } { print }' <<<"$sources")
  else
    sources="$TGL_FRESH_MIRROR $SUITE main"
  fi
  mirror=$TGL_FRESH_MIRROR
fi
[ -n "$mirror" ] || die "the host's apt sources ($apt_dir/sources.list, $apt_dir/sources.list.d/debian.sources) name no '$SUITE' suite; set TGL_FRESH_MIRROR to a Debian mirror's URL"
# The root's /etc/apt/sources.list.d/debian.sources: one deb822 stanza per
# line of $sources.
root_sources() {
  echo "# Written by tgl's scripts/fresh-machine.sh from the host's apt sources."
  awk -v k="$KEYRING" '{ comps = $3; for (i = 4; i <= NF; i++) comps = comps " " $i
    printf "\nTypes: deb\nURIs: %s\nSuites: %s\nComponents: %s\nSigned-By: %s\n", $1, $2, comps, k }' <<<"$sources"
}
if [ "$print_sources" = 1 ]; then
  echo "mirror: $mirror"
  root_sources
  exit 0
fi
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot and mounts); run it as root or with sudo"
arch=$(dpkg --print-architecture)

# ---------------------------------------------------------------------------
# Cleanup on every exit path.  The mounts live in the check's own mount
# namespace and end with it; the namespace's processes are killed with its
# first process.  The temporary root is removed only when no process runs
# in it and the host's mount table shows nothing under it (rm
# --one-file-system besides).
tmp="" child=""
# The processes whose root directory is in the temporary tree.
procs_in_tmp() {
  local p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    case $r in "$tmp"/*) echo "${p#/proc/}" ;; esac
  done
}
cleanup() {
  local rc=$? mp i
  set +e
  trap - INT TERM HUP
  if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
    # unshare --fork blocks SIGINT and SIGTERM while it waits for its child,
    # so only SIGKILL ends it; --kill-child then kills the namespace's first
    # process, and with it every other process of the namespace.
    kill -KILL "$child" 2>/dev/null
    wait "$child" 2>/dev/null
  fi
  if [ -n "$tmp" ] && [ -d "$tmp" ]; then
    for i in $(seq 50); do
      [ -z "$(procs_in_tmp)" ] && break
      [ "$i" -lt 25 ] || procs_in_tmp | xargs -r kill -KILL 2>/dev/null
      sleep 0.2
    done
    awk -v t="$tmp/" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
      while read -r mp; do umount "$mp" 2>/dev/null || umount -l "$mp"; done
    if awk -v t="$tmp/" 'index($5, t) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
      say "something is still mounted under $tmp; leaving it in place"
    elif [ "$keep" = 1 ]; then
      say "kept the root in $tmp (chroot $tmp/root /bin/bash; remove it with rm -rf $tmp)"
    else
      local t0
      t0=$(now)
      rm -rf --one-file-system "$tmp"
      say "removed the temporary root in $(( $(now) - t0 )) s"
    fi
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM HUP

# Runs "$@" in the background and waits for it, so that a signal to this
# script is handled at once (the trap then ends the child) rather than when
# the child is done.  With --log FILE first, the command's output goes to
# FILE (a redirection of the call itself would take the trap's messages too).
run_child() {
  if [ "$1" = --log ]; then
    local log=$2
    shift 2
    "$@" >"$log" 2>&1 &
  else
    "$@" &
  fi
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=""
  return "$rc"
}

# ---------------------------------------------------------------------------
header "host: $SUITE/$arch/$VARIANT from $mirror"
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap on the host"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends debootstrap
fi
[ -r "$KEYRING" ] || die "$KEYRING is missing (apt-get install debian-archive-keyring)"
sha=$(git -C "$top" rev-parse HEAD)
dirty=$(git -C "$top" status --porcelain)
if [ -n "$dirty" ]; then
  say "the work tree has changes that are not committed; they are NOT tested (the check clones the committed HEAD ${sha:0:12}):"
  head -n 10 <<<"$dirty" | sed 's/^/    /' >&2
  [ "$(wc -l <<<"$dirty")" -le 10 ] || say "    ... and $(( $(wc -l <<<"$dirty") - 10 )) more"
fi
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/tgl-fresh.XXXXXX")
root=$tmp/root
mkdir "$root"

# ---------------------------------------------------------------------------
# The pristine root, from the cache or bootstrapped into it.
cache_dir=${TGL_FRESH_CACHE:-${XDG_CACHE_HOME:-${HOME:-$(cd ~ && pwd)}/.cache}/tgl/fresh-machine}
cache=$cache_dir/debian-$SUITE-$arch-$VARIANT.tar.gz
mkdir -p "$cache_dir"

bootstrap() {
  local t0 staging part
  t0=$(now)
  header "bootstrap: debootstrap --variant=$VARIANT $SUITE (not cached yet)"
  staging=$tmp/bootstrap
  mkdir "$staging"
  # In its own mount namespace too: a debootstrap that fails half-way may
  # leave its /proc and /sys mounts in the target.
  run_child --log "$tmp/debootstrap.log" unshare --mount --pid --fork --kill-child --propagation private -- \
    debootstrap --variant="$VARIANT" --arch="$arch" --keyring="$KEYRING" "$SUITE" "$staging" "$mirror" || {
      tail -n 30 "$tmp/debootstrap.log" >&2
      die "debootstrap failed (log above; the mirror was $mirror)"
    }
  # Only the pristine system goes into the cache: no package lists, no .debs.
  rm -rf "$staging"/var/cache/apt/archives/*.deb "$staging"/var/lib/apt/lists/* \
         "$staging"/etc/apt/sources.list "$staging"/debootstrap
  part=$(mktemp "$cache.XXXXXX.part")
  tar --numeric-owner --xattrs -C "$staging" -czf "$part" .
  mv -f "$part" "$cache"          # atomic: a reader sees the old tarball or the whole new one
  rm -rf --one-file-system "$staging"
  t_boot=$(( $(now) - t0 ))
  say "bootstrapped and cached in $t_boot s ($cache, $(du -h "$cache" | cut -f1))"
}

unpack() {
  rm -rf --one-file-system "$root"
  mkdir "$root"
  tar --numeric-owner --xattrs -C "$root" -xzf "$cache" 2>"$tmp/tar.log" &&
    [ -x "$root/usr/bin/apt-get" ] && [ -x "$root/bin/sh" ] && [ -r "$root/etc/debian_version" ]
}

t_boot=""
[ "$refresh" = 1 ] && rm -f "$cache"
[ -s "$cache" ] || bootstrap
t0=$(now)
header "root: unpacking $cache"
if ! unpack; then
  say "the cached root is broken ($(head -c 300 "$tmp/tar.log")); bootstrapping it again"
  rm -f "$cache"
  bootstrap
  unpack || die "the freshly bootstrapped root does not unpack: $(head -c 300 "$tmp/tar.log")"
fi
t_unpack=$(( $(now) - t0 ))

# ---------------------------------------------------------------------------
# The machine's setup, as the host's: apt sources and fetch settings,
# name resolution, no services.
t0=$(now)
header "root: apt sources, resolv.conf, policy-rc.d, clone of ${sha:0:12}"
root_sources >"$root/etc/apt/sources.list.d/debian.sources"
# How the host's apt fetches (a proxy, a mirror whose Release files are
# dated by another clock): the same settings, read from apt itself.
apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|Max-FutureTime|Retries|ForceIPv4|ForceIPv6|(http|https|ftp)::([Pp]roxy|Timeout))' \
  >"$root/etc/apt/apt.conf.d/01host-acquire" || true
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
grep -qs '^127\.0\.0\.1[[:space:]].*localhost' "$root/etc/hosts" ||
  printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >>"$root/etc/hosts"
printf '#!/bin/sh\n# fresh-machine.sh: no service starts in the check'"'"'s root.\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
git clone -q --no-hardlinks "$top" "$root/root/tgl"
[ "$(git -C "$root/root/tgl" rev-parse HEAD)" = "$sha" ] ||
  git -C "$root/root/tgl" -c advice.detachedHead=false checkout -q --detach "$sha"
t_prep=$(( $(now) - t0 ))

# ---------------------------------------------------------------------------
rc=0
run_child unshare --mount --pid --fork --kill-child --propagation private -- \
  bash "$0" --inside-namespace "$root" "$quick" || rc=$?
t_quick=$(awk '$2 == "quickstart" { print $3 }' "$tmp/times" 2>/dev/null || true)
t_test=$(awk '$2 == "test" { print $3 }' "$tmp/times" 2>/dev/null || true)

header "summary (commit ${sha:0:12}, $SUITE/$arch/$VARIANT)"
if [ -n "$t_boot" ]; then printf '  %-34s %s s (cold: nothing cached)\n' "bootstrap" "$t_boot"
else printf '  %-34s %s\n' "bootstrap" "none (the root was cached)"; fi
printf '  %-34s %s s\n' "unpack the cached root" "$t_unpack" "set up the root and clone" "$t_prep"
case $rc in
  0)  printf '  %-34s %s s  passed\n' "scripts/quickstart.sh --epochs 1" "$t_quick"
      if [ "$quick" = 1 ]; then printf '  %-34s %s\n' "scripts/test.sh" "not run (--quick)"
      else printf '  %-34s %s s  passed\n' "scripts/test.sh" "$t_test"; fi ;;
  10) printf '  %-34s %s\n' "scripts/quickstart.sh --epochs 1" "FAILED" ;;
  11) printf '  %-34s %s s  passed\n' "scripts/quickstart.sh --epochs 1" "$t_quick"
      printf '  %-34s %s\n' "scripts/test.sh" "FAILED" ;;
esac
printf '  %-34s %s s\n' "total" "$(( $(now) - t_all ))"
case $rc in
  0)  echo "$me: passed: the README's commands work on a bare Debian $SUITE root" ;;
  10) say "FAILED: the README's first command (scripts/quickstart.sh) failed on a bare Debian $SUITE root"; exit 1 ;;
  11) say "FAILED: the README's test command (scripts/test.sh) failed on a bare Debian $SUITE root"; exit 1 ;;
  *)  say "FAILED: the check could not run (status $rc)"; exit 2 ;;
esac
