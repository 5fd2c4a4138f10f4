#!/usr/bin/env perl
# bench/soak_driver.pl — the stateful half of bench/soak.sh (Perl, core
# modules only): get challenged, solve, spend, replay, and send garbage that
# needs a real or forged token. Every response is recorded by kind; every
# token answered 200 as a spend is counted, and a token spent twice is a
# double spend.
#
#   perl bench/soak_driver.pl PORT SECONDS OUTFILE ID SECRET [T0]
#
# T0 (epoch seconds, default now) is the origin of the times it reports.
#
# One cycle, with a fresh client key "s<ID>-<n>" on the location /s
# (pow_shield_limit 1 1d; the first request is green, then every request
# is over the limit):
#   first      the key's green request                 expect 200 (pass)
#   challenge  over the limit                          expect 429 + challenge
#   garbage    one of: wrong nonce (422), bad MAC (403), token without nonce
#              (400), 30-digit nonce (422), forged-but-signed tokens with a
#              bad payload, another IP, an old or future time (400/403/410)
#   spend      the solution, alone or sent on two connections at once (race)
#   replay     the same solution again at once          expect 409
#   pool       a solution spent up to 50 s ago, again   expect 409 (410 later)
# A 200 answer to a solution counts as a spend unless the module says the
# request was simply green ($pow_shield_result "pass" in X-Soak-Result):
# after a Redis restart the key's history is gone and its next request is
# green, which consumes nothing.
#
# Stops by itself after SECONDS; every read has a 10 s deadline.

use strict;
use warnings;

use Digest::SHA qw(sha256_hex hmac_sha256);
use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use MIME::Base64 qw(encode_base64 decode_base64);
use Time::HiRes qw(time);

my ($port, $seconds, $out, $id, $secret, $t0) = @ARGV;
die "usage: $0 PORT SECONDS OUTFILE ID SECRET [T0]\n" unless defined $secret;
$t0 //= time();

my $deadline = time() + $seconds;
my $json = JSON::PP->new->canonical;
srand($$ ^ int(time() * 1000));

my %count;        # "kind status result" => n
my %spent;        # token => number of 200 answers that spent it
my %history;      # token => [[kind, result, seconds since T0], ...] (200 spends only)
my %green_replay; # token => 200 answers that were green (nothing spent)
my @pool;         # [token, nonce, key, time spent]
my ($cycles, $solved, $unanswered, $retries) = (0, 0, 0, 0);

###############################################################################
# HTTP/1.1 keep-alive client

my %conn;    # name => socket

sub connect_to {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
        Proto => 'tcp', Timeout => 5) or return;
    binmode $s;
    return $s;
}

sub request_text {
    my ($key, %h) = @_;
    my $req = "GET /s HTTP/1.1\r\nHost: soak\r\nX-Soak-Key: $key\r\n";
    $req .= "$_: $h{$_}\r\n" for sort keys %h;
    return "$req\r\n";
}

# Writes a request on connection $name (reconnecting if needed).
sub send_on {
    my ($name, $req) = @_;
    $conn{$name} ||= connect_to() or return;
    my $s = $conn{$name};
    my $off = 0;
    while ($off < length $req) {
        my $n = syswrite($s, $req, length($req) - $off, $off);
        unless ($n) { delete $conn{$name}; return }
        $off += $n;
    }
    return 1;
}

# Reads one response from connection $name: {status, headers, body}, or
# undef with $! set ('' bytes read means the server closed an idle
# keep-alive connection before answering, e.g. an old worker on reload).
sub read_on {
    my ($name) = @_;
    my $s = $conn{$name} or return (undef, 0);
    my $sel = IO::Select->new($s);
    my $buf = '';
    my $until = time() + 10;
    my ($head, $len, $close);
    while (1) {
        if (!defined $head && $buf =~ /\r\n\r\n/) {
            ($head, $buf) = split /\r\n\r\n/, $buf, 2;
            $len = $head =~ /^Content-Length:\s*(\d+)/mi ? $1 : undef;
            $close = $head =~ /^Connection:\s*close/mi;
        }
        last if defined $head && defined $len && length($buf) >= $len;
        my $left = $until - time();
        if ($left <= 0 || !$sel->can_read($left)) {
            delete $conn{$name};
            return (undef, -1);    # no answer in time
        }
        my $n = sysread($s, my $chunk, 65536);
        unless ($n) {
            delete $conn{$name};
            last if defined $head && !defined $len;    # body ends at close
            return (undef, length($buf) + length($head // ''));
        }
        $buf .= $chunk;
    }
    delete $conn{$name} if $close;
    my ($status) = $head =~ m{^HTTP/1\.[01] (\d{3})};
    my %h;
    for (split /\r\n/, $head) {
        $h{lc $1} = $2 if /^([^:]+):\s*(.*)$/;
    }
    return ({ status => $status // 0, headers => \%h, body => $buf });
}

# One request and its answer; a keep-alive connection closed before any byte
# of the answer is retried once on a new connection.
sub get {
    my ($key, %h) = @_;
    my $req = request_text($key, %h);
    for my $attempt (1, 2) {
        send_on('a', $req) or next;
        my ($r, $got) = read_on('a');
        return $r if $r;
        last if $got;    # timed out, or closed mid-answer: not retried
        $retries++;
    }
    $unanswered++;
    return { status => 0, headers => {}, body => '' };
}

###############################################################################
# Recording

sub result_of { $_[0]{headers}{'x-soak-result'} // '' }

sub record {
    my ($kind, $r, $token) = @_;
    my $result = result_of($r);
    $count{"$kind $r->{status} " . ($result eq '' ? '-' : $result)}++;
    return unless defined $token && $r->{status} == 200;
    if ($result eq 'pass') {
        $green_replay{$token}++ if $kind ne 'spend' && $kind ne 'race';
        return;
    }
    $spent{$token}++;
    push @{$history{$token}}, [$kind, $result || '-', time() - $t0];
}

###############################################################################
# Proof of work

sub b64url {
    my $s = encode_base64($_[0], '');
    $s =~ tr{+/}{-_};
    $s =~ s/=+$//;
    return $s;
}

sub forge {
    my ($text) = @_;
    my $p = b64url($text);
    return "$p." . b64url(hmac_sha256($p, $secret));
}

sub solve {
    my ($salt, $difficulty) = @_;
    my $zeros = '0' x $difficulty;
    for (my $n = int(rand(1000)); ; $n++) {
        return $n if substr(sha256_hex($salt . $n), 0, $difficulty) eq $zeros;
    }
}

sub challenge_of {
    my ($r) = @_;
    my $token = $r->{headers}{'x-pow-challenge'} or return;
    my $body = eval { $json->decode($r->{body}) } or return;
    return ($token, $body->{salt}, $r->{headers}{'x-pow-difficulty'} // $body->{difficulty});
}

sub now_ms { int(time() * 1000) }

my @garbage = (
    [wrong_nonce => sub { my ($t, $s, $d) = @_; (X_PoW_Challenge => $t, X_PoW_Nonce => wrong($s, $d)) }],
    [bad_mac     => sub { my ($t, $s, $d) = @_; (my $b = $t) =~ s/\.(.)/'.' . ($1 eq 'A' ? 'B' : 'A')/e;
                          (X_PoW_Challenge => $b, X_PoW_Nonce => solve($s, $d)) }],
    [token_only  => sub { (X_PoW_Challenge => $_[0]) }],
    [nonce_only  => sub { (X_PoW_Nonce => solve($_[1], $_[2])) }],
    [long_nonce  => sub { (X_PoW_Challenge => $_[0], X_PoW_Nonce => '9' x 30) }],
    [huge_nonce  => sub { (X_PoW_Challenge => $_[0], X_PoW_Nonce => '1' x 6000) }],
    [forged_json => sub { (X_PoW_Challenge => forge('{"ip":'), X_PoW_Nonce => '1') }],
    [forged_deep => sub { (X_PoW_Challenge => forge('[' x 3000), X_PoW_Nonce => '1') }],
    [forged_ip   => sub { (X_PoW_Challenge => forge($json->encode(
                          { ip => '192.0.2.1', ts => now_ms(), difficulty => 1, salt => 'ab' x 16 })), X_PoW_Nonce => '1') }],
    [forged_old  => sub { (X_PoW_Challenge => forge($json->encode(
                          { ip => '127.0.0.1', ts => now_ms() - 3_600_000, difficulty => 1, salt => 'ab' x 16 })), X_PoW_Nonce => '1') }],
    [forged_future => sub { (X_PoW_Challenge => forge($json->encode(
                          { ip => '127.0.0.1', ts => now_ms() + 3_600_000, difficulty => 1, salt => 'ab' x 16 })), X_PoW_Nonce => '1') }],
    [forged_types => sub { (X_PoW_Challenge => forge($json->encode(
                          { ip => ['127.0.0.1'], ts => '-1e999', difficulty => -3, salt => { x => 1 } })), X_PoW_Nonce => '1') }],
);

sub wrong {
    my ($salt, $difficulty) = @_;
    for (my $n = 0; ; $n++) {
        return $n if substr(sha256_hex($salt . $n), 0, $difficulty) ne '0' x $difficulty;
    }
}

sub headers_of { my %h = @_; map { (my $k = $_) =~ tr/_/-/; ($k => $h{$_}) } keys %h }

###############################################################################
# The cycles

while (time() < $deadline) {
    my $key = "s$id-" . ++$cycles;
    my $r = get($key);
    record(first => $r);
    my ($token, $salt, $diff);
    for (1 .. 3) {    # after a Redis restart the next request may be green again
        $r = get($key);
        record(challenge => $r);
        ($token, $salt, $diff) = challenge_of($r) and last;
    }
    next unless defined $token && defined $salt && defined $diff && $diff =~ /^\d+$/ && $diff <= 6;

    if (rand() < 0.5) {
        my ($kind, $make) = @{$garbage[int rand @garbage]};
        record($kind, get($key, headers_of($make->($token, $salt, $diff))));
    }

    my $nonce = solve($salt, $diff);
    my %sol = ('X-PoW-Challenge' => $token, 'X-PoW-Nonce' => $nonce);
    if (rand() < 0.5) {
        # Race: the same solution on two connections at once (with
        # reuseport, often two workers).
        my $req = request_text($key, %sol);
        my @sent = grep { send_on($_, $req) } qw(a b);
        for my $name (@sent) {
            my ($resp, $got) = read_on($name);
            unless ($resp) { $got ? $unanswered++ : $retries++; next }
            record(race => $resp, $token);
        }
    } else {
        record(spend => get($key, %sol), $token);
        record(replay => get($key, %sol), $token);
    }
    $solved++;
    push @pool, [$token, $nonce, $key, time()];
    shift @pool while @pool > 2000 || (@pool && $pool[0][3] < time() - 50);
    if (@pool > 1) {
        my ($t, $n, $k) = @{$pool[int rand @pool]};
        record(pool => get($k, 'X-PoW-Challenge' => $t, 'X-PoW-Nonce' => $n), $t);
    }
}

###############################################################################
# Report: plain lines for soak.sh to add up

my @double = grep { $spent{$_} > 1 } keys %spent;
open my $fh, '>', $out or die "$out: $!\n";
print $fh "count $_ $count{$_}\n" for sort keys %count;
print $fh "cycles $cycles\n";
print $fh "solved $solved\n";
print $fh "tokens_spent " . scalar(keys %spent) . "\n";
print $fh "double_spends " . scalar(@double) . "\n";
print $fh "green_replays " . scalar(keys %green_replay) . "\n";
print $fh "unanswered $unanswered\n";
print $fh "retries $retries\n";
# Every double spend: the times of its first two spends, then what they were.
for my $t (sort { $history{$a}[0][2] <=> $history{$b}[0][2] } @double) {
    my @h = @{$history{$t}};
    printf $fh "double %.1f %.1f %s token=%s...\n", $h[0][2], $h[1][2],
        join(',', map { sprintf '%s:%s@%.1fs', @$_ } @h), substr($t, 0, 20);
}
close $fh or die "$out: $!\n";
