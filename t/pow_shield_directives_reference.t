#!/usr/bin/perl

# docs/directives.md is the one reference of the module's directives and
# variables, in nginx.org's form, and it is complete both ways. What the
# module knows is asked of the module itself (`nginx -t` with it loaded),
# so the test follows the code wherever its command table lives:
#
# - the directives: every `pow_shield_*` name the sources register
#   (ngx_string!) that nginx does not call an unknown directive has a
#   section ("### name") with Syntax, Default and Context, a link in the
#   index, prose and an ```nginx example that uses it (the examples pass
#   `nginx -t`: t/pow_shield_doc_snippets.t); every section is a
#   directive; each Context is where nginx accepts the directive (and
#   nowhere else: "is not allowed here"); each Default line passes
#   `nginx -t` there;
# - the parameters: every option (`word=`) and keyword the module names
#   when it refuses a made-up word (the directive's example with the
#   word appended after each of its arguments: "expected ... [approx]
#   [name=<name>] [key=<value>]", "unknown option, expected cluster,
#   timeout=, ...") is in the directive's Syntax; every option and every
#   [flag] of the Syntax is one the module names;
# - the variables: every `$pow_shield_*` variable nginx knows has an entry
#   in "Embedded Variables", and every entry is one it knows;
# - no other document (README.md, docs/*.md) keeps a second directive
#   table (a table row with a directive and its contexts, or a Syntax
#   block): the one drifts from the other.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Basename qw(basename);
use File::Find qw(find);
use Test::More;
use Test::PowShield;
use Test::PowShield::Examples qw(slurp);

###############################################################################

my $t = Test::PowShield->new;   # skip_all without the nginx binary or the module
my $repo = $Test::PowShield::REPO;
my $doc_path = 'docs/directives.md';
my $doc = slurp("$repo/$doc_path");
my $PROBE = 'pow-shield-made-up-word';

# The names the sources register with nginx (directives and variables).
my %named;
find(sub {
    return unless /\.rs$/;
    my $text = slurp($_);
    $named{$1} = 1 while $text =~ /ngx_string!\(\s*"(pow_shield_\w+)"\s*\)/g;
}, "$repo/src");
ok(scalar(keys %named) >= 20, 'the sources name things for nginx: ' . scalar(keys %named));

###############################################################################
# The reference's sections

my ($directives_part) = $doc =~ /^## Directives\n(.*?)^## /ms;
my ($variables_part) = $doc =~ /^## Embedded Variables\n(.*)\z/ms;
ok($directives_part && $variables_part, "$doc_path: its Directives and Embedded Variables");

# name => { syntax, default, context, body }
my %section;
for my $s (split /^(?=### )/m, $directives_part // '') {
    my ($name) = $s =~ /^### (\S+)\s*\n/ or next;
    my ($block) = $s =~ /^```\n(Syntax:.*?)^```/ms;
    my %f;
    if ($block) {
        ($f{syntax}) = $block =~ /^Syntax:\s+(.*?)(?=^\w+:)/ms;
        ($f{default}) = $block =~ /^Default:\s+(.*?)\s*$/m;
        ($f{context}) = $block =~ /^Context:\s+(.*?)\s*$/m;
        $f{syntax} =~ s/\s+/ /g if defined $f{syntax};
        $f{syntax} =~ s/\s+$// if defined $f{syntax};
    }
    $f{body} = $s;
    $section{$name} = \%f;
}
cmp_ok(scalar(keys %section), '>=', 20, "$doc_path: " . scalar(keys %section) . ' directive sections');

###############################################################################
# nginx -t of one directive line in one context

my $n = 0;
sub check {
    my ($context, $line, $http) = @_;
    my %at = (http => '', server => '', location => '');
    $at{$context} = "$line\n";
    my $conf = "%%TEST_GLOBALS%%\nevents {\n}\nhttp {\n    %%TEST_GLOBALS_HTTP%%\n"
        . ($http // '') . "    $at{http}    server {\n        listen 127.0.0.1:%%PORT_8080%%;\n"
        . "        $at{server}        location / {\n            $at{location}        }\n    }\n}\n";
    my $file = 'probe' . ++$n . '.conf';
    $t->write_file_expand($file, $conf);
    my ($rc, $out) = $t->test_config($file);
    return ($rc, join "\n", grep { /\[emerg\]/ } split /\n/, $out);
}

# A directive's statements in its section's ```nginx examples: [args].
sub example_args {
    my ($name) = @_;
    my @args;
    for my $block (($section{$name}{body} // '') =~ /^```nginx\n(.*?)^```/msg) {
        (my $text = $block) =~ s/#[^\n]*//g;
        while ($text =~ /(?:^|[;{}])\s*\Q$name\E\b([^;{}]*);/g) {
            push @args, [split ' ', $1];
        }
    }
    return @args;
}

###############################################################################
# The directives: the module's, and the reference's

my %directive;
for my $name (sort keys %named, grep { !$named{$_} } sort keys %section) {
    my (undef, $out) = check('location', "$name;");
    $directive{$name} = 1 unless $out =~ /unknown directive "\Q$name\E"/;
}
ok(scalar(keys %directive) >= 20, 'directives nginx knows: ' . join(' ', sort keys %directive));

for my $name (sort keys %directive) {
    ok($section{$name}, "$name: a section in $doc_path") or next;
    my $s = $section{$name};
    ok($s->{syntax} && defined $s->{default} && $s->{context},
        "$name: Syntax, Default and Context") or next;
    like($s->{syntax}, qr/^\Q$name\E(?:[ ;]|$)/, "$name: its Syntax names it");
    like($doc, qr/^\s*\[\Q$name\E\]\(#\Q$name\E\)/m, "$name: in the index at the top");
    my @prose = grep { !/^```/ && !/^(?:Syntax|Default|Context):/ && /\S/ }
        split /\n/, ($s->{body} =~ s/^```.*?^```//msgr);
    cmp_ok(scalar(@prose), '>=', 2, "$name: prose that says what it does");
    ok(scalar(example_args($name)), "$name: an ```nginx example that uses it");

    # Context: where nginx accepts it, and only there
    my %doc_ctx = map { $_ => 1 } split /,\s*/, $s->{context};
    my %ok;
    for my $ctx (qw(http server location)) {
        my (undef, $out) = check($ctx, "$name;");
        $ok{$ctx} = 1 unless $out =~ /"\Q$name\E" directive is not allowed here/;
    }
    is(join(', ', grep { $ok{$_} } qw(http server location)), $s->{context},
        "$name: Context: $s->{context}, where nginx accepts it");

    # Default: as written, it loads
    if ($s->{default} ne '—') {
        my ($ctx) = grep { $ok{$_} } qw(location http);
        my ($rc, $out) = check($ctx // 'http', $s->{default});
        is($rc, 0, "$name: Default \"$s->{default}\" passes nginx -t") or diag($out);
    }
}
for my $name (sort keys %section) {
    ok($directive{$name}, "$doc_path: ### $name is a directive the module registers");
}

###############################################################################
# The parameters

# What a refusal names: options (word=) and keywords.
sub vocabulary {
    my ($reason) = @_;
    my %v;
    $v{"$1="} = 1 while $reason =~ /\b([a-z][a-z0-9_]*)=/g;
    $v{$1} = 1 while $reason =~ /\[([a-z][a-z0-9_]*)\]/g;
    while ($reason =~ /(?:must be|expected)\s+(.*)$/g) {
        my @items = split /,\s*|\s+or\s+/, $1;
        for my $item (@items) {
            my $quoted = $item =~ s/^"(.*)"$/$1/;
            next unless $item =~ /^[a-z][a-z0-9_]*$/;
            $v{$item} = 1 if $quoted || @items >= 2;
        }
    }
    return keys %v;
}

# The Syntax's words: options (word=), [flags] and other words.
sub syntax_words {
    my ($syntax, $name) = @_;
    (my $rest = $syntax) =~ s/^\Q$name\E\s*//;
    $rest =~ s/;\s*$//;
    my (%options, %flags, %words);
    $options{"$1="} = 1 while $rest =~ /\b([a-z][a-z0-9_]*)=/g;
    $flags{$1} = 1 while $rest =~ /(?:^|\s)\[([a-z][a-z0-9_]*)\]/g;
    (my $plain = $rest) =~ s/\b[a-z][a-z0-9_]*=\S*//g;
    $words{$_} = 1 for grep { /^[a-z][a-z0-9_]*$/ } split /[\s\[\]|]+/, $plain;
    return (\%options, \%flags, \%words);
}

for my $name (sort grep { $section{$_} && $section{$_}{syntax} } keys %directive) {
    my $s = $section{$name};
    my ($ctx) = split /,\s*/, $s->{context};
    $ctx = 'location' if $s->{context} =~ /location/ && $s->{context} =~ /http/;
    my ($example) = example_args($name);
    my @args = @{ $example // [] };
    my %known;
    for my $i (0 .. @args) {
        my $line = join ' ', $name, @args[0 .. $i - 1], "$PROBE;";
        my (undef, $out) = check($ctx, $line);
        my ($reason) = $out =~ /directive(?::|,)\s*(.*?)(?: in \S+:\d+)?$/m;
        $known{$_} = 1 for vocabulary($reason // '');
    }
    my ($options, $flags, $words) = syntax_words($s->{syntax}, $name);
    my @missing = grep { /=$/ ? !$options->{$_} : !($flags->{$_} || $words->{$_}) } sort keys %known;
    is("@missing", '', "$name: the Syntax has every parameter the module names ("
        . join(' ', sort keys %known) . ')');
    my @unknown = grep { !$known{$_} } sort(keys %$options), sort(keys %$flags);
    is("@unknown", '', "$name: every option and flag of the Syntax is one the module knows");
}

# the parameters the issue names, each found in the module and the reference
my %must = (pow_shield_limit => [qw(approx name= key=)], pow_shield_difficulty => ['max='],
    pow_shield_fail => ['trusted='], pow_shield_ban => ['after='],
    pow_shield_redis => [qw(cluster timeout= connect_timeout= prefix= sentinel_password=
        tls_ca= tls_verify= tls_name= tls_cert= tls_key=)]);
for my $name (sort keys %must) {
    my ($options, $flags) = syntax_words($section{$name}{syntax} // '', $name);
    my @absent = grep { !($options->{$_} || $flags->{$_}) } @{ $must{$name} };
    is("@absent", '', "$name: " . join(' ', @{ $must{$name} }) . ' in its Syntax');
}

###############################################################################
# The variables

my %documented = map { $_ => 1 } ($variables_part // '') =~ /^`\$(pow_shield_\w+)`\s*$/mg;
my %variable;
for my $name (sort keys %named, keys %documented) {
    my (undef, $out) = check('location', "set \$pow_probe \$$name;");
    $variable{$name} = 1 unless $out =~ /unknown "\Q$name\E" variable/;
}
ok(scalar(keys %variable) >= 5, 'variables nginx knows: ' . join(' ', sort keys %variable));
ok($documented{$_}, "\$$_: an entry in Embedded Variables") for sort keys %variable;
ok($variable{$_}, "Embedded Variables: \$$_ is a variable the module knows") for sort keys %documented;

###############################################################################
# One reference: no second directive table elsewhere

my $ctx_cell = qr/(?:http|server|location)(?:,\s*(?:server|location))*/;
for my $file ('README.md', map { 'docs/' . basename($_) } sort glob("$repo/docs/*.md")) {
    next if $file eq $doc_path;
    my @copies = grep {
        /^\|.*`pow_shield_\w+[^`]*`.*\|\s*$ctx_cell\s*\|/ || /^Syntax:\s+pow_shield_/
    } split /\n/, slurp("$repo/$file");
    is(scalar(@copies), 0, "$file: no directive reference of its own (docs/directives.md is the one)")
        or diag(join "\n", @copies[0 .. ($#copies < 2 ? $#copies : 2)]);
}

$t->done_testing;
