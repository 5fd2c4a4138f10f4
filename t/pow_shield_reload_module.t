#!/usr/bin/perl

# A reload that loads the module from another path (docs/operations.md,
# "Upgrading the module takes a restart"): nginx tags the zone with the
# module that asked for it, so the new module gets a new, empty zone (the
# counts start over) and never reads one a module of another zone layout
# wrote (`MAGIC`, src/shm/mod.rs); a reload with the same path keeps the
# module already loaded and its zone. Both paths here hold copies of one
# build, so this shows nginx's rule (a new path, a new zone), not the
# `MAGIC` check itself, which a reload cannot reach: a zone is only ever
# offered again to the module that made it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Copy qw(copy);
use File::Temp qw(tempdir);
use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my $built = $ENV{TEST_NGINX_MODULE}
    || "$Test::PowShield::REPO/objs/ngx_http_pow_shield_module.so";
my $copies = tempdir(CLEANUP => 1);
for my $name (qw(first second)) {
    copy($built, "$copies/$name.so") or plan(skip_all => "copy $built: $!");
}

my $t = Test::PowShield->new(module => "$copies/first.so");

my $conf = http_conf(<<'EOF');
    pow_shield_secret "reload-module-suite-secret-0123456789";
    pow_shield_zone 1m;

    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 2 1h;
            pow_shield_difficulty 1;
        }
    }
EOF

$t->write_file_expand('nginx.conf', $conf);
$t->write_file('html/api/data.json', qq({"ok":true}\n));
$t->run;

###############################################################################

sub get { $t->http_get('/api/data.json') }

is(get()->status, 200, 'request 1 of 2: 200');
is(get()->status, 200, 'request 2 of 2: 200');
is(get()->status, 429, 'request 3: 429');

ok($t->reload, 'reload with the same module path');
is(get()->status, 429, 'same path: the zone is kept, still 429');

$t->{module} = "$copies/second.so";
$t->write_file_expand('nginx.conf', $conf);
ok($t->reload, 'reload loading the module from another path');
my $r = get();
is($r->status, 200, 'another path: a new, empty zone, the client passes');
is($r->header('X-RateLimit-Remaining'), 1, 'another path: counting from 0');
unlike($t->read_file('error.log'), qr/unknown layout/,
    'no zone of another layout was offered to the new module');

done_testing;
