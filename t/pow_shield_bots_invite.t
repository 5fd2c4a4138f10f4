#!/usr/bin/perl

# Signed bots are invited (issue 39 point 8, docs/bots.md "Invited to
# sign"): where pow_shield_bot_keys is configured, a 429 to a request that
# carries no signature asks for a Web Bot Auth one (RFC 9421 §5.1,
# Accept-Signature: @authority, created, expires, alg ed25519, tag
# web-bot-auth); a signed request, a refused solution's fresh challenge and
# an http block without bots' keys are not asked.  A client holding a key
# that signs when asked (the CLI's --sign-when-asked, Python's
# BotSigner(when_asked=True), Node's whenAsked) meets the 429 and sends the
# request again, signed: the access log shows the 429, then the bot's
# request admitted under its own limit.  Every 429 body advertises the
# location's strike threshold (docs/protocol.md, "How many requests in
# flight").  The "Known bots" examples of the Python and Node clients'
# READMEs run as written, signed as a configured bot.  Both modes.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Temp qw(tempdir);
use Test::More;
use Test::PowShield qw(:util http_conf);
use Test::PowShield::Modes;

###############################################################################

my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$Test::PowShield::REPO/objs/pow-shield";
plan(skip_all => "no $cli (make build)") unless -x $cli;

my $INVITATION = 'sig1=("@authority");created;expires;alg="ed25519";tag="web-bot-auth"';

my $PY = $ENV{TEST_PYTHON} || '/usr/bin/python3';
my $python_ok = -x $PY && system($PY, '-c', 'import requests, cryptography') == 0;
my $NODE = $ENV{TEST_NODE} || 'node';
my $node_ok = system("$NODE --version >/dev/null 2>&1") == 0;
$ENV{PYTHONPATH} = "$Test::PowShield::REPO/clients/python";

# Each client signs as a bot of its own, with a limit of its own.
my @bots = qw(examplebot clibot pybot nodebot alwaysbot pyreadme nodereadme);
my $keys = tempdir(CLEANUP => 1);
my %directory;
for my $name (@bots, 'stranger') {
    $directory{$name} = `$cli bot-key new $keys/$name.jwk 2>/dev/null`;
    die "bot-key new $name failed\n" unless $? == 0 && $directory{$name} =~ /"keys"/;
}
my $bot_keys = join '', map { "    pow_shield_bot_keys $_ bots/$_.json;\n" } @bots;

my $conf = http_conf(<<'EOF' =~ s/%%BOT_KEYS%%\n/$bot_keys/r, workers => 2);
    pow_shield_secret "bots-invite-secret-0123456789abcdefghij";
    %%REDIS%%

    set_real_ip_from 127.0.0.1;
    real_ip_header X-Forwarded-For;

%%BOT_KEYS%%

    map $pow_shield_bot $pk {
        ""      $pow_shield_client;
        default bot:$pow_shield_bot;
    }

    log_format invite '$remote_addr $status $pow_shield_result bot=$pow_shield_bot';

    server {
        %%TEST_SERVER%%
        access_log %%TESTDIR%%/invite.log invite;

        add_header X-Bot $pow_shield_bot always;

        location /api/ {
            pow_shield_limit 1 1h;
            pow_shield_key $pk;
            pow_shield_difficulty 1;
        }

        location /three/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes 3 60s;
        }

        location /off/ {
            pow_shield_limit 1 1h;
            pow_shield_strikes off;
        }
    }
EOF

my %files = (
    'html/api/data.json'   => "{}\n",
    'html/three/data.json' => "{}\n",
    'html/off/data.json'   => "{}\n",
    map { ("bots/$_.json" => $directory{$_}) } @bots,
);

# run_in($dir, @argv) -> ($exit_code, $stdout, $stderr), run in $dir.
sub run_in {
    my ($dir, @argv) = @_;
    my $out = File::Temp->new;
    my $err = File::Temp->new;
    my $pid = fork // die "fork: $!";
    if (!$pid) {
        chdir $dir or die "$dir: $!";
        open STDOUT, '>&', $out or die;
        open STDERR, '>&', $err or die;
        exec @argv or exit 127;
    }
    waitpid $pid, 0;
    my $rc = $? >> 8;
    my $read = sub { local $/; open my $fh, '<', $_[0]->filename or die; <$fh> // '' };
    return ($rc, $read->($out), $read->($err));
}

# The signature headers of one request, from `bot-key sign`.
sub signed {
    my ($name, $url) = @_;
    my @lines = `$cli bot-key sign --sign-key $keys/$name.jwk $url`;
    die "bot-key sign $name failed\n" unless $? == 0 && @lines;
    return map { chomp; split /: /, $_, 2 } @lines;
}

my $n = 0;
Test::PowShield::Modes->each_mode($conf, nodes => 1,
    redis => 'timeout=3s', files => \%files, sub {
    my ($m) = @_;
    $n++;
    my $ip = sub { "192.0.2." . ($n * 100 + $_[0]) };
    my $t = $m->node(1);
    my $port = $t->port(8080);
    my $url = "http://127.0.0.1:$port/api/data.json";
    # (what the test's own requests are signed for: they send Host: localhost)
    my $local = 'http://localhost/api/data.json';

    # The invitation, on a 429 to an unsigned request only.
    $t->http_get('/api/data.json', 'X-Forwarded-For' => $ip->(1));
    my $r = $t->http_get('/api/data.json', 'X-Forwarded-For' => $ip->(1));
    is($r->status, 429, "$m: over the limit, unsigned: 429");
    is($r->header('Accept-Signature'), $INVITATION,
        "$m: the 429 asks for a Web Bot Auth signature (Accept-Signature)");
    is($r->json->{strike_threshold}, 5, "$m: its body advertises the strike threshold (5 by default)");

    my $bad = $t->http_get('/api/data.json', 'X-Forwarded-For' => $ip->(1),
        'X-PoW-Challenge' => $r->header('X-PoW-Challenge'), 'X-PoW-Nonce' => 'x');
    is($bad->status, 422, "$m: a wrong solution: 422 with a fresh challenge");
    is($bad->header('Accept-Signature'), undef, "$m: which does not ask for a signature");

    $t->http_get('/api/data.json', signed('examplebot', $local), 'X-Forwarded-For' => $ip->(2));
    $r = $t->http_get('/api/data.json', signed('examplebot', $local), 'X-Forwarded-For' => $ip->(2));
    is($r->status . ' ' . $r->header('X-Bot'), '429 examplebot', "$m: the bot over its own limit: 429");
    is($r->header('Accept-Signature'), undef, "$m: a signed request is not asked again");
    $t->http_get('/api/data.json', signed('stranger', $local), 'X-Forwarded-For' => $ip->(3));
    $r = $t->http_get('/api/data.json', signed('stranger', $local), 'X-Forwarded-For' => $ip->(3));
    is($r->status . ' ' . ($r->header('X-Bot') // ''), '429 ', "$m: an unknown key is anonymous: 429");
    is($r->header('Accept-Signature'), undef, "$m: nor is a request signed with a key not configured");

    # The strike threshold is the location's; none where the breaker is off.
    for my $case (['three', 3], ['off', undef]) {
        my ($where, $threshold) = @$case;
        $t->http_get("/$where/data.json", 'X-Forwarded-For' => $ip->(4));
        my $c = $t->http_get("/$where/data.json", 'X-Forwarded-For' => $ip->(4));
        is($c->status, 429, "$m: /$where/: 429");
        is($c->json->{strike_threshold}, $threshold,
            "$m: /$where/: strike_threshold " . ($threshold // 'absent'));
    }

    # A client holding a key that signs when asked: the 429, then the
    # same request signed, admitted under the bot's own limit.
    # The access log's lines of $addr are $want. (nginx writes a request's
    # line after its response went out, so the client may be done before
    # it: they are awaited, up to 5 s.)
    my $logged = sub {
        my ($addr, $want, $name) = @_;
        my $got;
        eventually(5, sub {
            $got = join ', ', map { /^\Q$addr\E (\d+ \w+ bot=\S*)/ ? $1 : () }
                split /\n/, $t->read_file('invite.log');
            $got eq $want;
        });
        is($got, $want, $name);
    };
    my $first = sub {
        my ($addr) = @_;
        my $pre = $t->http_get('/api/data.json', 'X-Forwarded-For' => $addr);
        is($pre->status, 200, "$m: $addr: its one free request");
    };

    $first->($ip->(10));
    my ($rc, $out, $err) = $t->run_argv($cli, 'get', '-s', '-i', '--sign-key', "$keys/clibot.jwk",
        '--sign-when-asked', '-H', 'X-Forwarded-For: ' . $ip->(10), $url);
    is($rc, 0, "$m: pow-shield get --sign-when-asked: exit 0");
    like($out, qr{^HTTP/1\.1 200 }, "$m: the CLI's answer is the 200");
    like($out, qr/^X-Bot: clibot\r$/m, "$m: admitted as the bot");
    $logged->($ip->(10), '200 pass bot=, 429 challenge bot=, 200 pass bot=clibot',
        "$m: the CLI: a 429 with Accept-Signature followed by a signed retry");

    SKIP: {
        skip "$PY with requests and cryptography not found", 2 unless $python_ok;
        $first->($ip->(11));
        my ($rc, $out) = $t->run_argv($PY, '-c', 'import sys, pow_shield; '
            . 'bot = pow_shield.BotSigner.from_file(sys.argv[1], when_asked=True); '
            . 'r = pow_shield.Session(bot=bot).get(sys.argv[2], headers={"X-Forwarded-For": sys.argv[3]}); '
            . 'print(r.status_code, r.headers.get("X-Bot"))',
            "$keys/pybot.jwk", $url, $ip->(11));
        is($out, "200 pybot\n", "$m: Python, when_asked: admitted as the bot");
        $logged->($ip->(11), '200 pass bot=, 429 challenge bot=, 200 pass bot=pybot',
            "$m: Python: a 429 with Accept-Signature followed by a signed retry");
    }

    SKIP: {
        skip 'no node', 2 unless $node_ok;
        $first->($ip->(12));
        my $client = "$Test::PowShield::REPO/clients/node";
        my ($rc, $out, $err) = $t->run_argv($NODE, '-e', <<'EOJS', $client, "$keys/nodebot.jwk", $url, $ip->(12));
const [client, key, url, ip] = process.argv.slice(1);
const { BotSigner, withPowShield } = require(client);
const pay = withPowShield(fetch, { bot: BotSigner.fromFile(key, { whenAsked: true }) });
pay(url, { headers: { 'X-Forwarded-For': ip } }).then((r) => console.log(r.status, r.headers.get('X-Bot')));
EOJS
        is($out, "200 nodebot\n", "$m: Node, whenAsked: admitted as the bot") or diag($err);
        $logged->($ip->(12), '200 pass bot=, 429 challenge bot=, 200 pass bot=nodebot',
            "$m: Node: a 429 with Accept-Signature followed by a signed retry");
    }

    # The READMEs' "Known bots" examples, as written, in a directory with
    # the bot's mybot.jwk: the request is the bot's.
    my $REPO = $Test::PowShield::REPO;
    my %example = (
        python => ["$REPO/clients/python/README.md", 'python', 'pyreadme', $PY, 'readme.py', $python_ok],
        node => ["$REPO/clients/node/README.md", 'js', 'nodereadme', $NODE, 'readme.mjs', $node_ok],
    );
    for my $lang (sort keys %example) {
        my ($readme, $info, $name, $run, $file, $ok) = @{$example{$lang}};
        SKIP: {
            skip "no $run (or its packages)", 2 unless $ok;
            my $text = do { local $/; open my $fh, '<', $readme or die "$readme: $!"; <$fh> };
            my ($block) = $text =~ /^## Known bots\n.*?^```\Q$info\E\n(.*?)^```$/ms;
            ok($block, "$m: $readme has a $info example under \"Known bots\"");
            $block =~ s{https://api\.example\.com/items}{$url}g;
            my $dir = $t->path("readme-$lang");
            mkdir $dir;
            $t->write_file("readme-$lang/$file", $block);
            system('cp', "$keys/$name.jwk", "$dir/mybot.jwk") == 0 or die "cp: $!";
            if ($lang eq 'node') {
                mkdir "$dir/node_modules";
                symlink "$REPO/clients/node", "$dir/node_modules/pow-shield" or die "symlink: $!";
            }
            my ($rc, $out, $err) = run_in($dir, $run, $file);
            is($rc, 0, "$m: the $lang README's \"Known bots\" example runs") or diag("$out$err");
            like($t->read_file('invite.log'), qr/^127\.0\.0\.1 200 pass bot=\Q$name\E$/m,
                "$m: and its request is the bot's");
        }
    }

    # A client that signs every request is never asked: one request, the bot's.
    $first->($ip->(13));
    ($rc, $out) = $t->run_argv($cli, 'get', '-s', '-i', '--sign-key', "$keys/alwaysbot.jwk",
        '-H', 'X-Forwarded-For: ' . $ip->(13), $url);
    like($out, qr/^X-Bot: alwaysbot\r$/m, "$m: --sign-key alone signs the first request");
    $logged->($ip->(13), '200 pass bot=, 200 pass bot=alwaysbot',
        "$m: --sign-key alone: no 429 to be asked on");
});

###############################################################################
# An http block without pow_shield_bot_keys invites no signature.

{
    my $t = Test::PowShield->new;
    $t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    server {
        %%TEST_SERVER%%
        location /api/ {
            pow_shield_limit 1 1h;
        }
    }
EOF
    $t->write_file('html/api/data.json', "{}\n");
    $t->run;
    $t->http_get('/api/data.json');
    my $r = $t->http_get('/api/data.json');
    is($r->status, 429, 'without bots: 429');
    is($r->header('Accept-Signature'), undef, 'without bots\' keys: no Accept-Signature');
    is($r->json->{strike_threshold}, 5, 'and the strike threshold all the same');
    $t->stop;
}

Test::PowShield::Modes->done_testing;
