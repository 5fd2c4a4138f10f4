#!/usr/bin/perl

# A broken or hostile cluster node that answers every command with a MOVED
# to a new host name (docs/operations.md, "Redis Cluster"): without a
# resolver names are not resolved, so those requests are decided by
# pow_shield_fail, and the error
# log gets at most 16 "announced by name" lines and then one saying that
# further ones are not logged, not one line per request (and the worker's
# list of such names stays short).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :redis http_conf);

###############################################################################

my $t = Test::PowShield->new;

# Every command in what it read, answered: SCRIPT LOAD with a SHA, CLUSTER
# SLOTS with an error (no map), anything else with a MOVED to a new name.
my $n = 0;
fake_peer($t->port(8094), sub {
    my ($buf) = @_;
    my $out = '';
    while ($buf =~ s/^\*(\d+)\r\n//) {
        my @args;
        for (1 .. $1) {
            $buf =~ s/^\$(\d+)\r\n// or last;
            push @args, substr($buf, 0, $1, '');
            $buf =~ s/^\r\n//;
        }
        my $cmd = uc($args[0] // '');
        if ($cmd eq 'SCRIPT') {
            $out .= "\$40\r\n" . ('0' x 40) . "\r\n";
        } elsif ($cmd eq 'CLUSTER') {
            $out .= "-ERR not now\r\n";
        } else {
            $n++;
            $out .= "-MOVED 1 node-$n.invalid:7000\r\n";
        }
    }
    return $out;
});

$t->write_file_expand('nginx.conf', http_conf(<<'EOF', workers => 1));
    pow_shield_secret "cluster-moved-names-secret-0123456789ab";
    pow_shield_redis redis://127.0.0.1:%%PORT_8094%% cluster timeout=1s connect_timeout=1s;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 1000 1h;
            pow_shield_key $http_x_client;
        }
    }
EOF
$t->write_file('html/api/data.json', '{"ok":true}');
$t->run;

###############################################################################

my @statuses = map { $t->http_get('/api/data.json', 'X-Client' => "c$_")->status // 'none' }
    1 .. 40;
is(join(' ', @statuses), join(' ', ('200') x 40),
    'every request moved to a name: decided by pow_shield_fail (local)');
my $named = $t->error_log_count(qr/redis cluster node \S+ is announced by name/);
cmp_ok($named, '<=', 16, "at most 16 names logged ($named), not one per request");
cmp_ok($named, '>=', 1, '... the first ones are');
is($t->error_log_count(qr/more than 16 nodes announced by name/), 1,
    '... then one line saying further ones are not logged');

###############################################################################

$t->done_testing;
