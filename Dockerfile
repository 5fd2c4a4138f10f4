# pow-shield: nginx 1.28 (vendored by the nginx-src crate) with the module.
#
#   docker build -t pow-shield .
#   docker run --rm -p 8080:8080 pow-shield        # the demo of `make run`
#
# Verified: every command below is what `make build` / `make run` run on a
# Debian 12 machine (bookworm), where they were tested. `docker build` itself
# could not be run where this file was written (no Docker engine there).

FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libclang-dev libpcre2-dev zlib1g-dev libssl-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make build

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libpcre2-8-0 zlib1g libssl3 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/objs/nginx /usr/local/sbin/nginx
COPY --from=build /src/objs/ngx_http_pow_shield_module.so /opt/pow-shield/ngx_http_pow_shield_module.so
COPY nginx-conf/demo.conf /opt/pow-shield/demo/nginx.conf
COPY nginx-conf/demo-api /opt/pow-shield/demo/html
# The demo listens on loopback; in a container it must listen on all addresses.
RUN sed -i -e 's#load_module ../ngx_http_pow_shield_module.so#load_module /opt/pow-shield/ngx_http_pow_shield_module.so#' \
           -e 's#listen 127.0.0.1:8080#listen 8080#' /opt/pow-shield/demo/nginx.conf \
 && mkdir -p /opt/pow-shield/demo/logs
EXPOSE 8080
CMD ["nginx", "-p", "/opt/pow-shield/demo", "-c", "nginx.conf", "-g", "daemon off;"]
