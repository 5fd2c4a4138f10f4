#!/usr/bin/perl

# The metrics keep each limit's series by its name across "nginx -s reload"
# (docs/metrics.md, pow_shield_requests_total{result,limit}): a reload
# that renames a limit and reorders two keeps each name's own counts, a new
# name starts at 0, and a name that comes back finds its counts again. (The
# counters are in the zone, which a reload adopts; which counters are a
# name's is kept there by name, not by the name's position.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util http_conf);
use Test::PowShield::Metrics qw(scrape metric);

###############################################################################

sub conf {
    my ($locations) = @_;
    return http_conf(<<"EOF");
    pow_shield_secret "metrics-reload-secret-0123456789abcdef";
    pow_shield_zone 1m;
    pow_shield_difficulty 1;
    pow_shield_key \$http_x_client;

    server {
        %%TEST_SERVER%%

$locations

        location = /metrics {
            pow_shield_status;
        }
    }
EOF
}

# Before: "alpha" (2 an hour) and "beta" at /a/, "gamma" at /b/.
my $before = <<'EOF';
        location /a/ {
            pow_shield_limit 2 1h name=alpha;
            pow_shield_limit 100 1h name=beta;
        }
        location /b/ {
            pow_shield_limit 1 1h name=gamma;
        }
EOF

# After: /b/ first (gamma is now the first name met), beta before the
# renamed alpha ("delta") at /a/.
my $after = <<'EOF';
        location /b/ {
            pow_shield_limit 1 1h name=gamma;
        }
        location /a/ {
            pow_shield_limit 100 1h name=beta;
            pow_shield_limit 2 1h name=delta;
        }
EOF

# Then "alpha" is back, beside the others.
my $back = <<'EOF';
        location /b/ {
            pow_shield_limit 1 1h name=gamma;
        }
        location /a/ {
            pow_shield_limit 100 1h name=beta;
            pow_shield_limit 2 1h name=delta;
        }
        location /c/ {
            pow_shield_limit 5 1h name=alpha;
        }
EOF

my %files = map { ("html/$_/data.json" => qq({"dir":"$_"}\n)) } qw(a b c);

my $t = Test::PowShield->new;
$t->write_file_expand('nginx.conf', conf($before));
$t->write_file($_, $files{$_}) for keys %files;
$t->run;

sub get {
    my ($dir, $client) = @_;
    return $t->http_get("/$dir/data.json", 'X-Client' => $client);
}

# "name result count" of every limit series.
sub series {
    my ($m, @names) = @_;
    return join ', ', map {
        my $name = $_;
        map { "$name $_ " . (metric($m, 'pow_shield_requests_total', result => $_, limit => $name)
            // 'none') } qw(pass challenge)
    } @names;
}

is(statuses(map { get('a', 'c1') } 1 .. 3), '200 200 429', 'premise: /a/ refuses the 3rd (alpha)');
is(statuses(map { get('b', 'c2') } 1 .. 2), '200 429', 'premise: /b/ refuses the 2nd (gamma)');
is(series(scrape($t), qw(alpha beta gamma)),
    'alpha pass 2, alpha challenge 1, beta pass 0, beta challenge 0, gamma pass 1, gamma challenge 1',
    'before the reload: each limit\'s counts');

# rename alpha to delta, reorder the locations and the limits of /a/

$t->write_file_expand('nginx.conf', conf($after));
ok($t->reload, 'reloaded: alpha renamed delta, gamma first, beta before delta');
my $m = scrape($t);
is(series($m, qw(gamma beta delta)),
    'gamma pass 1, gamma challenge 1, beta pass 0, beta challenge 0, delta pass 0, delta challenge 0',
    'after the reload: gamma and beta keep their own counts, delta (new) starts at 0');
unlike($m->{-text}, qr/limit="alpha"/, 'the name gone is not shown');

is(get('b', 'c3')->status, 200, 'counting after the reload: /b/ passes');
is(statuses(map { get('a', 'c4') } 1 .. 3), '200 200 429', '... /a/ refuses the 3rd (delta)');
is(series(scrape($t), qw(gamma beta delta)),
    'gamma pass 2, gamma challenge 1, beta pass 0, beta challenge 0, delta pass 2, delta challenge 1',
    'each name counts on its own series');

# alpha comes back

$t->write_file_expand('nginx.conf', conf($back));
ok($t->reload, 'reloaded: alpha back');
is(series(scrape($t), qw(alpha gamma delta)),
    'alpha pass 2, alpha challenge 1, gamma pass 2, gamma challenge 1, delta pass 2, delta challenge 1',
    'a name back finds its counts; the others keep theirs');

$t->stop;
done_testing;
