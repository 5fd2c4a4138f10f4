# Shared by bench/run.sh and bench/hung_redis.sh (sourced, not run).

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

# bench_conf_head DIR MODULE ROOT WORKER_CONNECTIONS: the top of a bench
# nginx.conf, up to inside `http {` (the caller adds servers and the `}`).
bench_conf_head() {
    local dir=$1 module=$2 root=$3 conns=$4
    cat <<CONF
load_module $module;
$( ((EUID == 0)) && echo "user root;" || true)
worker_processes 1;
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
    pow_shield_secret "bench-secret-0123456789abcdef0123456789";
CONF
}
