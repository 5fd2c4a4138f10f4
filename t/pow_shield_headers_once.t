#!/usr/bin/perl

# The shield's headers go out once a response, though nginx may run the
# header filters twice for one (src/http/filter.rs, its headers_sent
# guards): a Range past a file's end is refused by the range filter,
# which runs after ours, with 416; nginx then sends that response through
# every header filter again, the headers ours added the first time still
# in it. Likewise its error_page (an internal redirect), and a named
# location's answer, which the range filter refuses too (a third run).
# Each 416 carries the headers a 200 of the same request carries (the
# rate-limit headers, and the next challenge of the request that pays
# ahead), once each: the straight path's guard (local mode's first
# requests) and the full path's (the next challenge, both modes).
#
# Not yet so: a 412 of the not_modified filter (an If-Match or an
# If-Unmodified-Since that fails) carries none: nginx clears the header
# list before it runs the filters again (ngx_http_filter_finalize_request),
# and the guard skips the second run (a TODO test; image_filter's 415 and
# xslt's errors are sent the same way).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:redis http_conf);
use Test::PowShield::Modes;

my $conf = http_conf(<<'EOF');
    %%REDIS%%
    pow_shield_secret "headers-once-suite-secret-0123456789ab";

    server {
        %%TEST_SERVER%%

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        location /range/ { pow_shield_limit 3 1h; }
        location /page/  { pow_shield_limit 3 1h; error_page 416 /open/416.json; }
        location /named/ { pow_shield_limit 3 1h; error_page 416 = @named; }
        location @named  { return 200 '{"named":true}'; }
        location /open/  { }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"$_":true}\n)) } qw(range page named);
$files{'html/open/416.json'} = qq({"416":true}\n);

# The shield's headers of a response, lower-cased, in order: a name twice
# if it came twice.
sub shield_headers {
    my ($r) = @_;
    return join ' ', grep { /^(x-ratelimit-|ratelimit|x-pow-)/ }
        map { lc $_->[0] } @{$r->{order}};
}

Test::PowShield::Modes->each_mode($conf, files => \%files, sub {
    my ($m) = @_;
    my $t = $m->node(1);

    for my $loc (qw(range page named)) {
        my $uri = "/$loc/data.json";
        my (@want, @got);
        for my $i (1 .. 3) {
            my $whole = $t->http_get($uri, 'X-Client' => "whole-$loc");
            is($whole->status, 200, "/$loc/ $i: 200");
            my $past = $t->http_get($uri, 'X-Client' => "past-$loc",
                Range => 'bytes=1000-');
            is($past->status, 416, "/$loc/ $i with a Range past the end: 416");
            is($past->header('X-RateLimit-Remaining'), 3 - $i,
                "/$loc/ $i: X-RateLimit-Remaining: " . (3 - $i));
            push @want, shield_headers($whole);
            push @got, shield_headers($past);
        }
        like($want[0], qr/^x-ratelimit-limit .* ratelimit$/, "/$loc/: a 200's headers");
        ok(scalar(grep { /x-pow-next-challenge/ } @want), "/$loc/: one 200 pays ahead");
        is_deeply(\@got, \@want, "/$loc/: each 416 has the 200's headers, once each")
            or diag(explain(\@got, \@want));
    }

    my $r = $t->http_get('/range/data.json', 'X-Client' => 'if-match',
        'If-Match' => '"another"');
    is($r->status, 412, 'a failed If-Match: 412');
    TODO: {
        local $TODO = 'the 412 of a failed If-Match carries no headers (nginx cleared them)';
        is(shield_headers($r), 'x-ratelimit-limit x-ratelimit-remaining'
            . ' x-ratelimit-reset ratelimit-policy ratelimit', '... with the rate-limit headers');
    }
});

Test::PowShield::Modes->done_testing;
