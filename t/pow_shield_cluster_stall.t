#!/usr/bin/perl

# A Redis stall never blocks a paying client (issue 26 point 6, issue 37;
# SPEC §5: "A solution that cannot be spent right now (Redis unavailable or
# busy, the generation being learned) gets a fresh challenge and no strike;
# a node never blocks a client on strikes that Redis, once back, does not
# confirm"; SPEC §6: "A call that Redis runs after the node gave up on it
# changes nothing").
#
# Cluster mode, two nodes of two workers on one Redis, timeout=300ms, the
# default pow_shield_fail local and pow_shield_strikes 5 60s.  A client
# keeps 4 requests in flight (n - 1) for about 8 s, each to the two nodes
# in turn, and pays every challenge it is given (429, 409, 410, 422): the
# next request of that slot carries the solution.  1.5 s in, Redis is
# stopped (SIGSTOP) for 2.5 s.  The paying client is never blocked (no
# 403) before, during or in the 4 s after the stall: the checks Redis runs
# once resumed came after their deadline and change nothing; a node's
# workers stand in and return together (Redis's health is the node's); and
# for a few seconds after a node returns an unpaid 429 is no strike, while
# the other node returns and writes the payments it took meanwhile
# (docs/operations.md, "Choosing a fail policy").  It never gets a 5xx or
# no answer, and is admitted (200) after the stall.  A control client that
# ignores every challenge from the start of the stall is still blocked.
#
# No durations are asserted: statuses are counted per phase (by the time a
# request was sent: before the stall, during it, after SIGCONT) and
# printed with diag.  Every request carries its own sequence number in the
# query string (?c=<client>&n=<seq>) so that error.log lines can be matched
# to it; a 403 of the paying client is reported with those lines.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use IO::Select;
use IO::Socket::INET;
use POSIX qw(strftime);
use Test::More;
use Test::PowShield qw(:pow :util :redis);
use Test::PowShield::Modes;
use Test::PowShield::Response;
use Time::HiRes ();

###############################################################################

my $conf = http_conf(<<'EOF', workers => 2);
    pow_shield_secret "cluster-stall-suite-secret-0123456789ab";
    %%REDIS%%

    server {
        %%TEST_SERVER%%

        add_header X-Result $pow_shield_result always;
        add_header X-Strikes $pow_shield_strikes always;

        pow_shield_key $http_x_client;
        pow_shield_difficulty 1;

        # the defaults: pow_shield_strikes 5 60s, pow_shield_fail local
        location /api/ {
            pow_shield_limit 2 1h;
        }
    }
EOF

my @nodes = Test::PowShield::Modes->cluster_only($conf, nodes => 2,
    redis => 'timeout=300ms',
    files => { 'html/api/data.json' => qq({"ok":true}\n) })->nodes;
my $redis = $nodes[0]->redis;

my ($IN_FLIGHT, $STALL_AT, $STALL_FOR, $AFTER) = (4, 1.5, 2.5, 4.0);

sub wkey { client_key($_[0], 'w', 2, 3600000) }

sub get {
    my ($t, $client, %h) = @_;
    return $t->http_get('/api/data.json', 'X-Client' => $client, %h);
}

###############################################################################

# Both nodes decide with Redis, every worker connected: a run of fresh
# clients, each counted in Redis (a loaded machine may take a while)

for my $i (0 .. $#nodes) {
    my ($n, $row) = (0, 0);
    ok(eventually(30, sub {
            my $c = "warm-$i-" . $n++;
            my $ok = get($nodes[$i], $c)->status == 200 && $redis->cmd('EXISTS', wkey($c));
            $row = $ok ? $row + 1 : 0;
            $row >= 8;
        }), 'node ' . ($i + 1) . ': decides with Redis (8 fresh clients in a row counted there)');
}

###############################################################################
# The run: 4 paying slots from the start, one ignoring slot from the stall on

my $seq = 0;
my (@records, %slot_of);
my $sel = IO::Select->new;
my $t0 = Time::HiRes::time();
my ($paused_at, $resumed_at);

sub phase {
    my ($at) = @_;
    return 'before' if !defined $paused_at || $at < $paused_at;
    return 'stall' if !defined $resumed_at || $at < $resumed_at;
    return 'after';
}

sub launch {
    my ($slot) = @_;
    my $n = ++$seq;
    my $node = $n % @nodes;
    my %h = ('X-Client' => $slot->{client}, %{delete $slot->{pay} || {}});
    my $req = "GET /api/data.json?c=$slot->{client}&n=$n HTTP/1.0\r\n"
        . "Host: localhost\r\n" . join('', map { "$_: $h{$_}\r\n" } sort keys %h) . "\r\n";
    my $rec = { n => $n, client => $slot->{client}, node => $node + 1,
        paid => exists $h{'X-PoW-Nonce'} ? 1 : 0, sent => Time::HiRes::time() };
    $rec->{phase} = phase($rec->{sent});
    $rec->{for} = delete $slot->{pay_for} if $rec->{paid};
    push @records, $rec;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . $nodes[$node]->port(8080),
        Proto => 'tcp', Timeout => 5);
    unless ($s && (syswrite($s, $req) // 0) == length $req) {
        $rec->{status} = 'none';
        $rec->{error} = "connect/write: $!";
        $slot->{next_at} = Time::HiRes::time() + 0.05;
        return;
    }
    binmode $s;
    @$slot{qw(sock raw rec)} = ($s, '', $rec);
    $slot_of{fileno $s} = $slot;
    $sel->add($s);
}

sub finish_slot {
    my ($slot) = @_;
    my ($s, $rec) = @$slot{qw(sock rec)};
    $sel->remove($s);
    delete $slot_of{fileno $s};
    close $s;
    my $r = Test::PowShield::Response->new($slot->{raw});
    $rec->{got} = Time::HiRes::time();
    $rec->{status} = $r->status // 'none';
    $rec->{$_->[0]} = $r->header($_->[1]) for
        [result => 'X-Result'], [strikes => 'X-Strikes'], [shield => 'X-PoW-Shield'];
    $rec->{challenge} = $r->header('X-PoW-Challenge') ? 1 : 0;
    if ($slot->{pays} && $rec->{challenge} && $rec->{status} =~ /^(?:429|409|410|422)$/) {
        $slot->{pay} = { solution($r) };
        $slot->{pay_for} = $rec;
    }
    delete @$slot{qw(sock rec raw)};
    $slot->{next_at} = Time::HiRes::time() + ($slot->{gap} // 0);
}

my @slots = ((map { { client => 'payer', pays => 1, next_at => $t0 } } 1 .. $IN_FLIGHT),
    { client => 'ignorer', pays => 0, gap => 0.02 });
my $end = $t0 + $STALL_AT + $STALL_FOR + $AFTER;
my $drain = $end + 20;

while (1) {
    my $now = Time::HiRes::time();
    if (!defined $paused_at && $now >= $t0 + $STALL_AT) {
        $redis->pause;
        $paused_at = Time::HiRes::time();
        $_->{next_at} //= $paused_at for grep { $_->{client} eq 'ignorer' } @slots;
    } elsif (defined $paused_at && !defined $resumed_at
            && $now >= $paused_at + $STALL_FOR) {
        $redis->resume;
        $resumed_at = Time::HiRes::time();
    }
    if ($now < $end) {
        for my $slot (@slots) {
            launch($slot) if !$slot->{sock} && defined $slot->{next_at}
                && $slot->{next_at} <= $now;
        }
    }
    last if !$sel->count && $now >= $end;
    last if $now > $drain;
    for my $s ($sel->can_read(0.01)) {
        my $slot = $slot_of{fileno $s};
        my $n = sysread($s, my $buf, 65536);
        if ($n) { $slot->{raw} .= $buf } else { finish_slot($slot) }
    }
}
$redis->resume if $redis->paused;
for my $slot (grep { $_->{sock} } @slots) {     # not answered in 20 s
    $slot->{rec}{status} = 'none';
    $sel->remove($slot->{sock});
    close $slot->{sock};
}

###############################################################################
# The counts

sub at { my $t = $_[0]; strftime('%H:%M:%S', localtime $t) . sprintf('.%03d', ($t - int $t) * 1000) }
sub rel { sprintf '%+.3fs', $_[0] - $paused_at }

sub counts {
    my (@r) = @_;
    my %c;
    $c{$_->{status} // 'none'}++ for @r;
    return join(', ', map { "$c{$_} x $_" } sort keys %c) || 'nothing';
}

my %by;
push @{$by{$_->{client}}{$_->{phase}}}, $_ for @records;
push @{$by{$_->{client}}{all}}, $_ for @records;

diag(sprintf 'Redis stopped at %s for %.3f s (resumed %s); %d requests',
    at($paused_at), $resumed_at - $paused_at, at($resumed_at), scalar @records);
for my $c (qw(payer ignorer)) {
    diag(sprintf '%-7s %-6s: %s', $c, $_, counts(@{$by{$c}{$_} || []}))
        for qw(before stall after all);
}
my @paid = grep { $_->{paid} } @{$by{payer}{all}};
diag(sprintf 'payer: %d requests paid a challenge: %s', scalar @paid, counts(@paid));
diag(sprintf 'payer %-6s: paid: %s', $_, counts(grep { $_->{paid} } @{$by{payer}{$_} || []}))
    for qw(before stall after);

my @p403 = grep { $_->{status} eq '403' }
    map { @{$by{payer}{$_} || []} } qw(before stall after);
my @bad = grep { $_->{status} !~ /^[1-4]\d\d$/ } @records;
my @after200 = grep { $_->{status} eq '200' } @{$by{payer}{after} || []};

ok(@{$by{payer}{before} || []} && @{$by{payer}{stall} || []} && @{$by{payer}{after} || []},
    'the paying client sent requests before, during and after the stall');
is(scalar @p403, 0, 'the paying client is never blocked before, during or in the '
    . "$AFTER s after the stall (" . counts(@{$by{payer}{all}}) . ')') or report(@p403);
is(scalar @bad, 0, 'no 5xx, no request without an answer') or report(@bad);
ok(scalar @after200, 'after the stall the paying client is admitted ('
    . scalar(@after200) . ' x 200 after SIGCONT)');
my @i403 = grep { $_->{status} eq '403' } @{$by{ignorer}{all} || []};
diag(sprintf 'ignorer: first 403 sent %s after SIGCONT', @i403 ? sprintf('%.3f s', $i403[0]{sent} - $resumed_at) : 'not in the run');
# (Its 429s strike again 3 s after its node is back: a node that comes
# back late blocks it after the run; it goes on ignoring until then.)
my $k = 0;
ok(@i403 || eventually(30, sub { get($nodes[$k++ % 2], 'ignorer')->status == 403 }),
    'a client ignoring its challenges through the same stall is blocked ('
    . counts(@{$by{ignorer}{all} || []}) . ')');
is(scalar(grep { ($_->{shield} // '') ne 'blocked' } @i403), 0,
    '... X-PoW-Shield: blocked on every 403');

# Redis decides again at both nodes, and the paying client is admitted at
# each once it pays

for my $i (0 .. $#nodes) {
    my $n = 0;
    ok(eventually(30, sub {
            my $c = "back-$i-" . $n++;
            get($nodes[$i], $c);
            $redis->cmd('EXISTS', wkey($c));
        }), 'node ' . ($i + 1) . ': decides with Redis again');
}
diag("before the rounds: the payer's strikes, unpaid strikes and spends waiting for a batch in Redis: "
    . join(' ', map { $redis->cmd('GET', client_key('payer', $_)) // 0 } qw(s u c)));
my @rounds;
for my $i (1 .. 6) {
    my ($t, $other) = @nodes[$i % 2, 1 - $i % 2];
    my @r = (get($t, 'payer'));
    # a fresh challenge instead of a spend is allowed (SPEC §5): paid again
    push @r, get(@r % 2 ? $other : $t, 'payer', solution($r[-1]))
        while $r[-1]->header('X-PoW-Challenge') && @r < 4;
    push @rounds, statuses(@r);
}
# (Counted, not asserted: the run ends with the last challenge of each of
# its 4 slots unpaid, up to 4 strikes it earned; one more 429 may block it.)
diag('after the stall, 6 challenges paid at the other node: ' . join(', ', @rounds));
diag("after recovery: the payer's strikes in Redis: "
    . ($redis->cmd('GET', client_key('payer', 's')) // 0) . ", the ignorer's: "
    . ($redis->cmd('GET', client_key('ignorer', 's')) // 0));

# error.log lines of the node that answered a request, about it
my %log_cache;
sub log_of {
    my ($x) = @_;
    my $lines = $log_cache{$x->{node}} //=
        [$nodes[$x->{node} - 1]->error_log_lines(qr/pow_shield/)];
    return map { "$x->{node}: $_" } grep { /[?&]n=$x->{n}\b/ } @$lines;
}

# "p<n>@<node>": a request paid the challenge of request n, answered by that node
sub paid_for {
    my ($x) = @_;
    return '' unless $x->{paid};
    return 'p' unless $x->{for};
    return "p$x->{for}{n}\@$x->{for}{node}:";
}

# A 403 of the paying client (or a 5xx): when, where, what the response
# said, and what each node's error.log said about that request and about
# Redis and the breaker then.
sub report {
    my (@r) = @_;
    my %ph;
    $ph{$_->{phase}}++ for @r;
    diag(scalar(@r) . ' such responses; by the phase they were sent in: '
        . join(', ', map { "$_ $ph{$_}" } sort keys %ph));
    diag(sprintf 'first at %s (%s from the stall), last at %s (%s)',
        at($r[0]{sent}), rel($r[0]{sent}), at($r[-1]{sent}), rel($r[-1]{sent}));
    my @show = @r > 12 ? (@r[0 .. 7], @r[-4 .. -1]) : @r;
    for my $x (@show) {
        diag(sprintf 'n=%d node %d sent %s (%s, %s) answered %s: %s%s result=%s strikes=%s%s',
            $x->{n}, $x->{node}, at($x->{sent}), rel($x->{sent}), $x->{phase},
            defined $x->{got} ? rel($x->{got}) : '-', $x->{status},
            $x->{paid} ? ' (' . paid_for($x) . ')' : '', $x->{result} // '-', $x->{strikes} // '-',
            $x->{error} ? " $x->{error}" : '');
        diag("  node $_") for log_of($x);
    }
    # the payer's strikes just before its first 403, at the node that gave it
    my $first = $r[0];
    my @prev = grep { $_->{n} < $first->{n} && $_->{n} > $first->{n} - 30 } @{$by{payer}{all}};
    diag('the payer\'s requests before the first (n:node:[p<n of the challenge paid'
        . '@its node>]status/X-Strikes [result] @sent..answered, from the stall):');
    diag(sprintf '  %d:%d:%s%s/%s [%s] @%s..%s', $_->{n}, $_->{node}, paid_for($_),
        $_->{status}, $_->{strikes} // '-', $_->{result} // '-', rel($_->{sent}),
        defined $_->{got} ? rel($_->{got}) : '-'), map { "    node $_" } log_of($_)
        for @prev;
    for my $i (0 .. $#nodes) {
        diag('node ' . ($i + 1) . ": $_") for grep {
            /redis \S+ (?:unavailable|still unavailable|is available again)|breaker opened|refusals|spent while redis/
        } $nodes[$i]->error_log_lines(qr/pow_shield/);
    }
}

###############################################################################

$nodes[0]->done_testing;
