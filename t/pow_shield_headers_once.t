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
# A response a header filter answers instead (nginx's
# ngx_http_filter_finalize_request: the not_modified filter's 412 of an
# If-Match or an If-Unmodified-Since that fails; image_filter's 415 and
# xslt's errors are sent the same way) has its header list cleared, and
# goes through the filters again: it carries the shield's headers, those a
# 200 of the same request carries, added again (the filter sees that none
# of its own is left), once each; and so does its error_page's page (sent
# with the 412's status: no filter refuses it again). An error_page that
# answers the 412 with a 200 of an old file, which the range filter then
# refuses (a third run, the list not cleared: the headers added again are
# still in it), carries each once too, with the headers on or off (the
# next challenge alone). The same in both
# paths: local mode's straight one, and the full one. Its log line reads
# the shield's variables as a 200's does (nginx wiped the modules' contexts
# too: the state is found in the pool), and the next challenge it carries
# pays: the request paid with it, over the limit, passes (solved), and its
# own 412 carries the next one.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :redis http_conf);
use Test::PowShield::Modes;

my $conf = http_conf(<<'EOF');
    %%REDIS%%
    log_format shield '$http_x_client $status $pow_shield_result $pow_shield_remaining';
    pow_shield_secret "headers-once-suite-secret-0123456789ab";

    server {
        %%TEST_SERVER%%

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        location /range/ { pow_shield_limit 3 1h; }
        location /page/  { pow_shield_limit 3 1h; error_page 416 /open/416.json; }
        location /named/ { pow_shield_limit 3 1h; error_page 416 = @named; }
        location @named  { return 200 '{"named":true}'; }
        location /cond/  {
            pow_shield_limit 3 1h;
            access_log %%TESTDIR%%/cond.log shield;
        }
        location /cpage/ { pow_shield_limit 3 1h; error_page 412 /open/412.json; }
        location /coff/  { pow_shield_limit 3 1h; pow_shield_headers off; }
        location /open/  { }
        location /again/ { pow_shield_limit 3 1h; error_page 412 =200 /old/data.json; }
        location /againoff/ {
            pow_shield_limit 3 1h;
            pow_shield_headers off;
            error_page 412 =200 /old/data.json;
        }
        location /old/   { }
    }
EOF

my %files = map { ("html/$_/data.json" => qq({"$_":true}\n)) }
    qw(range page named cond cpage coff again againoff old);
$files{"html/open/$_.json"} = qq({"$_":true}\n) for qw(416 412);

# The solution of the challenge $r sent ahead.
sub paid_ahead {
    my ($r) = @_;
    my $token = $r->header('X-PoW-Next-Challenge') // '';
    my $p = (decode_token($token) || {})->{payload} || {};
    return ('X-PoW-Challenge' => $token,
        'X-PoW-Nonce' => solve_bits($p->{salt} // '', $p->{bits} // 1));
}

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

    # A failed precondition: the not_modified filter's 412 (the file's
    # ETag is not "another"; it was modified after 1970).
    my %fails = (
        'if-match' => ['If-Match' => '"another"'],
        'if-unmodified-since' => ['If-Unmodified-Since' => 'Thu, 01 Jan 1970 00:00:01 GMT'],
    );
    for my $loc (qw(cond cpage coff)) {
        for my $fail (sort keys %fails) {
            my $uri = "/$loc/data.json";
            my (@want, @got);
            for my $i (1 .. 3) {
                my $whole = $t->http_get($uri, 'X-Client' => "whole-$loc-$fail");
                is($whole->status, 200, "/$loc/ $i: 200");
                my $failed = $t->http_get($uri, 'X-Client' => "$loc-$fail",
                    @{$fails{$fail}});
                is($failed->status, 412, "/$loc/ $i with a failed $fail: 412");
                my $left = 3 - $i;
                if ($loc eq 'coff') {
                    is($failed->header('RateLimit'), undef,
                        "/$loc/ $i with a failed $fail: no RateLimit (headers off)");
                } else {
                    is($failed->header('X-RateLimit-Remaining'), $left,
                        "/$loc/ $i with a failed $fail: X-RateLimit-Remaining: $left");
                    like($failed->header('RateLimit'), qr/;r=$left;t=\d+$/,
                        "/$loc/ $i with a failed $fail: RateLimit r=$left");
                }
                push @want, shield_headers($whole);
                push @got, shield_headers($failed);
            }
            like($want[0], $loc eq 'coff' ? qr/^$/ : qr/^x-ratelimit-limit .* ratelimit$/,
                "/$loc/: a 200's headers");
            ok(scalar(grep { /x-pow-next-challenge/ } @want), "/$loc/: one 200 pays ahead");
            is_deeply(\@got, \@want,
                "/$loc/: each 412 of a failed $fail has the 200's headers, once each")
                or diag(explain(\@got, \@want));
        }
    }

    # A 412 answered by error_page with a 200 of a file of 1970 (its
    # If-Unmodified-Since holds there), past whose end the Range is: the
    # range filter's 416 runs the filters a third time, the headers added
    # again after the 412 still in the list.
    my $old = $t->path('html/old/data.json');
    utime 0, 0, $old or die "utime $old: $!";
    for my $loc (qw(again againoff)) {
        my @got;
        for my $i (1 .. 3) {
            my $r = $t->http_get("/$loc/data.json", 'X-Client' => "$loc",
                'If-Unmodified-Since' => 'Thu, 01 Jan 1970 00:00:01 GMT',
                Range => 'bytes=1000-');
            is($r->status, 416, "/$loc/ $i: a 412's error_page past its end: 416");
            push @got, shield_headers($r);
        }
        my $ahead = 'x-pow-next-challenge x-pow-next-bits x-pow-next-difficulty';
        my $limits = 'x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset'
            . ' ratelimit-policy ratelimit';
        my @want = $loc eq 'again'
            ? ($limits, $limits, "$limits $ahead") : ('', '', $ahead);
        is_deeply(\@got, \@want, "/$loc/: each header once, the next challenge on the last")
            or diag(explain(\@got));
    }

    # The last 412 of /cond/ sent the next challenge ahead: paid with it,
    # over the limit, the request passes, and its 412 sends the next one.
    for my $fail (sort keys %fails) {
        my $client = "cond-$fail";
        my $last = $t->http_get('/cond/data.json', 'X-Client' => $client, @{$fails{$fail}});
        is($last->status, 429, "/cond/ 4 with a failed $fail, unpaid: 429");
        my $ahead;
        $ahead = $t->http_get('/cond/data.json', 'X-Client' => "ahead-$fail",
            @{$fails{$fail}}) for 1 .. 3;
        my $paid = $t->http_get('/cond/data.json', 'X-Client' => "ahead-$fail",
            @{$fails{$fail}}, paid_ahead($ahead));
        is($paid->status, 412, "/cond/ paid ahead with a 412's challenge, a failed $fail: 412");
        is(shield_headers($paid), 'x-ratelimit-limit x-ratelimit-remaining x-ratelimit-reset'
            . ' ratelimit-policy ratelimit x-pow-next-challenge x-pow-next-bits'
            . ' x-pow-next-difficulty', '... with the headers and the next challenge, once each');
        my $log = $t->read_file('cond.log');
        is(join('|', grep { /^$client / } split /\n/, $log),
            "$client 412 pass 2|$client 412 pass 1|$client 412 pass 0|$client 429 challenge 0",
            "/cond/ a failed $fail: each 412 logged passed, with its remaining");
        like($log, qr/^ahead-$fail 412 solved 0$/m, '... and the paid one solved');
    }
});

Test::PowShield::Modes->done_testing;
