// The median of measured samples: benchmarks report it because one slow run (a context switch on
// a shared machine) moves a mean but not a median.
export function median(xs: readonly number[]): number {
  if (xs.length === 0) throw new RangeError('median of no samples');
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}
