# shellcheck shell=bash
# Shared by the bench/*.sh scripts (sourced,
# not run; the caller defines ROOT and die).

# The binaries under test (the caller sets ROOT before sourcing).
# shellcheck disable=SC2034 # used by the scripts that source this file
NGINX=${NGINX:-$ROOT/objs/nginx}
# shellcheck disable=SC2034
MODULE=${MODULE:-$ROOT/objs/ngx_http_pow_shield_module.so}
# nginx reads an inherited NGINX as its listening sockets (binary upgrade):
# keep a caller's NGINX=... out of its environment.
export -n NGINX

# The HMAC key every bench configuration uses (soak's driver forges tokens).
# shellcheck disable=SC2034 # used by the scripts that source this file
BENCH_SECRET=bench-secret-0123456789abcdef0123456789

# free_ports N: N distinct free loopback ports, all held open at once so
# none repeats.
free_ports() {
    perl -MIO::Socket::INET -e '
        my @s = map { IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1", LocalPort => 0, ReuseAddr => 1)
                      or die "no free port: $!\n" } 1 .. $ARGV[0];
        print join(" ", map { $_->sockport } @s), "\n";' "$1"
}

# wait_port PORT WHAT: wait up to 5 s for 127.0.0.1:PORT to accept.
wait_port() {
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    die "$2 did not start listening on 127.0.0.1:$1"
}

# bench_conf_head DIR MODULE ROOT WORKER_CONNECTIONS [WORKERS]: the top of a
# bench nginx.conf, up to inside `http {` (the caller adds servers and the
# `}`); WORKERS worker processes [1].
bench_conf_head() {
    local dir=$1 module=$2 root=$3 conns=$4 workers=${5:-1}
    cat <<CONF
load_module $module;
$(if ((EUID == 0)); then echo "user root;"; fi)
worker_processes $workers;
error_log $dir/error.log notice;
pid $dir/nginx.pid;
events { worker_connections $conns; }
http {
    access_log off;
    client_body_temp_path $dir/client_body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    default_type application/json;
    root $root;
    pow_shield_secret "$BENCH_SECRET";
CONF
}

# redis_start PORT DIR: a redis-server on 127.0.0.1:PORT (no persistence),
# daemonized with DIR/redis.pid and DIR/redis.log; returns once it answers
# PING (5 s at most). Starting again on the same PORT after a kill works:
# Redis binds with SO_REUSEADDR.
redis_start() {
    local port=$1 dir=$2
    rm -f "$dir/redis.pid"
    "${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize yes --pidfile "$dir/redis.pid" --dir "$dir" --logfile "$dir/redis.log" ||
        die "redis-server did not start on port $port"
    for _ in $(seq 50); do
        [[ -s $dir/redis.pid && $("${REDIS_CLI:-redis-cli}" -p "$port" ping 2>/dev/null) == PONG ]] && return 0
        sleep 0.1
    done
    die "redis-server on port $port did not answer PING"
}

# stop_pid PID [SIGNAL]: send SIGNAL [TERM] (after SIGCONT, in case it is
# stopped), wait up to 5 s for PID to go, then SIGKILL it.
stop_pid() {
    local pid=$1 sig=${2:-TERM}
    [[ -n $pid ]] || return 0
    kill -CONT "$pid" 2>/dev/null || return 0
    kill -"$sig" "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
}

# pay_ahead_server DIR: the nginx of the pay-ahead benches, on a free port
# (set in PORT): two locations priced alike, `pow_shield_limit 1 60s;
# pow_shield_difficulty 16b;`, /off/ with `pow_shield_pay_ahead off` (the
# 429 path, "before") and /on/ paying ahead ("after"), each serving
# data.json; DIR/ahead.log has "$http_x_client $status $pow_shield_result"
# per request. The caller stops DIR/nginx.pid.
pay_ahead_server() {
    local dir=$1
    mkdir -p "$dir/html/off" "$dir/html/on"
    echo '{"ok":true}' >"$dir/html/off/data.json"
    echo '{"ok":true}' >"$dir/html/on/data.json"
    read -r PORT < <(free_ports 1)
    {
        bench_conf_head "$dir" "$MODULE" "$dir/html" 1024
        cat <<CONF
    log_format ahead '\$http_x_client \$status \$pow_shield_result';
    server {
        listen 127.0.0.1:$PORT;
        access_log $dir/ahead.log ahead;
        pow_shield_key \$http_x_client;
        pow_shield_limit 1 60s;
        pow_shield_difficulty 16b;
        location /off/ { pow_shield_pay_ahead off; }
        location /on/ { pow_shield_pay_ahead on; }
    }
}
CONF
    } >"$dir/nginx.conf"
    "$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" ||
        die "nginx did not start: $(tail -3 "$dir/error.log")"
    wait_port "$PORT" nginx
}

# median "v1 v2 ...": the median of the numbers (the lower middle one of an
# even count); empty for none.
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }

# ratio A B: A / B to three places, "-" when either is missing or B is 0.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "" || a == "-" || b == "" || b == "-" || b == 0) print "-"; else printf "%.3f", a / b}'; }

# round_ratio ARRAY KEY REF: ARRAY (an associative array of "v1 v2 ...",
# one value per round) holds KEY's and REF's figures; the median over the
# rounds of KEY's / REF's in the same round ("-" unless both have every round).
round_ratio() {
    local -n values=$1
    local a b i out=""
    read -r -a a <<<"${values[$2]:-}"
    read -r -a b <<<"${values[$3]:-}"
    ((${#a[@]} && ${#a[@]} == ${#b[@]})) || { echo -; return; }
    for i in "${!a[@]}"; do out+="$(ratio "${a[$i]}" "${b[$i]}") "; done
    median "$out"
}
