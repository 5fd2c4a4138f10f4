# pow-shield: nginx 1.28 (vendored by the nginx-src crate) with the module,
# serving the demo API of `make run` on port 8080.
#
#   docker build -t pow-shield .
#   docker run --rm -p 8080:8080 pow-shield
#   docker run --rm -p 8080:8080 -v /path/to/keyfile:/etc/pow-shield/secret:ro pow-shield
#
# The image holds no HMAC key: docker/entrypoint.sh writes a random one to
# /etc/pow-shield/secret (0600) at first start unless a key file is mounted
# there, and says which on stderr. Mount one key file on every node of a
# cluster (a challenge must verify on any node) and to keep the key across
# container re-creation.
#
# Verified where this file was written (Debian 12, no Docker engine, so
# `docker build` itself has not been run): the build stage runs `make build`
# as tested there; t/pow_shield_docker.t runs docker/entrypoint.sh (key made
# once, 0600, reused, a mounted key kept) and `nginx -t` on docker/nginx.conf
# with the built module; shellcheck passes on the script and hadolint on
# this file.

FROM rust:1-bookworm AS build
# Unpinned on purpose: bookworm's security updates replace exact versions.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libclang-dev libpcre2-dev zlib1g-dev libssl-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make build

FROM debian:bookworm-slim
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libpcre2-8-0 zlib1g libssl3 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/objs/nginx /usr/local/sbin/nginx
COPY --from=build /src/objs/ngx_http_pow_shield_module.so /opt/pow-shield/ngx_http_pow_shield_module.so
COPY docker/nginx.conf /opt/pow-shield/nginx.conf
COPY nginx-conf/demo-api /opt/pow-shield/html
COPY docker/entrypoint.sh /usr/local/bin/pow-shield-entrypoint
RUN mkdir -p /opt/pow-shield/logs /etc/pow-shield \
 && chmod 700 /etc/pow-shield
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/pow-shield-entrypoint"]
CMD ["nginx", "-p", "/opt/pow-shield", "-c", "nginx.conf", "-g", "daemon off;"]
