#!/usr/bin/perl

# pow_shield_admin and limit keys (docs/operations.md, "Seeing and lifting
# a block"): any admin key is also read as a `pow_shield_limit ... key=`
# value: GET ?key=198.51.100.0/24 or ?key=site shows its count under each
# keyed limit (`keyed`, by the limit's name), DELETE ?key= clears those
# counts, so that the network (or the site) is admitted again at once (and
# at another node within 2 s); a client's own counts stay. The docs'
# example, run as it is written (its limits, its curl commands, the
# answers it shows). The admin location's wait for Redis: Redis stopped, a
# client gone meanwhile. In local mode and in cluster mode with one Redis
# and two nodes (Test::PowShield::Modes).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Time::HiRes qw(sleep);
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;

###############################################################################

my $ops = do {
    open my $fh, '<', "$Test::PowShield::REPO/docs/operations.md" or die "operations.md: $!";
    local $/;
    <$fh>;
};
my ($section) = $ops =~ /(## Seeing and lifting a block.*?)\n## /s
    or die 'docs/operations.md: no "Seeing and lifting a block"';
my ($admin) = $section =~ /```nginx\n(.*?)```/s;
# "With `pow_shield_limit ...` and `pow_shield_limit ...`:" then the example
my ($with) = $section =~ /\nWith (`pow_shield_limit.*?):\n\n```\n/s
    or die 'docs/operations.md: the limit keys example is missing';
my @limits = $with =~ /`(pow_shield_limit [^`]+)`/g;
is(scalar @limits, 2, 'the docs\' example has two keyed limits');
my ($example) = $section =~ /\nWith `pow_shield_limit.*?:\n\n```\n(.*?)```/s;
my @steps;    # [method, query, answer shown or undef]
for my $line (split /\n/, $example) {
    if ($line =~ m{^\$ curl -s (?:-X (\w+) )?'http://127\.0\.0\.1(/pow-shield/admin\?key=[^']+)'$}) {
        push @steps, [$1 // 'GET', $2, undef];
    } elsif (@steps && $line =~ /^\{/) {
        $steps[-1][2] = $line;
    }
}
is(join(' ', map { "$_->[0] $_->[1]" } @steps),
    'GET /pow-shield/admin?key=198.51.100.0/24 DELETE /pow-shield/admin?key=198.51.100.0/24 '
    . 'DELETE /pow-shield/admin?key=site',
    'the docs\' example: show the /24, lift it, lift the site');
my ($net) = $limits[0] =~ /^pow_shield_limit (\d+) 1m name=net key=\$pow_shield_net$/
    or die "the example's first limit is no longer per /24 a minute: $limits[0]";
my $limit_lines = join "\n", map { "            $_;" } @limits;

my $conf = http_conf(<<"EOF");
    %%REDIS%%
    pow_shield_secret "admin-keys-suite-secret-0123456789ab";
    pow_shield_difficulty 1;
    pow_shield_strikes off;

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    server {
        %%TEST_SERVER%%

        location /docs/ {
            pow_shield_limit 1000 1m;
$limit_lines
        }

$admin
    }
EOF

sub get {
    my ($node, $ip) = @_;
    return $node->http_get('/docs/data.json', 'X-Real-IP' => $ip);
}

sub admin {
    my ($node, $method, $path) = @_;
    return $node->http("$method $path HTTP/1.1\r\nHost: localhost\r\n"
        . "Content-Length: 0\r\nConnection: close\r\n\r\n");
}

sub keyed {
    my ($store, $name) = @_;
    my ($entry) = grep { ($_->{limit} // '') eq $name } @{$store->{keyed} // []};
    return $entry // {};
}

###############################################################################

Test::PowShield::Modes->each_mode($conf, nodes => 2, redis => 'timeout=3s',
    files => { 'html/docs/data.json' => qq({"ok":true}\n) }, sub {
    my ($m) = @_;
    my $t = $m->node(1);
    my $held = sub { $m->cluster ? $_[0]{redis} : $_[0]{node} };
    my ($show, $lift_net, $lift_site) = @steps;

    # the /24 uses up its limit from one address

    my %status;
    $status{get($t, '198.51.100.1')->status}++ for 1 .. $net;
    is($status{200}, $net, "premise: the /24's $net requests pass");
    is(get($t, '198.51.100.2')->status, 429,
        'premise: another address of the /24 is refused (by "net")');

    # the docs' view of the /24

    my $r = admin($t, $show->[0], $show->[1]);
    is($r->status, 200, 'show the /24: 200');
    my $view = $r->json;
    my $doc = json_decode($show->[2] =~ s/,\.\.\.,/,/r =~ s/"limits":\[\.\.\.\],//r);
    is_deeply([map { $_->{limit} } @{$doc->{node}{keyed}}], ['net', 'site'],
        'the docs\' view lists both keyed limits by name');
    is($view->{key}, '198.51.100.0/24', 'show: the key');
    my $seen = keyed($held->($view), 'net');
    my $shown = keyed($doc->{node}, 'net');
    is($seen->{count} // -1, $net, "show: the /24's count under \"net\" ($net)");
    is(join(',', map { $seen->{$_} // '?' } qw(requests window_ms approx)),
        join(',', map { $shown->{$_} } qw(requests window_ms approx)),
        '... with the numbers the docs show');
    cmp_ok($seen->{reset_in_ms} // 0, '>', 0, '... and when it resets');
    is(keyed($held->($view), 'site')->{count} // -1, 0,
        'show: the /24 is no value of "site" (key=site): 0 there');
    my $client = $held->(admin($t, 'GET', '/pow-shield/admin?key=198.51.100.1')->json);
    my ($own) = grep { $_->{requests} == 1000 } @{$client->{limits}};
    is($own->{count} // -1, $net, 'premise: the address counted its own requests');
    is(keyed($client, 'net')->{count} // -1, 0, 'an address is no /24 value: 0 under "net"');

    # the docs' lift of the /24: its counts go, the address's stay

    $r = admin($t, $lift_net->[0], $lift_net->[1]);
    is($r->status, 200, 'lift the /24: 200');
    if ($m->cluster) {
        is($r->json->{lifted}{keyed}, JSON::PP::true, 'lift: the keyed counts');
        is($r->json->{lifted}{redis}, JSON::PP::true, 'lift: in Redis');
    } else {
        is($r->body, "$lift_net->[2]\n", 'lift: the answer the docs show');
    }
    is(get($t, '198.51.100.2')->status, 200, 'lifted: the /24 is admitted again at once');
    $view = admin($t, $show->[0], $show->[1])->json;
    is(keyed($held->($view), 'net')->{count} // -1, 1, 'show after the lift: only the new request');
    $client = $held->(admin($t, 'GET', '/pow-shield/admin?key=198.51.100.1')->json);
    ($own) = grep { $_->{requests} == 1000 } @{$client->{limits}};
    is($own->{count} // -1, $net, 'the address keeps its own count');

    # the docs' lift of the site

    is(keyed($held->(admin($t, 'GET', '/pow-shield/admin?key=site')->json), 'site')->{count}
        // -1, $net + 1, 'show the site: every request admitted (a refused one counts nowhere)');
    is(admin($t, $lift_site->[0], $lift_site->[1])->status, 200, 'lift the site: 200');
    is(keyed($held->(admin($t, 'GET', '/pow-shield/admin?key=site')->json), 'site')->{count}
        // -1, 0, 'show after the lift: the site counts nothing');
    # cluster mode, two nodes: a node that refused the /24 on its own
    # asks Redis again within 2 s of a lift at the other

    return unless $m->cluster;
    my $b = $m->node(2);
    %status = ();
    $status{get($t, '198.51.100.1')->status}++ for 2 .. $net;
    is(get($t, '198.51.100.6')->status, 429, 'premise: the /24 is over its limit again');
    is(statuses(map { get($b, "198.51.100.$_") } 7 .. 9), '429 429 429',
        'premise: node B refuses the /24 too');
    is(admin($t, 'DELETE', '/pow-shield/admin?key=198.51.100.0/24')->status, 200,
        'lifted at node A');
    my ($tries, $served) = (0, 429);
    while ($served == 429 && $tries < 40) {
        $tries++;
        $served = get($b, '198.51.100.10')->status;
        sleep 0.1 if $served == 429;
    }
    is($served, 200, "node B: the /24 admitted again (after $tries tries, 0.1 s apart)");
    cmp_ok($tries, '<=', 30, '... within about 2 s (and a margin for a slow machine)');

    # cluster mode: the admin location waits for Redis as the access
    # handler does; Redis not answering within its timeout (3 s) is said,
    # and a client gone while it waits leaves nothing behind

    $m->redis->pause;
    my $gone = $t->send_request("GET /pow-shield/admin?key=site HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\n\r\n");
    close $gone;
    $r = admin($t, 'GET', '/pow-shield/admin?key=site');
    is($r->json->{redis}{error}, 'unavailable', 'Redis stopped: the view says Redis is unavailable');
    is(keyed($r->json->{node}, 'site')->{count} // -1, 0, '... with the node\'s own');
    $r = admin($t, 'DELETE', '/pow-shield/admin?key=198.51.100.0/24');
    is($r->status, 503, 'Redis stopped: a lift is 503');
    is($r->json->{lifted}{redis}, JSON::PP::false, '... lifted on the node only');
    $m->redis->resume;
    ok(eventually(10, sub { admin($t, 'DELETE', '/pow-shield/admin?key=198.51.100.0/24')->status
        == 200 }), 'Redis back: a lift is 200 again (once the node tries Redis again)');
    is(get($t, '198.51.100.9')->status, 200, 'the node serves on (the request gone while '
        . 'it waited touched nothing)');
});

###############################################################################

Test::PowShield::Modes->done_testing;
