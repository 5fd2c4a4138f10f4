#!/usr/bin/perl

# Local mode's straight path with rate-limit headers on:
# every response it passes carries the headers the full path sends
# (cluster mode, where the straight path never runs), byte for byte but
# the clock: in each mode (x, ietf, both), with a 32-byte limit name, on
# a 404 of error_page, and with add_header pushing after them.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:redis http_conf);
use Test::PowShield::Modes;

my $long = 'n' x 32;

my $conf = http_conf(<<"EOF2");
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        pow_shield_key \$http_x_client;
        pow_shield_difficulty 1;

        location /both/ { pow_shield_limit 3 1h; }
        location /x/    { pow_shield_limit 3 1h; pow_shield_headers x; }
        location /ietf/ { pow_shield_limit 3 1h; pow_shield_headers ietf; }
        location /long/ { pow_shield_limit 1000000 1m name=$long; pow_shield_pay_ahead off; }
        location /after/ {
            pow_shield_limit 3 1h;
            add_header X-After a always;
            add_header X-After2 b always;
        }
        location /ep/ {
            pow_shield_limit 3 1h;
            error_page 404 /open/nf.json;
        }
        location /open/ { }
        # a response whose header list's first part (20) has no room
        # left for five more: the rate-limit headers pushed one by one
        location /many/ {
            pow_shield_limit 3 1h;
            proxy_pass http://127.0.0.1:%%PORT_8081%%/;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        location / {
            add_header X-B1 1;
            add_header X-B2 2;
            add_header X-B3 3;
            add_header X-B4 4;
            add_header X-B5 5;
            add_header X-B6 6;
            add_header X-B7 7;
            add_header X-B8 8;
            add_header X-B9 9;
            add_header X-B10 10;
            add_header X-B11 11;
            add_header X-B12 12;
            add_header X-B13 13;
            add_header X-B14 14;
            add_header X-B15 15;
            add_header X-B16 16;
            add_header X-B17 17;
            add_header X-B18 18;
            return 200 '{}';
        }
    }
EOF2

my %files = map { ("html/$_/data.json" => qq({"$_":1}\n)) } qw(both x ietf long after ep);
$files{'html/open/nf.json'} = qq({"nf":1}\n);

my @RL = qw(x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset
    ratelimit-policy ratelimit);

# The rate-limit headers, in order, each "name: value" (every value kept:
# a duplicate shows), the clock's digits replaced by "T" once checked.
sub rl {
    my ($r, $window_s) = @_;
    my $now = time;
    my @out;
    for my $h (@{$r->{order}}) {
        my ($n, $v) = (lc $h->[0], $h->[1]);
        next unless grep { $_ eq $n } @RL;
        if ($n eq 'x-ratelimit-reset') {
            ok($v >= $now + $window_s - 2 && $v <= $now + $window_s + 2, "reset $v")
                or diag("now $now");
            $v = 'T';
        }
        if ($n eq 'ratelimit') {
            my ($t) = $v =~ /;t=(\d+)$/;
            ok(defined $t && $t >= $window_s - 2 && $t <= $window_s, "t $v");
            $v =~ s/;t=\d+$/;t=T/;
        }
        push @out, "$n: $v";
    }
    return join ' | ', @out;
}

my %seen;
my @modes = Test::PowShield::Modes->each_mode($conf, files => \%files, sub {
    my ($m) = @_;
    my $t = $m->node(1);
    my $get = sub { $t->http_get($_[1], 'X-Client' => $_[0]) };
    my @got;
    for my $loc (qw(both x ietf after)) {
        for my $i (1 .. 3) {
            my $r = $get->($loc, "/$loc/data.json");
            is($r->status, 200, "/$loc/ $i: 200");
            push @got, "/$loc/ $i: " . rl($r, 3600);
        }
    }
    my $r = $get->('after', '/after/data.json');
    is($r->status, 429, '/after/ 4: 429');
    push @got, '/after/ 4: ' . rl($r, 3600);
    for my $i (1 .. 2) {
        my $r = $get->('after2', '/after/data.json');
        is($r->header('X-After') . $r->header('X-After2'), 'ab', 'add_header after ours kept');
    }
    for my $i (1 .. 2) {
        my $r = $get->('long', '/long/data.json');
        push @got, "/long/ $i: " . rl($r, 60);
    }
    for my $i (1 .. 2) {
        my $r = $get->('ep', '/ep/missing.json');
        is($r->status, 404, "/ep/ $i: 404");
        push @got, "/ep/ $i: " . rl($r, 3600);
    }
    for my $i (1 .. 2) {
        my $r = $get->('many', '/many/x');
        is($r->status, 200, "/many/ $i: 200");
        is(scalar(grep { /^x-b\d+$/ } $r->header_names), 18, "/many/ $i: the backend's 18 headers");
        push @got, "/many/ $i: " . rl($r, 3600);
    }
    $seen{"$m"} = \@got;
    if ("$m" eq 'local') {
        my $passed = () = ($t->read_file('error.log') // '')
            =~ m{straight path: passed, remaining=\d+, uri=/(both|x|ietf|after|long|ep)/}mg;
        # (pay ahead: the first two of each limit of 3; /long/ both)
        is($passed, 2 * 4 + 2 + 2 + 2, 'local: the straight path passed them');
    }
});

SKIP: {
    skip 'cluster mode not run', 1 unless $seen{cluster};
    is_deeply($seen{local}, $seen{cluster}, 'local (straight path) = cluster (full path)');
}
diag(join "\n", @{$seen{local}});

Test::PowShield::Modes->done_testing;
