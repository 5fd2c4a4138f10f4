# pow-shield: nginx 1.28 (vendored by the nginx-src crate) with the module,
# serving the demo API of `make run` on port 8080, as a non-root user.
#
#   docker build -t pow-shield .                 # the runtime image (last stage)
#   docker build --target test .                 # runs `make test` (lint, cargo test, prove)
#   docker run --rm -p 8080:8080 pow-shield
#   docker run --rm -p 8080:8080 -v /path/to/keyfile:/etc/pow-shield/secret:ro pow-shield
#
# The image holds no HMAC key: docker/entrypoint.sh writes a random one to
# /etc/pow-shield/secret (0600) at first start unless a key file is mounted
# there, and says which on stderr. Mount one key file on every node of a
# cluster (a challenge must verify on any node) and to keep the key across
# container re-creation; a mounted file must be readable by uid 10001.
#
# nginx runs as uid/gid 10001 (pow-shield), master and workers: it listens
# on 8080 (no privileged port), and everything it writes is under
# /opt/pow-shield/logs (pid, temp files) and /etc/pow-shield (the key the
# entrypoint makes), both owned by that user. Logs go to stderr/stdout.
#
# Verified where this file was written (Debian 12, no Docker engine, so
# `docker build` itself has not been run): `make lint` runs hadolint on this
# file and shellcheck on docker/entrypoint.sh (and every other shell
# script); the build stage runs `make build` and the test stage `make test`
# exactly as tested there (as root, which `make test` needs to apt-get its
# packages); t/pow_shield_docker.t runs docker/entrypoint.sh as an
# unprivileged user on a key directory laid out as below (key made once,
# 0600, owned by that user, reused; a mounted key kept) and `nginx -t` on
# docker/nginx.conf as that user with the built module, and checks that
# this file switches to that user and exposes the port nginx.conf listens on.
#
# With the legacy builder (DOCKER_BUILDKIT=0), `docker build .` also runs
# the test stage; BuildKit builds only the stages the target needs.

FROM rust:1-bookworm AS build
# Unpinned on purpose: bookworm's security updates replace exact versions.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libclang-dev libpcre2-dev zlib1g-dev libssl-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make build

# The whole suite in the build image; `make test` installs its own Debian
# packages (redis-server, perl, shellcheck, nginx-dev, ...) and hadolint.
FROM build AS test
RUN make test

FROM debian:bookworm-slim AS runtime
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libpcre2-8-0 zlib1g libssl3 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 pow-shield \
 && useradd --system --uid 10001 --gid pow-shield --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin pow-shield
COPY --from=build /src/objs/nginx /usr/local/sbin/nginx
COPY --from=build /src/objs/ngx_http_pow_shield_module.so /opt/pow-shield/ngx_http_pow_shield_module.so
COPY docker/nginx.conf /opt/pow-shield/nginx.conf
COPY nginx-conf/demo-api /opt/pow-shield/html
COPY docker/entrypoint.sh /usr/local/bin/pow-shield-entrypoint
# Only these two directories are the user's: the configuration, module and
# content stay root's, read-only to nginx.
RUN mkdir -p /opt/pow-shield/logs /etc/pow-shield \
 && chown pow-shield:pow-shield /opt/pow-shield/logs /etc/pow-shield \
 && chmod 700 /etc/pow-shield
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/pow-shield-entrypoint"]
CMD ["nginx", "-p", "/opt/pow-shield", "-c", "nginx.conf", "-g", "daemon off;"]
