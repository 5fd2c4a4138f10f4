#!/usr/bin/perl

# The recipes of docs/bots.md, as written (each fenced block after a
# "<!-- bots-recipe: NAME -->" line), in local and cluster mode: a
# verified crawler on its own limit from any address, an allow-listed
# crawler never counted, and a price per bot.  Only what a snippet needs to
# run here is changed: its system paths move into the test directory, its
# "listen 80" becomes the test port, and the test adds realip (client
# addresses from X-Forwarded-For), an X-Bot header and the Redis line.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use Test::PowShield qw(:util :redis);
use Test::PowShield::Examples qw(slurp relocate);
use Test::PowShield::Modes;

###############################################################################

my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$Test::PowShield::REPO/objs/pow-shield";
plan(skip_all => "no $cli (make build)") unless -x $cli;

my $keys = tempdir(CLEANUP => 1);
my %directory;
for my $name (qw(examplebot otherbot)) {
    $directory{$name} = `$cli bot-key new $keys/$name.jwk 2>/dev/null`;
    die "bot-key new failed\n" unless $? == 0;
}

sub signed {
    my ($name) = @_;
    my @lines = `$cli bot-key sign --sign-key $keys/$name.jwk http://localhost/api/data.json`;
    die "bot-key sign failed\n" unless $? == 0;
    return map { chomp; split /: /, $_, 2 } @lines;
}

# The recipes: { name => nginx text }.
my %recipe;
my $doc = slurp("$Test::PowShield::REPO/docs/bots.md");
while ($doc =~ /^<!-- bots-recipe: (\S+) -->\n```nginx\n(.*?)^```$/msg) {
    $recipe{$1} = $2;
}
is_deeply([sort keys %recipe], [qw(allow-list own-limit per-bot)], 'the three recipes are found');

my $added = <<'EOF';
    %%REDIS%%
    set_real_ip_from 127.0.0.1;
    real_ip_header X-Forwarded-For;
    add_header X-Bot $pow_shield_bot always;
EOF

sub start {
    my ($name, $body) = @_;
    my $snippet = relocate($recipe{$name}, '%%TESTDIR%%');
    $snippet =~ s/^(\s*)listen 80;/$1listen 127.0.0.1:%%PORT_8080%%;/m
        or die "no listen 80 in $name\n";
    my %files = (
        'etc/nginx/bots/examplebot.json' => $directory{examplebot},
        'etc/nginx/bots/otherbot.json'   => $directory{otherbot},
        'html/api/data.json'             => "{}\n",
        'srv/www/api/data.json'          => "{}\n",
    );
    Test::PowShield::Modes->each_mode(http_conf($added . $snippet), nodes => 2,
        redis => 'timeout=3s', files => \%files, $body);
}

my $net = 0;

# A verified crawler on its own limit (60 per minute), from 61 addresses.
start('own-limit', sub {
    my ($m) = @_;
    $net++;
    my @got = map {
        $m->node($_)->http_get('/api/data.json', signed('examplebot'),
            'X-Forwarded-For' => "10.$net.0.$_")->status
    } 1 .. 61;
    is(scalar(grep { $_ == 200 } @got[0 .. 59]), 60,
        "own-limit, $m: 60 signed requests from 60 addresses pass");
    is($got[60], 429, "own-limit, $m: the 61st, from a 61st address, is over the bot's limit");
    my $r = $m->node(1)->http_get('/api/data.json', 'X-Forwarded-For' => "10.$net.0.1");
    is($r->status, 200, "own-limit, $m: an unsigned client at a bot's address has its own limit");
});

# An allow-listed crawler is never counted; another bot is, by its name.
start('allow-list', sub {
    my ($m) = @_;
    $net++;
    my $r;
    for my $i (1 .. 61) {
        $r = $m->node($i)->http_get('/api/data.json', signed('examplebot'),
            'X-Forwarded-For' => "10.$net.1.1");
        last unless $r->status == 200 && !defined $r->header('X-RateLimit-Limit');
    }
    is($r->status, 200, "allow-list, $m: the allow-listed bot's 61st request passes");
    ok(!defined $r->header('X-RateLimit-Limit'), "allow-list, $m: and is not counted (exempt)");
    my @got = map {
        $m->node($_)->http_get('/api/data.json', signed('otherbot'),
            'X-Forwarded-For' => "10.$net.2.$_")->status
    } 1 .. 61;
    is($got[60], 429, "allow-list, $m: another verified bot has one limit under its name");
});

# A price per bot: each bot its own limit, anonymous clients /api/'s.
start('per-bot', sub {
    my ($m) = @_;
    $net++;
    my %limit = (examplebot => 600, otherbot => 20);
    for my $bot (sort keys %limit) {
        my $r = $m->node(1)->http_get('/api/data.json', signed($bot),
            'X-Forwarded-For' => "10.$net.3.1");
        is($r->status, 200, "per-bot, $m: $bot passes");
        is($r->header('X-RateLimit-Limit'), $limit{$bot}, "per-bot, $m: $bot has its own limit");
        is($r->header('X-Bot'), $bot, "per-bot, $m: as $bot");
    }
    my $r = $m->node(1)->http_get('/api/data.json', 'X-Forwarded-For' => "10.$net.3.1");
    is($r->header('X-RateLimit-Limit'), 60, "per-bot, $m: an anonymous client has /api/'s limit");
});

Test::PowShield::Modes->done_testing;
