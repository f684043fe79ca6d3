// A line diff of a file's two sides (HEAD and the work tree): [sign, line] pairs, sign being
// " ", "-" or "+". A longest common subsequence for files of modest size; past that, the old
// side then the new one.
const LIMIT = 4_000_000;

export function lineDiff(original, modified) {
  const a = original === null || original === undefined ? [] : original.split("\n");
  const b = modified === null || modified === undefined ? [] : modified.split("\n");
  if (a.length && a[a.length - 1] === "") a.pop();
  if (b.length && b[b.length - 1] === "") b.pop();
  if (a.length * b.length > LIMIT) {
    return [...a.map((line) => ["-", line]), ...b.map((line) => ["+", line])];
  }
  const n = a.length;
  const m = b.length;
  const width = m + 1;
  const lengths = new Uint32Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      lengths[i * width + j] = a[i] === b[j]
        ? lengths[(i + 1) * width + j + 1] + 1
        : Math.max(lengths[(i + 1) * width + j], lengths[i * width + j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      out.push([" ", a[i]]);
      i += 1;
      j += 1;
    } else if (lengths[(i + 1) * width + j] >= lengths[i * width + j + 1]) {
      out.push(["-", a[i]]);
      i += 1;
    } else {
      out.push(["+", b[j]]);
      j += 1;
    }
  }
  while (i < n) out.push(["-", a[i++]]);
  while (j < m) out.push(["+", b[j++]]);
  return out;
}
