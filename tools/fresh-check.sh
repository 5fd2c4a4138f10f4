#!/usr/bin/env bash
# make fresh-check: the README's "Try it" commands, as a newcomer runs them,
# on a Debian 12 machine that has nothing installed but the base system,
# so that a missing install step fails here instead of for a newcomer.
#
# The machine is a throwaway root: `debootstrap --variant=minbase bookworm`
# from the mirror this machine's apt uses (cached as a tarball in
# target/fresh/, with empty apt lists, as cloud and container images have
# them), entered with unshare (new mount and PID namespaces: /dev, /proc and
# /sys mounted in it only; every process it started dies with it) and
# chroot, as root, with a clean environment. The repository goes in as a
# `git archive` of HEAD (FRESH_REV=<rev> for another commit) in
# /root/pow-shield, where root's `git clone` puts it (FRESH_DIR=<path> for
# another), so nothing built or installed here leaks in.
#
# The commands are the first two ```sh blocks under "## Try it" of the
# README (FRESH_README=<file> to take them from another README than the
# archived tree's):
#   - the first block runs line by line in one bash, as written, with the
#     `sudo`s dropped (root has none). Two lines are run differently:
#     `make run` runs in the background on a free port (PORT=...) until the
#     demo answers, then the second block runs against it, each command's
#     output compared with the README's comment under it (`# 200 ... 429`:
#     the codes; a "quoted" string: it appears), and the demo is stopped;
#     `make test` runs `make test` without its integration suite: the same
#     targets with `prove` replaced by `deps-test`, prove's install step
#     (FRESH_FULL=1: the whole `make test`, the integration suite too).
#   - https://sh.rustup.rs is fetched from
#     https://static.rust-lang.org/rustup/rustup-init.sh, the file it serves
#     (FRESH_RUSTUP_URL=... for another).
# Daemons that packages install are not started (policy-rc.d), as in any
# chroot; nothing here uses them. The environment is empty but for the
# proxy variables and CA bundle variables ($ca_vars) this machine has, and
# its own CAs (/usr/local/share/ca-certificates) are copied in: the way out
# of this machine, not a package the README would have to install.
#
# FRESH_PRINT=1 prints the steps written from the README and stops.
# Output goes to the terminal and target/fresh/last.log. The root is removed
# afterwards (FRESH_KEEP=1 keeps it in target/fresh/root). Needs root,
# debootstrap and the network to the Debian mirror, crates.io, PyPI, npm and
# static.rust-lang.org. docs/building.md, "The fresh-machine check".
set -euo pipefail

suite=bookworm
# Environment variables that point programs at a CA bundle.
ca_vars="SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE NODE_EXTRA_CA_CERTS PIP_CERT REQUESTS_CA_BUNDLE"

# --- inside the new namespaces (the script runs itself under unshare) ---
if [ "${1:-}" = --inside ]; then
    root=$2
    mount --rbind /dev "$root/dev"
    mount --make-rslave "$root/dev"
    mount -t proc proc "$root/proc"
    mount -t sysfs -o ro sysfs "$root/sys"
    # A clean environment, but for this machine's way out: its proxy and
    # the CA files it trusts (set where its egress intercepts TLS).
    pass=()
    for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY $ca_vars; do
        if [ -n "${!v:-}" ]; then pass+=("$v=${!v}"); fi
    done
    chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash \
        TERM=dumb LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        "${pass[@]}" /bin/bash /root/fresh-steps.sh
    exit
fi

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=$repo/target/fresh
root=$cache/root
rev=${FRESH_REV:-HEAD}
full=${FRESH_FULL:-0}
keep=${FRESH_KEEP:-0}
rustup_url=${FRESH_RUSTUP_URL:-https://static.rust-lang.org/rustup/rustup-init.sh}

die() { echo "fresh-check: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, unshare, chroot): sudo make fresh-check"
for tool in debootstrap unshare chroot git tar; do
    command -v "$tool" >/dev/null || die "$tool not found (make fresh-check installs debootstrap)"
done

# The first URI of this machine's apt sources that ends in the given path
# (/debian, /debian-security), one-line or deb822 style.
apt_mirror() {
    local path=$1 fallback=$2 uri
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
        grep -E '^[[:space:]]*(deb|URIs:)[[:space:]]' | grep -oE "https?://[^[:space:]]+$path/?([[:space:]]|$)" |
        head -n1 | tr -d '[:space:]') || true
    echo "${uri:-$fallback}"
}

# What it needs from outside: the Debian mirror and rustup's script. A
# machine that reaches neither cannot tell a missing install step from a
# missing network: said, and skipped (FRESH_STRICT=1 makes it a failure).
for url in "$(apt_mirror /debian http://deb.debian.org/debian)/dists/$suite/Release" "$rustup_url"; do
    if ! curl -sS -o /dev/null --max-time 20 --head "$url" 2>/dev/null; then
        [ "${FRESH_STRICT:-0}" = 1 ] && die "cannot reach $url"
        echo "fresh-check: SKIPPED: cannot reach $url (the network, not the README; FRESH_STRICT=1: a failure)"
        exit 0
    fi
done

# Refuses to go on while anything is mounted below the root (a bind of /dev
# under a directory about to be removed would remove the machine's /dev).
not_mounted() {
    if awk '{print $5}' /proc/self/mountinfo | grep -q "^$1\(/\|$\)"; then
        die "something is mounted below $1: not removing it"
    fi
}

remove_root() {
    [ -d "$root" ] || return 0
    not_mounted "$root"
    rm -rf "$root"
}

# --- the base system: debootstrap once, then a tarball ---
mkdir -p "$cache"
base=$cache/$suite-minbase.tar
if [ ! -f "$base" ]; then
    mirror=$(apt_mirror /debian http://deb.debian.org/debian)
    security=$(apt_mirror /debian-security http://deb.debian.org/debian-security)
    tmp=$cache/base.tmp
    not_mounted "$tmp"
    rm -rf "$tmp"
    echo "fresh-check: debootstrap --variant=minbase $suite $mirror (once: $base)"
    debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
        { tail -n 20 "$cache/debootstrap.log"; die "debootstrap failed ($cache/debootstrap.log)"; }
    # A fresh machine's sources: the release, its updates and security.
    printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n' \
        "$mirror" "$suite" "$mirror" "$suite" "$security" "$suite" >"$tmp/etc/apt/sources.list"
    printf '#!/bin/sh\n# fresh-check: no daemons started in the chroot\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
    chmod 755 "$tmp/usr/sbin/policy-rc.d"
    # Package lists and downloads emptied, as images ship them: the README
    # has to say `apt-get update`.
    find "$tmp/var/lib/apt/lists" -maxdepth 1 -type f -delete
    find "$tmp/var/cache/apt" -name '*.deb' -delete
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$tmp/etc/hosts"
    tar -C "$tmp" -cf "$base.part" . && mv "$base.part" "$base"
    rm -rf "$tmp"
fi

# --- a free loopback port for the demo (the root shares this network) ---
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=
for _ in $(seq 50); do
    p=$((20000 + RANDOM % 10000))
    if port_free "$p"; then port=$p; break; fi
done
[ -n "$port" ] || die "no free port found"

# --- the throwaway root and the tree under test ---
remove_root
if [ "$keep" != 1 ]; then trap remove_root EXIT; fi
mkdir -p "$root"
tar -C "$root" -xf "$base"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# This machine's own CAs (an egress proxy's, a company's): the root trusts
# them too once the README's line installs ca-certificates.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
# Where the tree goes: where root's `git clone` puts it (FRESH_DIR=/srv/...
# for elsewhere).
dir=${FRESH_DIR:-/root/pow-shield}
case $dir in /?*) ;; *) die "FRESH_DIR=$dir: want an absolute path" ;; esac
src=$root$dir
mkdir -p "$src"
commit=$(git -C "$repo" rev-parse --verify "$rev^{commit}") || die "FRESH_REV=$rev: no such commit"
git -C "$repo" archive --format=tar "$commit" | tar -C "$src" -xf -
readme=${FRESH_README:-$src/README.md}
[ -f "$readme" ] || die "$readme not found"

# The n-th fenced block of the README's "## Try it" section.
try_block() {
    awk -v n="$1" '
        /^## / { sec = ($0 == "## Try it") }
        sec && /^```/ { if (inb) { inb = 0 } else { k++; inb = 1 }; next }
        inb && k == n { print }' "$readme"
}
setup=$(try_block 1)
demo=$(try_block 2)
[ -n "$setup" ] || die "$readme: no \`\`\`sh block under \"## Try it\""
grep -q '^make run' <<<"$setup" || die "$readme: the first block under \"## Try it\" has no \`make run\`"
grep -q '^make test' <<<"$setup" || die "$readme: the first block under \"## Try it\" has no \`make test\`"

# make test's prerequisites, the integration suite's run replaced by its
# install step (its Makefile: the tree under test's).
test_targets=$(sed -n 's/^test:[[:space:]]*//p' "$src/Makefile" | head -n1)
[ -n "$test_targets" ] || die "no test: target in the Makefile"
cheap_targets=
for t in $test_targets; do
    [ "$t" = prove ] && t=deps-test
    cheap_targets="${cheap_targets:+$cheap_targets }$t"
done

# --- the steps, written as one bash script run in the root ---
# The demo block's command in $dcmd, as bash lines: run it, print its
# output, compare that with the README's comments under it ($dexpect).
dcmd=
dexpect=()
flush_demo() {
    [ -n "$dcmd" ] || return 0
    emit "step $(q "$dcmd")"
    emit "out=\$( { ${dcmd//127.0.0.1:8080/127.0.0.1:$port}; } 2>&1 )" # the demo's port
    emit "printf '%s\\n' \"\$out\""
    local e s
    for e in "${dexpect[@]}"; do
        if [[ $e =~ ^[0-9\ ]+$ ]]; then
            emit "[ \"\$(tr -s '\\n' ' ' <<<\"\$out\" | sed 's/ \$//')\" = $(q "$e") ] || fail $(q "$dcmd: the README says: $e")"
        elif [[ $e =~ \"([^\"]+)\" ]]; then
            s=${BASH_REMATCH[1]}
            emit "grep -qF -- $(q "$s") <<<\"\$out\" || fail $(q "$dcmd: the README says it prints: $s")"
        fi
    done
    dcmd=
    dexpect=()
}
# $1 quoted for bash: in single quotes, its own ones written '\''
q() { local sq="'" esc="'\\''"; printf "'%s'" "${1//$sq/$esc}"; }
emit() { printf '%s\n' "$1"; }
{
    cat <<EOF
#!/bin/bash
# Written by tools/fresh-check.sh from the README's "Try it" blocks.
set -euo pipefail
cd "$dir"
EOF
    cat <<'EOF'
step() { printf '\n== fresh-check [%s] $ %s\n' "$(date -u +%T)" "$1"; }
fail() { printf '\n== fresh-check: FAILED: %s\n' "$1"; exit 1; }
EOF
    while IFS= read -r line; do
        # the line's comment off, sudo dropped (root), rustup's script from
        # where sh.rustup.rs serves it
        cmd=$(sed -E 's/[[:space:]]+#.*$//; s/(^|[;&|(][[:space:]]*)sudo /\1/g' <<<"$line")
        cmd=${cmd//https:\/\/sh.rustup.rs/$rustup_url}
        case $cmd in
        '' | '#'*) ;;
        'make run'*)
            emit "step $(q "$cmd PORT=$port  (in the background until the demo answers)")"
            emit "setsid make run PORT=$port &"
            emit "run_pid=\$!"
            emit "until (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; do"
            emit "    kill -0 \"\$run_pid\" 2>/dev/null || { rc=0; wait \"\$run_pid\" || rc=\$?; fail \"make run exited (\$rc)\"; }"
            emit "    sleep 2"
            emit "done"
            # The demo block: each command, then its expected output, the
            # comment lines under it.
            dcmd=
            dexpect=()
            while IFS= read -r dline; do
                if [[ $dline =~ ^#[[:space:]]*(.*)$ ]]; then
                    dexpect+=("${BASH_REMATCH[1]}")
                elif [ -n "$dline" ]; then
                    flush_demo
                    dcmd=$dline
                fi
            done <<<"$demo"
            flush_demo
            emit "step 'the demo stopped'"
            emit "kill -TERM -- \"-\$run_pid\"; wait \"\$run_pid\" || true"
            ;;
        'make test'*)
            if [ "$full" = 1 ]; then
                emit "step $(q "$cmd")"
                emit "{ $cmd"
                emit "} || fail $(q "$cmd")"
            else
                emit "step $(q "make $cheap_targets  (make test without its integration suite; FRESH_FULL=1: all of it)")"
                emit "make $cheap_targets || fail $(q "make $cheap_targets")"
            fi
            ;;
        *)
            emit "step $(q "$cmd")"
            emit "{ $cmd"
            emit "} || fail $(q "$cmd")"
            ;;
        esac
    done <<<"$setup"
    emit "printf '\\n== fresh-check: every step passed\\n'"
} >"$root/root/fresh-steps.sh"
if [ "${FRESH_PRINT:-0}" = 1 ]; then cat "$root/root/fresh-steps.sh"; exit 0; fi

log=$cache/last.log
echo "fresh-check: $rev ($commit) in a fresh Debian 12 root ($root), the commands of ${FRESH_README:-its README.md}" | tee "$log"
start=$(date +%s)
rc=0
unshare --mount --pid --fork --propagation private "$0" --inside "$root" 2>&1 | tee -a "$log" || rc=$?
took=$(($(date +%s) - start))
if [ "$rc" = 0 ]; then
    echo "fresh-check: PASSED in $((took / 60)) min $((took % 60)) s ($log)" | tee -a "$log"
else
    echo "fresh-check: FAILED ($rc) after $((took / 60)) min $((took % 60)) s ($log)" | tee -a "$log"
fi
if [ "$keep" = 1 ]; then echo "fresh-check: the root is kept in $root"; fi
exit "$rc"
