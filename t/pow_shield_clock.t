#!/usr/bin/perl

# Local windows run on nginx's monotonic clock (docs/operations.md): a step of
# the wall clock neither freezes nor empties them, and the headers that show
# epoch times still follow the wall clock.  The step is made with
# libfaketime, which moves the wall clock only (FAKETIME_DONT_FAKE_MONOTONIC).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my ($faketime) = grep { -f } $ENV{TEST_FAKETIME_LIB} // (),
    map { "$_/faketime/libfaketime.so.1" }
        qw(/usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib);
plan(skip_all => 'libfaketime not found (Debian: libfaketime)')
    unless $faketime;

my $t = Test::PowShield->new;

# workers keep only the environment named here; libfaketime reads it
my $env = join '', map { "env $_;\n" } qw(FAKETIME_TIMESTAMP_FILE
    FAKETIME_NO_CACHE FAKETIME_DONT_FAKE_MONOTONIC DONT_FAKE_MONOTONIC);

$t->write_file_expand('nginx.conf', http_conf(<<'EOF', main => $env));
    pow_shield_secret "clock-suite-secret-0123456789abcdefgh";

    server {
        %%TEST_SERVER%%

        location /api/ {
            # two in any 2 s
            pow_shield_limit 2 2s;
            pow_shield_key $http_x_client;
        }
    }
EOF

$t->write_file('html/api/data.json', qq({"ok":true}\n));

# the wall-clock offset nginx sees, re-read at every clock reading
my $offset = $t->testdir . '/faketime';
$t->write_file('faketime', "+0\n");
{
    local $ENV{LD_PRELOAD} = $faketime;
    local $ENV{FAKETIME_TIMESTAMP_FILE} = $offset;
    local $ENV{FAKETIME_NO_CACHE} = 1;
    local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = 1;
    local $ENV{DONT_FAKE_MONOTONIC} = 1;
    $t->run;
}

###############################################################################

sub get { $t->http_get('/api/data.json', 'X-Client' => 'stepper') }

is(join(' ', map { get()->status } 1 .. 3), '200 200 429',
    'premise: the window is full');

# the wall clock steps an hour back
$t->write_file('faketime', "-3600\n");

# more than a window of monotonic time later, both requests have left it
Time::HiRes::sleep(2.5);
my $r = get();
is($r->status, 200,
    'a wall-clock step back does not freeze the window: 2.5 s later, 200');

# this request leaves the window in 2 s, on the stepped wall clock
my $wall = Test::PowShield::now_ms() / 1000 - 3600;
my $reset = $r->header('X-RateLimit-Reset') // 0;
ok($reset >= $wall && $reset <= $wall + 4,
    "X-RateLimit-Reset follows the stepped wall clock ($reset, now ~"
        . int($wall) . ')');

###############################################################################

$t->done_testing;
