#!/usr/bin/perl

# Two traps "nginx -t" warns of (not errors), naming file and line, once
# each (docs/directives.md): a pow_shield_key that is one header variable
# alone (requests without the header are exempt), and a shielded location
# whose first rewrite directive is "return" (the rewrite phase answers
# before the access phase: the shield never runs there).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(http_conf);
use Test::PowShield::ConfigCases;

###############################################################################

my $t = Test::PowShield->new;

my $template = http_conf(<<'EOF');
    map $http_x_api_key $pow_key {
        default     $pow_shield_client;
        "k-1041"    api:1041;
    }
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
my $limit = "pow_shield_limit 10 1m;\n";

###############################################################################

# a key that is a header alone

my $exempts = qr/\[warn\] pow_shield: "pow_shield_key \$http_x_api_key" exempts every request without that header/;

$cases->warns(location => 'pow_shield_key $http_x_api_key;', $exempts,
    'a key of a header alone in a shielded location', LOCATION => $limit);
$cases->warns(location => 'pow_shield_key ${http_x_api_key};',
    qr/\[warn\] pow_shield: "pow_shield_key \$http_x_api_key" exempts/,
    'the same header in braces', LOCATION => $limit);
$cases->warns(http => 'pow_shield_key $http_authorization;',
    qr/\[warn\] pow_shield: "pow_shield_key \$http_authorization" exempts/,
    'a key of a header in http, inherited by shielded locations: one warning',
    SERVER => $limit, LOCATION => "location /b/ { }\n");

$cases->quiet(location => 'pow_shield_key $pow_key;',
    'a key mapped with a fallback to the address', LOCATION => $limit);
$cases->quiet(location => 'pow_shield_key "api:$http_x_api_key";',
    'a header with a constant (no request is exempt)', LOCATION => $limit);
$cases->quiet(location => 'pow_shield_key $http_x_api_key;',
    'a header key where nothing is shielded');

# a shielded location that only returns

my $returns = qr/\[warn\] pow_shield: location "\/r\/" answers with "return" in the rewrite phase, before the access phase: the shield \(\S*case\d+\.conf:\d+\) never runs there/;

$cases->warns(server => "location /r/ { pow_shield_limit 1 1m; return 200 'hi'; }", $returns,
    'a location with a limit and return');
$cases->warns(server => "location /r/ { return 204; }", $returns,
    'a location that returns under a limit of its server', SERVER => $limit);
$cases->warns(server => "location /r/ { pow_shield_trap; return 404; }",
    qr/\[warn\] pow_shield: location "\/r\/" answers with "return"/, 'a trap that returns');

$cases->quiet(server => "location /r/ { return 200; }", 'return where nothing is shielded');
$cases->quiet(server => "location /r/ { pow_shield_limit 1 1m; if (\$arg_x) { return 403; } }",
    'a return inside if (the shield runs for the rest)');
$cases->quiet(server => "location /r/ { pow_shield_limit 1 1m; }",
    'a shielded location serving files');

###############################################################################

done_testing();
