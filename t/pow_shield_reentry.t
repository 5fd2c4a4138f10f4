#!/usr/bin/perl

# The access phase can run again after the shield answered: post_action
# (after every response) and error_page (for a response nginx made instead
# of ours, e.g. a body it could not read).  Every such request still ends
# exactly once: no connection is left open, and nginx stops without
# "open socket left".
#
# In local mode and in cluster mode (Test::PowShield::Modes each_mode).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow :util);
use Test::PowShield::Modes;

###############################################################################

my $t;    # the node of the mode under test (each_mode below)

my $conf = http_conf(<<'EOF');
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        # the whole server is shielded, the post_action and error_page
        # targets included
        pow_shield_limit 1 1h;
        pow_shield_key $http_x_client;
        pow_shield_strikes off;

        location /after/ {
            post_action /done.json;
        }

        location /errors/ {
            error_page 400 = /errors/data.json;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        server_name unrelated;

        root %%TESTDIR%%/html;
    }
EOF

my %files = map { ("html/$_" => qq({"ok":true}\n)) }
    'after/data.json', 'errors/data.json', 'done.json';

#{79}

Test::PowShield::Modes->each_mode($conf, redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $t = $m->node(1);

    # post_action after a 429: the post_action location runs (its output goes
    # nowhere) and the connection closes

    is($t->http_get('/after/data.json', 'X-Client' => 'pa')->status, 200,
        'post_action: first request passes');
    my @r = map { $t->http_get('/after/data.json', 'X-Client' => 'pa',
        -timeout => 5) } 1 .. 20;
    is(statuses(@r), join(' ', ('429') x 20),
        'post_action: 20 requests over the limit each answered 429 and closed');
    ok(!grep({ defined $_->error } @r), 'post_action: no read timed out');

    # error_page for nginx's 400 (broken chunked body over the limit): the
    # redirect target gets the shield's decision again, never the content

    is($t->http_get('/errors/data.json', 'X-Client' => 'ep')->status, 200,
        'error_page: first request passes');
    my @e = map {
        $t->http("POST /errors/data.json HTTP/1.1\r\nHost: localhost\r\n"
            . "X-Client: ep\r\nTransfer-Encoding: chunked\r\n"
            . "Connection: close\r\n\r\nzz\r\nnot a chunk\r\n", -timeout => 5)
    } 1 .. 20;
    ok(!grep({ defined $_->error } @e),
        'error_page: every request answered and closed');
    ok(!grep({ ($_->status // 0) == 200 } @e),
        'error_page: the shielded content is never served over the limit');
    is($e[0]->status, 429, 'error_page: the redirect is answered with the decision');

    # nothing leaked: another server on the same nginx still answers, and
    # the graceful stop (done_testing) finds no open socket

    is($t->http_get('/done.json', -port => 8081)->status, 200,
        'an unrelated server still answers');

    $t->stop;
    ok($t->stopped_gracefully, 'nginx stopped gracefully');
    ok(!$t->error_log_lines(qr/open socket .* left/),
        'no "open socket left" at stop');
});

###############################################################################

Test::PowShield::Modes->done_testing;
