#!/usr/bin/perl

# Cluster mode, one Redis, two workers: a /24 over its `key=$pow_shield_net`
# limit is refused on the node for every new address of it until its reset,
# not by one stacked script call per request (issue 37 point 6, issue 38
# point 3: at most 0.1 Redis commands a request). Another /24's client
# passes; a /24's refusal strikes nobody.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util :redis);

my $t = Test::PowShield->new->require_redis;
$t->run_redis;

my $conf = http_conf(<<'EOF', workers => 2);
    pow_shield_secret "cluster-net-refused-suite-secret-0123456";
    pow_shield_redis redis://127.0.0.1:%%REDIS_PORT%%;

    server {
        %%TEST_SERVER%%

        set_real_ip_from 127.0.0.1;
        real_ip_header X-Real-IP;
        add_header X-Result $pow_shield_result always;
        add_header X-Strikes $pow_shield_strikes always;

        location /api/ {
            pow_shield_limit 60 1m;
            pow_shield_limit 40 1h name=net key=$pow_shield_net;
        }
    }
EOF

$t->write_file_expand('nginx.conf', $conf);
$t->write_file('html/api/data.json', qq({"ok":true}\n));
$t->run;

sub from { $t->http_get('/api/data.json', 'X-Real-IP' => $_[0]) }

sub commands {
    my %c = ($t->redis_cmd('INFO', 'commandstats') // '') =~ /^cmdstat_([^:]+):calls=(\d+)/mg;
    my $n = 0;
    $n += $_ for values %c;
    return $n;
}

# The /24's 40: forty addresses, one request each.
my @first = map { from("198.51.100.$_") } 1 .. 40;
is(scalar(grep { $_->status == 200 } @first), 40, 'the /24 uses up its 40 from 40 addresses');
my $refused = from('198.51.100.41');
is($refused->status, 429, "the next address of it: 429 (Redis's refusal, by the /24's limit)");

# Requests from new addresses of the refused /24, three per address.
my $before = commands();
my (%status, %strikes);
for my $a (42 .. 254) {
    for (1 .. 3) {
        my $r = from("198.51.100.$a");
        $status{$r->status}++;
        $strikes{$r->header('X-Strikes') // '-'}++;
    }
}
my $requests = 213 * 3;
# (INFO itself is one command.)
my $used = commands() - $before - 1;
is(join(',', keys %status), '429', "$requests requests from new addresses of it: all 429");
is(join(',', sort keys %strikes), '0', '... none struck');
cmp_ok($used, '<=', 0.1 * $requests,
    "... Redis ran $used commands for them: at most 0.1 a request");
diag(sprintf('%d requests of the refused /24: %d Redis commands (%.3f a request)',
    $requests, $used, $used / $requests));

# Another network's client passes.
is(from('203.0.113.9')->status, 200, 'a client of another /24: 200');

done_testing();
