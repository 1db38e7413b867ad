// @config {"maxOutputBytes": 1150}
// The return value's JSON is 1,151 bytes (JSON.stringify's escapes and number formatting, UTF-8),
// and maxOutputBytes is one byte short of it: whatever shortcut an engine takes to serialize plain data, the
// text must be JSON.stringify's to the byte, or this limit would cut elsewhere.
const strings = [
  "", "plain", 'quote " and backslash \\', "\b\f\n\r\t", "\u0000\u0001\u001f\u007f", "é and 漢字",
  "\uD83D\uDE00 pair", "lone \uD800 high", "lone \uDC00 low", "\u2028\u2029",
];
const numbers = [
  0, -0, 1, -1, 2 ** 31, -(2 ** 31) - 1, 2 ** 53, 1e21, 1e-7, 0.1, 0.1 + 0.2, 5e-324, 1.7976931348623157e308, -1.5e-10,
];
return { strings, numbers, nested: [[[], {}], { x: [{ y: [1, [2, [3]]] }] }], pad: "x".repeat(800) };
