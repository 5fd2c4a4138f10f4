#!/usr/bin/perl

# pow_shield_dry_run (docs/directives.md): decide, count, log and set variables,
# but never reject.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my $t = Test::PowShield->new;

my $conf = http_conf(<<'EOF');
    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;
        pow_shield_dry_run on;

        location /dry/ {
            pow_shield_limit 2 1h;
            pow_shield_dry_run DRY;
        }

        location /enforced/ {
            pow_shield_limit 2 1h;
            pow_shield_dry_run off;
        }
    }
EOF

(my $dry = $conf) =~ s/DRY/on/;
$t->write_file_expand('nginx.conf', $dry);
$t->write_file('html/dry/data.json', qq({"ok":true}\n));
$t->write_file('html/enforced/data.json', qq({"ok":true}\n));

$t->run;

###############################################################################

sub get {
    my ($client, $uri, %h) = @_;
    return $t->http_get($uri, 'X-Client' => $client, %h);
}

# dry run never rejects: everything over the limit passes, still counted

my @remaining;
for my $i (1 .. 5) {
    my $r = get('dry', '/dry/data.json');
    is($r->status, 200, "dry run, request $i of limit 2: 200");
    push @remaining, $r->header('X-RateLimit-Remaining') // 'none';
    if ($i == 5) {
        is($r->body, qq({"ok":true}\n), 'dry run over the limit: content served');
        is($r->header('X-RateLimit-Limit'), 2,
            'dry run: rate-limit headers are set');
        ok($r->has_header('RateLimit'), 'dry run: RateLimit header');
        is($r->header('X-Result'), 'challenge',
            'dry run over the limit: $pow_shield_result is the decision');
    }
}
is("@remaining", '1 0 0 0 0', 'dry run: requests are counted');

# under the limit the result is pass

is(get('dry-green', '/dry/data.json')->header('X-Result'), 'pass',
    'dry run under the limit: result pass');

# a wrong solution is not rejected either

my $r = get('dry', '/dry/data.json', 'X-PoW-Challenge' => 'a.b',
    'X-PoW-Nonce' => '1');
is($r->status, 200, 'dry run, malformed solution over the limit: 200');

# the would-be rejection is logged with "dry run" and the client address

ok(scalar $t->error_log_lines(qr{dry run.*127\.0\.0\.1.*/dry/data\.json}),
    'dry run: decision logged with "dry run" and the client address');
ok(scalar $t->error_log_lines(qr{\[warn\].*dry run}),
    'dry run: logged at the default level warn');

# "pow_shield_dry_run off" in a location overrides the server's "on"

get('enforced', '/enforced/data.json') for 1 .. 2;
$r = get('enforced', '/enforced/data.json');
is($r->status, 429, 'dry run off in the location: 429 over the limit');
ok($r->has_header('X-PoW-Challenge'), 'dry run off: challenge issued');

# switching dry run off with a reload enforces what was counted

(my $enforce = $conf) =~ s/DRY/off/;
$t->write_file_expand('nginx.conf', $enforce);
ok($t->reload, 'reload with dry run off');
$r = get('dry', '/dry/data.json');
is($r->status, 429, 'counted in dry run, enforced after the reload: 429');

###############################################################################

$t->done_testing;
