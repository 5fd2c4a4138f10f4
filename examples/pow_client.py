#!/usr/bin/env python3
"""A pow-shield client: on 429, solve the challenge and retry.

Usage: pow_client.py URL [--replay]

Solves one challenge, sends the paid request (expect 200), then -- to show
replay protection -- sends the same solution again (expect 409).
Standard library only.
"""
import hashlib
import json
import sys
import urllib.error
import urllib.request


def fetch(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def solve(salt, difficulty):
    """Smallest decimal nonce with hex(sha256(salt + nonce)) starting with
    `difficulty` zeros. Reuses the hash state of the salt (midstate)."""
    prefix = "0" * difficulty
    base = hashlib.sha256(salt.encode())
    nonce = 0
    while True:
        h = base.copy()
        h.update(str(nonce).encode())
        if h.hexdigest().startswith(prefix):
            return str(nonce)
        nonce += 1


def main():
    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/api/items"
    # Spend the free quota until the shield asks for work.
    for _ in range(1000):
        status, headers, body = fetch(url)
        if status == 429:
            break
        print(f"{status}  remaining={headers.get('X-RateLimit-Remaining')}")
    else:
        sys.exit("never got a 429")

    challenge = json.loads(body)
    print(f"429  challenge difficulty={challenge['difficulty']} retry-after={headers.get('Retry-After')}s")
    nonce = solve(challenge["salt"], challenge["difficulty"])
    paid = {"X-PoW-Challenge": challenge["challenge"], "X-PoW-Nonce": nonce}

    status, _, body = fetch(url, paid)
    print(f"{status}  paid with nonce {nonce}: {body[:60].decode(errors='replace')}")

    status, headers, body = fetch(url, paid)
    print(f"{status}  same solution again: {json.loads(body)['error']}"
          f" (fresh challenge attached: {'X-PoW-Challenge' in headers})")


if __name__ == "__main__":
    main()
