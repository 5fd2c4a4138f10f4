#!/usr/bin/perl

# Every link between the documents goes somewhere: each relative link of
# README.md and docs/*.md (outside code) names a file or directory of the
# tree, and its #anchor, if any, is a heading of that Markdown file (as
# GitHub makes anchors of headings: lower case, punctuation dropped, spaces
# as hyphens, "-1", "-2"... for repeats) or an <a id> of it. Links to the
# web are not followed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";

use File::Basename qw(dirname basename);
use File::Spec;
use Test::More;

my $repo = File::Spec->rel2abs("$FindBin::Bin/..");

sub slurp {
    my ($path) = @_;
    open my $fh, '<', $path or die "$path: $!";
    local $/;
    return scalar <$fh>;
}

# The text outside fenced blocks and inline code.
sub prose {
    my ($text) = @_;
    my ($out, $fence) = ('', '');
    for my $l (split /\n/, $text) {
        if (!$fence && $l =~ /^\s*(`{3,}|~{3,})/) { $fence = $1; next }
        if ($fence && $l =~ /^\s*\Q$fence\E\s*$/) { $fence = ''; next }
        $out .= "$l\n" unless $fence;
    }
    return $out;
}

my %anchors;
sub anchors_of {
    my ($path) = @_;
    return $anchors{$path} //= do {
        my (%a, %seen);
        my $text = prose(slurp($path));
        for my $h ($text =~ /^#{1,6}\s+(.*?)\s*#*\s*$/mg) {
            (my $slug = lc $h) =~ s/\[([^\]]*)\]\([^)]*\)/$1/g;
            $slug =~ s/[^\w\- ]//g;
            $slug =~ s/ /-/g;
            my $n = $seen{$slug}++;
            $a{$n ? "$slug-$n" : $slug} = 1;
        }
        $a{$1} = 1 while $text =~ /<a\s+(?:id|name)="([^"]+)"/g;
        \%a;
    };
}

my @docs = ('README.md', map { "docs/" . basename($_) } sort glob("$repo/docs/*.md"));
my $count = 0;
for my $doc (@docs) {
    my $text = prose(slurp("$repo/$doc"));
    $text =~ s/`[^`\n]*`//g;
    my $dir = dirname("$repo/$doc");
    while ($text =~ /\]\(([^)\s]+)\)/g) {
        my $link = $1;
        next if $link =~ m{^(?:https?|mailto):};
        $count++;
        my ($file, $anchor) = $link =~ /^([^#]*)(?:#(.*))?$/;
        my $target = $file eq '' ? "$repo/$doc" : File::Spec->canonpath("$dir/$file");
        ok(-e $target, "$doc: ($link): $file exists") or next if $file ne '';
        next unless defined $anchor;
        if ($target !~ /\.md$/) {
            fail("$doc: ($link): an anchor into a file that is not Markdown");
            next;
        }
        ok(anchors_of($target)->{$anchor}, "$doc: ($link): #$anchor is a heading of "
            . File::Spec->abs2rel($target, $repo));
    }
}
cmp_ok($count, '>=', 50, "links between the documents: $count");

done_testing;
