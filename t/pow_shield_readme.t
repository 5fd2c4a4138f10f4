#!/usr/bin/perl

# The README is a first screen, and what it shows is what the module does:
# it stays within 14 KB and gives `make run` and `make test` in its first
# 40 lines; its configuration (the first ```nginx block of
# "## Configuration", run with only the test's paths, ports and backend
# changed) answers the request after its limit with the 429 the README
# prints: the same status line, every header the README shows (with its
# value where the value does not depend on the moment), every X-PoW-*,
# rate-limit, Retry-After and Cache-Control header the module sends shown
# in the README, and the body's fields the README shows. Its defaults
# sentence holds (difficulty 4 = 16 bits; the breaker at 5 strikes).
# (The fail2ban lines that configuration logs: t/pow_shield_fail2ban_readme.t;
# its demo commands: t/pow_shield_demo.t; its paying examples:
# t/pow_shield_consumer_snippets.t; its nginx blocks: t/pow_shield_doc_snippets.t.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Examples qw(slurp relocate);

###############################################################################

my $repo = $Test::PowShield::REPO;
my $readme = slurp("$repo/README.md");

cmp_ok(length($readme), '<=', 14 * 1024, 'README.md is a first screen: '
    . length($readme) . ' bytes, at most 14 KB');

# the two commands, on the first screen (its first 40 lines), and the
# Makefile has them
my $first = join "\n", (split /\n/, $readme)[0 .. 39];
my ($try) = $first =~ /^```sh\n(.*?)^```/ms;
like($try // '', qr/^make run\b/m, 'the first screen gives `make run`');
like($try // '', qr/^make test\b/m, '... and `make test`');
my $makefile = slurp("$repo/Makefile");
like($makefile, qr/^run:/m, 'the Makefile has run');
like($makefile, qr/^test:/m, '... and test');

my ($section) = $readme =~ /^## Configuration\n(.*?)^## /ms;
my ($conf_text) = ($section // '') =~ /^```nginx\n(.*?)^```/ms;
ok($conf_text && $conf_text =~ /^\s*load_module\b/m
    && $conf_text =~ /^\s*pow_shield_secret_file\s/m && $conf_text =~ /^\s*pow_shield_zone\s/m
    && $conf_text =~ /^\s*location\b[^{]*\{[^}]*\bpow_shield_limit\s/ms,
    'the configuration: load_module, the secret, the zone, a location with pow_shield_limit');
my ($shown) = ($section // '') =~ /^```\n(HTTP\/1\.1 429 .*?)^```/ms;
ok($shown, 'the 429 a client then sees');

my ($head, $body) = split /\n\n/, $shown // '', 2;
my ($status_line, @lines) = split /\n/, $head // '';
my @shown = map { /^([\w-]+): (.*)$/ ? [$1, $2] : () } @lines;

###############################################################################

my $t = Test::PowShield->new;
my $d = $t->testdir;
my $conf = relocate($conf_text // '', $d);
for my $file ($conf =~ /^\s*pow_shield_secret_file\s+(\S+?);/mg) {
    $t->write_file($file, ('5a' x 32) . "\n");
}
$conf =~ s{^[ \t]*load_module\s+\S*ngx_http_pow_shield_module\.so;[^\n]*\n}{%%TEST_GLOBALS%%\n}m;
$conf =~ s{^(\s*proxy_pass\s+http://)[^;/]+}{${1}127.0.0.1:%%PORT_8081%%}mg;
$conf =~ s{^[ \t]*listen\s[^;]*;[^\n]*\n}{}mg;
$conf =~ s{^([ \t]*server\s*\{[^\n]*\n)}{$1        listen 127.0.0.1:%%PORT_8080%%;\n}mg;
# the backend its proxy_pass names: a server of the test serving files
$conf =~ s{^([ \t]*http\s*\{[^\n]*\n)}{$1    %%TEST_GLOBALS_HTTP%%
    server {
        listen 127.0.0.1:%%PORT_8081%%;
        root $d/html;
    }
}m;
$t->write_file_expand('nginx.conf', $conf);
$t->write_file('html/api/items', qq({"items":[1,2,3]}\n));
$t->run;

my ($limit) = $conf_text =~ /pow_shield_limit\s+(\d+)\s/;
my @r = map { $t->http_get('/api/items') } 1 .. $limit + 1;
is(statuses(@r[0 .. $limit - 1]), join(' ', ('200') x $limit), "$limit requests pass");
my $r = $r[-1];

my ($code, $reason) = $status_line =~ m{^HTTP/1\.1 (\d+) (.*)$};
is($r->status, $code, "request " . ($limit + 1) . ": $code, as the README shows");
is($r->reason, $reason, "... $reason");

# the values that do not depend on the moment or the token
my %fixed = map { $_ => 1 } qw(content-type cache-control x-pow-difficulty x-pow-bits
    x-ratelimit-limit x-ratelimit-remaining ratelimit-policy);
for (@shown) {
    my ($name, $value) = @$_;
    ok($r->has_header($name), "the module sends $name");
    if ($fixed{lc $name}) {
        is($r->header($name), $value, "... $name: $value");
    } elsif (lc $name eq 'ratelimit') {
        like($r->header($name) // '', qr/^"pow-shield";r=0;t=\d+$/, "... $name: of the form $value");
    } elsif (lc $name eq 'x-pow-challenge') {
        (my $start = $value) =~ s/\.\.\.$//;
        like($r->header($name) // '', qr/^eyJ[\w-]+\.[\w-]+$/, "... $name: a token");
        ok(length $start < length($r->header($name) // ''), '... shown abbreviated');
    } else {
        like($r->header($name) // '', qr/^\d+$/, "... $name: a number");
    }
}
my %in_readme = map { lc $_->[0] => 1 } @shown;
my @sent = grep { /^(?:x-pow-|x-ratelimit-|ratelimit|retry-after$|cache-control$|content-type$)/ }
    map { lc $_->[0] } @{ $r->{order} };
is(join(' ', grep { !$in_readme{$_} } @sent), '', 'the README shows every such header the module sends');

my $json = $r->json || {};
my @fields = ($body // '') =~ /"(\w+)":/g;
ok(@fields >= 5, 'the body the README shows: ' . join(' ', @fields));
for my $f (grep { $_ ne 'challenge' } @fields) {
    my ($v) = $body =~ /"\Q$f\E":("[^"]*"|\d+)/;
    $v =~ s/^"|"$//g;
    if ($f eq 'salt') {
        like($json->{$f} // '', qr/^[0-9a-f]{32}$/, "body $f: 32 hex digits");
    } else {
        is($json->{$f}, $v, "body $f: $v");
    }
}
is($json->{challenge}, $r->header('X-PoW-Challenge'), "body challenge: the header's token");

# the defaults the README names
like($readme, qr/difficulty\s+4 \(16 zero bits/, 'the README: difficulty 4 is 16 zero bits');
is($r->header('X-PoW-Bits'), 16, '... and the module asks 16 bits');
like($readme, qr/circuit breaker at 5 strikes in 60 s/, 'the README: the breaker at 5 strikes in 60 s');
is(statuses(map { $t->http_get('/api/items') } 1 .. 5), '429 429 429 429 403',
    '... and the 5th unpaid challenge opens it: the next request is blocked');

$t->done_testing;
