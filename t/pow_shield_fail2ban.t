#!/usr/bin/perl

# The red zone at the network layer: the module logs one stable line per
# breaker opening and per ban, and the fail2ban filter and jail shipped in
# nginx-conf/fail2ban/ find exactly the blocked (by default) or banned
# ([mode=ban]) addresses in nginx's error log (fail2ban-regex), and nothing
# in a log of ordinary 429s and failed solutions.  The jails are off as
# shipped; the .local line of docs/operations.md turns the default one on,
# and then it passes fail2ban-client's configuration test.  No firewall
# rule is made here.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Examples ();

###############################################################################

plan(skip_all => 'fail2ban not installed (Debian: fail2ban)')
    unless `sh -c 'command -v fail2ban-regex'`;

my $F2B = "$Test::PowShield::REPO/nginx-conf/fail2ban";
my $FILTER = "$F2B/filter.d/pow-shield.conf";

my $conf = http_conf(<<'EOF');
    pow_shield_secret "fail2ban-suite-secret-0123456789abcdef";
    pow_shield_difficulty 1;

    # the client address is X-Real-IP's (what the lines must name)
    set_real_ip_from 127.0.0.1;
    real_ip_header X-Real-IP;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes STRIKES;
            pow_shield_ban 1h after=1;
        }

        location /keyed/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes STRIKES;
            pow_shield_ban 1h after=1;
            pow_shield_key $http_x_api_key;
        }

        location /dry/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes STRIKES;
            pow_shield_ban 1h after=1;
            pow_shield_dry_run on;
        }
    }
EOF

my ($banning, $calm) = map { Test::PowShield->new } 1 .. 2;
for ([$banning, '2 1h'], [$calm, '1000 1h']) {
    my ($t, $strikes) = @$_;
    (my $c = $conf) =~ s/STRIKES/$strikes/g;
    $t->write_file_expand('nginx.conf', $c);
    $t->write_file("html/$_/data.json", '{"ok":true}') for qw(api keyed dry);
    $t->run;
}

sub from {
    my ($t, $ip, $uri, %h) = @_;
    return $t->http_get("/$uri/data.json", 'X-Real-IP' => $ip, %h);
}

# what fail2ban-regex finds in a log: the addresses, one per match
sub matches {
    my ($log, $mode) = @_;
    my $filter = $mode ? "$FILTER\[mode=$mode\]" : $FILTER;
    my @ip = grep { /\S/ } split /\n/, `fail2ban-regex -o ip '$log' '$filter' 2>&1`;
    return join ' ', @ip;
}

###############################################################################

# 192.0.2.7 offends twice: the breaker opens and (after=1) bans it

is(statuses(map { from($banning, '192.0.2.7', 'api') } 1 .. 4), '200 429 429 403',
    'two offences open the breaker and ban');
is(from($banning, '192.0.2.7', 'api')->header('X-PoW-Shield'), 'banned',
    '... X-PoW-Shield: banned');

# the same with a custom key (an API key), and in a dry run: logged, but
# not as something a firewall should act on

from($banning, '192.0.2.8', 'keyed', 'X-API-Key' => 'k1') for 1 .. 3;
from($banning, '192.0.2.9', 'dry') for 1 .. 3;

# an address that only gets 429s and failed solutions (no breaker opens)

from($banning, '192.0.2.10', 'api') for 1 .. 2;
from($calm, '192.0.2.11', 'api') for 1 .. 2;
for (1 .. 10) {
    from($calm, '192.0.2.11', 'api',
        solution(from($calm, '192.0.2.11', 'api'), wrong => 1));
}
from($calm, '192.0.2.11', 'api', 'X-PoW-Challenge' => 'garbage', 'X-PoW-Nonce' => '1');

###############################################################################

# the lines, in their documented format

my @opened = $banning->error_log_lines(qr/pow_shield: breaker opened:/);
my @banned = $banning->error_log_lines(qr/pow_shield: client banned:/);
like($opened[0] // '', qr/\[error\] \d+#\d+: \*\d+ pow_shield: breaker opened: client=192\.0\.2\.7 key=address strikes=2 for=3600s, client: 192\.0\.2\.7,/,
    'breaker line: client, key kind, strikes, duration (at [error] by default)');
like($banned[0] // '', qr/\[error\] \d+#\d+: \*\d+ pow_shield: client banned: client=192\.0\.2\.7 key=address openings=1 for=3600s, client: 192\.0\.2\.7,/,
    'ban line: client, key kind, openings, duration');
is(scalar(grep { /client=192\.0\.2\.7 / } @banned), 1, 'one ban line per ban');
ok((grep { /client=192\.0\.2\.8 key=custom/ } @banned), 'custom key: key=custom');
ok((grep { /dry run, not enforced: client banned: client=192\.0\.2\.9/ }
        $banning->error_log_lines), 'dry run: the line says not enforced');
ok(!grep({ /192\.0\.2\.1[01]/ } @opened, @banned), 'no line for a client that only got 429s');

# fail2ban-regex with our filter

my $log = $banning->testdir . '/error.log';
is(matches($log), '192.0.2.7',
    'filter (default: openings): the one opening; not key=custom, not dry run');
is(matches($log, 'breaker'), '192.0.2.7', '... the same as mode=breaker');
is(matches($log, 'ban'), '192.0.2.7',
    'filter (mode=ban): exactly the banned address, once; not key=custom, not dry run');
ok(scalar $calm->error_log_lines(qr/pow_shield: .*(challenge|rejected)/),
    'premise: the calm log holds 429s and failed solutions');
is(matches($calm->testdir . '/error.log'), '',
    'filter: nothing in a log of ordinary 429s and failed solutions');
is(matches($calm->testdir . '/error.log', 'ban'), '', '... nor in ban mode');

# the jail, in a copy of the system's fail2ban configuration

SKIP: {
    skip '/etc/fail2ban not present', 9 unless -d '/etc/fail2ban';
    my $dir = tempdir(CLEANUP => 1);
    system('cp', '-r', '/etc/fail2ban/.', $dir) == 0 or die "cp: $?";
    unlink glob("$dir/jail.d/*");      # only our jail
    system('cp', $FILTER, "$dir/filter.d/") == 0 or die "cp: $?";
    open my $in, '<', "$F2B/jail.d/pow-shield.conf" or die $!;
    open my $out, '>', "$dir/jail.d/pow-shield.conf" or die $!;
    while (<$in>) {
        s{/var/log/nginx/error\.log}{$log};
        print $out $_;
    }
    close $out;

    my $dump = `fail2ban-client -c '$dir' -d 2>&1`;
    unlike($dump, qr/'add', 'pow-shield/, 'jail: off as shipped (neither jail is added)')
        or diag($dump);

    # the documented way to turn it on, with /etc/fail2ban the copy's
    my ($enable) = grep { m{^printf .*> /etc/fail2ban/jail\.d/pow-shield\.local$} }
        split /\n/, Test::PowShield::Examples::slurp("$Test::PowShield::REPO/docs/operations.md");
    ok($enable, "docs/operations.md: $enable");
    (my $local = $enable // 'false') =~ s{/etc/fail2ban/}{$dir/};
    is(system('sh', '-c', $local), 0, '... runs');

    my $test = `fail2ban-client -c '$dir' -t 2>&1`;
    is($? >> 8, 0, 'jail: fail2ban-client -t passes') or diag($test);
    $dump = `fail2ban-client -c '$dir' -d 2>&1`;
    like($dump, qr/'add', 'pow-shield',/, 'jail: [pow-shield] is on') or diag($dump);
    unlike($dump, qr/'add', 'pow-shield-ban',/, '... [pow-shield-ban] still off');
    like($dump, qr/'pow-shield', 'addaction', 'nftables-multiport'/,
        'jail: bans with the nftables action');
    like($dump, qr/'pow-shield', 'bantime', '1h'/, 'jail: for an hour');
    like($dump, qr/'pow-shield', 'maxretry', 3\]/, 'jail: after 3 openings') or diag($dump);
}

# What a ban covers, as docs/operations.md says: the ports of each jail,
# and that behind a load balancer or CDN the firewall sees only it.
{
    my $jails = Test::PowShield::Examples::slurp("$F2B/jail.d/pow-shield.conf");
    my $ops = Test::PowShield::Examples::slurp("$Test::PowShield::REPO/docs/operations.md");
    my ($section) = $ops =~ /^## Dropping banned clients at the firewall.*?\n(.*?)^## /ms;
    my %ports = map { $_ => 1 } $jails =~ /^port\s*=\s*(\S+)/mg;
    is(join(' ', sort keys %ports), 'http,https', 'every jail bans on ports http,https');
    like($section // '', qr/\*\*Ports 80 and 443 only\*\* \(`port = http,https`/,
        'docs/operations.md: a ban covers ports 80 and 443 only');
    like($section // '', qr/Behind a load balancer or\s+a CDN, the firewall of an nginx node sees the balancer's address/,
        '... and behind a load balancer or CDN the firewall sees only the balancer');
}

$banning->done_testing;
