#!/usr/bin/perl

# Web Bot Auth (docs/bots.md, pow_shield_bot_keys): a request signed with a
# configured bot's key sets $pow_shield_bot to the bot's name; a map on it
# gives the bot one limit under its name, whatever address it comes from.
# Another key, an expired signature, another authority, a tampered
# signature and a replayed nonce leave it empty: the request is anonymous,
# counted as its address, never refused or struck for its signature.  A
# reload reads a changed key file; the metrics count each bot's requests;
# the CLI signs (get --sign-key) and is recognised.  Every scenario runs
# in local mode and in cluster mode (two nodes on one Redis; the replay
# cache is each node's zone there).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use Test::PowShield qw(:util :redis);
use Test::PowShield::Metrics qw(scrape metric);
use Test::PowShield::Modes;

###############################################################################

my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$Test::PowShield::REPO/objs/pow-shield";
plan(skip_all => "no $cli (make build)") unless -x $cli;

my $keys = tempdir(CLEANUP => 1);

my $PY = $ENV{TEST_PYTHON} || '/usr/bin/python3';
$ENV{PYTHONPATH} = "$Test::PowShield::REPO/clients/python";
my $python_ok = -x $PY
    && system($PY, '-c', 'import requests, httpx, cryptography') == 0;

# A new key in $keys/$name.jwk; returns its directory (the public JWK Set).
sub new_key {
    my ($name) = @_;
    my $dir = `$cli bot-key new $keys/$name.jwk 2>/dev/null`;
    die "bot-key new $name failed\n" unless $? == 0 && $dir =~ /"keys"/;
    return $dir;
}

# The signature headers of one request, as a hash, from `bot-key sign`.
sub signed {
    my ($name, $url, @opts) = @_;
    my @lines = `$cli bot-key sign --sign-key $keys/$name.jwk $url @opts`;
    die "bot-key sign $name failed\n" unless $? == 0 && @lines;
    return map { chomp; split /: /, $_, 2 } @lines;
}

# $pow_shield_bot as the response says it (add_header leaves out an empty one).
sub bot { $_[0]->header('X-Bot') // '' }

my %directory = map { ($_ => new_key($_)) } qw(examplebot otherbot stranger newkey);

my $conf = http_conf(<<'EOF', workers => 2);
    pow_shield_secret "bots-suite-secret-0123456789abcdefghij";
    %%REDIS%%

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Forwarded-For;

    pow_shield_bot_keys examplebot bots/examplebot.json;
    pow_shield_bot_keys otherbot bots/otherbot.json;

    map $pow_shield_bot $pk {
        ""      $pow_shield_client;
        default bot:$pow_shield_bot;
    }

    server {
        %%TEST_SERVER%%

        add_header X-Bot $pow_shield_bot always;
        add_header X-Result $pow_shield_result always;
        add_header X-Strikes $pow_shield_strikes always;

        location /api/ {
            pow_shield_limit 3 1h;
            pow_shield_key $pk;
            pow_shield_difficulty 1;
        }

        location /open/ {
            pow_shield_limit 1000 1h;
            pow_shield_key $pk;
        }

        # an internal redirect re-runs the access phase: one verification
        location /redirect/ {
            try_files $uri /open/data.json;
        }

        location = /metrics {
            pow_shield_status;
        }
    }
EOF

my %files = (
    'html/api/data.json'  => "{}\n",
    'html/open/data.json' => "{}\n",
    'bots/examplebot.json' => $directory{examplebot},
    'bots/otherbot.json'   => $directory{otherbot},
);

my $n = 0;
Test::PowShield::Modes->each_mode($conf, nodes => 2,
    redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $n++;
    # Fresh addresses per mode: cluster mode's limits live in one Redis.
    my $ip = sub { "198.51.100." . ($n * 50 + $_[0]) };
    my $t = $m->node(1);

    my $r = $t->http_get('/open/data.json', 'X-Forwarded-For' => $ip->(1));
    is($r->status, 200, "$m: an unsigned request passes");
    is(bot($r), '', "$m: an unsigned request is anonymous");

    # One limit under the bot's name, from three addresses and both nodes.
    my $url = 'http://localhost/api/data.json';
    for my $i (1 .. 3) {
        my $r = $m->node($i)->http_get('/api/data.json', signed('examplebot', $url),
            'X-Forwarded-For' => $ip->(10 + $i));
        is($r->status, 200, "$m: signed request $i from its own address passes");
        is(bot($r), 'examplebot', "$m: signed request $i is the bot's");
    }
    $r = $m->node(4)->http_get('/api/data.json', signed('examplebot', $url),
        'X-Forwarded-For' => $ip->(14));
    is($r->status, 429, "$m: the 4th signed request, from a 4th address, is over the bot's limit of 3");
    is(bot($r), 'examplebot', "$m: and still the bot's");
    $r = $m->node(1)->http_get('/api/data.json', 'X-Forwarded-For' => $ip->(11));
    is($r->status, 200, "$m: an unsigned request from a bot's address has that address's own limit");

    # The other bot has its own limit.
    $r = $t->http_get('/api/data.json', signed('otherbot', $url), 'X-Forwarded-For' => $ip->(11));
    is(bot($r), 'otherbot', "$m: another configured bot is known by its own name");
    is($r->status, 200, "$m: under its own limit");

    # Anonymous, never refused nor struck for the signature.
    my $now = time;
    my %cases = (
        'another key'       => [signed('stranger', $url)],
        'an expired signature' => [signed('examplebot', $url,
            '--created', $now - 120, '--expires', $now - 60)],
        'a signature for another authority' => [signed('examplebot', 'http://other.example/')],
        'a signature made for later' => [signed('examplebot', $url,
            '--created', $now + 600, '--expires', $now + 660)],
        'a lifetime over 1 h' => [signed('examplebot', $url,
            '--created', $now, '--expires', $now + 3601)],
    );
    my %tampered = signed('examplebot', $url);
    $tampered{Signature} =~ s/^(sig1=:)(.)/$1 . ($2 eq 'A' ? 'B' : 'A')/e;
    $cases{'a tampered signature'} = [%tampered];
    my %moved = signed('examplebot', $url, '--signature-agent', 'https://examplebot.test/keys');
    $moved{'Signature-Agent'} = 'sig1="https://elsewhere.test/keys"';
    $cases{'a changed Signature-Agent'} = [%moved];
    my $k = 20;
    for my $case (sort keys %cases) {
        $k++;
        my $r = $t->http_get('/open/data.json', @{$cases{$case}}, 'X-Forwarded-For' => $ip->($k));
        is($r->status, 200, "$m: $case passes as any request");
        is(bot($r), '', "$m: $case is anonymous");
        is($r->header('X-Strikes'), '0', "$m: $case is no strike");
    }

    # The signature agent, signed, is accepted.
    $r = $t->http_get('/open/data.json',
        signed('examplebot', $url, '--signature-agent', 'https://examplebot.test/keys'));
    is(bot($r), 'examplebot', "$m: a signed Signature-Agent is the bot's");

    # A nonce seen twice within the signature's lifetime.
    my %once = signed('examplebot', $url);
    $r = $t->http_get('/open/data.json', %once, 'X-Forwarded-For' => $ip->(40));
    is(bot($r), 'examplebot', "$m: the nonce's first use is the bot's");
    $r = $t->http_get('/open/data.json', %once, 'X-Forwarded-For' => $ip->(41));
    is(bot($r), '', "$m: the same nonce again is anonymous (a replay)");
    is($r->status, 200, "$m: and passes as any request");

    # An internal redirect keeps the request's verdict (its nonce is
    # recorded once).
    $r = $t->http_get('/redirect/none', signed('examplebot', 'http://localhost/redirect/none'));
    is($r->status, 200, "$m: a signed request redirected internally passes");
    is(bot($r), 'examplebot', "$m: and is still the bot's");

    # The CLI signs, and each of its requests is fresh.
    my $port = $t->port(8080);
    for my $i (1 .. 2) {
        my ($rc, $out) = $t->run_argv($cli, 'get', '-si', '--sign-key', "$keys/otherbot.jwk",
            "http://127.0.0.1:$port/open/data.json");
        is($rc, 0, "$m: pow-shield get --sign-key, request $i");
        like($out, qr/^X-Bot: otherbot\r?$/mi, "$m: the CLI's request $i is the bot's");
    }

    # The Python client signs (requests and httpx), each resend afresh.
    SKIP: {
        skip "$PY with requests, httpx and cryptography not found", 2 unless $python_ok;
        for my $via ('requests', 'httpx') {
            my $code = $via eq 'requests'
                ? 'r = pow_shield.Session(bot=bot).get(url)'
                : 'import httpx; r = httpx.get(url, auth=pow_shield.HttpxAuth(bot=bot))';
            my ($rc, $out) = $t->run_argv($PY, '-c', "import sys, pow_shield; "
                . "bot = pow_shield.BotSigner.from_file(sys.argv[1]); url = sys.argv[2]; $code; "
                . "print(r.status_code, r.headers.get('X-Bot'))",
                "$keys/otherbot.jwk", "http://127.0.0.1:$port/open/data.json");
            is($out, "200 otherbot\n", "$m: the Python client's request through $via is the bot's");
        }
    }

    my $metrics = scrape($t, '/metrics');
    my $verified = metric($metrics, 'pow_shield_bot_requests_total', bot => 'examplebot');
    ok(defined $verified && $verified >= 2, "$m: the bot's verified requests are counted ($verified)");
    ok(defined metric($metrics, 'pow_shield_bot_requests_total', bot => 'otherbot'),
        "$m: every configured bot is a series");
    ok(metric($metrics, 'pow_shield_bot_replays_total', bot => 'examplebot') >= 1,
        "$m: the replay is counted");

    # A reload reads the changed key file: otherbot's new key.
    for my $node ($m->nodes) {
        $node->write_file('bots/otherbot.json', $directory{newkey});
        ok($node->reload, "$m: reloaded with otherbot's new key");
    }
    $r = $t->http_get('/open/data.json', signed('newkey', $url));
    is(bot($r), 'otherbot', "$m: after the reload the new key is otherbot's");
    $r = $t->http_get('/open/data.json', signed('otherbot', $url));
    is(bot($r), '', "$m: and its old key no longer");
    $r = $t->http_get('/open/data.json', signed('examplebot', $url));
    is(bot($r), 'examplebot', "$m: the other bot's file is read again too");
});

###############################################################################
# pow-shield bot-keys: a bot's key directory fetched, checked and written
# for pow_shield_bot_keys (a host-only URL gets the well-known path).

{
    my $t = Test::PowShield->new;
    $t->write_file('html/.well-known/http-message-signatures-directory', $directory{examplebot});
    $t->write_file('html/bad/.well-known/http-message-signatures-directory', qq({"keys": []}\n));
    $t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    server {
        %%TEST_SERVER%%
    }
EOF
    $t->run;
    my $port = $t->port(8080);
    my $file = $t->path('fetched.json');
    my ($rc, $out, $err) = $t->run_argv($cli, 'bot-keys', "http://127.0.0.1:$port", '-o', $file);
    is($rc, 0, 'bot-keys fetches the directory of a host');
    like($err, qr/1 Ed25519 key/, 'and says what it holds');
    is($t->read_file('fetched.json'), $directory{examplebot}, 'the file written is the directory');
    ($rc, $out, $err) = $t->run_argv($cli, 'bot-keys', "http://127.0.0.1:$port", '-o', $file);
    like($err, qr/unchanged/, 'fetched again unchanged, it is not rewritten');
    ($rc, $out, $err) = $t->run_argv($cli, 'bot-keys',
        "http://127.0.0.1:$port/bad/.well-known/http-message-signatures-directory", '-o', "$file.bad");
    isnt($rc, 0, 'a directory without a usable key is refused');
    ok(!-e "$file.bad", 'and nothing is written');
    ($rc, $out) = $t->run_argv($cli, 'bot-keys', "http://127.0.0.1:$port/none.json");
    is($rc, 22, 'a directory that is not there: exit 22, as curl -f');
    $t->stop;
}

###############################################################################
# nginx -t refuses a bad key file, naming the directive, the value, the
# file's line and the configuration's.

my $t = Test::PowShield->new;
$t->write_file('bots/broken.json', qq({\n  "keys": [\n    {"kty": "OKP",, }\n  ]\n}\n));
$t->write_file('bots/private.json', '{"keys": [' . `cat $keys/examplebot.jwk` . "]}\n");
$t->write_file('bots/rsa.json', qq({"keys": [{"kty": "RSA", "e": "AQAB", "n": "r4tm"}]}\n));
$t->write_file('bots/good.json', $directory{examplebot});
for my $case (
    ['broken.json', qr/invalid value "bots\/broken.json" in "pow_shield_bot_keys" directive: \S+broken.json: line 3: not JSON.* in \S+nginx.conf:\d+/],
    ['private.json', qr/invalid value "bots\/private.json" in "pow_shield_bot_keys" directive: \S+: line \d+: key 1 holds a private key/],
    ['rsa.json', qr/"pow_shield_bot_keys" directive: .*no Ed25519 key/],
    ['missing.json', qr/invalid value "bots\/missing.json" in "pow_shield_bot_keys" directive: .*No such file/],
) {
    my ($file, $re) = @$case;
    $t->write_file_expand('nginx.conf', http_conf(<<"EOF"));
    pow_shield_bot_keys examplebot bots/$file;
    server {
        %%TEST_SERVER%%
    }
EOF
    my ($rc, $out) = $t->test_config;
    isnt($rc, 0, "nginx -t refuses $file");
    like($out, $re, "the refusal of $file names the directive, the value, the file's line and nginx.conf's");
}
$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    pow_shield_bot_keys examplebot bots/good.json;
    pow_shield_bot_keys otherbot bots/good.json;
    server {
        %%TEST_SERVER%%
    }
EOF
my ($rc, $out) = $t->test_config;
like($out, qr/invalid value "otherbot" in "pow_shield_bot_keys" directive: key \S+ is already a key of bot "examplebot"/,
    'one key cannot be two bots');
$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    pow_shield_bot_keys "bad name" bots/good.json;
    server {
        %%TEST_SERVER%%
    }
EOF
($rc, $out) = $t->test_config;
like($out, qr/invalid value "bad name" in "pow_shield_bot_keys" directive: a bot name is/, 'a bot name is a label');

Test::PowShield::Modes->done_testing;
