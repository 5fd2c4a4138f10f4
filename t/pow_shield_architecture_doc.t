#!/usr/bin/perl

# docs/architecture.md tells the truth about the tree:
# - every path it names exists: the entries of "The tree" (a top-level
#   entry from the repository's root, an indented one inside its crate's
#   src/ or directory), each file or directory named in an entry's text
#   (somewhere below that entry), and every repository path, `a/b.rs` and
#   `pow_shield_core::a::b` it names elsewhere;
# - every workspace crate (Cargo.toml's members) has a top-level entry, and
#   the Cargo.toml entry lists them all;
# - every top-level module of the module crate (src/lib.rs) and of core
#   (core/src/lib.rs) has an entry under its crate.
# Build output (objs/, target/) is not in the tree and not looked for.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Find qw(find);
use File::Spec;
use Test::More;

my $repo = File::Spec->rel2abs("$FindBin::Bin/..");

sub slurp {
    my ($path) = @_;
    open my $fh, '<', $path or die "$path: $!";
    local $/;
    return scalar <$fh>;
}

my $doc = slurp("$repo/docs/architecture.md");
my ($tree) = $doc =~ /^## The tree\n.*?^```\n(.*?)^```/ms;
ok($tree, 'docs/architecture.md: The tree');

# Files and directories named in a text: a path ending in a source or
# document extension, or in "/".
my $NAME = qr{(?<![\w./\-:])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:rs|lua|md|py|pl|pm|toml|sh|json|yml|conf)|(?:[\w.-]+/)+)(?![\w/])};

# Whether $name is below $dir (a file or directory path ending in $name).
my %below;
sub below {
    my ($dir, $name) = @_;
    (my $want = $name) =~ s{/$}{};
    return 1 if -e "$dir/$want";
    my $found = 0;
    find({ no_chdir => 1, wanted => sub {
        return if $found;
        if (m{/(?:target|node_modules|\.git)$}) { $File::Find::prune = 1; return }
        $found = 1 if m{(?:^|/)\Q$want\E$};
    } }, $dir) if -d $dir;
    return $found;
}

###############################################################################
# The tree's entries

my (@entries, $top);
for my $line (split /\n/, $tree // '') {
    if ($line =~ /^(\S.*?)\s{2,}(.*)$/ || $line =~ /^(\S+)$/) {
        my ($names, $text) = ($1, $2 // '');
        my @paths = map { s/\s+//gr } split /,\s*/, $names;
        $top = { paths => \@paths, text => $text, level => 0 };
        push @entries, $top;
    } elsif ($line =~ /^  (\S+)\s{2,}(.*)$/ && $top) {
        my ($name, $text) = ($1, $2);
        my ($parent) = @{ $top->{paths} };
        my $base = -d "$repo/${parent}src" ? "${parent}src/" : $parent;
        push @entries, { paths => ["$base$name"], text => $text, level => 1, parent => $top };
    } elsif ($line =~ /^\s+(\S.*)$/ && @entries) {
        $entries[-1]{text} .= " $1";
    }
}
cmp_ok(scalar(@entries), '>=', 20, 'entries of the tree: ' . scalar(@entries));

for my $e (@entries) {
    for my $path (@{ $e->{paths} }) {
        ok(-e "$repo/$path", "the tree's entry $path exists");
    }
    my ($first) = @{ $e->{paths} };
    my $dir = -d "$repo/$first" ? "$repo/$first" : "$repo/" . ($first =~ s{[^/]+$}{}r);
    while ($e->{text} =~ /$NAME/g) {
        my $name = $1;
        next if $name =~ m{^(?:objs|target)/};
        ok(below($dir, $name) || -e "$repo/$name",
            "$first: the $name it names exists (below " . File::Spec->abs2rel($dir, $repo) . ')');
    }
}

###############################################################################
# What the rest of the text names

(my $rest = $doc) =~ s/^## The tree\n.*?^```\n.*?^```//ms;
my %seen;
while ($rest =~ m{(?<![\w./-])((?:src|core|protocol|client|clients|bots|t|tools|fuzz|bench|docs|debian|nginx-conf)/[\w./-]*[\w/])}g) {
    my $path = $1;
    next if $seen{$path}++;
    ok(-e "$repo/$path", "docs/architecture.md names $path: it exists");
}
while ($rest =~ /`([\w-]+(?:\/[\w.-]+)+\.(?:rs|lua|py))`/g) {
    my $path = $1;
    next if $seen{$path}++;
    ok((grep { -e "$repo/$_$path" } '', 'src/', 'core/src/'), "docs/architecture.md names $path: it exists");
}
while ($rest =~ /\bpow_shield_core::((?:\w+::)*\w+)/g) {
    my $named = $1;
    my $mod = $named =~ s{::}{/}gr;
    next if $seen{$mod}++;
    ok(-e "$repo/core/src/$mod.rs" || -d "$repo/core/src/$mod",
        "docs/architecture.md names pow_shield_core::$named: core/src/$mod exists");
}

###############################################################################
# The crates and their top-level modules

my ($members) = slurp("$repo/Cargo.toml") =~ /^\[workspace\].*?^members\s*=\s*\[(.*?)\]/ms;
my @crates = ($members // '') =~ /"([^"]+)"/g;
ok(@crates >= 4, 'the workspace\'s crates: ' . join(' ', @crates));
my %top = map { $_->{paths}[0] => $_ } grep { $_->{level} == 0 } @entries;
my ($cargo_entry) = grep { $_->{paths}[0] eq 'Cargo.toml' } @entries;
for my $crate (@crates) {
    my $dir = $crate eq '.' ? 'src/' : "$crate/";
    ok($top{$dir}, "the crate $crate has an entry: $dir");
    like($cargo_entry ? $cargo_entry->{text} : '', $crate eq '.' ? qr/\(\.\)/ : qr{\b\Q$crate\E/},
        "the Cargo.toml entry lists $crate");
}

for my $lib ('src/lib.rs', 'core/src/lib.rs') {
    (my $src = $lib) =~ s{lib\.rs$}{};
    my $text = slurp("$repo/$lib");
    $text =~ s/#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+\w+\s*;//g;
    my @mods = $text =~ /^\s*(?:pub(?:\([\w:]+\))?\s+)?mod\s+(\w+)\s*;/mg;
    ok(@mods >= 5, "$lib: its modules: @mods");
    my %listed = map { $_->{paths}[0] => 1 } grep { $_->{level} == 1 } @entries;
    for my $m (@mods) {
        ok($listed{"$src$m.rs"} || $listed{"$src$m/"}, "the tree has ${src}$m (.rs or /)");
    }
}

done_testing;
