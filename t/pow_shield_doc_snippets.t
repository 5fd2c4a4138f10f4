#!/usr/bin/perl

# The nginx snippets of the documentation (README.md, docs/*.md) do what
# they say: each passes "nginx -t" with the module, and each that picks the
# client key or an allow-list is run and answers real requests as it claims.
#
# Which blocks are configuration: every fenced block opened with ```nginx
# is, unless the line just before its fence is "<!-- not-config -->" (for
# a snippet meant not to load with this nginx: the geoip2 block of
# operations.md, "Per autonomous system", which needs Debian's GeoIP2
# module, checked by pow_shield_as_geoip2.t). A block fenced with
# ``` alone holds output, syntax lines or formulas; one that looks like
# nginx configuration (a line that starts with a directive and ends with
# ";" or "{") fails here, so that it gets its ```nginx.
#
# How a snippet is wrapped, by its first directive:
#   load_module, events, http  a whole nginx.conf: its load_module line of
#                              the module becomes the test's globals (pid,
#                              error log, the module under test); an empty
#                              events { } or http { } is added if missing
#   server                     inside http { }
#   location                   inside server { } inside http { }
#   anything else              inside http { }
# Only what a snippet needs to load is added or changed, each step a rule:
# a line that is only "..." (the rest of your configuration) is dropped;
# system paths move into the test directory (Test::PowShield::Examples,
# as in pow_shield_examples.t), and the key file and the TLS files it names
# are made there; a Redis host name becomes 127.0.0.1 (names are resolved
# when nginx loads the configuration, and a test has no DNS); an upstream
# named by a proxy_pass (http://backend) and not defined by the snippet is
# defined, pointing at a server of the test.
# A file a geo block includes is made, empty (no network listed).
#
# Behaviour: a snippet that sets pow_shield_key or has a geo block (and so
# nginx-conf/examples/allow-list-and-api-keys.conf, the complete form the
# docs point to) is started, the client address set by realip from
# X-Real-IP, every pow_shield_limit made "2 1m" (a location /api/ with that
# limit is added when the snippet has none), files served from disk
# ("return" answers before the access phase), every listen moved to a test
# port; then:
#   - two addresses have separate limits;
#   - every network a geo lists (with another value than its default) is
#     exempt, a geo in a snippet being an allow-list: never 429, no
#     rate-limit headers;
#   - with a map of $http_x_api_key: a request without the header, with a
#     value made up for each request, or with another client's address as
#     its value is counted by its address; each key the map lists is
#     either exempt or counted per key, the same count from any address
#     and in any letter case (map matches keys case-insensitively), apart
#     from the address's own count and from the other keys.
# And in every snippet: no geo value holds a variable (geo does not expand
# them), no pow_shield_key is a request header alone; in the prose, a
# paragraph that shows "pow_shield_key $http_..." says never to.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Basename qw(basename);
use File::Path qw(make_path);
use Test::More;
use Test::PowShield qw(:util);
use Test::PowShield::Examples qw(slurp relocate make_tls_files);

###############################################################################

Test::PowShield->new;     # skip_all without the nginx binary or the module

my $repo = $Test::PowShield::REPO;
my @docs = ('README.md', map { "docs/" . basename($_) } sort glob("$repo/docs/*.md"));
my $LIMIT = 2;

# Every fenced block of a Markdown file: { where => "file:line" (of the
# opening fence), lang, text, marker (the line before the fence) }.
sub fenced_blocks {
    my ($file) = @_;
    my @lines = split /\n/, slurp("$repo/$file");
    my (@blocks, $cur);
    for my $i (0 .. $#lines) {
        my $l = $lines[$i];
        if (!$cur) {
            next unless $l =~ /^\s*(`{3,}|~{3,})\s*([^\s`]*)/;
            $cur = { where => "$file:" . ($i + 1), fence => $1, lang => $2,
                text => '', marker => $i ? $lines[$i - 1] : '' };
        } elsif ($l =~ /^\s*\Q$cur->{fence}\E\s*$/) {
            push @blocks, $cur;
            undef $cur;
        } else {
            $cur->{text} .= "$l\n";
        }
    }
    die "$file: the fence opened at $cur->{where} is never closed\n" if $cur;
    return @blocks;
}

# The text of a file outside its fenced blocks, as paragraphs.
sub prose_paragraphs {
    my ($file) = @_;
    my ($out, $in) = ('', '');
    for my $l (split /\n/, slurp("$repo/$file")) {
        if (!$in && $l =~ /^\s*(`{3,}|~{3,})/) { $in = $1; $out .= "\n\n"; next }
        if ($in && $l =~ /^\s*\Q$in\E\s*$/) { $in = ''; next }
        $out .= "$l\n" unless $in;
    }
    return grep { /\S/ } split /\n\s*\n/, $out;
}

sub uncomment {
    my ($conf) = @_;
    $conf =~ s/#[^\n]*//g;
    return $conf;
}

# The bodies of the blocks whose head (before "{") matches $head_re.
sub block_bodies {
    my ($conf, $head_re) = @_;
    $conf = uncomment($conf);
    my @bodies;
    while ($conf =~ /(?:^|[;{}])\s*$head_re[^{;]*\{/gm) {
        my ($pos, $depth, $start) = (pos($conf), 1, pos($conf));
        while ($depth && $pos < length $conf) {
            my $c = substr($conf, $pos++, 1);
            $depth++ if $c eq '{';
            $depth-- if $c eq '}';
        }
        push @bodies, substr($conf, $start, $pos - $start - 1);
        pos($conf) = $start;
    }
    return @bodies;
}

# The entries of a geo or map body: [source, value] (quotes removed).
sub entries {
    my ($body) = @_;
    my @e;
    my $tok = qr/"[^"]*"|'[^']*'|[^\s;"']+/;
    while ($body =~ /($tok)\s+($tok)\s*;/g) {
        my ($k, $v) = ($1, $2);
        s/^(["'])(.*)\1$/$2/s for $k, $v;
        push @e, [$k, $v];
    }
    return @e;
}

my %SPECIAL = map { $_ => 1 } qw(default hostnames volatile include ranges proxy
    proxy_recursive delete);

# The first directive of a snippet decides where it goes.
sub context_of {
    my ($conf) = @_;
    my ($first) = uncomment($conf) =~ /^\s*([a-z_]+)/m;
    $first //= '';
    return 'main' if $first =~ /^(?:load_module|events|http)$/;
    return 'server' if $first eq 'location';
    return 'http';
}

###############################################################################
# Building the nginx.conf of a snippet

my @ipv4_pool = ((map { "198.51.100.$_" } 1 .. 254),
                 (map { "203.0.113.$_" } 1 .. 254));

sub ip4_num { my @o = split /\./, $_[0]; ($o[0] << 24) + ($o[1] << 16) + ($o[2] << 8) + $o[3] }

sub in_cidr4 {
    my ($ip, $cidr) = @_;
    my ($net, $len) = split m{/}, $cidr;
    return 0 unless $net =~ /^\d+\.\d+\.\d+\.\d+$/;
    $len //= 32;
    my $mask = $len ? (0xffffffff << (32 - $len)) & 0xffffffff : 0;
    return (ip4_num($ip) & $mask) == (ip4_num($net) & $mask);
}

# An address inside a geo network (its second address, for an IPv4
# network larger than 2 addresses).
sub address_in {
    my ($cidr) = @_;
    my ($net, $len) = split m{/}, $cidr;
    if ($net =~ /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/) {
        return $net if defined $len && $len >= 31 || !defined $len;
        my $n = ip4_num($net) + 1;
        return join '.', map { ($n >> $_) & 255 } 24, 16, 8, 0;
    }
    return defined $len && $net =~ /::$/ ? "${net}1" : $net;
}

# $o{run}: the behaviour variant (realip, test ports, small limits).
# Returns the nginx.conf text, before %%...%% expansion.
sub build_conf {
    my ($t, $snippet, %o) = @_;
    my $d = $t->testdir;
    my $conf = $snippet;
    my $ctx = context_of($conf);

    $conf =~ s/^[ \t]*\.\.\.[ \t]*\n//mg;
    $conf = relocate($conf, $d);
    $conf =~ s{(rediss?://(?:[^\s,;@/]*@)?)[A-Za-z][A-Za-z0-9.-]*(?=[:/,;\s]|$)}{${1}127.0.0.1}g;

    for my $file ($conf =~ /^\s*pow_shield_secret_file\s+(\S+?);/mg) {
        $t->write_file($file, ('5a' x 32) . "\n");
    }
    # A bot's key directory (RFC 9421's Ed25519 test key), one key per bot.
    my $bot = 0;
    for my $file ($conf =~ /^\s*pow_shield_bot_keys\s+\S+\s+(\S+?);/mg) {
        my @x = ('JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs', 'hO18HwkINNSEMjXxJj3uUCtZ1cd6Z5Ahl2uFQFYuuTw');
        $t->write_file($file, qq({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "$x[$bot++ % 2]"}]}\n));
    }
    make_tls_files($conf, $d);
    # The table a geo includes, as pow-shield asn-geo writes it (the per-AS
    # recipe, run as written by pow_shield_as_limits.t): empty here.
    for my $body (block_bodies($conf, qr/geo\b/)) {
        $t->write_file($_->[1], '') for grep { $_->[0] eq 'include' } entries($body);
    }

    my $http = "%%TEST_GLOBALS_HTTP%%\n";
    my %defined = map { $_ => 1 } uncomment($conf) =~ /^\s*upstream\s+(\S+)/mg;
    my @upstreams = grep { !$defined{$_} && !/^\d+\.\d+\.\d+\.\d+$/ }
        uncomment($conf) =~ m{\bproxy_pass\s+https?://([A-Za-z][\w.-]*)[;/]}g;
    my %seen;
    for my $u (grep { !$seen{$_}++ } @upstreams) {
        $http .= "upstream $u {\n    server 127.0.0.1:%%PORT_8081%%;\n}\n";
    }

    if ($o{run}) {
        $http .= "set_real_ip_from 127.0.0.1;\nreal_ip_header X-Real-IP;\n";
        $conf =~ s/\b(pow_shield_limit\s+)\d+\s+[^\s;]+/${1}$LIMIT 1m/g;
        $conf =~ s/^[ \t]*listen\s[^;]*;[^\n]*\n//mg;
        my $n = 0;
        $conf =~ s{((?:^|[;{}])[ \t]*server\s*\{)}{
            "$1\n    listen 127.0.0.1:%%PORT_" . (8080 + 10 * $n++) . "%%;\n"
        }gme if $ctx ne 'server';
        # the upstream's server: the files
        $http .= "server {\n    listen 127.0.0.1:%%PORT_8081%%;\n}\n" if @upstreams;
        # a shielded location, when the snippet has none of its own
        unless ($n || $ctx eq 'server') {
            my $limit = $conf =~ /\bpow_shield_limit\s/ ? '' : "pow_shield_limit $LIMIT 1m; ";
            $http .= "server {\n    listen 127.0.0.1:%%PORT_8080%%;\n"
                . "    location /api/ { $limit}\n}\n";
        }
    }

    if ($ctx eq 'main') {
        my $globals = "%%TEST_GLOBALS%%\n";
        $conf =~ s{^[ \t]*load_module\s+\S*ngx_http_pow_shield_module\.so;[^\n]*\n}{$globals}m
            or $conf = $globals . $conf;
        $conf .= "\nevents {\n}\n" unless uncomment($conf) =~ /^\s*events\s*\{/m;
        $conf .= "\nhttp {\n}\n" unless uncomment($conf) =~ /^\s*http\s*\{/m;
        $conf =~ s{^([ \t]*http\s*\{[^\n]*\n)}{$1$http}m;
        return $conf;
    }
    if ($ctx eq 'server') {
        my $limit = ($o{run} && $conf !~ /\bpow_shield_limit\s/)
            ? "pow_shield_limit $LIMIT 1m;\n" : '';
        $conf = "server {\n    listen 127.0.0.1:%%PORT_8080%%;\n$limit$conf\n}\n";
    }
    return "%%TEST_GLOBALS%%\n\nevents {\n}\n\nhttp {\n$http\n$conf\n}\n";
}

###############################################################################
# Static checks

my (@config, @other);
for my $file (@docs) {
    for my $b (fenced_blocks($file)) {
        if ($b->{lang} eq 'nginx') {
            push @config, $b unless $b->{marker} =~ /^\s*<!--\s*not-config\s*-->\s*$/;
        } elsif ($b->{lang} eq '') {
            push @other, $b;
        }
    }
}

cmp_ok(scalar @config, '>=', 20, 'the documentation has nginx snippets: ' . @config);

my $directive = qr/^\s*(?:pow_shield_\w+|load_module|http|events|server|location|map|geo
    |upstream|set_real_ip_from|real_ip_header|real_ip_recursive|proxy_pass|listen
    |log_format|access_log|error_log|include|allow|deny|root|try_files|return)\b/x;
for my $b (@other) {
    my @like = grep { /$directive/ && /[;{]\s*(?:#.*)?$/ } split /\n/, $b->{text};
    is(join("\n", @like), '', "$b->{where}: a block without a language is not nginx"
        . " configuration (or it would be fenced ```nginx)");
}

for my $b (@config) {
    for my $body (block_bodies($b->{text}, qr/geo\b/)) {
        my @vars = grep { $_->[1] =~ /\$/ } entries($body);
        is(join(' ', map { "$_->[0] $_->[1]" } @vars), '',
            "$b->{where}: no geo value holds a variable (geo does not expand it)");
    }
    unlike(uncomment($b->{text}), qr/^\s*pow_shield_key\s+["']?\$http_\w+["']?\s*;/m,
        "$b->{where}: the key is not a request header alone")
        if $b->{text} =~ /pow_shield_key/;
}

for my $file (@docs) {
    for my $p (grep { /pow_shield_key\s+\$http_/ } prose_paragraphs($file)) {
        my ($first) = $p =~ /^\s*(.{0,60})/;
        like($p, qr/\bnever\b/i, "$file: a paragraph showing pow_shield_key \$http_..."
            . " says never to (\"$first...\")");
    }
}

###############################################################################
# nginx -t on every snippet

my $t;
for my $b (@config) {
    $t = Test::PowShield->new;
    $t->write_file_expand('nginx.conf', build_conf($t, $b->{text}));
    my ($rc, $out) = $t->test_config;
    is($rc, 0, "$b->{where}: nginx -t passes") or diag($out . "\n"
        . $t->read_file('nginx.conf'));
}

###############################################################################
# What the snippets that pick the key say

# The snippets to run: the documentation's that set a key or an
# allow-list, and the complete example the documentation points to.
my @run = grep { $_->{text} =~ /^\s*(?:pow_shield_key|geo)\s/m } @config;
my $example = 'nginx-conf/examples/allow-list-and-api-keys.conf';
push @run, { where => $example, text => slurp("$repo/$example") };

cmp_ok(scalar @run, '>=', 4, 'snippets that choose the key or an allow-list: ' . @run);

for my $b (@run) {
    my $w = $b->{where};
    $t = Test::PowShield->new;
    my $d = $t->testdir;
    my $conf = build_conf($t, $b->{text}, run => 1);
    $t->write_file_expand('nginx.conf', $conf);

    # the file of the shielded location, wherever it is served from
    my ($prefix) = uncomment($conf) =~ m!\blocation\s+(?:\^~\s+)?(/[^\s{]*/)\s*\{[^{}]*pow_shield_limit!s;
    $prefix //= '/api/';
    my @roots = ("$d/html", map { s{/$}{}r } uncomment($conf) =~ /^\s*root\s+(\S+?);/mg);
    $t->write_file("$_${prefix}data.json", "{\"ok\":true}\n") for @roots;
    my $uri = "${prefix}data.json";

    mkdir "$d/logs";
    unless (eval { $t->run; 1 }) {
        fail("$w: nginx starts with the snippet");
        diag($@);
        next;
    }

    # the networks a geo gives another value than its default
    my @listed;
    for my $body (block_bodies($b->{text}, qr/geo\b/)) {
        my @e = entries($body);
        my ($default) = map { $_->[1] } grep { $_->[0] eq 'default' } @e;
        push @listed, map { $_->[0] }
            grep { !$SPECIAL{$_->[0]} && $_->[1] ne ($default // '') } @e;
    }
    my @pool = grep { my $ip = $_; !grep { in_cidr4($ip, $_) } @listed } @ipv4_pool;
    my $fresh = sub { shift @pool // die "out of addresses" };

    my $get = sub {
        my ($ip, %h) = @_;
        return $t->http_get($uri, 'X-Real-IP' => $ip, %h);
    };
    my $round = sub {       # LIMIT + 1 requests
        my ($ips, %h) = @_;
        return map { $get->($ips->[$_ % @$ips], %h) } 0 .. $LIMIT;
    };
    my $over = join ' ', ('200') x $LIMIT, '429';

    # every client its own limit
    my ($one, $two) = ($fresh->(), $fresh->());
    my @r = $round->([$one]);
    is(statuses(@r), $over, "$w: a client is counted ($uri, limit $LIMIT)");
    is($r[0]->header('X-RateLimit-Limit'), $LIMIT, "$w: ... with rate-limit headers");
    is($get->($two)->status, 200, "$w: another address has a limit of its own");

    # every network of the allow-list exempt
    for my $net (@listed) {
        my $ip = address_in($net);
        @r = map { $get->($ip) } 0 .. $LIMIT + 1;
        is(statuses(@r), join(' ', ('200') x ($LIMIT + 2)),
            "$w: $ip (allow-listed $net) is never challenged");
        ok(!grep({ defined $_->header('X-RateLimit-Limit') } @r),
            "$w: ... nor counted (no rate-limit headers)");
    }

    # API keys
    my @maps = block_bodies($b->{text}, qr/map\s+["']?\$http_x_api_key["']?\s/);
    next unless @maps;
    my @known = grep { !$SPECIAL{$_} && !/^~/ && $_ ne '' }
        map { $_->[0] } map { entries($_) } @maps;
    ok(@known >= 1, "$w: the map lists API keys: @known");

    is(statuses($round->([$fresh->()])), $over,
        "$w: a request without X-Api-Key is counted by its address");
    my $maker = $fresh->();
    is(statuses(map { $get->($maker, 'X-Api-Key' => "made-up-$_") } 0 .. $LIMIT),
        $over, "$w: ... and so is one with a new made-up key each time");
    my ($victim, $thief) = ($fresh->(), $fresh->());
    is(statuses($round->([$victim])), $over, "$w: a client uses up its limit");
    is($get->($thief, 'X-Api-Key' => $victim)->status, 200,
        "$w: ... a key that is its address is not its count");
    is($get->($victim, 'X-Api-Key' => $thief)->status, 429,
        "$w: ... nor is a key that is another's address a fresh count");

    for my $k (@known) {
        my ($g, $h) = ($fresh->(), $fresh->());
        @r = $round->([$g, $h], 'X-Api-Key' => $k);
        if (!defined $r[0]->header('X-RateLimit-Limit')) {
            is(statuses(@r), join(' ', ('200') x ($LIMIT + 1)),
                "$w: the key $k is exempt: never challenged");
            ok(!grep({ defined $_->header('X-RateLimit-Limit') } @r),
                "$w: ... nor counted");
            next;
        }
        is(statuses(@r), $over, "$w: the key $k counts per key, from any address"
            . " (the first request of a key: a fresh count)");
        is($get->($g)->status, 200, "$w: ... apart from the address's own count");
        (my $other_case = $k) =~ tr/a-zA-Z/A-Za-z/;
        is($get->($fresh->(), 'X-Api-Key' => $other_case)->status, 429,
            "$w: ... and $other_case is the same key, the same count")
            if $other_case ne $k;
    }
}

$t->done_testing;
