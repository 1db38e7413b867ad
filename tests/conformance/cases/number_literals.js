// Numeric literals of every form read as the language says. (quickjs-wasi's parser reads a small
// decimal integer itself and gives everything else to its general number reader: the values, the
// errors and where one literal ends must not tell them apart.)
const values = [
  0, 7, 42, 123456789, 1234567890, 2147483647, 2147483648, 999999999999, 9007199254740993,
  1e3, 2E2, 1.5, 5., .5, 1_000, 1_000_000, 0x1F, 0X1f, 0o17, 0b101, 0.1 + 0.2, 12*12, 1+1,
];
const other = [typeof 10n, String(10n), String(123456789n), 1..toString(), 1 .toString(), 9 .toFixed(1),
  [1,2,3][1], 7%4, -5, 1/0];
const errors = [];
for (const src of ["10instanceof Number", "1_", "1__0", "0_1", "1.toString()", "3in []", "12abc", "123456789a"]) {
  try { (0, eval)(src); errors.push(src + ": accepted"); } catch (e) { errors.push(src + ": " + e.name); }
}
const sloppy = [(0, eval)("010"), (0, eval)("08"), (0, eval)("019"), (0, eval)("0")];
let strictOctal;
try { (0, eval)('"use strict"; 010'); strictOctal = "accepted"; } catch (e) { strictOctal = e.name; }
return { values, other, errors, sloppy, strictOctal };
