#!/usr/bin/perl

# The examples for API consumers, run as written against the module: the
# README's one line each (its "Paying a challenge" section), every example
# of docs/clients.md, and those of clients/node/README.md: every ```sh
# line with the built CLI, every ```python block with the client installed
# from clients/python, every ```js block as an ES module of an application
# that ran `npm install ./clients/node` (and, for the axios example, has
# the axios `make node-dev` installed). Only the server changes:
# 127.0.0.1:8080 (and api.example.com) become the test's nginx.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use Test::More;
use Test::PowShield qw(:pow http_conf);

###############################################################################

my $repo = $Test::PowShield::REPO;
my $cli = $ENV{TEST_POW_SHIELD_CLI} // "$repo/objs/pow-shield";
plan(skip_all => "no $cli (make build)") unless -x $cli;
my $PY = '/usr/bin/python3';
my $has_node = system('node --version >/dev/null 2>&1') == 0
    && system('npm --version >/dev/null 2>&1') == 0;
my $has_requests = system($PY, '-c', 'import requests') == 0;

my $t = Test::PowShield->new;

$t->write_file_expand('nginx.conf', http_conf(<<'EOF'));
    server {
        %%TEST_SERVER%%

        location /api/ {
            pow_shield_limit 2 1s;
            pow_shield_difficulty 3;
        }

        # what a README example may say about a host of its own
        location /items {
            pow_shield_limit 2 1s;
            pow_shield_difficulty 3;
            try_files /api/items =404;
        }
    }
EOF

$t->write_file('html/api/items', qq({"items":[1,2,3]}\n));

$t->run;

###############################################################################

my $port = $t->port(8080);
my $dir = $t->testdir;

# The fenced blocks of $file (between the headings $from and the next of
# its level, when given): [info, text, line] each.
sub blocks {
    my ($file, $from) = @_;
    open my $fh, '<', "$repo/$file" or die "$file: $!";
    my (@out, $in, $take, $level, $start);
    $take = !defined $from;
    while (my $line = <$fh>) {
        if (!defined $in && defined $from && $line =~ /^(#+) /) {
            my $l = length $1;
            if ($line =~ /^#+ \Q$from\E\s*$/) { ($take, $level) = (1, $l); next }
            $take = 0 if $take && $l <= $level;
        }
        next unless $take;
        if (!defined $in && $line =~ /^```(\w+)\s*$/) { $in = [$1, '', $.]; next }
        if (defined $in && $line =~ /^```\s*$/) { push @out, $in; undef $in; next }
        $in->[1] .= $line if defined $in;
    }
    return @out;
}

sub local_server {
    my ($text) = @_;
    $text =~ s{https://api\.example\.com}{http://127.0.0.1:$port}g;
    $text =~ s{127\.0\.0\.1:8080}{127.0.0.1:$port}g;
    $text =~ s{(^|\s)objs/pow-shield\b}{$1$cli}g;
    return $text;
}

# one command (or program) in the test directory: (exit code, output)
sub run_in {
    my ($cwd, @cmd) = @_;
    my $pid = open(my $fh, '-|') // die "fork: $!";
    if (!$pid) {
        chdir $cwd or die "$cwd: $!";
        open STDERR, '>&', \*STDOUT;
        open STDIN, '<', '/dev/null';
        exec @cmd;
        exit 127;
    }
    my $out = do { local $/; <$fh> } // '';
    close $fh;
    return ($? >> 8, $out);
}

# [file, info, text, line] each
my @readme = map { ['README.md', @$_] } blocks('README.md', 'Paying a challenge');
my @clients = map { ['docs/clients.md', @$_] } blocks('docs/clients.md');
my @node_readme = map { ['clients/node/README.md', @$_] } blocks('clients/node/README.md');
for my $set (['README.md', @readme], ['docs/clients.md', @clients]) {
    my ($file, @b) = @$set;
    my %seen;
    $seen{$_->[1]}++ for @b;
    ok($seen{sh} && $seen{python} && $seen{js}, "$file has sh, python and js examples");
}

# sh: each command line, as a shell runs it

for my $b (grep { $_->[1] eq 'sh' } @readme, @clients) {
    my ($file, undef, $text, $n) = @$b;
    for my $line (split /\n/, $text) {
        $n++;
        next if $line =~ /^\s*(#|$)/;
        my ($rc, $out) = run_in($dir, 'sh', '-c', local_server($line));
        is($rc, 0, "$file:$n: $line") or diag($out);
    }
}

# python: each block, with the client installed from clients/python

SKIP: {
    skip('requests is not installed', 1) unless $has_requests;
    my $site = "$dir/site";
    system("cp -r '$repo/clients/python' '$dir/pypkg' && '$PY' -m pip install --quiet --no-build-isolation"
        . " --no-deps --no-index --target '$site' '$dir/pypkg' >/dev/null 2>&1") == 0
        or BAIL_OUT('pip install ./clients/python');
    local $ENV{PYTHONPATH} = $site;
    for my $b (grep { $_->[1] eq 'python' } @readme, @clients) {
        my ($file, undef, $text, $line) = @$b;
        $t->write_file('snippet.py', local_server($text) . "print(items)\n");
        my ($rc, $out) = run_in($dir, $PY, 'snippet.py');
        is($rc, 0, "$file:$line: the python example runs") or diag($out);
        like($out, qr/\[1, 2, 3\]/, "$file:$line: and gets the items");
    }
}

# js: each block as an ES module of an application with the package installed

SKIP: {
    skip('no node and npm', 1) unless $has_node;
    $t->write_file('app/package.json', qq({"name":"app","version":"1.0.0","private":true}\n));
    my ($rc, $out) = run_in("$dir/app", 'npm', 'install', '--offline', '--no-audit', '--no-fund',
        '--loglevel=error', "$repo/clients/node");
    is($rc, 0, 'npm install ./clients/node') or diag($out);
    # the axios example's axios: the one `make node-dev` installed for the tests
    my $axios = "$repo/clients/node/node_modules/axios";
    symlink($axios, "$dir/app/node_modules/axios") if -d $axios;
    # the "Known bots" example's key (a bot this server does not know: anonymous)
    system("'$cli' bot-key new '$dir/app/mybot.jwk' >/dev/null 2>&1") == 0 or BAIL_OUT('bot-key new');
    local $ENV{NODE_NO_WARNINGS} = 1;
    for my $b (grep { $_->[1] eq 'js' } @readme, @clients, @node_readme) {
        my ($file, undef, $text, $line) = @$b;
        if ($text =~ /from 'axios'/ && !-d $axios) {
            SKIP: { skip("$file:$line: axios is not installed in clients/node (make node-dev)", 1) }
            next;
        }
        $t->write_file('app/snippet.mjs', local_server($text));
        ($rc, $out) = run_in("$dir/app", 'node', 'snippet.mjs');
        is($rc, 0, "$file:$line: the js example runs") or diag($out);
    }
}

done_testing;
