#!/bin/sh
# Docker entrypoint of pow-shield: makes sure the HMAC key file exists, then
# runs the command (nginx). The image ships no key: at first start a random
# one is written, unless a key file is mounted (share one key between
# nodes, and keep it across container re-creation, by mounting it).
#
#   POW_SHIELD_SECRET_FILE  the key file (default /etc/pow-shield/secret);
#                           it must match pow_shield_secret_file in nginx.conf.
set -eu

secret=${POW_SHIELD_SECRET_FILE:-/etc/pow-shield/secret}

if [ -s "$secret" ]; then
    echo "pow-shield: signing challenges with the key in $secret" >&2
else
    dir=$(dirname "$secret")
    mkdir -p "$dir"
    # 32 random bytes as 64 hex characters: one key line, no newline inside.
    umask 077
    tmp="$secret.new.$$"
    key=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
    if [ "${#key}" -ne 64 ]; then
        echo "pow-shield: could not read 32 random bytes from /dev/urandom" >&2
        exit 1
    fi
    printf '%s\n' "$key" > "$tmp"
    chmod 600 "$tmp"
    mv "$tmp" "$secret"
    echo "pow-shield: no key in $secret: generated a random one (this container" \
         "only; mount a key file there to share it between nodes)" >&2
fi

exec "$@"
