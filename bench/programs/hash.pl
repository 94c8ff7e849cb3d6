# Perl: a hash of 400,000 keys, each an array of a number and a string of 0-299 bytes,
# every third key also joined into a list; then the keys sorted, a fifth of the entries
# deleted, and the list's prefixes joined (bench/run_programs.sh).
my %h; my @a;
for my $i (1..400000) {
  my $k = "key" . ($i * 7919 % 1000003);
  $h{$k} = [$i, "v" x ($i % 300)];
  push @a, join(",", $i, $k) if $i % 3 == 0;
}
my $n = 0;
for my $k (sort keys %h) { $n += length($h{$k}[1]); delete $h{$k} if $n % 5 == 0; }
my $s = join("", map { substr($_, 0, 5) } @a);
print length($s) + $n, "\n";
