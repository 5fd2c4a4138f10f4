#!/usr/bin/perl

# The Node.js client (clients/node): `npm install ./clients/node` works
# offline (no dependencies) and the installed package imports as ESM and
# CommonJS; its own tests (node --test clients/node/test/) pass, among them
# those against this module: it pays its way through, waits with
# preferWait, stops when blocked and honours its bound (nothing is sent
# after a challenge it gave up on).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my $NODE = $ENV{TEST_NODE} || 'node';
plan(skip_all => 'no node (apt-get install nodejs)')
    unless system("$NODE --version >/dev/null 2>&1") == 0;

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    log_format node '$http_x_client $status $pow_shield_result';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/node.log node;

        add_header X-Result $pow_shield_result always;

        pow_shield_key $http_x_client;

        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 3;
        }

        location /echo/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 2;
            proxy_pass http://127.0.0.1:%%PORT_8081%%/;
        }

        location /fast/ {
            pow_shield_limit 1 2s;
            pow_shield_difficulty 1;
        }

        location /red/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 1;
            pow_shield_strikes 2 60s;
        }

        location /hard/ {
            pow_shield_limit 1 1h;
            pow_shield_difficulty 12;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name localhost;
        location / { return 200 "echo\n"; }
    }
EOF

for my $dir (qw(api fast red hard)) {
    $t->write_file("html/$dir/data.json", qq({"dir":"$dir"}\n));
}

$t->run;

###############################################################################

my $repo = $Test::PowShield::REPO;
my $dir = $t->testdir;
my $base = 'http://127.0.0.1:' . $t->port(8080);

# npm install ./clients/node, into an application of its own
{
    $t->write_file('app/package.json', qq({"name":"app","version":"1.0.0","private":true}\n));
    my $out = qx{cd '$dir/app' && npm install --offline --no-audit --no-fund --loglevel=error '$repo/clients/node' 2>&1};
    is($?, 0, 'npm install ./clients/node succeeds offline') or diag($out);
    ok(-e "$dir/app/node_modules/pow-shield/package.json", 'installed as node_modules/pow-shield');

    $t->write_file('app/esm.mjs', <<'EOF');
import { powFetch, BlockedError } from 'pow-shield';
const r = await powFetch(process.argv[2], { headers: { 'X-Client': 'node-esm' } });
console.log(r.status, r.headers.get('X-Result'), typeof BlockedError);
EOF
    $t->write_file('app/cjs.js', <<'EOF');
const { withPowShield } = require('pow-shield');
withPowShield(fetch)(process.argv[2], { headers: { 'X-Client': 'node-cjs' } })
  .then((r) => console.log(r.status, r.headers.get('X-Result')));
EOF
    $t->http_get('/api/data.json', 'X-Client' => $_) for qw(node-esm node-cjs);
    is(scalar qx{cd '$dir/app' && NODE_NO_WARNINGS=1 $NODE esm.mjs '$base/api/data.json' 2>&1},
        "200 solved function\n", 'the installed package, imported as ESM, pays a 429');
    is(scalar qx{cd '$dir/app' && NODE_NO_WARNINGS=1 $NODE cjs.js '$base/api/data.json' 2>&1},
        "200 solved\n", 'the installed package, required as CommonJS, pays a 429');
}

# the package's own tests, those against this module included

{
    local $ENV{POW_SHIELD_TEST_BASE} = $base;
    my $out = qx{cd '$repo/clients/node' && $NODE --test test/ 2>&1};
    is($?, 0, 'node --test clients/node/test/ passes') or diag($out);
    my ($pass) = $out =~ /^# pass (\d+)$/m;
    my ($skipped) = $out =~ /^# skipped (\d+)$/m;
    ok($pass && $pass >= 30, "node --test: $pass tests passed") or diag($out);
    is($skipped, 0, 'none skipped: the module tests ran against this server') or diag($out);
}

# what the server saw

my @log = split /\n/, $t->read_file('node.log');
my @hard = grep { /^node-hard / } @log;
is_deeply(\@hard, ['node-hard 200 pass', 'node-hard 429 challenge'],
    'gave up at the bound: nothing sent after the difficulty-12 challenge');
is_deeply([grep { /^node-red / } @log],
    ['node-red 200 pass', 'node-red 429 challenge', 'node-red 429 challenge', 'node-red 403 blocked'],
    'blocked: one request, no retry');
is_deeply([grep { /^node-wait / } @log],
    ['node-wait 200 pass', 'node-wait 429 challenge', 'node-wait 200 pass'],
    'preferWait: waited, paid nothing');

done_testing;
