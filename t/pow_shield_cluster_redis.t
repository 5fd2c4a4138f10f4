#!/usr/bin/perl

# Cluster mode: how pow_shield_redis reaches Redis and what it writes there
# (docs/directives.md, pow_shield_redis): AUTH with a password
# (":password@" and "user:password@"), a wrong or missing password fails
# clearly in error.log and requests fall back (pow_shield_fail local);
# "/db" selects the database; "prefix=" starts every key; the client key is
# hex inside a {hash tag}; spent challenges are "<prefix>spent:{<sha256>}"
# with a TTL; "unix:/path" connects over a Unix socket.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Digest::SHA qw(sha256_hex);
use Test::More;
use Test::PowShield qw(:pow :util client_tag);

###############################################################################

my $SECRET = 'cluster-redis-suite-secret-0123456789';
my $PASSWORD = 's3cr3t@pa/ss';

sub conf {
    my ($redis) = @_;
    return http_conf(<<"EOF", workers => 1);
    pow_shield_secret "$SECRET";
    pow_shield_redis $redis;

    server {
        %%TEST_SERVER%%

        add_header X-Result \$pow_shield_result always;

        pow_shield_difficulty 1;
        pow_shield_challenge_ttl 20s;

        location /api/ {
            pow_shield_limit 3 1h;
            pow_shield_key \$http_x_client;
        }

        # the default key, \$pow_shield_client
        location /ip/ {
            pow_shield_limit 5 1h;
        }
    }
EOF
}

sub start {
    my ($t, $redis) = @_;
    $t->write_file_expand('nginx.conf', conf($redis));
    $t->write_file("html/$_/data.json", qq({"dir":"$_"}\n)) for qw(api ip);
    $t->run;
    return $t;
}

sub get {
    my ($t, $client, $uri, %h) = @_;
    return $t->http_get($uri // '/api/data.json', 'X-Client' => $client, %h);
}


# keys of database $db matching $pattern (SELECT inside a script only
# affects the script)
sub keys_in {
    my ($t, $db, $pattern) = @_;
    my $k = $t->redis_cmd('EVAL',
        "redis.call('SELECT', ARGV[1]) return redis.call('KEYS', ARGV[2])",
        0, $db, $pattern) || [];
    return sort @$k;
}

sub in_db {
    my ($t, $db, @cmd) = @_;
    my $script = "redis.call('SELECT', ARGV[1]) "
        . "return redis.call(unpack(ARGV, 2))";
    return $t->redis_cmd('EVAL', $script, 0, $db, @cmd);
}

# Redis with a password, database 3, prefix "edge:"

my $auth = Test::PowShield->new->require_redis;
my $redis = $auth->run_redis(requirepass => $PASSWORD);
start($auth,
    'redis://:%%REDIS_PASSWORD%%@127.0.0.1:%%REDIS_PORT%%/3 prefix=edge:');

my @rs = map { get($auth, 'db-client') } 1 .. 4;
is(statuses(@rs), '200 200 200 429', 'AUTH with a password: Redis counts (3, then 429)');
my $wkey = 'edge:{' . client_tag('db-client') . '}:w:3:3600000';
is_deeply([grep { /:w:/ } keys_in($auth, 3, 'edge:*')], [$wkey],
    "/3 and prefix=edge: the window key is $wkey in database 3");
# (and edge:gen, the data generation: docs/operations.md, "One spend per
# solution")
is_deeply([grep { !/^edge:\{\Q${\ client_tag('db-client')}\E\}:/ && $_ ne 'edge:gen' }
        keys_in($auth, 3, '*')], [],
    '... and every key of the client shares its prefix and hash tag');
is_deeply([keys_in($auth, 0, '*')], [], 'nothing in database 0');
is(in_db($auth, 3, 'ZCARD', $wkey), 3, '3 entries in the sorted set');
my $pttl = in_db($auth, 3, 'PTTL', $wkey) // -9;
ok($pttl > 3_590_000 && $pttl <= 3_600_000,
    "the window key expires one window after its newest entry ($pttl ms)");

# the default key: $pow_shield_client of 127.0.0.1 is the text "127.0.0.1"
# behind a NUL byte (no client-controlled key can equal it), written
# "@127.0.0.1" in key names

is(get($auth, 'ignored', '/ip/data.json')->status, 200, 'default key: 200');
my $ipkey = 'edge:{@127.0.0.1}:w:5:3600000';
is(client_tag("\x00127.0.0.1"), '@127.0.0.1', "the default key's tag");
is_deeply([keys_in($auth, 3, 'edge:{@127.0.0.1}*')], [$ipkey],
    "default key \$pow_shield_client of 127.0.0.1: $ipkey");

# a spent challenge: <prefix>spent:{sha256 hex of the token}, with a TTL

{
    my %sol = solution($rs[3]);
    is(get($auth, 'db-client', undef, %sol)->status, 200, 'solution accepted');
    my $spent = 'edge:spent:{' . sha256_hex($sol{'X-PoW-Challenge'}) . '}';
    is_deeply([keys_in($auth, 3, 'edge:spent:*')], [$spent],
        "spent challenge stored as $spent in database 3");
    my $ttl = in_db($auth, 3, 'TTL', $spent) // -9;
    ok($ttl > 20 && $ttl <= 25,
        "spent key lives for the challenge TTL (20 s) + 5 s clock allowance ($ttl s)");
    is(get($auth, 'db-client', undef, %sol)->status, 409, 'replay: 409');
}

is($auth->redis_unavailable_count, 0,
    'AUTH with a password: no "unavailable" line');
ok(!grep({ index($_, $PASSWORD) >= 0 } $auth->error_log_lines),
    'the password never appears in error.log');

# user:password (ACL form, AUTH default <password>); a client key with
# braces stays inside the hash tag, its braces %-escaped

my $acl = Test::PowShield->new;
$acl->use_redis($redis);
start($acl, 'redis://default:%%REDIS_PASSWORD%%@127.0.0.1:%%REDIS_PORT%%');

@rs = map { get($acl, '{acl}') } 1 .. 4;
is(statuses(@rs), '200 200 200 429', 'AUTH user:password: Redis counts');
my $bkey = 'pow:{%7bacl%7d}:w:3:3600000';
is($acl->redis_cmd('ZCARD', $bkey), 3,
    "client key \"{acl}\" has its braces escaped: $bkey (default prefix, db 0)");
is($acl->redis_unavailable_count, 0,
    'AUTH user:password: no "unavailable" line');

# a wrong password: error.log names AUTH and Redis's error; requests fall
# back to the local bucket (fail local is the default)

my $wrong = Test::PowShield->new;
$wrong->use_redis($redis);
start($wrong, 'redis://:wrong-password@127.0.0.1:%%REDIS_PORT%%');

@rs = map { get($wrong, 'wrong-client') } 1 .. 4;
is(statuses(@rs), '200 200 200 429',
    'wrong password: requests decided by the local bucket (3, then 429)');
ok($rs[3]->header('X-PoW-Challenge'), 'wrong password: the 429 is a challenge');
is_deeply([keys_in($wrong, 0, '*' . client_tag('wrong-client') . '*')], [],
    'wrong password: nothing written to Redis');
my @auth_lines = $wrong->error_log_lines(qr/pow_shield: redis .*unavailable/);
is(scalar @auth_lines, 1, 'wrong password: logged once');
like($auth_lines[0] // '', qr/AUTH.*(WRONGPASS|invalid password)/i,
    'wrong password: the line names AUTH and the error')
    or diag($auth_lines[0]);
like($auth_lines[0] // '', qr/\[(error|crit|alert|emerg)\]/,
    'wrong password: logged at error level or above');
get($wrong, 'wrong-more') for 1 .. 10;
Time::HiRes::sleep(0.5);    # reconnect attempts fail AUTH again
get($wrong, 'wrong-more') for 1 .. 5;
is($wrong->redis_unavailable_count, 1,
    'wrong password: still one line after retries and more requests');
ok(!grep({ index($_, 'wrong-password') >= 0 } $wrong->error_log_lines),
    'wrong password: the password is not logged');

# no password for a Redis that requires one: NOAUTH, clearly logged

my $noauth = Test::PowShield->new;
$noauth->use_redis($redis);
start($noauth, 'redis://127.0.0.1:%%REDIS_PORT%%');

@rs = map { get($noauth, 'noauth-client') } 1 .. 4;
is(statuses(@rs), '200 200 200 429', 'no password: local bucket decides');
ok($noauth->error_log_count(qr/pow_shield: redis .*unavailable.*NOAUTH/),
    'no password: the line names NOAUTH')
    or diag(join "\n", $noauth->error_log_lines(qr/pow_shield: redis/));

# unix:/path

my $unix = Test::PowShield->new;
my $sock = $unix->testdir . '/redis.sock';
$unix->run_redis(args => ['--unixsocket', $sock, '--unixsocketperm', '777']);
start($unix, "unix:$sock");

@rs = map { get($unix, 'unix-client') } 1 .. 4;
is(statuses(@rs), '200 200 200 429', 'unix: socket: Redis counts');
is($unix->redis_cmd('ZCARD', 'pow:{' . client_tag('unix-client') . '}:w:3:3600000'),
    3, 'unix: socket: 3 entries in Redis');
is($unix->redis_unavailable_count, 0,
    'unix: socket: no "unavailable" line');
{
    my $list = $unix->redis_cmd('CLIENT', 'LIST') // '';
    my @u = grep { /\baddr=\Q$sock\E:/ && /\bflags=\S*U/ } split /\n/, $list;
    is(scalar @u, 1, 'the worker holds one connection, over the Unix socket')
        or diag($list);
    like($u[0] // '', qr/\bcmd=evalsha\b/, '... and ran the script with EVALSHA');
}

# reload with another prefix: the new workers use it, the old ones have
# closed their connections

$unix->write_file_expand('nginx.conf', conf("unix:$sock prefix=v2:"));
ok($unix->reload, 'reload with prefix=v2:');
@rs = map { get($unix, 'unix-client') } 1 .. 4;
is(statuses(@rs), '200 200 200 429', 'after reload: a new key, counted from 0');
is($unix->redis_cmd('ZCARD', 'v2:{' . client_tag('unix-client') . '}:w:3:3600000'),
    3, 'after reload: keys use prefix v2:');
{
    my $conns = sub {
        my $list = $unix->redis_cmd('CLIENT', 'LIST') // '';
        return scalar grep { /\baddr=\Q$sock\E:/ } split /\n/, $list;
    };
    my $deadline = Time::HiRes::time() + 5;
    Time::HiRes::sleep(0.1)
        while $conns->() != 1 && Time::HiRes::time() < $deadline;
    is($conns->(), 1, 'after reload: one connection (the old worker closed its own)');
}

# Redis closes idle connections (its "timeout" setting): the worker
# reconnects on the next request, silently (this is not a failure)

my $idle = Test::PowShield->new;
$idle->run_redis(args => ['--timeout', '1']);
start($idle, 'redis://localhost:%%REDIS_PORT%%');
is(get($idle, 'idle-1')->status, 200, 'redis://localhost:<port>, Redis with timeout 1: 200');
is($idle->redis_cmd('ZCARD', 'pow:{' . client_tag('idle-1') . '}:w:3:3600000'), 1,
    'redis://localhost: counted in Redis');
{
    my $conns = sub {
        my $list = $idle->redis_cmd('CLIENT', 'LIST') // '';
        return scalar grep { !/cmd=client\|list/ } split /\n/, $list;
    };
    my $deadline = Time::HiRes::time() + 10;
    Time::HiRes::sleep(0.2)
        while $conns->() > 0 && Time::HiRes::time() < $deadline;
    is($conns->(), 0, 'Redis closed the idle connection');
}
@rs = map { get($idle, 'idle-2') } 1 .. 4;
is(statuses(@rs), '200 200 200 429', 'next requests: Redis decides again');
is($idle->redis_cmd('ZCARD', 'pow:{' . client_tag('idle-2') . '}:w:3:3600000'), 3,
    '... counted in Redis');
is($idle->redis_unavailable_count, 0,
    'an idle connection closed by Redis is not logged as a failure');

# a database Redis does not have (/99 with 16 databases): SELECT fails,
# clearly logged, requests fall back

my $baddb = Test::PowShield->new;
$baddb->use_redis($idle->redis);
start($baddb, 'redis://127.0.0.1:%%REDIS_PORT%%/99');
@rs = map { get($baddb, 'baddb') } 1 .. 4;
is(statuses(@rs), '200 200 200 429', '/99: the local bucket decides');
my @sel = $baddb->error_log_lines(qr/pow_shield: redis \S+ unavailable/);
is(scalar @sel, 1, '/99: logged once');
like($sel[0] // '', qr/SELECT.*(out of range|ERR)/i,
    '/99: the line names SELECT and the error') or diag($sel[0]);

###############################################################################

$auth->done_testing;
