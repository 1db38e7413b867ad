// A nested call's message reaches the host as the cell's exact text, whichever way an engine sends
// it (quickjs-wasi hands the host an ASCII string's own bytes, scanned eight at a time, converts
// any other string to UTF-8, and joins a message sent in parts, in a buffer or, past 4 KiB, on its
// heap): a non-ASCII character at every offset of the message's words and its tail, characters of
// one and two bytes and beyond, lone surrogates (which arrive as U+FFFD, as in any value), and
// inputs around and past the 4 KiB buffer.
const mismatches = [];
let calls = 0;
async function roundTrip(label, input, expected = input) {
  calls += 1;
  const out = await tools.demo_echo(input);
  if (JSON.stringify(out) !== JSON.stringify(expected)) mismatches.push(label);
}
const lone = (ch) => ch === "\uD800" || ch === "\uDC00";
for (const ch of ["é", "\u00ff", "\u0080", "漢", "\uD83D\uDE00", "\uD800", "\uDC00"]) {
  const arrives = lone(ch) ? "\uFFFD" : ch;
  for (let k = 0; k < 20; k++) {
    const label = `${ch.charCodeAt(0).toString(16)} at ${k}`;
    await roundTrip(label + " after", { s: "x".repeat(k) + ch }, { s: "x".repeat(k) + arrives });
    await roundTrip(label + " before", { s: ch + "y".repeat(k) }, { s: arrives + "y".repeat(k) });
  }
}
// A call's message is its head, `{"id":"plugin:demo:demo_echo","mode":"value","input":` (53
// bytes), the input's JSON and `}`: an input string of n ASCII characters makes n + 62 bytes, so
// n = 4033 / 4034 / 4035 make 4095 / 4096 / 4097 (the join buffer holds 4096); with a trailing "é"
// (two bytes in UTF-8) n = 4031 / 4032 / 4033 do.
for (const n of [4000, 4033, 4034, 4035, 5000, 40000]) await roundTrip(`ascii ${n}`, { s: "a".repeat(n) });
for (const n of [4000, 4031, 4032, 4033, 5000, 40000]) await roundTrip(`latin1 ${n}`, { s: "a".repeat(n) + "é" });
await roundTrip("keys", { "é": 1, "ascii": 2, "漢": [3] });
return { calls, mismatches };
