#!/usr/bin/perl

# Configuration (docs/directives.md): "nginx -t" rejects every invalid
# value with a message naming the directive, the bad value, file and line;
# valid values pass; what passes but can never act is warned of, naming
# file and line.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(http_conf);
use Test::PowShield::ConfigCases;

###############################################################################

my $t = Test::PowShield->new;

my $SECRET = 'config-suite-secret-0123456789abcd';    # 34 bytes

my $template = http_conf(<<'EOF');
HTTP
    server {
        %%TEST_SERVER%%
SERVER
        location / {
LOCATION
        }
    }
EOF

my $cases = Test::PowShield::ConfigCases->new($t, $template);

sub config { $cases->config(@_) }
sub bad { $cases->bad(@_) }
sub good { $cases->good(@_) }
sub warns { $cases->warns(@_) }
sub quiet { $cases->quiet(@_) }

my $secret = qq(pow_shield_secret "$SECRET";);

# pow_shield_limit <requests> <window> [approx] | off

bad(location => 'pow_shield_limit 0 1m;', '0', 'limit of 0 requests');
bad(location => 'pow_shield_limit -5 1m;', '-5', 'negative limit');
bad(location => 'pow_shield_limit abc 1m;', 'abc', 'limit not a number');
bad(location => 'pow_shield_limit 10 abc;', 'abc', 'window "abc"');
bad(location => 'pow_shield_limit 10 0s;', '0s', 'window of 0 seconds');
bad(location => 'pow_shield_limit on;', 'on', 'limit "on"');
bad(location => 'pow_shield_limit 10;', undef, 'limit without a window');
bad(location => 'pow_shield_limit 10 1m 5;', '5', 'limit with a third argument not approx');
bad(location => 'pow_shield_limit 10 1m exact;', 'exact', 'limit with a third word not approx');
bad(location => 'pow_shield_limit 10 1m approx x;', undef, 'limit with 4 arguments');
bad(location => "pow_shield_limit 10 1m;\n            pow_shield_limit 10 1m;",
    '10', 'the same limit twice in a location');
bad(location => "pow_shield_limit 10 1s name=burst;\n            pow_shield_limit 1000 1h name=burst;",
    'name=burst', 'two limits of a location with one name');
bad(location => "pow_shield_limit 10 1s;\n            pow_shield_limit off;",
    'off', 'off beside a limit');
good(location => "pow_shield_limit 100 1m approx;\n            pow_shield_limit 1000 1h;",
    'approx on one stacked limit, not the other: each counts its own way');
bad(location => "pow_shield_limit 10 1m approx;\n            pow_shield_limit 10 1m;",
    '10', 'the same limit approx and exact (one count in local mode)');
good(location => join("\n            ", map { "pow_shield_limit $_ 1h;" } 1 .. 8),
    'eight limits in a location');
bad(location => join("\n            ", map { "pow_shield_limit $_ 1h;" } 1 .. 9),
    '9', 'a ninth limit in a location', -says => qr/at most 8 "pow_shield_limit" lines/);
bad(location => 'pow_shield_limit 10 1m name=;', 'name=', 'an empty name');

# pow_shield_limit ... key=<value>: a count per another identity

bad(location => 'pow_shield_limit 10 1m key=;', 'key=', 'a key= without a value');
bad(location => "pow_shield_limit 10 1m name=a key=\$pow_shield_net;\n"
        . "            pow_shield_limit 10 1m name=b key=\$pow_shield_net;",
    'key=$pow_shield_net', 'two limits of a location with the same key and numbers');
good(location => 'pow_shield_limit 40 1h key=$pow_shield_net name=net;',
    'a name after the key: the options in any order, as limit_req\'s');
good(location => 'pow_shield_limit 40 1h name=net key=$pow_shield_net approx;',
    'approx after the key');
for my $order ([0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]) {
    my @options = ('key=$pow_shield_net', 'name=net', 'approx');
    my $line = join ' ', 'pow_shield_limit 40 1h', @options[@$order];
    good(location => "$line;", "the options in any order: $line");
}
bad(location => 'pow_shield_limit 10 1m key=site name=x name=y;', 'name=y', 'a name twice');
good(location => "pow_shield_limit 10 1m;\n"
        . "            pow_shield_limit 10 1m name=net key=\$pow_shield_net;\n"
        . "            pow_shield_limit 10 1m name=site key=site;",
    'the same numbers per client, per network and site-wide');
good(location => 'pow_shield_limit 10 1m approx name=net key=$pow_shield_net;',
    'a keyed limit with every option');
{
    # 16 names elsewhere: a 17th has no metrics' label to count under
    my $sixteen = join "\n", map {
        my $l = $_;
        "        location /l$l/ {\n"
            . join('', map { "            pow_shield_limit $_ 1h name=n${l}_$_;\n" } 1 .. 4)
            . "        }";
    } 1 .. 4;
    bad(location => 'pow_shield_limit 10 1m name=n17;', 'name=n17',
        'a 17th limit name in the configuration', SERVER => $sixteen,
        -says => qr/more than 16 limit names/);
    good(location => 'pow_shield_limit 10 1m name=n1_1;', 'a 17th limit with one of the 16 names',
        SERVER => $sixteen);
}
bad(location => 'pow_shield_limit 10 1m name=a,b;', 'name=a,b', 'a name with a comma');
bad(location => 'pow_shield_limit 10 1m name=x name=y;', 'name=y', 'two names');
good(location => 'pow_shield_limit 10 1m name=x approx;', 'approx after the name');

good(location => 'pow_shield_limit 10 30s;', 'limit 10 30s');
good(location => 'pow_shield_limit 1 1s;', 'limit 1 1s');
good(location => 'pow_shield_limit 100000 24h;', 'limit 100000 24h');
good(location => 'pow_shield_limit 1000 1h approx;', 'limit 1000 1h approx');
good(location => 'pow_shield_limit off;', 'limit off');
good(location => "pow_shield_limit 10 1s name=burst;\n            pow_shield_limit 1000 1h name=hourly;",
    'two named limits stack');
good(location => "pow_shield_limit 10 1m;\n            pow_shield_limit 5 1m;",
    'two unnamed limits stack (named 10r/m and 5r/m)');
good(location => "pow_shield_limit 10 1s approx name=burst;\n            pow_shield_limit 1000 1h approx;",
    'stacked approx limits');
good(location => 'pow_shield_limit 10 1m name=api.v2-search_x;', 'a name of letters, digits, ., - and _');
good(server => 'pow_shield_limit 10 1m;', 'limit in server');
good(http => 'pow_shield_limit 10 1m;', 'limit in http');

# pow_shield_difficulty <n>, 1..12

bad(location => 'pow_shield_difficulty 0;', '0', 'difficulty 0');
bad(location => 'pow_shield_difficulty 13;', '13', 'difficulty 13');
bad(location => 'pow_shield_difficulty -1;', '-1', 'difficulty -1');
bad(location => 'pow_shield_difficulty abc;', 'abc', 'difficulty "abc"');

good(location => 'pow_shield_difficulty 1;', 'difficulty 1');
good(location => 'pow_shield_difficulty 12;', 'difficulty 12');
good(http => 'pow_shield_difficulty 4;', 'difficulty in http');

# pow_shield_difficulty <n>b, 1b..48b (leading zero bits)

bad(location => 'pow_shield_difficulty 0b;', '0b', 'difficulty 0b');
bad(location => 'pow_shield_difficulty 49b;', '49b', 'difficulty 49b',
    -says => 'must be between 1b and 48b');
bad(location => 'pow_shield_difficulty b;', 'b', 'difficulty "b"');
bad(location => 'pow_shield_difficulty 18B;', '18B', 'difficulty with an upper-case B');
bad(location => 'pow_shield_difficulty 18bits;', '18bits', 'difficulty "18bits"');
bad(location => 'pow_shield_difficulty 18b max=4;', 'max=4',
    'difficulty max in hex below a base in bits');
bad(location => 'pow_shield_difficulty 4 max=15b;', 'max=15b',
    'difficulty max in bits below a base in hex');
bad(location => 'pow_shield_difficulty 18b max=49b;', 'max=49b', 'difficulty max=49b');

good(location => 'pow_shield_difficulty 1b;', 'difficulty 1b');
good(location => 'pow_shield_difficulty 18b;', 'difficulty 18b');
good(location => 'pow_shield_difficulty 48b;', 'difficulty 48b');
good(location => 'pow_shield_difficulty 18b max=24b;', 'difficulty 18b max=24b');
good(location => 'pow_shield_difficulty 18b max=6;', 'difficulty 18b max=6');
good(location => 'pow_shield_difficulty 4 max=30b;', 'difficulty 4 max=30b');

# pow_shield_key <value>

bad(location => 'pow_shield_key;', undef, 'key without a value');
# nginx itself reports unknown variables after parsing, without file:line
{
    my ($file) = config(location => 'pow_shield_key $pow_no_such_variable;');
    my ($rc, $out) = $t->test_config($file);
    isnt($rc, 0, 'rejected: key with an unknown variable');
    like($out, qr/\[emerg\].*"pow_no_such_variable"/,
        'key with an unknown variable: names the variable');
}

good(location => 'pow_shield_key $http_x_api_key;', 'key from a header');
good(location => 'pow_shield_key "$binary_remote_addr:$http_host";',
    'key with two variables');
good(location => 'pow_shield_key "";', 'empty key (exempt)');

# pow_shield_secret <string >= 32 bytes>, http only

bad(http => 'pow_shield_secret "short";', undef, 'secret of 5 bytes');
bad(http => 'pow_shield_secret "' . ('s' x 31) . '";', undef,
    'secret of 31 bytes');
bad(server => $secret, undef, 'secret in server');
bad(location => $secret, undef, 'secret in location');

good(http => 'pow_shield_secret "' . ('s' x 32) . '";', 'secret of 32 bytes');
bad(http => "$secret\n            $secret", undef, 'secret twice',
    -says => qr/"pow_shield_secret" directive is duplicate/);

# pow_shield_secret_file <path>: 1-2 lines, current then previous

my $d = $t->testdir;
$t->write_file('keys/one', "$SECRET\n");
$t->write_file('keys/two', "$SECRET\nprevious-0123456789abcdef0123456789\n");
$t->write_file('keys/noeol', $SECRET);
$t->write_file('keys/empty', '');
$t->write_file('keys/short', "short\n");
$t->write_file('keys/short2', "$SECRET\nshort\n");
$t->write_file('keys/three', "$SECRET\n$SECRET\n$SECRET\n");

bad(http => "pow_shield_secret_file $d/keys/missing;", "$d/keys/missing",
    'secret file missing');
bad(http => "pow_shield_secret_file $d/keys/empty;", undef,
    'secret file empty');
bad(http => "pow_shield_secret_file $d/keys/short;", undef,
    'secret file with a short key');
bad(http => "pow_shield_secret_file $d/keys/short2;", undef,
    'secret file with a short previous key');
bad(http => "pow_shield_secret_file $d/keys/three;", undef,
    'secret file with three lines');
bad(server => "pow_shield_secret_file $d/keys/one;", undef,
    'secret file in server');

bad(http => "$secret\n            pow_shield_secret_file $d/keys/one;", undef,
    'secret, then secret file',
    -says => qr/"pow_shield_secret_file" and "pow_shield_secret" cannot both be set: use one of them/);
bad(http => "pow_shield_secret_file $d/keys/one;\n            $secret", undef,
    'secret file, then secret',
    -says => qr/"pow_shield_secret" and "pow_shield_secret_file" cannot both be set: use one of them/);
bad(http => "pow_shield_secret_file $d/keys/one;\n            pow_shield_secret_file $d/keys/two;",
    undef, 'secret file twice', -says => qr/"pow_shield_secret_file" directive is duplicate/);

good(http => "pow_shield_secret_file $d/keys/one;", 'secret file, one key');
good(http => "pow_shield_secret_file $d/keys/two;", 'secret file, two keys');
good(http => "pow_shield_secret_file $d/keys/noeol;",
    'secret file without a final newline');

# pow_shield_redis <url>: options are words after the URL, not a query

bad(http => 'pow_shield_redis redis://127.0.0.1:6379/0?timeout=1s;',
    'redis://127.0.0.1:6379/0?timeout=1s', 'redis URL with a query string',
    -says => qr/query strings are not supported: give options as words after the URL/);
bad(http => 'pow_shield_redis redis://127.0.0.1?prefix=x;', 'redis://127.0.0.1?prefix=x',
    'redis URL, host and a query string', -says => qr/query strings are not supported/);
bad(http => 'pow_shield_redis redis://:hunter2hunter2@127.0.0.1/1?db=2;',
    'redis://***@127.0.0.1/1?db=2', 'redis URL with a password and a query string',
    -says => qr/query strings are not supported/, -hide => 'hunter2');

# pow_shield_zone <size>, http only

bad(http => 'pow_shield_zone 1k;', '1k', 'zone too small (1k)');
bad(http => 'pow_shield_zone 0;', '0', 'zone of 0 bytes');
bad(http => 'pow_shield_zone abc;', 'abc', 'zone size "abc"');
bad(server => 'pow_shield_zone 1m;', undef, 'zone in server');

good(http => 'pow_shield_zone 1m;', 'zone 1m');
good(http => 'pow_shield_zone 64m;', 'zone 64m');

# pow_shield_challenge_ttl <time>

bad(location => 'pow_shield_challenge_ttl abc;', 'abc', 'ttl "abc"');
bad(location => 'pow_shield_challenge_ttl 0;', '0', 'ttl 0');

good(location => 'pow_shield_challenge_ttl 30s;', 'ttl 30s');
good(http => 'pow_shield_challenge_ttl 5m;', 'ttl in http');

# pow_shield_work sha256 | equix (the module of make build has Equi-X)

bad(location => 'pow_shield_work argon2;', 'argon2', 'work "argon2"');
bad(location => 'pow_shield_work sha256 equix;', undef, 'work with 2 values');
good(location => "pow_shield_work $_;", "work $_") for qw(sha256 equix);

# pow_shield_headers x | ietf | both | off

bad(location => 'pow_shield_headers foo;', 'foo', 'headers "foo"');
bad(location => 'pow_shield_headers x ietf;', undef, 'headers with 2 values');

good(location => "pow_shield_headers $_;", "headers $_")
    for qw(x ietf both off);

# pow_shield_dry_run on | off

bad(location => 'pow_shield_dry_run maybe;', 'maybe', 'dry_run "maybe"');

good(location => 'pow_shield_dry_run on;', 'dry_run on');
good(location => 'pow_shield_dry_run off;', 'dry_run off');

# pow_shield_log_level info | notice | warn | error

bad(location => 'pow_shield_log_level loud;', 'loud', 'log_level "loud"');

good(location => "pow_shield_log_level $_;", "log_level $_")
    for qw(info notice warn error);

# pow_shield_log_summary <interval> | off

bad(location => 'pow_shield_log_summary 500ms;', '500ms', 'log_summary shorter than 1s');
bad(location => 'pow_shield_log_summary 2h;', '2h', 'log_summary longer than 1h');
bad(location => 'pow_shield_log_summary often;', 'often', 'log_summary "often"');
bad(location => "pow_shield_log_summary 10s;\n            pow_shield_log_summary 1m;",
    undef, 'log_summary duplicated in a location');

good(location => 'pow_shield_log_summary 1s;', 'log_summary 1s');
good(location => 'pow_shield_log_summary 1h;', 'log_summary 1h');
good(location => 'pow_shield_log_summary off;', 'log_summary off');
good(http => 'pow_shield_log_summary 1m;', 'log_summary in http');

# the red zone: pow_shield_strikes, _ban, _block_status, _trap,
# _breaker_log_level, pow_shield_difficulty max=

bad(location => 'pow_shield_strikes 0 60s;', '0', 'strikes 0');
bad(location => 'pow_shield_strikes 5 2d;', '2d', 'strikes for 2d');
bad(location => 'pow_shield_strikes sometimes;', 'sometimes', 'strikes "sometimes"');
bad(location => 'pow_shield_ban 1h;', '1h', 'ban without after=');
bad(location => 'pow_shield_ban 1h after=0;', 'after=0', 'ban after=0');
bad(location => 'pow_shield_ban 0 after=3;', '0', 'ban for 0');
bad(location => 'pow_shield_block_status 200;', '200', 'block_status 200');
bad(location => 'pow_shield_block_status nope;', 'nope', 'block_status "nope"');
bad(location => 'pow_shield_difficulty 4 max=3;', 'max=3', 'difficulty max below the base');
bad(location => 'pow_shield_difficulty 4 max=13;', 'max=13', 'difficulty max=13');
bad(location => 'pow_shield_difficulty 4 8;', '8', 'difficulty max without max=');
bad(location => 'pow_shield_breaker_log_level loud;', 'loud', 'breaker_log_level "loud"');
bad(server => 'pow_shield_trap;', undef, 'trap outside a location', -noline => 1);
bad(location => 'pow_shield_trap on;', undef, 'trap with an argument', -noline => 1);

good(location => 'pow_shield_strikes 5 60s;', 'strikes 5 60s');
good(location => 'pow_shield_strikes off;', 'strikes off');
good(location => 'pow_shield_ban 1h after=3;', 'ban 1h after=3');
good(location => 'pow_shield_ban off;', 'ban off');
good(location => "pow_shield_block_status $_;", "block_status $_") for 403, 429, 444;
good(location => 'pow_shield_difficulty 4 max=8;', 'difficulty 4 max=8');
good(location => 'pow_shield_trap;', 'trap');
good(location => 'pow_shield_breaker_log_level warn;', 'breaker_log_level warn');

# a ban that strikes off leaves without effect: accepted, with a warning
# naming the ban (and where strikes are off), once per pair of directives

my $limit = "pow_shield_limit 10 1m;\n";
my $never = qr/\[warn\] pow_shield: "pow_shield_ban" can never act where "pow_shield_strikes" is off/;
my $off_at = qr/is off \(\S*case\d+\.conf:\d+\)/;

warns(location => "pow_shield_strikes off;\n            pow_shield_ban 1h after=3;", $never,
    'ban with strikes off in a location', LOCATION => $limit, -at => $off_at);
warns(location => 'pow_shield_ban 1h after=3;', $never, 'ban under strikes off of http',
    HTTP => "pow_shield_strikes off;\n", LOCATION => $limit, -at => $off_at);
warns(server => 'pow_shield_ban 1h after=3;', $never,
    'a ban in the server, strikes off in its location: names the ban, and the strikes',
    LOCATION => "${limit}pow_shield_strikes off;\n", -at => $off_at);
warns(http => "pow_shield_strikes off;\n            pow_shield_ban 1h after=3;", $never,
    'the pair in http, inherited by a shielded server and its location: one warning',
    SERVER => $limit);
warns(location => 'pow_shield_ban 1h after=3;', $never, 'in a trap',
    LOCATION => "pow_shield_trap;\npow_shield_strikes off;\n");

quiet(location => 'pow_shield_ban 1h after=3;', 'ban with the default strikes', LOCATION => $limit);
quiet(location => "pow_shield_strikes off;\n            pow_shield_ban off;",
    'strikes off and ban off', LOCATION => $limit);
quiet(http => "pow_shield_strikes off;\n            pow_shield_ban 1h after=3;",
    'the pair in http, strikes on again where it is shielded',
    LOCATION => "pow_shield_limit 10 1m;\npow_shield_strikes 5 60s;\n");
quiet(location => "pow_shield_strikes off;\n            pow_shield_ban 1h after=3;",
    'the pair where nothing is shielded');

# everything at once

good(http => "pow_shield_zone 2m;\n$secret\n"
    . "pow_shield_limit 60 1m;\npow_shield_difficulty 3;\n"
    . "pow_shield_challenge_ttl 30s;\npow_shield_headers both;\n",
    'all directives together',
    SERVER => "pow_shield_key \$http_x_api_key;\npow_shield_dry_run on;\n",
    LOCATION => "pow_shield_limit 5 10s;\npow_shield_difficulty 2;\n"
        . "pow_shield_log_level notice;\npow_shield_headers x;\n");

# without a secret a random key is generated, with a notice

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    server {
        %%TEST_SERVER%%

        location / {
            pow_shield_limit 10 1m;
        }
    }
EOF

$t->run;
ok(scalar $t->error_log_lines(qr/\[notice\].*random/i),
    'no secret configured: a notice says a random key was generated');
$t->stop;

###############################################################################

$t->done_testing;
